"""Golden builds of the Hermes fixtures, with expectations derived by hand.

Each ``fixtures/hermes/<scenario>/input/`` holds Hermes files as Hermes writes them; a ``*.db.json``
is a state.db export (DDL and rows, the shape of the real sample export) that :func:`materialise`
turns into a real SQLite database in a temporary folder. The facts below were written from the
rules (the Hermes format and the reader docstrings) before the output was
generated; ``expected.jsonl`` then pins every byte. ``NG_TRAJ_UPDATE_GOLDEN=1`` rewrites it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import orjson
import pytest

from conftest import FIXTURES, build_db, run_cli, run_json
from ng_traj.checks import check_line

HERMES = FIXTURES / "hermes"
N = None


def materialise(source: Path, target: Path) -> Path:
    """Copy a fixture input folder, turning every ``<name>.db.json`` export into the database ``<name>.db``."""
    shutil.copytree(source, target)
    for export in sorted(target.rglob("*.db.json")):
        build_db(json.loads(export.read_text()), export.with_suffix(""))
        export.unlink()
    return target


def build(scenario: str, tmp_path: Path, *extra: str) -> tuple[bytes, dict, str]:
    """Build a scenario's materialised input; return the output bytes, the summary and standard error."""
    folder = materialise(HERMES / scenario / "input", tmp_path / "input")
    out = tmp_path / "out.jsonl"
    result = run_json("build", folder, "-o", out, *extra)
    assert result.exit_code == 0, result.stderr
    return out.read_bytes(), result.summary, result.stderr


def golden(scenario: str, produced: bytes) -> None:
    expected = HERMES / scenario / "expected.jsonl"
    if os.environ.get("NG_TRAJ_UPDATE_GOLDEN") == "1":
        expected.write_bytes(produced)
    assert produced == expected.read_bytes()
    for line in produced.splitlines():
        findings, _ = check_line(orjson.loads(line))
        assert findings == []


def records(produced: bytes) -> dict[str, dict]:
    return {record["rollout_id"]: record for record in map(orjson.loads, produced.splitlines())}


SKIPPED = ("turns_unavailable", "turns_from_transcript", "model_calls_unavailable")


def gaps(record: dict, *, skip: tuple[str, ...] = SKIPPED) -> list[tuple]:
    return [(g["code"], g["invocation_id"], g["detail"]) for g in record["gaps"] if g["code"] not in skip]


def invocations(record: dict) -> list[tuple]:
    return [
        (
            i["invocation_id"],
            i["parent_invocation_id"],
            i["status"],
            i["duration_ms"],
            [c["type"] for c in i["conversation"]],
        )
        for i in record["invocations"]
    ]


def tools(record: dict) -> list[tuple]:
    return [
        (t["invocation_id"], t["tool_call_id"], t["tool_name"], t["status"], t["started_at"])
        for t in record["tool_calls"]
    ]


M, R, F, OUT = "message", "reasoning", "function_call", "function_call_output"


def test_db_v1_reads_the_first_schema(tmp_path: Path) -> None:
    produced, summary, _ = build("db_v1", tmp_path)
    golden("db_v1", produced)
    one, two = records(produced).values()
    s1, s2 = "20260220_100000_aaaaaa", "20260220_110000_bbbbbb"
    # 1771581660.5 - 1771581600.0 = 60.5 s; the last message is an answer without tool calls: completed.
    assert invocations(one) == [(s1, N, "completed", 60500.0, [M, M, M, F, OUT, M])]
    # terminal with exit_code 2 fails (reference heuristic); Hermes keeps no tool times.
    assert tools(one) == [(s1, "call_v1_1", "terminal", "failed", N)]
    # Bundle gaps first, then the build's own (projection order).
    assert gaps(one) == [
        ("tool_timing_unavailable", s1, "call_v1_1"),
        ("model_call_ownership_unavailable", s1, N),
        ("rollout_record_unavailable", N, f"session:{s1}"),
    ]
    # No end recorded: no duration; a tool call without result ends the history: incomplete.
    assert invocations(two) == [(s2, N, "incomplete", N, [M, M, M, F])]
    assert tools(two) == [(s2, "call_v1_2", "terminal", "unknown", N)]
    assert ("tool_result_missing", s2, "call_v1_2") in gaps(two)
    # v1 input counts are the provider's raw prompt count: no prompt total; 200 + 20 completion tokens.
    assert summary["native_session_totals"] == {"completion_tokens": 220, "sessions": 2}


