"""Codex rollouts: the real 0.142 sub-agent samples and fixtures for every format the reader reads.

Expected values are derived by hand from the rules in ``sources/codex`` (fixtures/codex/README.md
says which format description each fixture follows), or, for the real samples, counted by a plain
reading of the files that shares no code with ``ng_traj``.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import orjson

from conftest import FIXTURES, run_cli, run_json, shared_dir
from conftest import build_valid as _build

CODEX = FIXTURES / "codex"
PARENT = "019ede24-67de-7b11-b46f-7922530907a9"


def _gaps(record: dict) -> list[tuple]:
    return [(g["code"], g["invocation_id"], g["detail"]) for g in record["gaps"]]


def _text(content: str | list) -> str:
    return content if isinstance(content, str) else "".join(part["text"] for part in content)


def _tokens(record: dict) -> list[list]:
    return [list(call["token_stats"].values()) for call in record["model_calls"]]


def _plain_counts(path: Path) -> dict:
    """Items, model calls and tool pairs of one thread-spawn rollout, by plain reading."""
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    items = [line["payload"] for line in lines if line["type"] == "response_item"]
    totals = [
        line["payload"]["info"]["total_token_usage"]["total_tokens"]
        for line in lines
        if line["type"] == "event_msg" and line["payload"]["type"] == "token_count" and line["payload"]["info"]
    ]
    calls = sum(1 for i, total in enumerate(totals) if total > max(totals[:i], default=-1))
    call_ids = {i["call_id"] for i in items if i["type"] == "function_call"}
    outputs = [i for i in items if i["type"] == "function_call_output" and i["call_id"] in call_ids]
    thread = lines[0]["payload"]["id"]
    return {"items": len(items), "calls": calls, "tools": len(outputs), "thread": thread, "turns": _turns(items)}


def _turns(items: list[dict]) -> list[tuple[int, int, int]]:
    """(turn number, function calls before it, items before it): a response starts at an item the
    model wrote (reasoning, its message, a function call) that follows one it read."""

    def written(item: dict) -> bool:
        return item["type"] in ("reasoning", "function_call") or item.get("role") == "assistant"

    starts = [n for n, item in enumerate(items) if written(item) and (n == 0 or not written(items[n - 1]))]
    steps = [sum(item["type"] == "function_call" for item in items[:n]) for n in starts]
    return [(number, step, n) for number, (step, n) in enumerate(zip(steps, starts, strict=True), 1)]


def _real_samples() -> list[Path]:
    return sorted(shared_dir("producer-samples", "codex").glob("*.jsonl"))


def _check_real_tree(record: dict, samples: list[Path]) -> None:
    counts = [_plain_counts(path) for path in samples]
    invocations = record["invocations"]
    assert record["rollout_id"] == PARENT
    assert [(i["invocation_id"], i["parent_invocation_id"]) for i in invocations] == [
        (PARENT, None),
        *((c["thread"], PARENT) for c in counts),
    ]
    assert [len(i["conversation"]) for i in invocations] == [0, *(c["items"] for c in counts)]
    assert len(record["model_calls"]) == sum(c["calls"] for c in counts)
    assert len(record["tool_calls"]) == sum(c["tools"] for c in counts)
    # no rollout row and no capture: no captured turns; each thread's turns read from its transcript
    turns = [(t["invocation_id"], t["turn_no"], t["step_count"], len(t["question"])) for t in record["turns"]]
    assert turns == [(c["thread"], *turn) for c in counts for turn in c["turns"]]
    assert sum(len(c["turns"]) for c in counts) == sum(c["calls"] for c in counts)
    assert ("turns_from_transcript", None, None) in _gaps(record)
    gaps = _gaps(record)
    assert ("agent_transcript_unavailable", PARENT, PARENT) in gaps
    assert ("subagent_hierarchy_incomplete", None, None) in gaps
    spawn = [g for g in gaps if g[0] == "subagent_spawn_tool_unavailable"]
    assert spawn == [("subagent_spawn_tool_unavailable", c["thread"], None) for c in counts]


def test_real_subagent_samples_build_one_tree(tmp_path):
    samples = _real_samples()
    assert len(samples) == 2
    (record,) = _build(tmp_path, *samples)
    _check_real_tree(record, samples)
    # usage: the per-call deltas of total_token_usage, equal to each row's last_token_usage here
    assert _tokens(record) == [
        [24167, 209, 114, 24376, 0],
        [24430, 26, 0, 24456, 0],
        [24167, 215, 120, 24382, 0],
        [24433, 32, 0, 24465, 0],
    ]
    tools = record["tool_calls"]
    assert [(t["tool_name"], t["status"], t["duration_ms"]) for t in tools] == [("exec_command", "completed", 0.0)] * 2


def test_real_samples_in_their_native_layout(tmp_path):
    """Copied to the folder SOURCES.md names (the parent thread's folder); the same tree results."""
    sources = shared_dir("producer-samples") / "SOURCES.md"
    root = tmp_path / "sessions"
    for row in sources.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in row.split("|")]
        if len(cells) > 3 and cells[1].startswith("codex/"):
            native = re.sub(r"^.*?codex/", "", cells[3])
            (root / native).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(sources.parent / cells[1], root / native)
    assert len(list(root.rglob("rollout-*.jsonl"))) == 2
    (record,) = _build(tmp_path, root)
    _check_real_tree(record, _real_samples())


