"""Pi session files (issue 4): scenarios with expectations derived by hand from the rules."""

from __future__ import annotations

import orjson
import pytest

from conftest import FIXTURES, run_cli
from ng_traj.diagnostics import DiagnosticSink
from ng_traj.sources.native import timestamp_seconds
from ng_traj.sources.pi.session import read_session

PI = FIXTURES / "pi"
N = None


def _build(tmp_path, *inputs) -> list[dict]:
    out = tmp_path / "out.jsonl"
    result = run_cli("build", *inputs, "-o", out)
    assert result.exit_code == 0, result.stderr
    return [orjson.loads(line) for line in out.read_bytes().splitlines()]


def _items(invocation: dict) -> list[tuple]:
    return [
        (
            item["type"],
            item.get("role"),
            item.get("call_id") or (item["content"] if isinstance(item.get("content"), str) else None),
        )
        for item in invocation["conversation"]
    ]


def _gaps(record: dict) -> list[tuple]:
    return [(g["code"], g["invocation_id"], g["detail"]) for g in record["gaps"]]


def _tokens(record: dict) -> list[list]:
    return [list(call["token_stats"].values()) for call in record["model_calls"]]


def test_parallel_tool_calls_get_independent_intervals(tmp_path):
    (record,) = _build(tmp_path, PI / "parallel_tools.jsonl")
    assert record["rollout_id"] == "pi-par" and record["task_id"] == "unknown"
    (invocation,) = record["invocations"]
    assert invocation["status"] == "completed"
    assert [i[:2] for i in _items(invocation)] == [
        ("message", "user"),
        ("reasoning", N),
        ("function_call", N),
        ("function_call", N),
        ("function_call_output", N),
        ("function_call_output", N),
        ("message", "assistant"),
    ]
    tools = {
        t["tool_call_id"]: (t["started_at"], t["completed_at"], t["duration_ms"], t["output"])
        for t in record["tool_calls"]
    }
    # durationMs with the result's ms timestamp: call_b ends 10:00:08 after 1 s, call_a ends 10:00:09 after 3 s.
    assert tools == {
        "call_b": (1777629607.0, 1777629608.0, 1000.0, "3 f"),
        "call_a": (1777629606.0, 1777629609.0, 3000.0, "f\ng"),
    }
    # Anthropic usage is exclusive: prompt = input + cacheRead + cacheWrite (10 + 100 + 5; 30 + 120 + 0).
    assert _tokens(record) == [[115, 20, N, 135, 100], [150, 6, N, 156, 120]]
    assert [c["response_metadata"]["dialect"] for c in record["model_calls"]] == ["messages", "messages"]


def test_orphan_tool_result_and_call_without_result_are_never_paired(tmp_path):
    (record,) = _build(tmp_path, PI / "orphan_tool_result.jsonl")
    assert record["tool_calls"] == []
    gaps = _gaps(record)
    assert ("tool_result_unowned", "pi-orphan", "call-2") in gaps
    assert ("tool_timing_unavailable", "pi-orphan", "call-1") in gaps
    assert ("invocation_outcome_unavailable", "pi-orphan", N) in gaps  # last stopReason is toolUse


def test_abandoned_branch_is_kept_out_of_the_conversation_but_its_call_counts(tmp_path):
    (record,) = _build(tmp_path, PI / "branch.jsonl")
    (invocation,) = record["invocations"]
    assert _items(invocation) == [
        ("message", "user", "task placeholder"),
        (
            "message",
            "user",
            "The following is a summary of a branch that this conversation came back from:\n\n<summary>\nabandoned attempt A</summary>",
        ),
        ("message", "assistant", N),
    ]
    assert invocation["conversation"][2]["content"][0]["text"] == "attempt B"
    assert _tokens(record) == [[100, 20, N, 120, 0], [110, 25, N, 135, 0]]
    assert ("agent_conversation_branch_abandoned", "s-1", "e1") in _gaps(record)
    assert [g[2] for g in _gaps(record) if g[0] == "model_call_usage_from_transcript"] == ["entry:e2", "entry:e4"]


