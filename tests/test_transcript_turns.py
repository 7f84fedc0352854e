"""Turns read from the transcript where no captured call makes one (gap ``turns_from_transcript``).

Each producer's expected turns come from a plain reading of its input written here, sharing no code
with ``ng_traj``: the items each line or message contributes to the conversation, which of them the
model wrote (and for which call), and its tool calls. From that: per call, ``(turn_no, step_count,
number of items before the call's first item)``.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import orjson

from conftest import FIXTURES, build_valid, run_cli
from ng_traj.assemble.project import ProjectionInputs, project
from ng_traj.assemble.turns import TRANSCRIPT_GAP, TranscriptCall, turns_from_calls, turns_from_transcript
from ng_traj.contract import AgentInvocation, ModelCallRef, TrajectoryRecord

REF = {"type": "responses_api_models", "name": "policy_model"}


def _said(text: str, n: int = 0) -> dict:
    """An assistant output message item."""
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {"type": "message", "role": "assistant", "id": f"msg_{n}", "status": "completed", "content": content}


def _expected(items: list[tuple[str | None, bool]]) -> list[tuple[int, int, int]]:
    """``items``: per conversation item, the call that wrote it (None: an item the model read) and
    whether it is a tool call. Returns ``(turn_no, step_count, question length)`` per call."""
    firsts: dict[str, int] = {}
    tools: Counter[str] = Counter()
    for position, (call, tool) in enumerate(items):
        if call is not None:
            firsts.setdefault(call, position)
            tools[call] += tool
    turns, steps = [], 0
    for number, (call, position) in enumerate(firsts.items(), 1):
        turns.append((number, steps, position))
        steps += tools[call]
    return turns


def _turns(record: dict, invocation: str | None = None) -> list[tuple[int, int, int]]:
    return [
        (t["turn_no"], t["step_count"], len(t["question"]))
        for t in record["turns"]
        if invocation is None or t["invocation_id"] == invocation
    ]


def _codes(record: dict) -> Counter:
    return Counter(gap["code"] for gap in record["gaps"])


def _transcript_gap_only(record: dict) -> None:
    assert _codes(record)[TRANSCRIPT_GAP] == 1
    assert _codes(record)["turns_unavailable"] == 0


# --- pi and OpenClaw: session JSONL entries -------------------------------------------------------


def _pi_items(path: Path) -> list[tuple[str | None, bool]]:
    """A linear pi/OpenClaw session: user and tool results are one item each; an assistant entry
    writes one item per thinking block, one message for its text, one per tool call."""
    items: list[tuple[str | None, bool]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry.get("type") != "message":
            continue
        message = entry["message"]
        if message["role"] != "assistant":
            items.append((None, False))
            continue
        blocks = message["content"]
        items.extend((entry["id"], False) for b in blocks if b["type"] == "thinking")
        if any(b["type"] == "text" for b in blocks):
            items.append((entry["id"], False))
        items.extend((entry["id"], True) for b in blocks if b["type"] == "toolCall")
    return items


def test_pi_session_turns_from_the_transcript(tmp_path):
    path = FIXTURES / "pi" / "parallel_tools.jsonl"
    (record,) = build_valid(tmp_path, path)
    assert _turns(record) == _expected(_pi_items(path)) == [(1, 0, 1), (2, 2, 6)]
    first, last = record["turns"]
    assert [item["type"] for item in first["reasoning_content"]] == ["reasoning"]
    assert [item["call_id"] for item in first["answer"]] == ["call_a", "call_b"]
    assert last["answer"][0]["role"] == "assistant" and last["reasoning_content"] is None
    assert last["question"] == record["invocations"][0]["conversation"][:6]
    # times from the session's own record of each call; no capture, so no refs
    assert 0 < first["timestamp"] < last["timestamp"] and all(t["model_calls"] == [] for t in record["turns"])
    _transcript_gap_only(record)


def test_openclaw_tree_turns_for_every_invocation(tmp_path):
    sessions = FIXTURES / "openclaw" / "tree"
    records = build_valid(tmp_path, sessions)
    files = sorted(sessions.rglob("sess-*.jsonl"))
    expected = sorted(_expected(_pi_items(path)) for path in files)
    built = [rec for rec in records if rec["turns"]]
    per_invocation = sorted(
        _turns(rec, inv["invocation_id"]) for rec in built for inv in rec["invocations"] if inv["conversation"]
    )
    assert per_invocation == expected
    assert sum(len(rec["turns"]) for rec in records) == sum(len(e) for e in expected) == 6
    for rec in built:
        _transcript_gap_only(rec)


# --- Hermes: a session snapshot --------------------------------------------------------------------

HERMES_MESSAGES = [
    {"role": "user", "content": "back up the config"},
    {
        "role": "assistant",
        "content": "Running both.",
        "reasoning": "two commands",
        "tool_calls": [
            {"id": "call_h1", "type": "function", "function": {"name": "terminal", "arguments": '{"command": "a"}'}},
            {"id": "call_h2", "type": "function", "function": {"name": "terminal", "arguments": '{"command": "b"}'}},
        ],
    },
    {"role": "tool", "content": '{"output": "ok"}', "tool_call_id": "call_h1"},
    {"role": "tool", "content": '{"output": "ok"}', "tool_call_id": "call_h2"},
    {"role": "assistant", "content": "Done."},
]


def _hermes_items(snapshot: dict) -> list[tuple[str | None, bool]]:
    """The system prompt and every user or tool message are one item each; an assistant message
    writes its reasoning, its message and one item per tool call."""
    items: list[tuple[str | None, bool]] = [(None, False)] if snapshot.get("system_prompt") else []
    for number, message in enumerate(snapshot["messages"]):
        if message["role"] != "assistant":
            items.append((None, False))
            continue
        call = f"m{number}"
        items.extend([(call, False)] * (bool(message.get("reasoning")) + bool(message.get("content"))))
        items.extend((call, True) for _ in message.get("tool_calls", []))
    return items


def test_hermes_snapshot_turns_from_the_transcript(tmp_path):
    snapshot = {
        "session_id": "20260601_090000_abcdef",
        "model": "m",
        "platform": "cli",
        "session_start": "2026-06-01T09:00:00+00:00",
        "last_updated": "2026-06-01T09:01:00+00:00",
        "system_prompt": "You are Hermes.",
        "message_count": len(HERMES_MESSAGES),
        "messages": HERMES_MESSAGES,
    }
    path = tmp_path / "sessions" / f"session_{snapshot['session_id']}.json"
    path.parent.mkdir()
    path.write_text(json.dumps(snapshot), encoding="utf-8")
    (record,) = build_valid(tmp_path, path)
    assert _turns(record) == _expected(_hermes_items(snapshot)) == [(1, 0, 2), (2, 2, 8)]
    # Hermes keeps no per-call times or usage: timestamp 0, no refs
    assert [(t["timestamp"], t["model_calls"]) for t in record["turns"]] == [(0.0, [])] * 2
    _transcript_gap_only(record)


# --- Claude Code: one line per content block ------------------------------------------------------

SESSION = "9b5a4c6e-1f7d-4a5b-8c2e-0000000000c3"


def _cc_line(n: int, kind: str, message: dict) -> dict:
    return {
        "parentUuid": f"u{n - 1}" if n else None,
        "isSidechain": False,
        "type": kind,
        "uuid": f"u{n}",
        "timestamp": f"2026-09-21T10:00:{n:02d}.000Z",
        "sessionId": SESSION,
        "version": "2.1.0",
        "cwd": "/work/demo",
        "message": message,
    }


def _cc_assistant(n: int, rid: str, block: dict) -> dict:
    usage = {"input_tokens": 3, "output_tokens": 2, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    message = {"id": rid, "type": "message", "role": "assistant", "model": "claude-x", "content": [block]}
    return _cc_line(n, "assistant", {**message, "usage": usage})


def _cc_result(n: int, tool: str) -> dict:
    content = [{"type": "tool_result", "tool_use_id": tool, "content": "ok"}]
    return _cc_line(n, "user", {"role": "user", "content": content})


CC_LINES = [
    _cc_line(0, "user", {"role": "user", "content": "run two commands"}),
    _cc_assistant(1, "msg_1", {"type": "thinking", "thinking": "both at once", "signature": "s"}),
    _cc_assistant(2, "msg_1", {"type": "tool_use", "id": "toolu_a", "name": "Bash", "input": {"command": "a"}}),
    _cc_result(3, "toolu_a"),  # the result is written before the call's second tool_use block
    _cc_assistant(4, "msg_1", {"type": "tool_use", "id": "toolu_b", "name": "Bash", "input": {"command": "b"}}),
    _cc_result(5, "toolu_b"),
    _cc_assistant(6, "msg_2", {"type": "text", "text": "both ran"}),
]


def _cc_items(lines: list[dict]) -> list[tuple[str | None, bool]]:
    items: list[tuple[str | None, bool]] = []
    for line in lines:
        content = line["message"]["content"]
        if line["type"] == "user":
            items.extend([(None, False)] * (1 if isinstance(content, str) else len(content)))
        else:
            items.extend((line["message"]["id"], block["type"] == "tool_use") for block in content)
    return items


def test_claude_code_parallel_tool_blocks_are_one_turn(tmp_path):
    path = tmp_path / "claude" / "projects" / "-work-demo" / f"{SESSION}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in CC_LINES), encoding="utf-8")
    (record,) = build_valid(tmp_path, path.parents[2])
    assert _turns(record) == _expected(_cc_items(CC_LINES)) == [(1, 0, 1), (2, 2, 6)]
    first = record["turns"][0]
    assert [item["call_id"] for item in first["answer"]] == ["toolu_a", "toolu_b"]  # not the result between
    assert [item["type"] for item in first["reasoning_content"]] == ["reasoning"]
    _transcript_gap_only(record)


# --- Codex: rollout items -------------------------------------------------------------------------


def _codex_items(path: Path) -> list[tuple[str | None, bool]]:
    """Response items: a call starts at an item the model wrote that follows one it read."""
    items: list[tuple[str | None, bool]] = []
    calls = 0
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        item = json.loads(line)
        if item.get("type") not in ("message", "function_call", "function_call_output", "reasoning"):
            continue
        written = item["type"] in ("reasoning", "function_call") or item.get("role") == "assistant"
        if written and (not items or items[-1][0] is None):
            calls += 1
        items.append((f"c{calls}" if written else None, item["type"] == "function_call"))
    return items


def test_codex_rollout_turns_from_the_transcript(tmp_path):
    (path,) = sorted((FIXTURES / "codex" / "legacy").glob("*.jsonl"))
    (record,) = build_valid(tmp_path, path)
    assert _turns(record) == _expected(_codex_items(path)) == [(1, 0, 1), (2, 1, 3)]
    _transcript_gap_only(record)


# --- OpenCode: a row's own observation bundle -----------------------------------------------------


def _opencode_row() -> dict:
    conversation = [
        {"type": "message", "role": "user", "content": "count files"},
        {"type": "function_call", "call_id": "call_o1", "name": "bash", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_o1", "output": "3"},
        _said("3"),
    ]
    refs = [{"model_call_id": "a" * 32}, {"model_call_id": "b" * 32}]
    invocation = {"kind": "agent_invocation", "invocation_id": "ses_1", "model_calls": refs}
    return {
        "_ng_task_index": 0,
        "_ng_rollout_index": 0,
        "responses_create_params": {"input": "count files"},
        "response": {"id": "resp_x", "output": [], "status": "completed"},
        "reward": 1.0,
        "resolved": True,
        "ng_agent_observations": {"source": "opencode", "records": [{**invocation, "conversation": conversation}]},
    }


def test_opencode_row_bundle_turns_take_the_invocations_refs(tmp_path):
    row = _opencode_row()
    rows = tmp_path / "rollouts.jsonl"
    rows.write_bytes(orjson.dumps(row) + b"\n")
    (record,) = build_valid(tmp_path, rows)
    items = [
        (
            "c1" if i["type"] == "function_call" else "c2" if i.get("role") == "assistant" else None,
            i["type"] == "function_call",
        )
        for i in row["ng_agent_observations"]["records"][0]["conversation"]
    ]
    assert _turns(record) == _expected(items) == [(1, 0, 1), (2, 1, 3)]
    # one ref per turn: paired in order; the row's resolution on the last turn only
    assert [t["model_calls"][0]["model_call_id"] for t in record["turns"]] == ["a" * 32, "b" * 32]
    assert [t["resolved"] for t in record["turns"]] == [None, True]
    _transcript_gap_only(record)


# --- the rule itself ------------------------------------------------------------------------------


def _invocation(conversation: list[dict], refs: list[dict] | None = None, **extra) -> AgentInvocation:
    return AgentInvocation.model_validate(
        {"invocation_id": "root", "conversation": conversation, "model_calls": refs or [], **extra}
    )


def test_owned_captured_calls_keep_upstreams_turns():
    """A call that an invocation owns and that has a response is a turn as upstream makes it; the
    transcript is not read, and no transcript gap is written."""
    conversation = [
        {"type": "message", "role": "user", "content": "hi"},
        _said("a", 1),
        {"type": "message", "role": "user", "content": "again"},
        _said("b", 2),
    ]
    call = {
        "model_call_id": "c" * 32,
        "started_at": 5.0,
        "request": {"input": [{"role": "user", "content": "hi"}]},
        "response": {"id": "resp_1", "output": [{"type": "message", "role": "assistant", "content": []}]},
        "response_id": "resp_1",
        "model_ref": REF,
    }
    bundle = {"source": "pi", "records": [_invocation(conversation, [{"model_call_id": "c" * 32}]).model_dump()]}
    inputs = ProjectionInputs(task_id="t", rollout_id="r", bundles=[bundle], capture_calls=[call], resolved=True)
    record = project(inputs)
    upstream = turns_from_calls("t", "r", record.invocations, record.model_calls, True)
    assert record.turns == upstream and len(upstream) == 1  # one captured call, not the two transcript turns
    assert record.turns[0].question == [{"type": "message", "role": "user", "content": "hi"}]
    assert TRANSCRIPT_GAP not in [gap.code for gap in record.gaps]
    # without the response the same record has no captured turn, and reads both from the transcript
    bare = project(ProjectionInputs(**{**inputs.__dict__, "capture_calls": [{**call, "response": None}]}))
    assert [(t.turn_no, len(t.question)) for t in bare.turns] == [(1, 1), (2, 3)]
    assert [gap.code for gap in bare.gaps].count(TRANSCRIPT_GAP) == 1
    assert "turns_unavailable" not in [gap.code for gap in bare.gaps]


def test_a_producer_trajectory_is_never_completed_from_the_transcript():
    conversation = [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "x", "name": "f", "arguments": "{}"},
    ]
    bundle = {"source": "pi", "records": [_invocation(conversation).model_dump()]}
    producer = {"task_id": "t", "rollout_id": "r"}
    record = project(ProjectionInputs(task_id="t", rollout_id="r", producer_trajectory=producer, bundles=[bundle]))
    assert record.turns == [] and TRANSCRIPT_GAP not in [gap.code for gap in record.gaps]


def test_segments_follow_the_order_a_model_writes_its_output():
    """Reasoning, message, tool calls make one call; going back in that order starts the next one."""
    conversation = [
        {"type": "message", "role": "system", "content": "s"},  # 0
        {"type": "reasoning", "id": "r1", "summary": []},  # 1: call 1
        _said("t", 2),  # 2
        {"type": "function_call", "call_id": "f1", "name": "f", "arguments": "{}"},  # 3
        _said("t", 4),  # 4: call 2 (a message after a tool call)
        _said("t", 5),  # 5: call 3 (a second message)
        {"type": "function_call_output", "call_id": "f1", "output": "o"},  # 6
        {"type": "function_call", "call_id": "f2", "name": "f", "arguments": "{}"},  # 7: call 4
        {"type": "function_call_output", "call_id": "f2", "output": "o"},  # 8
        {"type": "function_call", "call_id": "f3", "name": "f", "arguments": "{}"},  # 9: call 5
    ]
    invocation = _invocation(conversation)
    turns = turns_from_transcript("t", "r", [invocation], [], [], False)
    assert [(t.turn_no, t.step_count, len(t.question), len(t.answer)) for t in turns] == [
        (1, 0, 1, 2),
        (2, 1, 4, 1),
        (3, 1, 5, 1),
        (4, 1, 7, 1),
        (5, 2, 9, 1),
    ]
    items = invocation.model_dump(mode="json")["conversation"]  # the conversation's own item shape
    assert turns[0].reasoning_content == [items[1]] and turns[1].question == items[:4]
    assert [t.resolved for t in turns] == [None, None, None, None, False]
    # when the session says f2 and f3 came from one call, the run of only f3 joins f2's turn
    calls = [TranscriptCall("root", frozenset({"f1"}), 3.0), TranscriptCall("root", frozenset(), 4.0)]
    calls += [TranscriptCall("root", frozenset(), 5.0), TranscriptCall("root", frozenset({"f2", "f3"}), 6.0)]
    joined = turns_from_transcript("t", "r", [invocation], calls, [], None)
    assert [(t.turn_no, t.timestamp, [a["call_id"] for a in t.answer if "call_id" in a]) for t in joined] == [
        (1, 3.0, ["f1"]),
        (2, 4.0, []),
        (3, 5.0, []),
        (4, 6.0, ["f2", "f3"]),
    ]


def test_sub_agents_number_their_own_turns_and_refs_pair_only_one_per_turn():
    ask = {"type": "message", "role": "user", "content": "q"}
    answer = _said("t")
    root = _invocation([ask, answer, ask, answer], [{"model_call_id": "a" * 32}])  # one ref, two turns
    child = AgentInvocation.model_validate(
        {"invocation_id": "child", "parent_invocation_id": "root", "conversation": [ask, answer]}
    )
    ref = ModelCallRef(model_call_id="b" * 32)
    turns = turns_from_transcript("t", "r", [root, child], [TranscriptCall("child", frozenset(), 9.0, ref)], [], None)
    assert [(t.invocation_id, t.turn_no, t.timestamp, t.model_calls) for t in turns] == [
        ("root", 1, 0.0, []),
        ("root", 2, 0.0, []),
        ("child", 1, 9.0, [ref]),
    ]


def test_transcript_turns_round_trip_through_parquet(tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    shutil.copyfile(FIXTURES / "pi" / "parallel_tools.jsonl", source / "parallel_tools.jsonl")
    jsonl, dataset = tmp_path / "out.jsonl", tmp_path / "out.parquet"
    assert run_cli("build", source, "-o", jsonl).exit_code == 0
    assert run_cli("build", source, "-o", dataset).exit_code == 0
    back = run_cli("convert", dataset, "-o", "-").stdout.encode()
    assert back == jsonl.read_bytes()
    (record,) = [TrajectoryRecord.model_validate_json(line) for line in back.splitlines()]
    assert len(record.turns) == 2


def test_without_payloads_the_transcript_turns_name_the_captured_calls(tmp_path):
    """Rows, capture and sessions: with payloads the turns are the captured calls' (upstream's);
    with ``--no-payloads`` no captured call has a response, so the sessions' turns are read, each
    with the ref of the captured call its message matched and that call's start."""
    folder = FIXTURES / "native_e2e"
    captured = {}
    for path in sorted((folder / "capture").glob("*.capture.jsonl")):
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        captured[path.name.split(".")[0]] = [(line["model_call_id"], line["started_at"]) for line in lines]
    with_payloads = {r["rollout_id"]: r for r in build_valid(tmp_path, folder)}
    out = tmp_path / "bare.jsonl"
    assert run_cli("build", folder, "--no-payloads", "-o", out).exit_code == 0
    bare = {r["rollout_id"]: r for r in map(orjson.loads, out.read_bytes().splitlines())}
    for rollout, record in bare.items():
        owned = [
            ref["model_call_id"] for inv in record["invocations"] for ref in inv["model_calls"] if ref["model_call_id"]
        ]
        expected = [(call, start) for call, start in captured[rollout] if call in owned]
        assert [(t["model_calls"][0]["model_call_id"], t["timestamp"]) for t in record["turns"]] == expected
        _transcript_gap_only(record)
        full = with_payloads[rollout]
        assert TRANSCRIPT_GAP not in _codes(full) and len(full["turns"]) == len(expected)
        assert [t["model_calls"] for t in full["turns"]] == [t["model_calls"] for t in record["turns"]]