def test_paginated_history_turns_from_completed_items(tmp_path):
    (record,) = _build(tmp_path, CODEX / "paginated")
    (invocation,) = record["invocations"]
    conversation = invocation["conversation"]
    assert [(i["role"], i.get("phase")) for i in conversation] == [
        ("user", None),
        ("assistant", "commentary"),
        ("assistant", "final_answer"),
    ]
    assert conversation[0]["content"] == "What is 2+2?"  # the UserMessage item, not also the response item
    assert [i["content"][0]["text"] for i in conversation[1:]] == ["Let me add.", "4"]
    assert [i["id"] for i in conversation[1:]] == ["item_a1", "item_a2"]
    assert invocation["status"] == "completed"
    # the re-emitted token_count (same totals) is not a second call; the second call is the delta
    assert _tokens(record) == [[1000, 50, 10, 1050, 200], [1100, 10, 0, 1110, 900]]


def test_a_file_with_content_but_no_turns_says_so(tmp_path):
    out = tmp_path / "out.jsonl"
    result = run_json("build", CODEX / "no_turns", "-o", out)
    assert result.exit_code == 0
    codes = Counter(d["code"] for d in result.diagnostics)
    assert codes["codex_turns_unavailable"] == 1
    assert codes["codex_record_unknown"] == 1
    assert "item_completed/Reasoning" in result.stderr and "cli_version 0.147.0" in result.stderr
    (record,) = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    thread = "019f0a20-0000-7000-8000-000000000002"
    assert record["invocations"][0]["conversation"] == []
    assert ("agent_transcript_unavailable", thread, None) in _gaps(record)


F_PARENT = "019ede2f-0000-7000-8000-00000000000a"
F_CHILD = "019ede30-0000-7000-8000-00000000000b"
F_GRANDCHILD = "019ede31-0000-7000-8000-00000000000c"