def test_compaction_summary_stands_before_the_first_kept_entry(tmp_path):
    (record,) = _build(tmp_path, PI / "compaction.jsonl")
    (invocation,) = record["invocations"]
    assert invocation["status"] == "incomplete"  # last stopReason "length"
    texts = [i[2] for i in _items(invocation)]
    assert texts[:4] == [
        "first question",
        N,
        "The conversation history before this point was compacted into the following summary:\n\n<summary>\nasked two questions\n</summary>",
        "second question",
    ]
    # OpenAI responses after 2025-12-03: exclusive input, so 50 + 10 and 70 + 60.
    assert _tokens(record) == [[60, 5, N, 65, 10], [130, 6, N, 136, 60], [40, 4, N, 44, 0]]
    gaps = _gaps(record)
    assert ("compaction_model_call_boundary_unavailable", "pi-compact", N) in gaps
    assert ("compaction_tokens_after_unavailable", "pi-compact", N) in gaps
    assert ("compaction_boundary_unavailable", "pi-compact", N) not in gaps


def test_unsupported_layout_is_a_gap_not_a_crash(tmp_path):
    (record,) = _build(tmp_path, PI / "kind_header.jsonl")
    assert ("agent_transcript_unavailable", "kind_header", "layout=kind_header") in _gaps(record)


def test_duplicate_header_missing_parent_and_corrupt_line(tmp_path):
    out = tmp_path / "out.jsonl"
    result = run_cli("build", PI / "duplicate_header_and_missing_parent.jsonl", "-o", out)
    assert ":6: error[invalid_json]" in result.stderr
    (record,) = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [i[2] for i in _items(record["invocations"][0])] == ["task placeholder", N, "continue", N]
    gaps = _gaps(record)
    assert ("agent_conversation_parent_unavailable", "pi-dup", "never-written") in gaps
    assert ("agent_artifact_record_unparseable", N, N) in gaps


def _content(record: dict) -> tuple:
    """A trajectory without the ids pi mints during migration (compared on content)."""
    invocation = record["invocations"][0]
    items = [
        {k: v for k, v in item.items() if k != "id" or item["type"] != "message"} for item in invocation["conversation"]
    ]
    gaps = [(code, inv) for code, inv, _ in _gaps(record)]
    return items, invocation["status"], record["model_calls"], record["tool_calls"], gaps


def test_v1_v2_v3_of_one_conversation_give_the_same_trajectory(tmp_path):
    records = [_build(tmp_path, PI / f"same_v{n}.jsonl")[0] for n in (1, 2, 3)]
    assert _content(records[0]) == _content(records[1]) == _content(records[2])
    items = _items(records[2]["invocations"][0])
    assert ("message", "user", "reminder: be brief") in items  # v2 hookMessage / v3 custom, both sent as user text
    assert _tokens(records[0]) == [[47, 9, N, 56, 40], [65, 3, N, 68, 45]]


def test_v1_migration_mints_position_ids_and_resolves_kept_index(tmp_path):
    path = tmp_path / "v1.jsonl"
    lines = [
        {"type": "session", "id": "old", "timestamp": "2025-11-20T00:00:00Z", "cwd": "/w"},
        {"type": "message", "timestamp": "2025-11-20T00:00:01Z", "message": {"role": "user", "content": "a"}},
        {"type": "message", "timestamp": "2025-11-20T00:00:02Z", "message": {"role": "user", "content": "b"}},
        {
            "type": "compaction",
            "timestamp": "2025-11-20T00:00:03Z",
            "summary": "s",
            "firstKeptEntryIndex": 2,
            "tokensBefore": 9,
        },
    ]
    path.write_text("".join(orjson.dumps(line).decode() + "\n" for line in lines))
    session = read_session(path, DiagnosticSink())
    assert [(e.id, e.parent_id) for e in session.entries] == [("v1-2", None), ("v1-3", "v1-2"), ("v1-4", "v1-3")]
    assert session.entries[2].raw["firstKeptEntryId"] == "v1-3"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (1776049201000, 1776049201.0),
        (1776049201.5, 1776049201.5),
        # The unit is read from the magnitude: seconds ~1e9, ms ~1e12, µs ~1e15, ns ~1e18.
        (1776049201, 1776049201.0),
        (1776049201500, 1776049201.5),
        (1776049201500000, 1776049201.5),
        (1776049201500000000, 1776049201.5),
        (99_999_999_999, 99_999_999_999.0),  # just below 1e11: still seconds (year 5138)
        (100_000_000_000, 100_000_000.0),  # 1e11 ms: 1973
        (100_000_000_000_000, 100_000_000.0),  # 1e14 µs
        (100_000_000_000_000_000, 100_000_000.0),  # 1e17 ns
        ("2026-01-01T00:00:01Z", 1767225601.0),
        ("2026-01-01T00:00:01", 1767225601.0),
        (True, N),
        (-1, N),
        (float("nan"), N),
        ("yesterday", N),
    ],
)
def test_timestamps(value, seconds):
    assert timestamp_seconds(value) == seconds


