"""OpenClaw layouts (issue 4): trees, archives, missing and refused transcripts, PinchBench, end to end."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson

from conftest import FIXTURES, run_cli
from ng_traj.io.files import resolved_folders
from ng_traj.sources.openclaw.store import _usable

OPENCLAW = FIXTURES / "openclaw"
N = None


def _build(tmp_path, *inputs) -> tuple[list[dict], str]:
    out = tmp_path / "out.jsonl"
    result = run_cli("build", *inputs, "-o", out)
    assert result.exit_code == 0, result.stderr
    return [orjson.loads(line) for line in out.read_bytes().splitlines()], result.stderr


def _gaps(record: dict) -> list[tuple]:
    return [(g["code"], g["invocation_id"], g["detail"]) for g in record["gaps"]]


def test_cross_agent_subagent_tree(tmp_path):
    (record,), _ = _build(tmp_path, OPENCLAW / "tree")
    assert record["rollout_id"] == "sess-root"
    lineage = [(inv["invocation_id"], inv["parent_invocation_id"], inv["status"]) for inv in record["invocations"]]
    assert lineage == [
        ("agent:main:main", N, "unknown"),
        ("agent:main:subagent:child", "agent:main:main", "unknown"),
        ("agent:worker:subagent:grand", "agent:main:subagent:child", "unknown"),
    ]
    tools = [
        (t["invocation_id"], t["tool_call_id"], t["status"], t["started_at"], t["duration_ms"])
        for t in record["tool_calls"]
    ]
    assert tools == [
        ("agent:main:main", "call_spawn", "completed", 1776049203.5, 2500.0),
        ("agent:main:subagent:child", "call_p1", "completed", 1776049204.0, 1000.0),
        ("agent:main:subagent:child", "call_p2", "failed", 1776049204.0, 3000.0),
        ("agent:worker:subagent:grand", "call_read", "failed", N, N),
    ]
    gaps = _gaps(record)
    assert ("subagent_spawn_tool_unavailable", "agent:main:subagent:child", N) in gaps
    assert ("subagent_spawn_tool_unavailable", "agent:worker:subagent:grand", N) in gaps
    assert ("tool_timing_unavailable", "agent:worker:subagent:grand", "call_read") in gaps
    assert not [g for g in gaps if g[0] in ("subagent_hierarchy_unavailable", "subagent_hierarchy_incomplete")]
    assert len(record["model_calls"]) == 6


def test_archive_only_parent_missing_child_and_refused_symlink(tmp_path):
    records, stderr = _build(tmp_path, OPENCLAW / "archive_and_missing")
    tree = next(r for r in records if r["rollout_id"] == "sess-old")
    assert [inv["invocation_id"] for inv in tree["invocations"]] == [
        "agent:main:main",
        "agent:main:subagent:gone",
        "agent:main:subagent:sym",
    ]
    root, gone, sym = tree["invocations"]
    assert len(root["conversation"]) == 5 and gone["conversation"] == [] and sym["conversation"] == []
    gaps = _gaps(tree)
    assert ("agent_transcript_unavailable", "agent:main:subagent:gone", "sess-gone") in gaps
    assert ("agent_transcript_unavailable", "agent:main:subagent:sym", "sess-sym") in gaps
    assert ("subagent_hierarchy_incomplete", N, N) in gaps
    # the aborted empty turn and the gateway-injected message are not model calls
    assert [c["response_metadata"]["response_id"] for c in tree["model_calls"]] == ["chatcmpl-arch-1"]
    assert "warning[session_path_refused]" in stderr
    assert [r["rollout_id"] for r in records] == ["sess-old", "sess-sym"]  # the real file, read as a plain pi session


def test_pinchbench_run_id_attributes_the_retained_session_to_its_row(tmp_path):
    (record,), _ = _build(tmp_path, OPENCLAW / "pinchbench")
    assert record["rollout_id"] == "rollouts.jsonl:1"
    assert [inv["invocation_id"] for inv in record["invocations"]] == ["agent:main:main"]
    assert [c["response_metadata"]["response_id"] for c in record["model_calls"]] == ["chatcmpl-pb-1"]
    assert not [g for g in _gaps(record) if g[0] in ("agent_transcript_unavailable", "rollout_record_unavailable")]


def test_end_to_end_rows_capture_and_sessions_join_by_exact_id(tmp_path):
    records, _ = _build(tmp_path, FIXTURES / "native_e2e")
    by_id = {r["rollout_id"]: r for r in records}
    openclaw, pi = by_id["0-0"], by_id["0-1"]
    refs = [(r["model_call_id"], r["response_id"]) for r in openclaw["invocations"][0]["model_calls"]]
    assert refs == [(f"{1:032x}", "chatcmpl-e2e-1"), (f"{2:032x}", "chatcmpl-e2e-2")]
    assert [r["model_call_id"] for r in pi["invocations"][0]["model_calls"]] == [f"{4:032x}", f"{5:032x}"]
    ownership = [g for r in records for g in _gaps(r) if g[0] == "model_call_ownership_unavailable"]
    assert ownership == [("model_call_ownership_unavailable", N, f"capture:{3:032x}:call_index=2")]  # the judge only
    for record in records:
        codes = [g[0] for g in _gaps(record)]
        assert "model_call_reference_unmatched" not in codes and "model_call_usage_from_transcript" not in codes
    assert openclaw["tool_calls"][0]["duration_ms"] == 400.0


def test_a_corrupt_store_is_reported_once(tmp_path):
    shutil.copytree(OPENCLAW / "tree", tmp_path / "in")
    (tmp_path / "in/agents/main/sessions/sessions.json").write_text('{"agent:main:main": {"sessionId": ')
    (tmp_path / "in/agents/worker/sessions/sessions.json").write_text("[1, 2]")
    for jobs in ("1", "2"):
        result = run_cli("build", tmp_path / "in", "-o", tmp_path / "out.jsonl", "-j", jobs)
        assert result.exit_code == 0, result.stderr
        assert result.stderr.count("error[invalid_json]: session store unreadable") == 1
        assert result.stderr.count("error[not_an_object]: session store unreadable") == 1
        assert "2 lines skipped" in result.stderr and "2 errors" in result.stderr


def test_a_spawned_by_cycle_is_reported_and_cut_at_the_smallest_key(tmp_path):
    shutil.copytree(OPENCLAW / "tree", tmp_path / "in")
    store = tmp_path / "in/agents/main/sessions/sessions.json"
    entries = orjson.loads(store.read_bytes())
    entries["agent:main:main"]["spawnedBy"] = "agent:worker:subagent:grand"
    store.write_bytes(orjson.dumps(entries))
    (record,), stderr = _build(tmp_path, tmp_path / "in")
    assert [line.split(": ", 1)[1] for line in stderr.splitlines() if "[parent_cycle]" in line] == [
        "warning[parent_cycle]: spawnedBy/parentSessionKey links form a cycle (agent:main:main -> "
        "agent:worker:subagent:grand -> agent:main:subagent:child -> agent:main:main); the link of "
        "agent:main:main to agent:worker:subagent:grand is ignored and agent:main:main heads the tree"
    ]
    assert record["rollout_id"] == "sess-root"
    assert [(i["invocation_id"], i["parent_invocation_id"]) for i in record["invocations"]] == [
        ("agent:main:main", N),
        ("agent:main:subagent:child", "agent:main:main"),
        ("agent:worker:subagent:grand", "agent:main:subagent:child"),
    ]
    assert ("cyclic_subagent_parent", "agent:main:main", "agent:worker:subagent:grand") in _gaps(record)


def test_a_session_id_naming_a_file_outside_the_agents_folder_is_refused_and_said(tmp_path):
    shutil.copytree(OPENCLAW / "tree", tmp_path / "in")
    sessions = tmp_path / "in/agents/main/sessions"
    (tmp_path / "secret.jsonl").write_bytes((sessions / "sess-child.jsonl").read_bytes())
    entries = orjson.loads((sessions / "sessions.json").read_bytes())
    entries["agent:main:subagent:child"]["sessionId"] = "../../../../secret"
    (sessions / "sessions.json").write_bytes(orjson.dumps(entries))
    (sessions / "sess-child.jsonl").unlink()
    (record,), stderr = _build(tmp_path, tmp_path / "in")
    refused = [line for line in stderr.splitlines() if "[session_path_refused]" in line]
    assert refused == [
        f"{sessions}/../../../../secret.jsonl: warning[session_path_refused]: session agent:main:subagent:child: "
        f"{sessions}/../../../../secret.jsonl lies outside the agents folder; not read"
    ]
    gap = ("agent_transcript_unavailable", "agent:main:subagent:child", "../../../../secret")
    assert gap in _gaps(record)


def test_store_entries_of_the_wrong_shape_are_reported(tmp_path):
    shutil.copytree(OPENCLAW / "tree", tmp_path / "in")
    store = tmp_path / "in/agents/main/sessions/sessions.json"
    entries = orjson.loads(store.read_bytes())
    entries["agent:main:subagent:child"]["spawnedBy"] = ["agent:main:main"]
    entries["agent:main:broken"] = None
    store.write_bytes(orjson.dumps(entries))
    _, stderr = _build(tmp_path, tmp_path / "in")
    assert [line.split(": ", 1)[1] for line in stderr.splitlines() if "openclaw_entry_invalid" in line] == [
        "warning[openclaw_entry_invalid]: entry agent:main:subagent:child: spawnedBy not text; ignored",
        "warning[openclaw_entry_invalid]: entry agent:main:broken: not an object (NoneType); skipped",
    ]


def test_a_session_id_longer_than_a_file_name_can_be_is_a_missing_transcript(tmp_path):
    """Found by the fuzzer: looking for ``<sessionId>.jsonl`` raised "File name too long", so the whole
    tree failed to index (``native_load_failed``) and every session in it was left out."""
    shutil.copytree(OPENCLAW / "tree", tmp_path / "in")
    sessions = tmp_path / "in/agents/main/sessions"
    entries = orjson.loads((sessions / "sessions.json").read_bytes())
    entries["agent:main:subagent:child"]["sessionId"] = "x" * 5000
    (sessions / "sessions.json").write_bytes(orjson.dumps(entries))
    (child, root), stderr = _build(tmp_path, tmp_path / "in")
    assert "native_load_failed" not in stderr
    assert (root["rollout_id"], root["invocations"][0]["invocation_id"]) == ("sess-root", "agent:main:main")
    assert ("agent_transcript_unavailable", "agent:main:subagent:child", "x" * 5000) in _gaps(root)
    assert child["rollout_id"] == "sess-child"  # the transcript no entry names any more, read on its own
    assert len(root["model_calls"]) + len(child["model_calls"]) == 6


def test_an_archived_transcript_is_found_by_its_name_not_by_a_pattern(tmp_path):
    """Found by the fuzzer: archives were looked up with a glob of ``<sessionId>.jsonl.reset.*``, so a
    3 MB session id was compiled into a regular expression (a minute of CPU), and a ``[`` in an id was
    a character class (``sess[1]`` found ``sess1``'s archive, not its own)."""
    shutil.copytree(OPENCLAW / "archive_and_missing" / "agents", tmp_path / "in" / "agents")
    sessions = tmp_path / "in/agents/main/sessions"
    archive = sessions / "sess-old.jsonl.reset.2026-04-14T04-00-00.000Z"
    archive.rename(sessions / "sess[1].jsonl.reset.2026-04-14T04-00-00.000Z")
    entries = orjson.loads((sessions / "sessions.json").read_bytes())
    entries["agent:main:main"]["sessionId"] = "sess[1]"
    (sessions / "sessions.json").write_bytes(orjson.dumps(entries))
    records, _ = _build(tmp_path, tmp_path / "in")
    tree = next(r for r in records if r["invocations"][0]["invocation_id"] == "agent:main:main")
    assert len(tree["invocations"][0]["conversation"]) == 5
    assert [c["response_metadata"]["response_id"] for c in tree["model_calls"]] == ["chatcmpl-arch-1"]


def _transcript(path, *, response_ids: bool) -> None:
    """An OpenClaw v3 transcript (claimed by its ``model-snapshot`` entry): a user message, an assistant
    turn with thinking, text and a tool call, its result, a custom message, and a final answer."""
    assistant = {"role": "assistant", "api": "openai-responses", "provider": "openai", "model": "m"}

    def reply(number: int, content: list) -> dict:
        extra = {"responseId": f"resp_{number}"} if response_ids else {}
        return {**assistant, **extra, "content": content, "stopReason": "stop"}

    entries = [
        {"type": "session", "version": 3, "id": "oc-ids", "timestamp": "2026-04-13T03:00:00.000Z", "cwd": "/w"},
        {"type": "custom", "customType": "model-snapshot", "id": "s0", "parentId": None, "data": {}},
        {"type": "message", "id": "u1", "parentId": "s0", "message": {"role": "user", "content": "list it"}},
        {
            "type": "message",
            "id": "a1",
            "parentId": "u1",
            "message": reply(
                1,
                [
                    {"type": "thinking", "thinking": "run ls"},
                    {"type": "text", "text": "running ls"},
                    {"type": "toolCall", "id": "call_ls", "name": "exec", "arguments": {"command": "ls"}},
                ],
            ),
        },
        {
            "type": "message",
            "id": "t1",
            "parentId": "a1",
            "message": {"role": "toolResult", "toolCallId": "call_ls", "content": [{"type": "text", "text": "a b"}]},
        },
        {"type": "custom_message", "id": "c1", "parentId": "t1", "customType": "note", "content": "a note"},
        {"type": "message", "id": "a2", "parentId": "c1", "message": reply(2, [{"type": "text", "text": "a and b"}])},
    ]
    path.write_bytes(b"".join(orjson.dumps(entry) + b"\n" for entry in entries))


def test_assistant_item_ids_are_positions_as_gyms_openclaw_agent_writes_them(tmp_path):
    """``msg-<n>``: n counts the items NeMo Gym's OpenClaw agent writes before the message (user, reasoning,
    message, call, result: not the custom message ng-traj adds); reasoning keeps ``rs_<entry id>``."""
    (tmp_path / "in").mkdir()
    _transcript(tmp_path / "in" / "oc-ids.jsonl", response_ids=True)
    (record,), _ = _build(tmp_path, tmp_path / "in")
    conversation = record["invocations"][0]["conversation"]
    assert [(item["type"], item.get("id")) for item in conversation] == [
        ("message", N),
        ("reasoning", "rs_a1"),
        ("message", "msg-2"),
        ("function_call", "call_ls"),
        ("function_call_output", N),
        ("message", N),  # the custom message: no position of the agent's
        ("message", "msg-5"),
    ]
    assert conversation[6]["content"][0]["text"] == "a and b"


def test_a_session_without_response_ids_carries_the_bundle_level_ownership_gap(tmp_path):
    """No assistant message names its provider response: no call can be referenced, and the bundle says
    so with ``model_call_ownership_unavailable`` without invocation id (once), as NeMo Gym's producer."""
    for named in (False, True):
        folder = tmp_path / f"in-{named}"
        folder.mkdir()
        _transcript(folder / "oc-ids.jsonl", response_ids=named)
        (record,), _ = _build(folder, folder)
        bundle_level = [g for g in _gaps(record) if g[:2] == ("model_call_ownership_unavailable", N)]
        assert bundle_level == ([] if named else [("model_call_ownership_unavailable", N, N)])


def test_checkpoint_copies_are_found_by_their_name_not_by_a_pattern(tmp_path):
    """``s[1].checkpoint.*.jsonl`` read as a glob would name ``s1.checkpoint.c1.jsonl`` (another session's)
    and miss ``s[1].checkpoint.c1.jsonl``; the checkpoint's own call counts in the session it copies."""
    sessions = tmp_path / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "sessions.json").write_bytes(orjson.dumps({"agent:main:main": {"sessionId": "s[1]"}}))
    header = {"type": "session", "version": 3, "timestamp": "2026-04-13T03:00:00.000Z", "cwd": "/w"}
    user = {"type": "message", "id": "u1", "parentId": None, "message": {"role": "user", "content": "go"}}

    def reply(entry: str, response: str) -> dict:
        message = {"role": "assistant", "responseId": response, "content": [{"type": "text", "text": response}]}
        return {"type": "message", "id": entry, "parentId": "u1", "message": message}

    files = {
        "s[1].jsonl": [{**header, "id": "s[1]"}, user, reply("a2", "resp_live")],
        "s[1].checkpoint.c1.jsonl": [{**header, "id": "s[1]"}, user, reply("a1", "resp_checkpoint")],
        "s1.checkpoint.c1.jsonl": [{**header, "id": "s1"}, user, reply("d1", "resp_decoy")],
    }
    for name, entries in files.items():
        (sessions / name).write_bytes(b"".join(orjson.dumps(entry) + b"\n" for entry in entries))
    records, _ = _build(tmp_path, tmp_path / "agents")
    calls = {
        record["rollout_id"]: sorted(call["response_metadata"]["response_id"] for call in record["model_calls"])
        for record in records
    }
    assert calls["s[1]"] == ["resp_checkpoint", "resp_live"]
    assert ["resp_decoy"] in calls.values()  # the other file is a session of its own


def test_a_transcript_in_a_sibling_folder_sharing_the_agents_folders_name_is_outside_it(tmp_path):
    agents, sibling = tmp_path / "agents", tmp_path / "agents-old"
    for folder in (agents / "main" / "sessions", sibling):
        folder.mkdir(parents=True)
        (folder / "s.jsonl").write_text("{}\n")
    root = agents.resolve()
    with resolved_folders():
        assert _usable(agents / "main" / "sessions" / "s.jsonl", root)
        assert not _usable(sibling / "s.jsonl", root)
        assert not _usable(agents / "main" / "sessions" / ".." / ".." / ".." / "agents-old" / "s.jsonl", root)
        assert _usable(sibling / "s.jsonl", Path("/"))  # everything lies inside the root folder


def _pinchbench_run_of_path(path: Path) -> str | None:
    """``reader.pinchbench_run`` by ``Path`` attributes (what it did before it read text)."""
    from ng_traj.io.compression import logical_name

    name = logical_name(path.name)
    stem, folder = name.removesuffix(".jsonl"), path.parent.name
    if name.endswith(".jsonl") and folder.startswith(f"{stem}_") and len(folder) > len(stem) + 1:
        return folder[len(stem) + 1 :]
    return None


def test_the_index_reads_paths_as_text_as_it_would_read_their_path_objects():
    """Indexing keeps its files as text (no ``Path`` per file): the agents root of a store, whether a
    file is a store, a PinchBench run id and the roots' order, worked out on the text as ``str`` of a
    ``Path`` gives it, are those of the ``Path``."""
    from ng_traj.io.files import path_order
    from ng_traj.sources.openclaw.reader import _agents_root, _agents_root_text, _is_json, pinchbench_run

    texts = [
        "/r/agents/main/sessions/sessions.json",
        "agents/main/sessions/sessions.json",
        "main/sessions/sessions.json",
        "sessions/sessions.json",
        "sessions.json",
        "/sessions/sessions.json",
        "//host/sessions/sessions.json",
        "/r/a/other.json",
        "/r/a/sessions/store.json",
        "/r/a/.json",
        "/r/a/..json",
        "/r/a/x.json.gz",
        "/r/a/x.jsonl",
        "/r/task_run7/task.jsonl",
        "/r/task_run7/task.jsonl.gz",
        "task_/task.jsonl",
        "task.jsonl",
        "/task_x/task.jsonl",
    ]
    for text in texts:
        path = Path(text)
        assert str(path) == text
        assert _agents_root_text(text) == str(_agents_root(path)), text
        assert _is_json(text) == (path.suffix == ".json"), text
        assert pinchbench_run(text) == pinchbench_run(path) == _pinchbench_run_of_path(path), text
    roots = ["/r/a/b", "/r/a-b", "/r/a/b/c", "/r/a", "a", "."]
    assert sorted(roots, key=path_order) == [str(p) for p in sorted(map(Path, roots))]