def test_fork_tree_copied_context_counted_once(tmp_path):
    (record,) = _build(tmp_path, CODEX / "fork_tree")
    invocations = {i["invocation_id"]: i for i in record["invocations"]}
    assert [
        (i["invocation_id"], i["parent_invocation_id"], i["spawned_by_tool_call_id"]) for i in record["invocations"]
    ] == [
        (F_PARENT, None, None),
        (F_CHILD, F_PARENT, "call_spawn_1"),
        (F_GRANDCHILD, F_CHILD, "call_spawn_2"),
    ]
    child = invocations[F_CHILD]
    # the replayed parent prompt ("Split the work.") is not in the child's conversation
    texts = [_text(i["content"]) for i in child["conversation"] if i.get("role") == "user"]
    assert texts == ["do half", "Summary: half done, one sub-agent running."]
    assert child["status"] == "incomplete"  # turn_aborted
    gaps = _gaps(record)
    assert ("copied_context", F_CHILD, "lines=2-7") in gaps
    assert ("subagent_transcript_missing", F_CHILD, "call_spawn_3") in gaps
    assert ("compaction_model_call_boundary_unavailable", F_CHILD, None) in gaps
    # parent 3 calls; child 3 (its replayed row is the baseline, not a call; first = 6260 - 3040); grandchild 1
    assert _tokens(record) == [
        [3000, 40, 0, 3040, 0],
        [3100, 30, 0, 3130, 3000],
        [3200, 10, 0, 3210, 3100],
        [3200, 20, 5, 3220, 3000],
        [3300, 30, 0, 3330, 3000],
        [3400, 10, 0, 3410, 3000],
        [800, 5, 0, 805, 0],
    ]
    assert sum(call["token_stats"]["total_tokens"] for call in record["model_calls"]) == 9380 + (13000 - 3040) + 805
    exec_tool = next(t for t in record["tool_calls"] if t["tool_call_id"] == "call_exec_1")
    assert (exec_tool["status"], exec_tool["duration_ms"]) == ("failed", 1500.0)
    assert exec_tool["completed_at"] - exec_tool["started_at"] == 1.5


def test_damaged_lines_are_reported_and_the_rest_read(tmp_path):
    out = tmp_path / "out.jsonl"
    result = run_json("build", CODEX / "damaged", "-o", out)
    assert result.exit_code == 0
    codes = Counter(d["code"] for d in result.diagnostics)
    assert (codes["invalid_json"], codes["not_an_object"], codes["truncated_line"]) == (1, 1, 1)
    assert codes["codex_record_unknown"] == 2
    (record,) = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    (invocation,) = record["invocations"]
    assert [i["type"] for i in invocation["conversation"]] == ["message", "message", "function_call_output"]
    gaps = _gaps(record)
    thread = invocation["invocation_id"]
    assert ("tool_result_unowned", thread, "call_nobody") in gaps
    assert ("invocation_outcome_unavailable", thread, None) in gaps  # the task_complete line was cut
    assert _tokens(record) == [[100, 5, 0, 105, 0]]


def test_pre_envelope_rollout(tmp_path):
    (record,) = _build(tmp_path, CODEX / "legacy")
    (invocation,) = record["invocations"]
    assert invocation["invocation_id"] == "0197c000-0000-7000-8000-000000000005"
    assert [i["type"] for i in invocation["conversation"]] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert invocation["conversation"][2]["output"] == "a\nb"
    (tool,) = record["tool_calls"]
    assert (tool["status"], tool["duration_ms"], tool["started_at"]) == ("completed", 100.0, None)
    assert record["model_calls"] == []


def test_a_newer_major_version_is_named_not_read(tmp_path):
    result = run_cli("build", CODEX / "future", "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 1
    assert "info[input_unsupported]: recognised as Codex rollout of cli_version 1.0.0" in result.stderr


def test_a_rollout_folder_attributes_the_tree(tmp_path):
    sessions = tmp_path / "sessions" / "0-0"
    shutil.copytree(CODEX / "fork_tree", sessions)
    rollouts = tmp_path / "rollouts.jsonl"
    row = {
        "_ng_task_index": 0,
        "_ng_rollout_index": 0,
        "agent_ref": {"name": "codex_agent"},
        "responses_create_params": {"input": [{"role": "user", "content": "Split the work."}]},
        "response": {"id": "r-0-0", "output": []},
        "reward": 1.0,
    }
    rollouts.write_text(json.dumps(row) + "\n")
    (record,) = _build(tmp_path, rollouts, tmp_path / "sessions")
    assert record["rollout_id"] == "0-0"
    assert [i["invocation_id"] for i in record["invocations"]] == [F_PARENT, F_CHILD, F_GRANDCHILD]
    assert "rollout_record_unavailable" not in {g[0] for g in _gaps(record)}


def test_jobs_and_input_order_do_not_change_the_output(tmp_path):
    files = sorted((CODEX / "fork_tree").glob("*.jsonl"))
    outputs = []
    for jobs, order in (("1", files), ("2", list(reversed(files)))):
        out = tmp_path / f"out-{jobs}.jsonl"
        assert run_cli("build", *order, "-o", out, "--jobs", jobs).exit_code == 0
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]