def test_db_v6_subagents_compression_and_branches(tmp_path: Path) -> None:
    produced, summary, _ = build("db_v6_lineage", tmp_path)
    golden("db_v6_lineage", produced)
    built = records(produced)
    assert list(built) == [
        "20260325_090000_root01",
        "20260325_091000_orphan",
        "20260325_100000_compa1",
        "20260325_110000_brch01",
    ]
    root, child = "20260325_090000_root01", "20260325_090010_child1"
    tree = built[root]
    assert invocations(tree) == [
        (root, N, "completed", 100000.0, [M, M, R, M, F, OUT, M]),
        (child, root, "completed", 40000.0, [M, M, M, F, OUT, M]),
    ]
    # delegate result has no error; the sub-agent's "Error: ..." text fails by the heuristic.
    assert tools(tree) == [
        (root, "call_del_1", "delegate_task", "completed", N),
        (child, "call_ws_1", "web_search", "failed", N),
    ]
    assert ("subagent_spawn_tool_unavailable", child, root) in gaps(tree)
    assert ("reasoning_details_unavailable", root, N) in gaps(tree)
    orphan = built["20260325_091000_orphan"]
    assert ("subagent_hierarchy_incomplete", "20260325_091000_orphan", "20260325_085959_gone00") in gaps(orphan)
    assert orphan["invocations"][0]["parent_invocation_id"] == "20260325_085959_gone00"
    a, b = "20260325_100000_compa1", "20260325_101000_compb2"
    chain = built[a]
    # B continues A at A's place (root level), not as A's sub-agent.
    assert invocations(chain) == [
        (a, N, "incomplete", 600000.0, [M, M, M, F, OUT]),
        # B repeats A's first user message (a copy, counted in A): its system prompt, the summary, its own turn.
        (b, N, "completed", N, [M, M, M, M]),
    ]
    assert ("copied_context", b, "messages=1") in gaps(chain)
    assert ("tool_call_id", "call_todo_1") and tools(chain) == [(a, "call_todo_1", "todo", "failed", N)]
    assert [code for code, inv, _ in gaps(chain) if inv == a and code.startswith("compaction")] == [
        "compaction_tokens_before_unavailable",
        "compaction_tokens_after_unavailable",
        "compaction_model_call_boundary_unavailable",
    ]
    branch = built["20260325_110000_brch01"]
    assert [i[:2] for i in invocations(branch)] == [("20260325_110000_brch01", N), ("20260325_110500_brch02", N)]
    # The /branch child starts with its source's history (a, b): copies; its own turn (c, d) follows.
    assert [i[4] for i in invocations(branch)] == [[M, M, M], [M, M, M]]
    assert ("copied_context", "20260325_110500_brch02", "messages=2") in gaps(branch)
    assert ("agent_conversation_branching_unavailable", "20260325_110500_brch02", "20260325_110000_brch01") in gaps(
        branch
    )
    # R: 100+1000+0 prompt, 10 completion; C: 50+0+20, 5; the others report 0 (column defaults).
    assert summary["native_session_totals"]["prompt_tokens"] == 1170
    assert summary["native_session_totals"]["completion_tokens"] == 15
    assert summary["native_session_totals"]["sessions"] == 7


