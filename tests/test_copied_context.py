"""Copied context (pi, OpenClaw, Hermes): each model call and tool call counted once per rollout, in the
invocation that made it; copies marked ``copied_context`` and reported ``context_copied``.

Each ``fixtures/<producer>/copied_context*/input`` was written by hand; the distinct totals below are
derived by hand from the files (the comments give the derivation) before the output was generated,
and ``expected.jsonl`` then pins every byte (``NG_TRAJ_UPDATE_GOLDEN=1`` rewrites it).
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson
from test_hermes_golden import materialise

from conftest import FIXTURES, run_cli
from ng_traj.checks import check_line
from ng_traj.diagnostics import Diagnostic, DiagnosticSink
from ng_traj.sources.pi.copies import CopyIndex, mark_copies
from ng_traj.sources.pi.forks import fork_parents
from ng_traj.sources.pi.session import Entry, Session

N = None


def _build(folder: Path, tmp_path: Path) -> tuple[bytes, str]:
    out = tmp_path / "out.jsonl"
    result = run_cli("build", folder, "-o", out)
    assert result.exit_code == 0, result.stderr
    return out.read_bytes(), result.stderr


def _golden(scenario: Path, produced: bytes) -> list[dict]:
    expected = scenario / "expected.jsonl"
    if os.environ.get("NG_TRAJ_UPDATE_GOLDEN") == "1":
        expected.write_bytes(produced)
    assert produced == expected.read_bytes()
    records = [orjson.loads(line) for line in produced.splitlines()]
    for record in records:
        findings, _ = check_line(record)
        assert findings == []
    return records


def _totals(record: dict) -> tuple[int, int, int, int, int]:
    """(model calls, tool calls, prompt, completion, total tokens) of one trajectory."""
    stats = [call["token_stats"] for call in record["model_calls"]]
    return (
        len(record["model_calls"]),
        len(record["tool_calls"]),
        sum(s["prompt_tokens"] or 0 for s in stats),
        sum(s["completion_tokens"] or 0 for s in stats),
        sum(s["total_tokens"] or 0 for s in stats),
    )


def _copied(record: dict) -> list[tuple]:
    return [(g["invocation_id"], g["detail"]) for g in record["gaps"] if g["code"] == "copied_context"]


def _conversation(invocation: dict) -> list[tuple]:
    return [(item["type"], item.get("call_id") or item.get("role")) for item in invocation["conversation"]]


def test_pi_compaction_re_appends_counted_once_live_path_kept(tmp_path: Path) -> None:
    scenario = FIXTURES / "pi" / "copied_context_compaction"
    produced, stderr = _build(scenario / "input", tmp_path)
    (record,) = _golden(scenario, produced)
    # Lines: u1, a1 (call_1; 100 in / 10 out), r1, a2 (call_2; 200/20), r2, compaction c1 keeping a2,
    # then the compaction re-appends a2 and r2 under fresh ids f1, f2 (copies by content), the live
    # a3 (call_3; 150/15), r3, a4 (answer; 300/5), then a1 and r1 again under their old ids (copies by
    # id) and a3 under the fresh id f3 (a copy by responseId and content).
    # Distinct calls a1..a4: 4; tools call_1..call_3: 3; prompt 100+200+150+300 = 750 (no cache),
    # completion 10+20+15+5 = 50, total 750+50 = 800. Counting every assistant line would give 7 calls and 1200 prompt tokens.
    assert _totals(record) == (4, 3, 750, 50, 800)
    assert [c["response_metadata"]["response_id"] for c in record["model_calls"]] == [
        "msg_1",
        "msg_2",
        "msg_3",
        "msg_4",
    ]
    assert [t["tool_call_id"] for t in record["tool_calls"]] == ["call_1", "call_2", "call_3"]
    # The live path ends at a4 (copies are never the leaf): summary before a2, its first kept entry.
    (invocation,) = record["invocations"]
    assert invocation["status"] == "completed"
    assert _conversation(invocation) == [
        ("message", "user"),
        ("function_call", "call_1"),
        ("function_call_output", "call_1"),
        ("message", "user"),  # the compaction summary
        ("function_call", "call_2"),
        ("function_call_output", "call_2"),
        ("function_call", "call_3"),
        ("function_call_output", "call_3"),
        ("message", "assistant"),
    ]
    assert _copied(record) == [("pi-cc", "entries=a2,r2,a1,r1,a3")]
    codes = {g["code"] for g in record["gaps"]}
    assert "agent_conversation_branch_abandoned" not in codes and "tool_call_identity_ambiguous" not in codes
    assert (
        "session.jsonl:9: warning[context_copied]: 5 entries copy earlier entries of the session "
        "(a2,r2,a1,r1,a3); left out of calls, tools and conversation, counted once"
    ) in stderr


def test_pi_fork_is_a_child_invocation_whose_copied_path_is_not_counted(tmp_path: Path) -> None:
    scenario = FIXTURES / "pi" / "copied_context_fork"
    produced, stderr = _build(scenario / "input", tmp_path)
    (record,) = _golden(scenario, produced)  # one trajectory: the fork joins its parent's unit
    # Parent pi-parent: u1, a1 (call_p1; 100/10), r1, a2 (answer; 120/12).
    # Fork pi-fork (header parentSession names the parent's file by another host's path): u1, a1, r1
    # under the parent's ids, a2 under the fresh id x2, then u2, a3 (call_f1; 300/30), r3, a4 (310/5).
    # Distinct calls: a1, a2 in the parent, a3, a4 in the fork = 4; tools call_p1, call_f1 = 2;
    # prompt 100+120+300+310 = 830, completion 10+12+30+5 = 57, total 887.
    assert _totals(record) == (4, 2, 830, 57, 887)
    assert [(t["invocation_id"], t["tool_call_id"]) for t in record["tool_calls"]] == [
        ("pi-parent", "call_p1"),
        ("pi-fork", "call_f1"),
    ]
    parent, fork = record["invocations"]
    assert (parent["invocation_id"], parent["parent_invocation_id"]) == ("pi-parent", N)
    assert (fork["invocation_id"], fork["parent_invocation_id"]) == ("pi-fork", "pi-parent")
    assert _conversation(fork) == [
        ("message", "user"),
        ("function_call", "call_f1"),
        ("function_call_output", "call_f1"),
        ("message", "assistant"),
    ]
    assert _copied(record) == [("pi-fork", "entries=u1,a1,r1,a2")]
    assert "pi-fork.jsonl:2: warning[context_copied]: 4 entries copy entries of the session it was forked" in stderr


def test_pi_fork_whose_parent_is_not_an_input_names_it(tmp_path: Path) -> None:
    fork = FIXTURES / "pi" / "copied_context_fork" / "input" / "2026-05-01T11-00-00-000Z_pi-fork.jsonl"
    produced, _ = _build(fork, tmp_path)
    (record,) = [orjson.loads(line) for line in produced.splitlines()]
    # Without the parent nothing shows what was copied: all 4 assistant messages count.
    assert _totals(record)[:2] == (4, 2)
    detail = "2026-05-01T10-00-00-000Z_pi-parent.jsonl"
    assert ("subagent_parent_unavailable", "pi-fork", detail) in [
        (g["code"], g["invocation_id"], g["detail"]) for g in record["gaps"]
    ]


def test_openclaw_compaction_checkpoint_and_thread_forks_counted_once(tmp_path: Path) -> None:
    scenario = FIXTURES / "openclaw" / "copied_context"
    produced, stderr = _build(scenario / "input", tmp_path)
    (record,) = _golden(scenario, produced)  # the checkpoint and both forks join the main session's tree
    main, thread, topic = "agent:main:main", "agent:main:discord:channel:9", "agent:main:telegram:group:42:topic:7"
    # oc-main.jsonl: prelude, u1, a1 (call_1; 100 in / 10 out), r1, a2 (call_2; 200/20), r2, a compaction
    # keeping a2, a2 and r2 re-appended under fresh ids, then the answer a3 (150/15): 3 calls, 2 tools.
    # oc-main.checkpoint.cp1.jsonl (named by compactionCheckpoints[0].preCompaction.sessionFile): the
    # transcript before the compaction, the same ids: all copies, nothing counted.
    # oc-topic.jsonl (forkedFromParent, parentSessionKey main): the prelude, u1, a1, r1 verbatim, then
    # its own t2 (call_t1; 300/30) and t4 (answer; 50/5): 2 calls, 1 tool.
    # oc-thread.jsonl (forkedFromParent; only its header's parentSession names oc-main.jsonl): u1 and a1
    # under fresh ids (copies by content and responseId), then h4 (answer; 70/7): 1 call.
    # Distinct: 3+2+1 = 6 calls, 2+1 = 3 tools; prompt 100+200+150+300+50+70 = 870,
    # completion 10+20+15+30+5+7 = 87, total 957.
    assert _totals(record) == (6, 3, 870, 87, 957)
    assert [(t["invocation_id"], t["tool_call_id"]) for t in record["tool_calls"]] == [
        (main, "call_1"),
        (main, "call_2"),
        (topic, "call_t1"),
    ]
    assert [(i["invocation_id"], i["parent_invocation_id"]) for i in record["invocations"]] == [
        (main, N),
        (thread, main),
        (topic, main),
    ]
    assert [len(i["conversation"]) for i in record["invocations"]] == [7, 2, 4]
    assert _copied(record) == [
        (main, "entries=b1000004,b1000005"),
        (main, "entries=aa000000,aa000001,aa000002,b1000001,b1000002,b1000003,b1000004,b1000005"),
        (thread, "entries=b1000001,b1000002"),
        (topic, "entries=aa000000,aa000001,aa000002,b1000001,b1000002,b1000003"),
    ]
    assert "oc-main.checkpoint.cp1.jsonl:2: warning[context_copied]: 8 entries copy entries of session" in stderr


def test_hermes_compression_continuation_tail_counted_once(tmp_path: Path) -> None:
    scenario = FIXTURES / "hermes" / "copied_context_compression"
    folder = materialise(scenario / "input", tmp_path / "input")
    produced, stderr = _build(folder, tmp_path)
    (record,) = _golden(scenario, produced)
    a, b = "20260801_130000_comp_a", "20260801_131000_comp_b"
    # Session A (ended by compression): user, assistant call_a1, its result, assistant call_a2, its result.
    # Session B continues A: A's first user message again, the compressor's summary, A's kept tail
    # (assistant call_a2 and its result) again, then its own assistant call_b1, its result, the answer.
    # Capture holds the 4 distinct calls: c1 (call_a1; 100 in / 10 out), c2 (call_a2; 200/20),
    # c3 (call_b1; 300/30), c4 (the answer; 400/40): 4 calls, prompt 1000, completion 100, total 1100.
    # Tools: call_a1, call_a2 in A, call_b1 in B = 3 (the copied call_a2 is not a second one).
    assert _totals(record) == (4, 3, 1000, 100, 1100)
    assert [(t["invocation_id"], t["tool_call_id"]) for t in record["tool_calls"]] == [
        (a, "call_a1"),
        (a, "call_a2"),
        (b, "call_b1"),
    ]
    # Each captured call is referenced once, by the invocation that made it (the copy of A's call_a2
    # message no longer claims c2 for B); the answer has no id to join by.
    assert [(i["invocation_id"], [m["response_id"] for m in i["model_calls"]]) for i in record["invocations"]] == [
        (a, ["chatcmpl-c1", "chatcmpl-c2"]),
        (b, ["chatcmpl-c3"]),
    ]
    codes = [g["code"] for g in record["gaps"]]
    assert "model_call_reference_conflict" not in codes and "duplicate_tool_call" not in codes
    assert _copied(record) == [(b, "messages=3;tool_calls=call_a2")]
    # B's conversation: its system prompt, the summary, then its own turns.
    assert [item["type"] for item in record["invocations"][1]["conversation"]] == [
        "message",
        "message",
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert f"warning[context_copied]: session {b}: 3 messages copy messages of the session it continues" in stderr


def test_openclaw_transcripts_without_a_store_join_by_parent_session(tmp_path: Path) -> None:
    sessions = FIXTURES / "openclaw" / "copied_context" / "input" / "agents" / "main" / "sessions"
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "oc-main.jsonl").write_bytes((sessions / "oc-main.jsonl").read_bytes())
    header, *rest = (sessions / "oc-topic.jsonl").read_bytes().splitlines(keepends=True)
    forked = {**orjson.loads(header), "parentSession": "C:\\Users\\claw\\.openclaw\\sessions\\oc-main.jsonl"}
    (loose / "oc-topic.jsonl").write_bytes(orjson.dumps(forked) + b"\n" + b"".join(rest))
    produced, _ = _build(loose, tmp_path)
    (record,) = [orjson.loads(line) for line in produced.splitlines()]
    # No store: invocation ids are header ids. oc-main: 3 calls (100/10, 200/20, 150/15), 2 tools;
    # oc-topic (a fork by its header, named by a Windows path): 2 calls (300/30, 50/5), 1 tool, after
    # its copies of the prelude, u1, a1 and r1. 5 calls, 3 tools, prompt 800, completion 80, total 880.
    assert _totals(record) == (5, 3, 800, 80, 880)
    assert [(i["invocation_id"], i["parent_invocation_id"]) for i in record["invocations"]] == [
        ("oc-main", N),
        ("oc-topic", "oc-main"),
    ]
    assert _copied(record) == [
        ("oc-main", "entries=b1000004,b1000005"),
        ("oc-topic", "entries=aa000000,aa000001,aa000002,b1000001,b1000002,b1000003"),
    ]


def test_a_fork_without_response_ids_is_one_unowned_session(tmp_path: Path) -> None:
    sessions = FIXTURES / "openclaw" / "copied_context" / "input" / "agents" / "main" / "sessions"
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "oc-main.jsonl").write_bytes((sessions / "oc-main.jsonl").read_bytes())
    header, *rest = (sessions / "oc-topic.jsonl").read_bytes().splitlines()
    entries = [orjson.loads(line) for line in rest]
    for entry in entries:
        entry.get("message", {}).pop("responseId", None)
    forked = {**orjson.loads(header), "parentSession": "oc-main.jsonl"}
    (loose / "oc-topic.jsonl").write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in [forked, *entries]))
    produced, _ = _build(loose, tmp_path)
    (record,) = [orjson.loads(line) for line in produced.splitlines()]
    assert [i["invocation_id"] for i in record["invocations"]] == ["oc-main", "oc-topic"]
    unowned = [g for g in record["gaps"] if g["code"] == "model_call_ownership_unavailable"]
    # one bundle-level gap for the fork, whose messages carry no response id (oc-main has them)
    assert [g["invocation_id"] for g in unowned if g["detail"] is None].count(N) == 1


def test_fork_parents_by_path_then_by_unique_file_name() -> None:
    def session(path: str, parent: str | None) -> Session:
        return Session(path, Path(path).stem, header={"type": "session", "parentSession": parent} if parent else None)

    sessions = {
        "/runs/a/p.jsonl": session("/runs/a/p.jsonl", None),
        "/runs/b/p.jsonl": session("/runs/b/p.jsonl", None),
        "/runs/a/by-path.jsonl": session("/runs/a/by-path.jsonl", "/runs/b/p.jsonl"),  # the path decides
        "/runs/a/relative.jsonl": session("/runs/a/relative.jsonl", "p.jsonl"),  # beside it
        "/runs/a/two-names.jsonl": session("/runs/a/two-names.jsonl", "/host/p.jsonl"),  # two p.jsonl: none
        "/runs/a/by-name.jsonl": session("/runs/a/by-name.jsonl", "C:\\host\\by-path.jsonl"),
        "/runs/a/nul.jsonl": session("/runs/a/nul.jsonl", "x\x00/relative.jsonl"),  # text only, never opened
        "/runs/a/self.jsonl": session("/runs/a/self.jsonl", "self.jsonl"),
    }
    assert fork_parents(sessions) == {
        "/runs/a/p.jsonl": N,
        "/runs/b/p.jsonl": N,
        "/runs/a/by-path.jsonl": "/runs/b/p.jsonl",
        "/runs/a/relative.jsonl": "/runs/a/p.jsonl",
        "/runs/a/two-names.jsonl": N,
        "/runs/a/by-name.jsonl": "/runs/a/by-path.jsonl",
        "/runs/a/nul.jsonl": "/runs/a/relative.jsonl",
        "/runs/a/self.jsonl": N,
    }


def test_pi_copies_with_capture_claim_each_captured_call_once(tmp_path: Path) -> None:
    # The compaction fixture beside a rollout row and a capture store holding its 4 distinct calls.
    session = FIXTURES / "pi" / "copied_context_compaction" / "input" / "session.jsonl"
    folder = tmp_path / "in"
    (folder / "capture").mkdir(parents=True)
    (folder / "session.jsonl").write_bytes(session.read_bytes())
    row = {
        "_ng_task_index": 0,
        "_ng_rollout_index": 0,
        "responses_create_params": {"input": [{"role": "user", "content": "fix the bug"}]},
        "response": {"id": "r-0-0", "output": []},
        "reward": 1.0,
    }
    (folder / "rollouts.jsonl").write_bytes(orjson.dumps(row) + b"\n")
    lines = []
    for n, (prompt, completion) in enumerate([(100, 10), (200, 20), (150, 15), (300, 5)], 1):
        response = {
            "id": f"msg_{n}",
            "object": "chat.completion",
            "model": "claude-x",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        }
        call = {
            "model_call_id": f"{n:032x}",
            "dialect": "chat",
            "model_ref": {"type": "responses_api_models", "name": "policy_model"},
            "started_at": 1777629600.0 + n,
            "completed_at": 1777629600.5 + n,
            "status_code": 200,
            "request": {"model": "claude-x", "messages": []},
            "response": response,
        }
        lines.append(orjson.dumps(call))
    (folder / "capture" / "0-0.capture.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    produced, _ = _build(folder, tmp_path)
    (record,) = [orjson.loads(line) for line in produced.splitlines()]
    # The session attributes to 0-0 by its response ids; its 4 distinct messages each claim their
    # captured call by responseId, and the copies (f1, a1, r1, f3) claim none a second time.
    assert record["rollout_id"] == "0-0"
    assert _totals(record) == (4, 3, 750, 50, 800)
    (invocation,) = record["invocations"]
    assert [ref["model_call_id"] for ref in invocation["model_calls"]] == [f"{n:032x}" for n in range(1, 5)]
    codes = [g["code"] for g in record["gaps"]]
    assert "model_call_reference_conflict" not in codes and "model_call_usage_from_transcript" not in codes
    assert _copied(record) == [("pi-cc", "entries=a2,r2,a1,r1,a3")]


def test_goldens_hold_with_two_jobs(tmp_path: Path) -> None:
    # Copies are recognised inside one unit, so the worker split cannot change a byte.
    for scenario in ("pi/copied_context_compaction", "pi/copied_context_fork", "openclaw/copied_context"):
        out = tmp_path / f"{scenario.replace('/', '_')}.jsonl"
        result = run_cli("build", FIXTURES / scenario / "input", "-o", out, "--jobs", "2")
        assert result.exit_code == 0, result.stderr
        assert out.read_bytes() == (FIXTURES / scenario / "expected.jsonl").read_bytes()


def test_a_sealing_copy_index_keeps_digests_and_still_finds_copies() -> None:
    def entry(entry_id: str, text: str, time: int) -> Entry:
        raw = {"type": "message", "id": entry_id, "message": {"role": "user", "content": text, "timestamp": time}}
        return Entry("message", entry_id, None, raw, 1)

    first = Session("a.jsonl", "a", entries=[entry("u1", "hi", 1), entry("u2", "again", 2)])
    later = Session("b.jsonl", "b", entries=[entry("x1", "hi", 1), entry("u2", "again", 2), entry("x3", "new", 3)])
    earlier = CopyIndex(sealing=True)
    mark_copies(first, earlier, "earlier sessions", DiagnosticSink())
    assert [original.raw for original in earlier.ids.values()] == [None, None]  # entries let go
    found: list[Diagnostic] = []
    mark_copies(later, earlier, "earlier sessions", DiagnosticSink(found.append))
    assert [e.copy_of for e in later.entries] == ["u1", "u2", None]  # by content, by id with its content
    assert [d.code for d in found] == ["context_copied"]


def test_openclaw_checkpoint_of_a_tree_of_one_session_is_compared_with_its_transcript(tmp_path: Path) -> None:
    """The main session alone (no forks in its store): its transcript is the last session of the tree but
    its checkpoint comes after it, so the checkpoint's copies are still found and counted once."""
    source = FIXTURES / "openclaw" / "copied_context" / "input" / "agents" / "main" / "sessions"
    folder = tmp_path / "input" / "agents" / "main" / "sessions"
    folder.mkdir(parents=True)
    store = orjson.loads((source / "sessions.json").read_bytes())
    (folder / "sessions.json").write_bytes(orjson.dumps({"agent:main:main": store["agent:main:main"]}))
    for name in ("oc-main.jsonl", "oc-main.checkpoint.cp1.jsonl"):
        (folder / name).write_bytes((source / name).read_bytes())
    produced, stderr = _build(tmp_path / "input", tmp_path)
    (record,) = [orjson.loads(line) for line in produced.splitlines()]
    # oc-main.jsonl alone (see the test above): 3 calls (100/10, 200/20, 150/15), 2 tools; the checkpoint
    # holds the transcript before the compaction, all copies.
    assert _totals(record) == (3, 2, 450, 45, 495)
    assert _copied(record) == [
        ("agent:main:main", "entries=b1000004,b1000005"),
        ("agent:main:main", "entries=aa000000,aa000001,aa000002,b1000001,b1000002,b1000003,b1000004,b1000005"),
    ]
    assert "oc-main.checkpoint.cp1.jsonl:2: warning[context_copied]: 8 entries copy entries of session" in stderr