def test_a_row_bundle_of_the_same_producer_wins_over_the_rollouts(tmp_path):
    sessions = tmp_path / "sessions" / "0-0"
    shutil.copytree(CODEX / "fork_tree", sessions)
    bundle = {
        "source": "codex",
        "records": [{"kind": "agent_invocation", "invocation_id": "root"}],
        "gaps": [],
    }
    row = {
        "_ng_task_index": 0,
        "_ng_rollout_index": 0,
        "responses_create_params": {"input": [{"role": "user", "content": "Split the work."}]},
        "response": {"id": "r-0-0", "output": []},
        "reward": 1.0,
        "ng_agent_observations": bundle,
    }
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text(json.dumps(row) + "\n")
    out = tmp_path / "out.jsonl"
    result = run_json("build", rollouts, tmp_path / "sessions", "-o", out)
    assert result.exit_code == 0
    assert [d["code"] for d in result.diagnostics if d["code"] == "native_superseded"] == ["native_superseded"]
    (record,) = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    ids = [i["invocation_id"] for i in record["invocations"]]
    assert ids[0] == "root" and F_PARENT not in ids  # the empty bundle root also gets the row fallback


def _envelope(kind: str, payload: dict, second: int = 0) -> dict:
    return {"timestamp": f"2026-06-20T01:00:{second:02d}.000Z", "type": kind, "payload": payload}


def _thread(thread: str, parent: str | None = None, calls: tuple[tuple[str, str], ...] = ()) -> list[dict]:
    """A small 0.142 rollout: meta, a user message, ``spawn_agent`` calls with their outputs, an answer."""
    source = {"subagent": {"thread_spawn": {"parent_thread_id": parent, "depth": 1}}} if parent else "cli"
    lines = [
        _envelope("session_meta", {"id": thread, "cli_version": "0.142.0", "source": source}),
        _envelope(
            "response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
        ),
    ]
    for call_id, output in calls:
        lines.append(
            _envelope(
                "response_item", {"type": "function_call", "name": "spawn_agent", "arguments": "{}", "call_id": call_id}
            )
        )
        lines.append(_envelope("response_item", {"type": "function_call_output", "call_id": call_id, "output": output}))
    return lines


