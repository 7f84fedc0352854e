"""The Claude Code reader: the real session, and fixtures for the layouts no real file covers.

Expected counts of the real session come from ``_plain_counts``, a plain reading of the file that
shares no code with ``ng_traj``: distinct ``message.id`` values are model calls (the file writes one
line per content block), ``tool_use`` blocks are tool calls, user text and non-empty assistant text
blocks are messages. The fixture values were worked out by hand from the files (README next to them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import Counter
from pathlib import Path

import orjson
import pytest

from conftest import FIXTURES, run_cli, shared_dir
from ng_traj.checks import check_line
from ng_traj.diagnostics import DiagnosticSink
from ng_traj.sources.claude_code.layout import discover, session_folder
from ng_traj.sources.claude_code.reader import READER
from ng_traj.sources.detect import claims

CC = FIXTURES / "claude_code"
TREE_ID = "5d1c0e2a-7b3f-4c1d-9e8a-000000000001"
SAMPLE = "claude-code_session_thinking-tooluse_per-block-lines.jsonl"
SCENARIOS = ("tree", "compaction", "damaged", "sidechain")


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _plain_counts(path: Path) -> dict:
    lines = _lines(path)
    assistants = [line for line in lines if line.get("type") == "assistant"]
    users = [line for line in lines if line.get("type") == "user"]
    blocks = [b for line in assistants for b in line["message"]["content"]]
    user_texts = [u for u in users if isinstance(u["message"]["content"], str)]
    user_blocks = [b for u in users if isinstance(u["message"]["content"], list) for b in u["message"]["content"]]
    return {
        "model_calls": len({line["message"]["id"] for line in assistants}),
        "tool_calls": sum(1 for b in blocks if b["type"] == "tool_use"),
        "tool_results": sum(1 for b in user_blocks if b["type"] == "tool_result"),
        "messages": len(user_texts) + sum(1 for b in blocks if b["type"] == "text" and b["text"]),
        "reasoning": sum(1 for b in blocks if b["type"] == "thinking" and b["thinking"]),
        "session": next(line["sessionId"] for line in lines if "sessionId" in line),
    }


def _build(tmp_path: Path, *inputs: Path, expect: int = 0) -> tuple[list[dict], str]:
    out = tmp_path / "out.jsonl"
    result = run_cli("build", *inputs, "-o", out)
    assert result.exit_code == expect, result.stderr
    assert "Traceback" not in result.stderr
    if expect:
        return [], result.stderr
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    for record in records:
        findings, _ = check_line(record)
        assert [f for f in findings if f.severity == "error"] == []
    return records, result.stderr


def _native_sample(tmp_path: Path) -> Path:
    """The real session copied to its native place, ``projects/<project dir>/<session id>.jsonl``."""
    source = shared_dir("producer-samples", "claude-code") / SAMPLE
    session = _plain_counts(source)["session"]
    target = tmp_path / "claude" / "projects" / "-home-user-Documents-tools-llm-feipi-agent-kit" / f"{session}.jsonl"
    target.parent.mkdir(parents=True)
    shutil.copyfile(source, target)
    return target


def _gaps(record: dict) -> Counter:
    return Counter(gap["code"] for gap in record["gaps"])


def test_real_session_builds_with_counts_from_a_plain_reading(tmp_path):
    path = _native_sample(tmp_path)
    expected = _plain_counts(path)
    (record,), _ = _build(tmp_path, path.parents[2])
    (invocation,) = record["invocations"]
    items = Counter(item["type"] for item in invocation["conversation"])
    assert invocation["invocation_id"] == expected["session"] == "8a283a61-e3f0-4e8f-ba06-6711e2fcf2ed"
    assert (expected["model_calls"], expected["tool_calls"], expected["messages"]) == (4, 5, 4)
    assert len(record["model_calls"]) == expected["model_calls"]
    assert len(record["tool_calls"]) == expected["tool_calls"]
    assert items["function_call"] == expected["tool_calls"]
    assert items["function_call_output"] == expected["tool_results"]
    assert items["message"] == expected["messages"]
    assert items["reasoning"] == expected["reasoning"]
    assert _gaps(record)["model_call_usage_from_transcript"] == expected["model_calls"]
    assert _gaps(record)["tool_timing_unavailable"] == expected["tool_calls"]  # no durations in this file
    # without captured calls nothing owns a turn: one turn per response, read from the transcript
    turns = record["turns"]
    assert [(t["turn_no"], t["step_count"], len(t["question"])) for t in turns] == _plain_turns(path)
    assert len(turns) == expected["model_calls"]
    assert [len(t["answer"]) + len(t["reasoning_content"] or []) for t in turns] == _plain_outputs(path)
    assert _gaps(record)["turns_from_transcript"] == 1 and _gaps(record)["turns_unavailable"] == 0


def _items_of(line: dict) -> list[tuple[str, str | None]]:
    """The conversation items one line makes, each with the response it belongs to (None: input)."""
    content = line["message"]["content"]
    if line.get("type") == "user":
        return [("input", None)] if isinstance(content, str) else [("input", None) for b in content]
    rid = line["message"]["id"]
    return [("output", rid) for b in content if b["type"] == "tool_use" or b.get(b["type"])]


def _plain_turns(path: Path) -> list[tuple[int, int, int]]:
    """(turn number, tool calls of earlier responses, items before the response's first item)."""
    items = [item for line in _lines(path) if line.get("type") in ("user", "assistant") for item in _items_of(line)]
    tools = Counter(b["message"]["id"] for b in _tool_blocks(path))
    firsts = {}
    for position, (_, rid) in enumerate(items):
        if rid is not None:
            firsts.setdefault(rid, position)
    steps, turns = 0, []
    for number, (rid, position) in enumerate(firsts.items(), 1):
        turns.append((number, steps, position))
        steps += tools[rid]
    return turns


def _plain_outputs(path: Path) -> list[int]:
    items = [item for line in _lines(path) if line.get("type") == "assistant" for item in _items_of(line)]
    return list(Counter(rid for _, rid in items).values())


def _tool_blocks(path: Path) -> list[dict]:
    return [
        {"message": line["message"]}
        for line in _lines(path)
        if line.get("type") == "assistant"
        for b in line["message"]["content"]
        if b["type"] == "tool_use"
    ]


def test_per_block_usage_is_counted_once_per_response(tmp_path):
    path = _native_sample(tmp_path)
    finals = {}
    for line in _lines(path):
        if line.get("type") == "assistant":
            usage = line["message"]["usage"]
            best = finals.get(line["message"]["id"])
            if best is None or usage["output_tokens"] >= best["output_tokens"]:
                finals[line["message"]["id"]] = usage
    (record,), _ = _build(tmp_path, path)
    stats = {c["response_metadata"]["response_id"]: c["token_stats"] for c in record["model_calls"]}
    assert stats.keys() == finals.keys()
    for rid, usage in finals.items():
        prompt = usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
        assert stats[rid]["prompt_tokens"] == prompt
        assert stats[rid]["completion_tokens"] == usage["output_tokens"]
        assert stats[rid]["cached_tokens"] == usage["cache_read_input_tokens"]
    assert stats["msg_95c7664f-a705-4ef5-9806-0d2d7ab63b96"]["completion_tokens"] == 134


def _capture_line(index: int, rid: str, model: str) -> dict:
    return {
        "model_call_id": f"{index:032x}",
        "dialect": "messages",
        "model_ref": {"type": "responses_api_models", "name": "policy_model"},
        "started_at": 1781335600.0 + index,
        "completed_at": 1781335600.5 + index,
        "latency_ms": 500.0,
        "latency_ttft_ms": None,
        "status_code": 200,
        "error_category": None,
        "request": {"model": model, "messages": []},
        "response": {"id": rid, "type": "message", "role": "assistant", "model": model, "content": [], "usage": {}},
    }


def test_real_session_with_its_captured_calls_owns_one_turn_per_response(tmp_path):
    path = _native_sample(tmp_path)
    ids = list(dict.fromkeys(line["message"]["id"] for line in _lines(path) if line.get("type") == "assistant"))
    rows = tmp_path / "rollouts.jsonl"
    row = {"_ng_task_index": 0, "_ng_rollout_index": 0, "agent_ref": {"name": "claude_code_agent"}, "response": {}}
    rows.write_text(json.dumps(row) + "\n", encoding="utf-8")
    capture = tmp_path / "capture" / "0-0.capture.jsonl"
    capture.parent.mkdir()
    capture.write_text("".join(json.dumps(_capture_line(i, rid, "qwen3.7-plus")) + "\n" for i, rid in enumerate(ids)))
    (record,), _ = _build(tmp_path, rows, capture.parent, path.parents[2])
    (invocation,) = record["invocations"]
    assert [ref["response_id"] for ref in invocation["model_calls"]] == ids
    assert len(record["model_calls"]) == len(ids)
    assert [turn["turn_no"] for turn in record["turns"]] == list(range(1, len(ids) + 1))
    assert _gaps(record)["model_call_usage_from_transcript"] == 0


def test_gym_claude_code_rollouts_still_build_from_their_rows(tmp_path):
    for name in ("claude_code_agent__example_math_rollouts.jsonl", "anyswe_agent__example_rollouts_claude_code.jsonl"):
        rows = shared_dir("gym-examples") / name
        records, _ = _build(tmp_path, rows)
        assert len(records) == len(_lines(rows)) == 5
        assert all(r["invocations"][0]["conversation"] for r in records)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fixture_builds_its_golden(tmp_path, scenario):
    """``expected.jsonl`` pins every byte once the facts the other tests check were derived by hand;
    ``NG_TRAJ_UPDATE_GOLDEN=1`` rewrites it for review."""
    out = tmp_path / "out.jsonl"
    assert run_cli("build", CC / scenario / "input", "-o", out).exit_code == 0
    expected = CC / scenario / "expected.jsonl"
    if os.environ.get("NG_TRAJ_UPDATE_GOLDEN") == "1":
        expected.write_bytes(out.read_bytes())
    assert out.read_bytes() == expected.read_bytes()


def test_tree_fixture_sub_agents_nest_five_levels_with_lineage_from_results_meta_and_path(tmp_path):
    (record,), _ = _build(tmp_path, CC / "tree" / "input")
    lineage = [
        (i["invocation_id"], i["parent_invocation_id"], i["spawned_by_tool_call_id"], i["status"])
        for i in record["invocations"]
    ]
    assert lineage == [
        (TREE_ID, None, None, "unknown"),
        ("a100", TREE_ID, "toolu_spawn1", "completed"),  # the root's tool result names a100
        ("a101", "a100", "toolu_nest", "completed"),  # flat in subagents/, named by a100's result
        ("a102", "a101", "toolu_n2", "completed"),  # its .meta.json names the spawning call
        ("a103", "a102", None, "unknown"),  # only the agent-a102 folder it sits in
        ("a104", "a103", None, "unknown"),  # .meta.json parentAgentId, fifth level
        ("f200", TREE_ID, "toolu_fork", "completed"),
    ]
    gaps = {(g["code"], g["invocation_id"]) for g in record["gaps"]}
    assert {("subagent_spawn_tool_unavailable", "a103"), ("subagent_spawn_tool_unavailable", "a104")} <= gaps
    assert not any(code == "conflicting_subagent_parent" for code, _ in gaps)


def _distinct(folder: Path, kind: str) -> set[str]:
    found = set()
    for path in folder.rglob("*.jsonl"):
        for line in _lines(path):
            if line.get("type") != "assistant":
                continue
            if kind == "responses":
                found.add(line["message"]["id"])
            else:
                found |= {b["id"] for b in line["message"]["content"] if b["type"] == "tool_use"}
    return found


def test_tree_fixture_fork_copies_are_counted_once_in_the_parent(tmp_path):
    (record,), stderr = _build(tmp_path, CC / "tree" / "input")
    responses, tools = _distinct(CC / "tree" / "input", "responses"), _distinct(CC / "tree" / "input", "tools")
    assert (len(responses), len(tools)) == (13, 6)
    assert sorted(c["response_metadata"]["response_id"] for c in record["model_calls"]) == sorted(responses)
    assert sorted(t["tool_call_id"] for t in record["tool_calls"]) == sorted(tools)
    by_id = {i["invocation_id"]: i for i in record["invocations"]}
    fork = by_id["f200"]["conversation"]
    assert [(item["type"], item.get("role")) for item in fork] == [("message", "user"), ("message", "assistant")]
    assert fork[0]["content"] == "Fork: check the failing test"
    owners = {t["tool_call_id"]: t["invocation_id"] for t in record["tool_calls"]}
    assert owners["toolu_spawn1"] == owners["toolu_big"] == TREE_ID
    (copied,) = [g for g in record["gaps"] if g["code"] == "copied_context"]
    assert copied == {
        "code": "copied_context",
        "invocation_id": "f200",
        "detail": f"parent={TREE_ID};entries=6;first=r-u1;last=r-u3",
    }
    assert "agent-f200.jsonl:1: info[context_copied]: the first 6 entries repeat the history" in stderr


def test_tree_fixture_externalised_tool_results_are_read_from_the_companion_folder(tmp_path):
    (record,), _ = _build(tmp_path, CC / "tree" / "input" / "projects" / "-work-demo" / f"{TREE_ID}.jsonl")
    root = record["invocations"][0]
    outputs = {i["call_id"]: i["output"] for i in root["conversation"] if i["type"] == "function_call_output"}
    saved = CC / "tree" / "input" / "projects" / "-work-demo" / TREE_ID / "tool-results" / "toolu_big.txt"
    assert outputs["toolu_big"] == saved.read_text(encoding="utf-8")
    assert outputs["toolu_gone"].startswith("<persisted-output>\nOutput too large (120.0KB)")
    gaps = [(g["code"], g["detail"]) for g in record["gaps"] if g["code"] == "tool_result_output_unavailable"]
    assert gaps == [("tool_result_output_unavailable", "toolu_gone")]
    status = {t["tool_call_id"]: t["status"] for t in record["tool_calls"]}
    assert status["toolu_gone"] == "incomplete"  # the structured result says interrupted
    assert len(record["invocations"]) == 7  # naming the root transcript alone reads its sub-agents too


def test_tool_start_comes_only_from_a_recorded_duration(tmp_path):
    (record,), _ = _build(tmp_path, CC / "tree" / "input")
    timing = {t["tool_call_id"]: (t["started_at"], t["completed_at"], t["duration_ms"]) for t in record["tool_calls"]}
    root = _lines(CC / "tree" / "input" / "projects" / "-work-demo" / f"{TREE_ID}.jsonl")
    result_time = {
        b["tool_use_id"]: line["timestamp"]
        for line in root
        if line.get("type") == "user" and isinstance(line["message"]["content"], list)
        for b in line["message"]["content"]
    }
    assert result_time["toolu_spawn1"] == "2026-09-21T10:00:04.000Z"
    assert timing["toolu_spawn1"] == (1789984800.0, 1789984804.0, 4000.0)  # totalDurationMs 4000
    assert timing["toolu_big"][0] is None and timing["toolu_big"][1] == 1789984806.0


def test_thinking_tokens_are_reasoning_tokens(tmp_path):
    (record,), _ = _build(tmp_path, CC / "tree" / "input")
    stats = {c["response_metadata"]["response_id"]: c["token_stats"] for c in record["model_calls"]}
    assert stats["msg_R1"] == {
        "prompt_tokens": 12 + 100 + 5,
        "completion_tokens": 40,
        "reasoning_tokens": 12,
        "total_tokens": 157,
        "cached_tokens": 100,
    }


def test_compaction_boundary_and_summary_make_one_compaction(tmp_path):
    folder = CC / "compaction" / "input" / "projects" / "-work-logs"
    (path,) = folder.glob("*.jsonl")
    observations = READER.load(READER.index([path], DiagnosticSink())[0], DiagnosticSink())
    (compaction,) = [r for r in observations.bundle.records if r.kind == "context_compaction"]
    assert (compaction.trigger, compaction.tokens_before, compaction.outcome) == ("auto", 151000, "completed")
    assert compaction.summary.startswith("This session is being continued from a previous conversation")
    (invocation,) = [r for r in observations.bundle.records if r.kind == "agent_invocation"]
    assert [item.content for item in invocation.conversation if item.role == "user"][1] == compaction.summary
    codes = [g.code for g in observations.bundle.gaps]
    assert "compaction_model_call_reference_unavailable" in codes
    assert "compaction_summary_unavailable" not in codes


def test_damaged_lines_are_named_and_lose_nothing_else(tmp_path):
    (record,), stderr = _build(tmp_path, CC / "damaged" / "input")
    (path,) = (CC / "damaged" / "input").rglob("*.jsonl")
    name = path.name
    assert f"{path}:3: error[invalid_json]" in stderr
    assert f"{path}:5: error[not_an_object]" in stderr
    assert f"{path}:6: warning[claude_code_entry_unknown]: entry type 'future-thing' (CLI version 2.1.300)" in stderr
    assert f"{path}:8: warning[claude_code_entry_repeated]: a copy of entry d-a2 (line 7); read once" in stderr
    assert f"{path}:9: error[truncated_line]" in stderr
    malformed = sorted(g["detail"] for g in record["gaps"] if g["code"] == "malformed_transcript_line")
    assert malformed == [f"{name}:3", f"{name}:5", f"{name}:9"]
    assert len(record["model_calls"]) == 2
    (tool,) = record["tool_calls"]
    assert (tool["tool_call_id"], tool["duration_ms"], tool["status"]) == ("toolu_ls", 1200.0, "completed")


def test_in_file_sidechains_of_cli_1_are_sub_agents(tmp_path):
    (record,), _ = _build(tmp_path, CC / "sidechain" / "input")
    lineage = [
        (i["invocation_id"], i["parent_invocation_id"], i["spawned_by_tool_call_id"]) for i in record["invocations"]
    ]
    assert lineage == [
        ("8a4f3b5d-0e6c-4f4a-8b1d-000000000004", None, None),
        ("ag-7", "8a4f3b5d-0e6c-4f4a-8b1d-000000000004", "toolu_task"),
    ]
    assert [len(i["conversation"]) for i in record["invocations"]] == [4, 2]


def test_an_unknown_cli_major_version_is_input_unsupported_with_the_version(tmp_path):
    _, stderr = _build(tmp_path, CC / "cli_v3" / "input", expect=1)
    assert re.search(
        r"info\[input_unsupported\]: recognised as Claude Code session transcript of CLI version 3\.0\.1", stderr
    )


def test_companion_files_are_claimed_and_belong_to_their_session():
    folder = CC / "tree" / "input" / "projects" / "-work-demo" / TREE_ID
    meta = folder / "subagents" / "agent-a100.meta.json"
    saved = folder / "tool-results" / "toolu_big.txt"
    assert [c.kind for c in claims(meta)] == [c.kind for c in claims(saved)] == ["claude_code"]
    assert session_folder(meta) == session_folder(saved) == folder
    session = discover(folder, folder.with_name(f"{TREE_ID}.jsonl"))
    assert [(a.agent_id, a.depth) for a in session.agents] == [
        ("a100", 1),
        ("a101", 1),
        ("f200", 1),
        ("a102", 2),
        ("a103", 3),
        ("a104", 4),
    ]


def test_unrelated_session_folders_stay_apart(tmp_path):
    root = tmp_path / "projects" / "-work-demo"
    shutil.copytree(CC / "tree" / "input" / "projects" / "-work-demo", root)
    other = root / "5d1c0e2a-7b3f-4c1d-9e8a-00000000000f" / "subagents"
    other.mkdir(parents=True)
    shutil.copyfile(root / TREE_ID / "subagents" / "agent-a101.jsonl", other / "agent-z9.jsonl")
    records, _ = _build(tmp_path, tmp_path / "projects")
    by_rollout = {r["rollout_id"]: [i["invocation_id"] for i in r["invocations"]] for r in records}
    assert "z9" not in by_rollout[TREE_ID]
    assert by_rollout["5d1c0e2a-7b3f-4c1d-9e8a-00000000000f"] == ["z9"]


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_output_is_the_same_whatever_the_jobs(tmp_path, jobs):
    out = tmp_path / "out.jsonl"
    inputs = [CC / name / "input" for name in SCENARIOS]
    assert run_cli("build", *inputs, "-o", out, "--jobs", jobs).exit_code == 0
    first = out.read_bytes()
    assert run_cli("build", *reversed(inputs), "-o", out, "--jobs", "1").exit_code == 0
    assert out.read_bytes() == first


def test_a_row_with_claude_code_observations_keeps_its_bundle(tmp_path):
    session = tmp_path / "0-0" / "projects" / "-work-demo"
    shutil.copytree(CC / "tree" / "input" / "projects" / "-work-demo", session)
    bundle = {
        "source": "claude_code",
        "records": [
            {
                "kind": "agent_invocation",
                "invocation_id": TREE_ID,
                "conversation": [{"type": "message", "role": "user", "content": "from the row"}],
            }
        ],
        "gaps": [],
    }
    row = {"_ng_task_index": 0, "_ng_rollout_index": 0, "response": {}, "ng_agent_observations": bundle}
    rows = tmp_path / "rollouts.jsonl"
    rows.write_text(json.dumps(row) + "\n", encoding="utf-8")
    (record,), stderr = _build(tmp_path, rows, tmp_path / "0-0")
    assert [i["invocation_id"] for i in record["invocations"]] == [TREE_ID]
    assert record["invocations"][0]["conversation"][0]["content"] == "from the row"
    assert f"info[native_superseded]: the row carries claude_code observations, which are used; session {TREE_ID}" in (
        stderr
    )


def test_odd_shapes_cost_only_what_they_break(tmp_path):
    deep = '{"x":' * 1010 + "{}" + "}" * 1010  # the reader parses it; the standard serialiser cannot walk it
    call = (
        '{"type": "assistant", "uuid": "a2", "sessionId": "s-odd", "toolUseResult": "not an object", "message": '
        '{"id": "msg_2", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": ' + deep + "}]}}"
    )
    lines = [
        {"type": "user", "uuid": "u1", "sessionId": "s-odd", "message": {"role": "user", "content": "go"}},
        {
            "type": "assistant",
            "uuid": "a1",
            "sessionId": "s-odd",
            "message": {"id": "msg_1", "role": "assistant", "content": [{"type": "text", "text": "ok"}], "usage": [1]},
        },
    ]
    odd = {"type": "user", "uuid": "u2", "sessionId": "s-odd", "message": {"content": 7}, "toolUseResult": [1]}
    path = tmp_path / "s-odd.jsonl"
    text = "".join(json.dumps(line) + "\n" for line in lines) + call + "\n" + json.dumps(odd) + "\n"
    path.write_text(text, encoding="utf-8")
    (record,), stderr = _build(tmp_path, path)
    assert "native_load_failed" not in stderr
    assert [c["response_metadata"]["response_id"] for c in record["model_calls"]] == ["msg_1", "msg_2"]
    assert record["model_calls"][0]["token_stats"]["prompt_tokens"] is None
    (function_call,) = [i for i in record["invocations"][0]["conversation"] if i["type"] == "function_call"]
    assert function_call["call_id"] == "t1" and function_call["arguments"] == ""
    gaps = {(g["code"], g.get("detail")) for g in record["gaps"]}
    assert ("invalid_assistant_content", "t1") in gaps
    assert ("unsupported_user_content_block", "int") in gaps


def test_a_root_transcript_under_another_name_is_still_read_with_its_sub_agents(tmp_path):
    project = tmp_path / "projects" / "-work-demo"
    shutil.copytree(CC / "tree" / "input" / "projects" / "-work-demo", project)
    (project / f"{TREE_ID}.jsonl").rename(project / f"{TREE_ID}.jsonl.bak")
    (record,), _ = _build(tmp_path, tmp_path / "projects")
    assert record["rollout_id"] == TREE_ID
    assert len(record["invocations"]) == 7
    assert record["invocations"][0]["conversation"][0]["content"] == "Refactor the parser and check the tests."


def test_a_transcript_outside_the_known_layout_is_named_not_dropped_silently(tmp_path):
    project = tmp_path / "projects" / "-work-demo"
    shutil.copytree(CC / "tree" / "input" / "projects" / "-work-demo", project)
    stray = project / TREE_ID / "subagents" / "worker.jsonl"
    shutil.copyfile(project / TREE_ID / "subagents" / "agent-a100.jsonl", stray)
    (record,), stderr = _build(tmp_path, tmp_path / "projects")
    assert f"{stray}: warning[input_unsupported]: a Claude Code file in a session folder's layout" in stderr
    assert len(record["invocations"]) == 7


def test_a_stray_transcript_named_alone_is_named_and_builds_nothing(tmp_path):
    stray = tmp_path / "s-1" / "subagents" / "worker.jsonl"
    stray.parent.mkdir(parents=True)
    shutil.copyfile(
        CC / "tree" / "input" / "projects" / "-work-demo" / TREE_ID / "subagents" / "agent-a100.jsonl", stray
    )
    _, stderr = _build(tmp_path, stray, expect=1)
    assert f"{stray}: warning[input_unsupported]: a Claude Code file in a session folder's layout" in stderr
    assert "native_load_failed" not in stderr


def test_a_second_transcript_of_one_agent_is_named_and_read_once(tmp_path):
    project = tmp_path / "projects" / "-work-demo"
    shutil.copytree(CC / "tree" / "input" / "projects" / "-work-demo", project)
    again = project / TREE_ID / "subagents" / "extra" / "agent-a100.jsonl"
    again.parent.mkdir()
    shutil.copyfile(project / TREE_ID / "subagents" / "agent-f200.jsonl", again)
    (record,), stderr = _build(tmp_path, tmp_path / "projects")
    assert f"{again}: warning[claude_code_entry_repeated]: a second transcript of agent a100 in the session" in stderr
    by_id = {i["invocation_id"]: i for i in record["invocations"]}
    assert by_id["a100"]["conversation"][0]["content"] == "Read the parser"


def test_a_tool_call_id_written_twice_is_ambiguous_and_gets_no_record(tmp_path):
    def line(uuid, message, **extra):
        return {"type": message["role"], "uuid": uuid, "sessionId": "s-dup", "message": message, **extra}

    use = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}
    lines = [
        line("u1", {"role": "user", "content": "go"}),
        line("a1", {"id": "msg_1", "role": "assistant", "content": [use]}),
        line("a2", {"id": "msg_2", "role": "assistant", "content": [use]}),
        line("u2", {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}),
    ]
    path = tmp_path / "s-dup.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in lines), encoding="utf-8")
    (record,), _ = _build(tmp_path, path)
    assert record["tool_calls"] == []
    assert [g["detail"] for g in record["gaps"] if g["code"] == "ambiguous_tool_artifact"] == ["t1"]