def test_db_v6_compaction_observation_is_kept_with_attach(tmp_path: Path) -> None:
    # Only the compression chain, in a folder named by the rollout id (--attach keeps it).
    export = json.loads((HERMES / "db_v6_lineage" / "input" / "state.db.json").read_text())
    chain = {"20260325_100000_compa1", "20260325_101000_compb2"}
    export["sessions"] = [row for row in export["sessions"] if row["id"] in chain]
    export["messages"] = [row for row in export["messages"] if row["session_id"] in chain]
    target = tmp_path / "20260325_100000_compa1"
    target.mkdir()
    build_db(export, target / "state.db")
    rows = tmp_path / "rollouts.jsonl"
    row = {"responses_create_params": {"input": "plan"}, "response": {"id": "r", "output": []}, "reward": 0.0}
    rows.write_text(json.dumps({**row, "_ng_rollout_id": "20260325_100000_compa1", "_ng_task_index": 0}) + "\n")
    out = tmp_path / "out.jsonl"
    result = run_cli("build", rows, target, "-o", out, "--attach")
    assert result.exit_code == 0, result.stderr
    attached = orjson.loads(out.read_bytes().splitlines()[0])
    compactions = [r for r in attached["ng_agent_observations"]["records"] if r["kind"] == "context_compaction"]
    summary = "[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns were compacted into the summary below. Summary: the trip goes to Lisbon; flights booked."
    assert [(c["invocation_id"], c["observed_at"], c["outcome"], c["summary"], c["trigger"]) for c in compactions] == [
        ("20260325_100000_compa1", 1774433400.0, "completed", summary, N)
    ]