SECOND = 1777629602
UNITS = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


@pytest.mark.parametrize("unit", list(UNITS))
def test_epoch_message_times_in_every_unit_durations_never_rescaled(tmp_path, unit):
    # The same session with its message times in s, ms, µs or ns gives the same times; durationMs stays ms.
    scale = UNITS[unit]
    lines = [
        {"type": "session", "version": 3, "id": f"pi-{unit}", "timestamp": "2026-05-01T10:00:00.000Z", "cwd": "/w"},
        {
            "type": "message",
            "id": "u1",
            "parentId": None,
            "message": {"role": "user", "content": "go", "timestamp": (SECOND - 1) * scale},
        },
        {
            "type": "message",
            "id": "a1",
            "parentId": "u1",
            "message": {
                "role": "assistant",
                "content": [{"type": "toolCall", "id": "call_t", "name": "bash", "arguments": {}}],
                "api": "anthropic-messages",
                "provider": "anthropic",
                "model": "m",
                "stopReason": "toolUse",
                "usage": {"input": 1, "output": 2},
                "timestamp": SECOND * scale,
                "responseId": f"msg_{unit}",
            },
        },
        {
            "type": "message",
            "id": "r1",
            "parentId": "a1",
            "message": {
                "role": "toolResult",
                "toolCallId": "call_t",
                "toolName": "bash",
                "content": "ok",
                "isError": False,
                "details": {"status": "completed", "durationMs": 1500},
                "timestamp": (SECOND + 4) * scale,
            },
        },
        {
            "type": "message",
            "id": "a2",
            "parentId": "r1",
            "message": {
                "role": "assistant",
                "content": [{"type": "text", "text": "done"}],
                "api": "anthropic-messages",
                "provider": "anthropic",
                "model": "m",
                "stopReason": "stop",
                "usage": {"input": 1, "output": 1},
                "timestamp": (SECOND + 5) * scale,
            },
        },
    ]
    path = tmp_path / f"{unit}.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(line) for line in lines) + b"\n")
    (record,) = _build(tmp_path, path)
    assert [call["started_at"] for call in record["model_calls"]] == [SECOND, SECOND + 5]
    (tool,) = record["tool_calls"]
    # Completion at SECOND + 4 s; durationMs 1500 is a duration in ms whatever the epoch unit: start 1.5 s earlier.
    assert (tool["completed_at"], tool["duration_ms"], tool["started_at"]) == (SECOND + 4, 1500.0, SECOND + 2.5)


def test_json_mode_event_log_becomes_a_linear_session(tmp_path):
    (record,) = _build(tmp_path, PI / "json_mode_events.jsonl")
    (invocation,) = record["invocations"]
    assert invocation["status"] == "completed"
    assert [i[:2] for i in _items(invocation)] == [
        ("message", "user"),
        ("function_call", N),
        ("function_call_output", N),
        ("message", "assistant"),
    ]
    assert [c["response_metadata"]["response_id"] for c in record["model_calls"]] == [
        "chatcmpl-json-1",
        "chatcmpl-json-2",
    ]
    # events carry no times: only the tool result message's own timestamp (completion) is known
    (tool,) = record["tool_calls"]
    assert (tool["started_at"], tool["completed_at"], tool["duration_ms"]) == (N, 1780300803.0, N)
    assert ("tool_timing_unavailable", "pi-json", "call_py") in _gaps(record)