def test_the_compaction_call_is_not_associated_with_its_compaction(tmp_path):
    """NeMo Gym's producer ties a captured summary call to its compaction by the summary text; ng-traj
    does not (a registered deviation): the call stays a model call no invocation owns."""
    summary = "The user asked for a log summary; two restarts were found."
    calls = [_capture_line(0, "msg_K1", "m"), _capture_line(1, "msg_C0", "m"), _capture_line(2, "msg_K2", "m")]
    calls[1]["request"]["messages"] = [
        {"role": "user", "content": "Your task is to create a detailed summary of the conversation so far"}
    ]
    calls[1]["response"]["content"] = [{"type": "text", "text": f"<summary>{summary}</summary>"}]
    rows = tmp_path / "rollouts.jsonl"
    rows.write_text(json.dumps({"_ng_task_index": 0, "_ng_rollout_index": 0, "response": {}}) + "\n")
    capture = tmp_path / "capture" / "0-0.capture.jsonl"
    capture.parent.mkdir()
    capture.write_text("".join(json.dumps(call) + "\n" for call in calls))
    (record,), _ = _build(tmp_path, rows, capture.parent, CC / "compaction" / "input")
    (invocation,) = record["invocations"]
    assert [ref["response_id"] for ref in invocation["model_calls"]] == ["msg_K1", "msg_K2"]
    assert len(record["model_calls"]) == 3
    assert [t["model_calls"][0]["response_id"] for t in record["turns"]] == ["msg_K1", "msg_K2"]
    unowned = [g["detail"] for g in record["gaps"] if g["code"] == "model_call_ownership_unavailable"]
    assert unowned == [f"capture:{1:032x}:call_index=1"]