def test_db_v23_in_place_compaction_api_content_and_reasoning_spellings(tmp_path: Path) -> None:
    produced, summary, _ = build("db_v23_inplace", tmp_path)
    golden("db_v23_inplace", produced)
    (record,) = records(produced).values()
    s = "20260722_120000_inplace"
    (inv,) = record["invocations"]
    kinds = [(c["type"], c.get("role"), c.get("id")) for c in inv["conversation"]]
    # rows 40, 41 (archived) and 45 (undone) are out of the live history; no system prompt stored.
    assert kinds == [
        (M, "user", N),  # 42 summary
        (M, "user", N),  # 43 text + image
        (R, N, f"{s}-reasoning-2"),  # 44 reasoning_content
        (M, "assistant", f"{s}-message-2"),
        (M, "user", N),  # 46 api_content
        (R, N, "rs_c1"),  # 47 codex reasoning item kept as is
        (M, "assistant", f"{s}-message-4"),
        (F, N, "call_c1"),
        (OUT, N, N),
        (M, "assistant", f"{s}-message-6"),
        (M, "assistant", f"{s}-message-7"),  # 50: tool_calls not JSON, dropped with a gap
    ]
    assert inv["conversation"][1]["content"] == [
        {"type": "input_text", "text": "what is in this image?"},
        {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"},
    ]
    assert inv["conversation"][4]["content"] == "what colour?\n\n[memory: the user likes cats]"
    assert inv["conversation"][5]["encrypted_content"] == "gAAAAB"
    assert inv["status"] == "completed" and inv["duration_ms"] == 300000.0
    assert tools(record) == [(s, "call_c1", "vision_analyze", "unknown", N)]
    assert gaps(record, skip=(*SKIPPED, "rollout_record_unavailable")) == [
        ("agent_artifact_record_unparseable", s, "state.db:messages.id=50:tool_calls"),
        ("tool_outcome_unavailable", s, "call_c1"),
        ("tool_timing_unavailable", s, "call_c1"),
        ("compaction_tokens_before_unavailable", s, N),
        ("compaction_tokens_after_unavailable", s, N),
        ("compaction_model_call_boundary_unavailable", s, N),
        ("model_call_ownership_unavailable", s, N),
    ]
    # 500 + 1000 + 100 inclusive prompt; 50 completion; 1000 cached; 10 reasoning; 4 API calls.
    assert summary["native_session_totals"] == {
        "cached_tokens": 1000,
        "completion_tokens": 50,
        "model_calls": 4,
        "prompt_tokens": 1600,
        "reasoning_tokens": 10,
        "sessions": 1,
    }


def test_db_v99_reads_known_columns_and_names_the_version(tmp_path: Path) -> None:
    produced, summary, stderr = build("db_v99_unknown", tmp_path)
    golden("db_v99_unknown", produced)
    (record,) = records(produced).values()
    assert ("hermes_schema_version_unsupported", N, "schema_version=99") in gaps(record)
    assert invocations(record) == [("20261001_080000_future", N, "completed", 10000.0, [M, M, M])]
    assert "warning[hermes_schema_version_unknown]" in stderr
    # Versions are cumulative: above 5, input excludes the cache (10 + 0 + 0).
    assert summary["native_session_totals"]["prompt_tokens"] == 10


def test_forms_one_invocation_per_session_database_authoritative(tmp_path: Path) -> None:
    produced, summary, stderr = build("forms", tmp_path)
    golden("forms", produced)
    built = records(produced)
    assert list(built) == ["20260401_080000_forms1", "20260402_090000_gate01", "20260403_070000_snaps1"]
    forms = built["20260401_080000_forms1"]
    (inv,) = forms["invocations"]
    assert inv["conversation"][0] == {
        "type": "message",
        "role": "system",
        "content": "Prompt of 20260401_080000_forms1",
        "phase": None,
    }
    assert inv["conversation"][-1]["content"][0]["text"] == "Bye!"
    assert "warning[hermes_session_forms_differ]" in stderr and "differ from message 4; state.db used" in stderr
    # state.db times are UTC seconds: no local-time gap for this session.
    assert [g for g in gaps(forms) if g[0] == "local_timestamp_unconverted"] == []
    gate = built["20260402_090000_gate01"]
    g = "20260402_090000_gate01"
    # session_meta skipped; line 5 is not JSON, line 7 is a truncated last line.
    assert invocations(gate) == [(g, N, "completed", N, [M, R, M, F, OUT, M])]
    assert gaps(gate, skip=(*SKIPPED, "rollout_record_unavailable")) == [
        ("local_timestamp_unconverted", g, "timestamp"),
        ("agent_artifact_record_unparseable", g, f"{g}.jsonl:5"),
        ("agent_artifact_record_unparseable", g, f"{g}.jsonl:7"),
        ("reasoning_details_unavailable", g, N),
        ("tool_timing_unavailable", g, "call_g1"),
        ("model_call_ownership_unavailable", g, N),
    ]
    assert "error[invalid_json]" in stderr and "error[truncated_line]" in stderr
    snaps = built["20260403_070000_snaps1"]
    assert ("local_timestamp_unconverted", "20260403_070000_snaps1", "session_start,last_updated") in gaps(snaps)
    # state.db session (v6: 20 + 0 + 0 prompt, 8 completion) and the store entry of the gateway session
    # (no schema version, so no prompt total: 40 completion, 2000 cached).
    assert summary["native_session_totals"] == {
        "cached_tokens": 2000,
        "completion_tokens": 48,
        "prompt_tokens": 20,
        "reasoning_tokens": 0,
        "sessions": 2,
    }


def test_sharegpt_lines_pair_tool_calls_by_position(tmp_path: Path) -> None:
    produced, summary, _ = build("sharegpt", tmp_path)
    golden("sharegpt", produced)
    built = records(produced)
    assert list(built) == [
        "20260210_120000_early1",
        "failed_trajectories.jsonl:1",
        "trajectory_samples.jsonl:1",
        "trajectory_samples.jsonl:2",
    ]
    first = built["trajectory_samples.jsonl:1"]
    i1 = "trajectory_samples.jsonl:1"
    assert invocations(first) == [(i1, N, "completed", N, [M, M, R, M, F, F, OUT, OUT, M])]
    calls = [c for c in first["invocations"][0]["conversation"] if c["type"] == F]
    assert [(c["call_id"], c["name"], c["arguments"]) for c in calls] == [
        ("call_s1", "terminal", '{"command":"ls"}'),
        ("call_s2", "read_file", '{"path":"a"}'),
    ]
    assert tools(first) == [(i1, "call_s1", "terminal", "completed", N), (i1, "call_s2", "read_file", "failed", N)]
    assert [g for g in gaps(first) if g[0] == "tool_call_paired_by_position"] == [
        ("tool_call_paired_by_position", i1, "call_s1"),
        ("tool_call_paired_by_position", i1, "call_s2"),
    ]
    second = built["trajectory_samples.jsonl:2"]
    i2 = "trajectory_samples.jsonl:2"
    fallback = f"{i2}-call-2-0"
    assert tools(second) == [(i2, fallback, "memory", "unknown", N)]
    assert ("tool_call_id_missing", i2, fallback) in gaps(second)
    assert ("tool_result_missing", i2, fallback) in gaps(second)
    failed = built["failed_trajectories.jsonl:1"]
    assert failed["invocations"][0]["status"] == "incomplete"
    assert ("hermes_session_id_unavailable", "failed_trajectories.jsonl:1", N) in gaps(failed)
    early = built["20260210_120000_early1"]
    assert invocations(early) == [("20260210_120000_early1", N, "completed", N, [M, M, M])]
    assert summary["native_session_totals"] == {}


def test_rollout_capture_and_state_db(tmp_path: Path) -> None:
    produced, summary, _ = build("rollout_capture_db", tmp_path)
    golden("rollout_capture_db", produced)
    (record,) = records(produced).values()
    s = "20260801_120000_rollout"
    assert record["rollout_id"] == "0-0" and record["task_id"] == "0"
    # Model calls come from capture (tokens as captured: 120 prompt incl. 100 cached); the invocation
    # and its conversation from Hermes, attributed by the folder named 0-0.
    assert [
        (c["model_call_id"][-2:], c["response_metadata"]["response_id"], c["token_stats"]["prompt_tokens"])
        for c in record["model_calls"]
    ] == [
        ("01", "chatcmpl-r1", 120),
        ("02", "chatcmpl-r2", 150),
    ]
    (inv,) = record["invocations"]
    assert inv["invocation_id"] == s and [c["type"] for c in inv["conversation"]] == [M, M, M, F, OUT, M]
    # The tool-call message joins call 1 by its tool-call id set; the answer has no id to join by.
    assert inv["model_calls"] == [
        {
            "model_call_id": f"{1:032x}",
            "model_ref": {"type": "responses_api_models", "name": "policy_model"},
            "response_id": "chatcmpl-r1",
        }
    ]
    # The reference join reports the unowned captured call; the unmatched native answer follows.
    assert gaps(record) == [
        ("tool_timing_unavailable", s, "call_r1"),
        ("model_call_ownership_unavailable", N, f"capture:{2:032x}:call_index=1"),
        ("model_response_id_unavailable", s, N),
    ]
    assert tools(record) == [(s, "call_r1", "terminal", "completed", N)]
    assert summary["by_origin"] == {"rollout_row": 1}


@pytest.mark.parametrize("scenario", sorted(p.name for p in HERMES.iterdir() if p.is_dir()))
def test_every_fixture_has_a_golden(scenario: str) -> None:
    assert (HERMES / scenario / "expected.jsonl").is_file()


def test_input_order_does_not_change_the_bytes(tmp_path: Path) -> None:
    folder = materialise(HERMES / "forms" / "input", tmp_path / "input")
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    outputs = []
    for name, order in (("a", files), ("b", files[::-1])):
        out = tmp_path / f"{name}.jsonl"
        assert run_cli("build", *order, "-o", out).exit_code == 0
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] == (HERMES / "forms" / "expected.jsonl").read_bytes()