def test_parent_id_cycle_is_reported_and_the_active_path_starts_where_it_closes(tmp_path):
    path = tmp_path / "cycle.jsonl"
    lines = [
        {"type": "session", "version": 3, "id": "cyc", "timestamp": "2026-01-01T00:00:00Z", "cwd": "/w"},
        *(
            {
                "type": "message",
                "id": entry,
                "parentId": parent,
                "timestamp": f"2026-01-01T00:00:0{n}Z",
                "message": {"role": "user", "content": entry},
            }
            for n, (entry, parent) in enumerate([("a", "c"), ("b", "a"), ("c", "b")], start=1)
        ),
    ]
    path.write_text("".join(orjson.dumps(line).decode() + "\n" for line in lines))
    out = tmp_path / "out.jsonl"
    result = run_cli("build", path, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert [line.split(": ", 1)[1] for line in result.stderr.splitlines() if "[parent_cycle]" in line] == [
        "warning[parent_cycle]: entry parentId links form a cycle (a -> c -> b -> a); "
        "the active path starts at a, whose parentId c is ignored"
    ]
    (record,) = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [i[2] for i in _items(record["invocations"][0])] == ["a", "b", "c"]


def test_unknown_version_and_misplaced_header_are_reported(tmp_path):
    entry = {"type": "message", "id": "a", "parentId": None, "timestamp": "2026-01-01T00:00:01Z"}
    entry["message"] = {"role": "user", "content": "hi"}
    header = {"type": "session", "version": 99, "id": "s", "timestamp": "2026-01-01T00:00:00Z", "cwd": "/w"}
    newer, late = tmp_path / "newer.jsonl", tmp_path / "late.jsonl"
    newer.write_bytes(orjson.dumps(header) + b"\n" + orjson.dumps(entry) + b"\n")
    late.write_bytes(orjson.dumps(entry) + b"\n" + orjson.dumps({**header, "version": 3}) + b"\n")
    seen = []
    sink = DiagnosticSink(seen.append)
    assert read_session(newer, sink).version == 3
    assert read_session(late, sink).version == 3
    assert [(d.line, d.code, d.message) for d in seen] == [
        (1, "pi_session_version_unknown", "session format version 99 is not one ng-traj knows (1, 2, 3); read as v3"),
        (
            2,
            "pi_header_misplaced",
            "session header after the first entry; ignored (the file was read without a header)",
        ),
    ]


def test_entries_with_non_text_ids_or_no_message_object_are_reported(tmp_path):
    path = tmp_path / "odd.jsonl"
    lines = [
        {"type": "session", "version": 3, "id": "odd", "timestamp": "2026-01-01T00:00:00Z", "cwd": "/w"},
        {"type": "message", "id": 7, "parentId": None, "timestamp": "2026-01-01T00:00:01Z", "message": None},
        {"type": "message", "id": "b", "parentId": 7, "timestamp": "2026-01-01T00:00:02Z", "message": {}},
        {"type": "message", "id": "c", "parentId": "b", "timestamp": "2026-01-01T00:00:03Z", "message": None},
        {"type": ["message"], "id": "d", "parentId": "c", "timestamp": "2026-01-01T00:00:04Z", "message": {}},
        {"type": "message", "id": "e", "parentId": "d", "message": {"role": {"r": 1}, "content": "x"}},
        {"type": "message", "id": "f", "parentId": "e", "message": {"role": "user", "content": 12345}},
    ]
    path.write_text("".join(orjson.dumps(line).decode() + "\n" for line in lines))
    seen = []
    read_session(path, DiagnosticSink(seen.append))
    assert [(d.line, d.code, d.message) for d in seen] == [
        (2, "pi_entry_invalid", "id is not text (7); the entry is named after its line"),
        (3, "pi_entry_invalid", "parentId is not text (7); the entry has no parent"),
        (4, "pi_entry_invalid", "a message entry without a message object; passed over"),
        (5, "pi_entry_invalid", "type is not text (['message']); passed over"),
        (6, "pi_entry_invalid", "message role is not text ({'r': 1}); passed over"),
        (7, "pi_entry_invalid", "message content is neither text nor a list of blocks (int); not read"),
    ]


def test_a_session_its_reader_fails_on_is_reported_and_the_run_goes_on(tmp_path, monkeypatch):
    from ng_traj.sources.pi.reader import PiReader

    def broken(self, unit, sink):
        raise TypeError("unhashable type: 'list'")

    monkeypatch.setattr(PiReader, "load", broken)
    out = tmp_path / "out.jsonl"
    result = run_cli("build", FIXTURES / "build" / "retained_run" / "input", PI / "kind_header.jsonl", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert "error[native_load_failed]: session kind_header could not be read (TypeError: unhashable type" in (
        result.stderr
    )
    assert len(out.read_bytes().splitlines()) == 14  # the retained run's 13 and the session's own
    header = {"type": ["session"], "version": 3, "id": "x"}
    odd = tmp_path / "odd.jsonl"
    odd.write_bytes(orjson.dumps(header) + b"\n")
    result = run_cli("build", odd, "-o", out)
    assert result.exit_code == 1 and "internal error" not in result.stderr


def test_a_cycle_made_by_an_entry_replaced_where_it_stood_is_reported(tmp_path, monkeypatch):
    """Entries in pi's own order (each parent written before its child, no id twice) form no cycle and
    are not walked for one; an entry whose later content replaces it where it stood, with a parent
    written after it, can close one, and it is still found and reported."""
    import ng_traj.sources.pi.session as session_module

    def entry(entry_id, parent, text):
        message = {"role": "user", "content": text}
        return {"type": "message", "id": entry_id, "parentId": parent, "message": message}

    header = {"type": "session", "version": 3, "id": "rep", "timestamp": "2026-01-01T00:00:00Z", "cwd": "/w"}
    ordered = tmp_path / "ordered.jsonl"
    ordered.write_text("".join(orjson.dumps(line).decode() + "\n" for line in [header, entry("a", None, "a")]))
    replaced = tmp_path / "replaced.jsonl"
    lines = [header, entry("a", None, "a"), entry("b", "a", "b"), entry("a", "b", "a again")]
    replaced.write_text("".join(orjson.dumps(line).decode() + "\n" for line in lines))
    walked = []
    original = session_module.parent_cycles
    monkeypatch.setattr(session_module, "parent_cycles", lambda parents: walked.append(parents) or original(parents))
    read_session(ordered, DiagnosticSink())
    assert walked == []  # in order: never walked
    found = []
    read_session(replaced, DiagnosticSink(found.append))
    assert [d.message for d in found if d.code == "parent_cycle"] == [
        "entry parentId links form a cycle (a -> b -> a); the active path starts at a, whose parentId b is ignored"
    ]


def test_a_native_call_makes_its_transcript_call_when_asked_with_the_time_it_had(tmp_path):
    """pi's native calls leave their transcript call until a consumer asks (most match a captured
    call); the time read before it is made is the made call's, and it is made once."""
    from ng_traj.contract import TrajectoryModelCall
    from ng_traj.sources.pi.observe import observe

    session = read_session(PI / "parallel_tools.jsonl", DiagnosticSink())
    calls = observe(session, session.session_id).calls
    assert calls and all(call.transcript_call is None for call in calls)
    for call in calls:
        timestamp = call.timestamp()
        made = call.transcript()
        assert type(made) is TrajectoryModelCall and call.transcript() is made
        assert timestamp == (made.started_at or made.completed_at) and timestamp is not None
        assert call.timestamp() == timestamp  # the same once made
        assert made == TrajectoryModelCall.model_validate(made.model_dump())