def _write(path: Path, lines: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


A = "019ede40-0000-7000-8000-0000000000a1"
B = "019ede41-0000-7000-8000-0000000000b2"


def test_a_cut_session_meta_takes_the_thread_id_from_the_file_name(tmp_path):
    lines = _thread(A)
    path = _write(tmp_path / "in" / f"rollout-2026-06-20T09-00-00-{A}.jsonl", [json.dumps(lines[0])[:40], *lines[1:]])
    out = tmp_path / "out.jsonl"
    result = run_json("build", path, "-o", out)
    assert result.exit_code == 0
    assert [d["code"] for d in result.diagnostics if d["code"].startswith(("codex", "invalid_json"))] == [
        "invalid_json",
        "codex_session_meta_missing",
    ]
    (record,) = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [(i["invocation_id"], len(i["conversation"])) for i in record["invocations"]] == [(A, 1)]


def test_a_repeated_thread_is_read_once(tmp_path):
    folder = tmp_path / "in"
    _write(folder / f"rollout-2026-06-20T09-00-00-{A}.jsonl", _thread(A))
    _write(folder / f"rollout-2026-06-20T09-00-00-{A}_reverted.jsonl", _thread(A))
    out = tmp_path / "out.jsonl"
    result = run_json("build", folder, "-o", out)
    repeated = [d for d in result.diagnostics if d["code"] == "codex_thread_repeated"]
    assert [Path(d["path"]).name for d in repeated] == [f"rollout-2026-06-20T09-00-00-{A}_reverted.jsonl"]
    (record,) = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [i["invocation_id"] for i in record["invocations"]] == [A]


def test_two_spawn_calls_naming_one_child_are_ambiguous(tmp_path):
    folder = tmp_path / "in"
    _write(folder / "rollout-parent.jsonl", _thread(A, calls=(("call_1", f"started {B}"), ("call_2", f"again {B}"))))
    _write(folder / "rollout-child.jsonl", _thread(B, parent=A))
    (record,) = _build(tmp_path, folder)
    assert [
        (i["invocation_id"], i["parent_invocation_id"], i["spawned_by_tool_call_id"]) for i in record["invocations"]
    ] == [
        (A, None, None),
        (B, A, None),
    ]
    assert ("subagent_spawn_ambiguous", B, None) in _gaps(record)
    assert not [g for g in _gaps(record) if g[0] == "subagent_transcript_missing"]


def test_threads_naming_each_other_as_parents_are_broken_at_the_smallest(tmp_path):
    folder = tmp_path / "in"
    _write(folder / "rollout-a.jsonl", _thread(A, parent=B))
    _write(folder / "rollout-b.jsonl", _thread(B, parent=A))
    out = tmp_path / "out.jsonl"
    result = run_json("build", folder, "-o", out)
    assert [d["code"] for d in result.diagnostics if d["code"] == "parent_cycle"] == ["parent_cycle"]
    (record,) = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert record["rollout_id"] == A
    assert [(i["invocation_id"], i["parent_invocation_id"]) for i in record["invocations"]] == [(A, None), (B, A)]


def test_a_captured_call_joins_by_its_tool_call_ids(tmp_path):
    """Codex writes no response ids: the child's exec call is matched to the captured call by its call id."""
    shutil.copytree(CODEX / "fork_tree", tmp_path / "sessions" / "0-0")
    row = {
        "_ng_task_index": 0,
        "_ng_rollout_index": 0,
        "responses_create_params": {"input": [{"role": "user", "content": "Split the work."}]},
        "response": {"id": "r-0-0", "output": []},
        "reward": 1.0,
    }
    _write(tmp_path / "rollouts.jsonl", [row])
    captured = {
        "model_call_id": "000000000000000000000000000000c1",
        "dialect": "responses",
        "model_ref": {"type": "responses_api_models", "name": "policy_model"},
        "started_at": 1781917201.2,
        "completed_at": 1781917202.0,
        "status_code": 200,
        "request": {"model": "gpt-5.5", "input": []},
        "response": {
            "id": "resp_c1",
            "object": "response",
            "model": "gpt-5.5",
            "output": [
                {
                    "type": "function_call",
                    "call_id": "call_exec_1",
                    "name": "exec_command",
                    "arguments": "{}",
                    "id": "fc_1",
                }
            ],
            "usage": {"input_tokens": 3200, "output_tokens": 20, "total_tokens": 3220},
        },
    }
    _write(tmp_path / "capture" / "0-0.capture.jsonl", [captured])
    (record,) = _build(tmp_path, tmp_path / "rollouts.jsonl", tmp_path / "capture", tmp_path / "sessions")
    child = next(i for i in record["invocations"] if i["invocation_id"] == F_CHILD)
    assert [ref["model_call_id"] for ref in child["model_calls"]] == ["000000000000000000000000000000c1"]
    ids = [call["model_call_id"] for call in record["model_calls"]]
    assert ids.count("000000000000000000000000000000c1") == 1
    assert ids.count(None) == 6  # the other native calls keep their transcript usage


def test_an_exec_command_end_gives_the_exit_code_but_no_start():
    from ng_traj.sources.codex.observe import tools
    from ng_traj.sources.codex.rollout import Record

    records = [
        Record(
            2, 10.0, "response_item", {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"}
        ),
        Record(3, 12.0, "event_msg", {"type": "exec_command_end", "call_id": "c1", "exit_code": 1}),
        Record(4, 12.5, "response_item", {"type": "function_call_output", "call_id": "c1", "output": "boom"}),
    ]
    gaps = []
    (tool,) = tools(records, "t", gaps)
    assert (tool.status, tool.started_at, tool.completed_at) == ("failed", None, 12.5)
    assert [(g.code, g.detail) for g in gaps] == [("tool_timing_unavailable", "c1")]