def test_entry_keys_are_derived_once_and_kept_with_the_entry(tmp_path: Path) -> None:
    """An entry's probe and response key (``copies.entry_keys``): a message by its role, time and
    response id, a summary type by its summary, nothing for other types or a message without a text
    role; the read keeps them with the entry and comparing it with a later session takes them as kept."""
    from ng_traj.sources.pi.copies import entry_keys
    from ng_traj.sources.pi.session import read_session

    assistant = {"type": "message", "message": {"role": "assistant", "timestamp": 5, "responseId": "r1"}}
    assert entry_keys("message", assistant) == (("message", "assistant", 5, "r1"), "r1")
    assert entry_keys("message", {"type": "message", "message": {"role": 3}}) == (None, None)
    assert entry_keys("message", {"type": "message", "message": "text"}) == (None, None)
    compaction = {"type": "compaction", "summary": {"a": 1}, "customType": "x"}
    assert entry_keys("compaction", compaction) == (("compaction", "dict", "x", None), None)
    assert entry_keys("model_change", {"type": "model_change"}) == (None, None)

    path = tmp_path / "s.jsonl"
    lines = [{"type": "session", "version": 3, "id": "s"}, {"id": "e1", "parentId": None, **assistant}]
    path.write_text("".join(orjson.dumps(line).decode() + "\n" for line in lines))
    session = read_session(path, DiagnosticSink())
    (entry,) = session.entries
    assert entry.keys == (("message", "assistant", 5, "r1"), "r1")
    entry.keys = (None, "kept")  # what mark_copies reads: the kept keys, not derived again
    earlier = mark_copies(session, CopyIndex(), "earlier sessions", DiagnosticSink())
    assert earlier.responses == {"kept": "e1"} and earlier.contents == {}
