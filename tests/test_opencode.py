"""The OpenCode reader: the real export, the 1.x and 2.x database fixtures, forks, sub-agents, damage.

Expected values are written from the rules (NeMo Gym 0.7.0's OpenCode producer, the reader
docstrings and ``fixtures/opencode/README.md``), not from the output; the real export's counts come
from ``_independent_counts``, a plain reading of the JSON that shares no code with ``ng_traj``.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import orjson
import pytest

from conftest import FIXTURES, run_cli, run_json, shared_dir
from ng_traj.checks import check_line
from ng_traj.sources.detect import claims

OPENCODE = FIXTURES / "opencode"


def materialise(source: Path, target: Path) -> Path:
    """Copy a fixture folder, creating the database ``<name>.db`` from every ``<name>.db.json`` (DDL, rows)."""
    shutil.copytree(source, target)
    for spec_path in sorted(target.rglob("*.db.json")):
        spec = json.loads(spec_path.read_text())
        connection = sqlite3.connect(spec_path.with_suffix(""))
        for ddl in spec["ddl"]:
            connection.execute(ddl)
        for table, rows in spec["rows"].items():
            for row in rows:
                names = ", ".join(row)
                connection.execute(
                    f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(row))})", list(row.values())
                )
        connection.commit()
        connection.close()
        spec_path.unlink()
    return target


def _build(tmp_path: Path, *inputs: Path, extra: tuple[str, ...] = ()) -> tuple[list[dict], str]:
    out = tmp_path / "out.jsonl"
    result = run_cli("build", *inputs, "-o", out, *extra)
    assert result.exit_code == 0, result.stderr
    assert "Traceback" not in result.stderr
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    for record in records:
        findings, _ = check_line(record)
        assert [f for f in findings if f.severity == "error"] == []
    return records, result.stderr


def _gaps(record: dict, code: str) -> list[tuple]:
    return [(g["invocation_id"], g["detail"]) for g in record["gaps"] if g["code"] == code]


def _independent_counts(path: Path) -> dict:
    """What one ``opencode export`` holds, counted by plain reading."""
    export = json.loads(path.read_text())
    assistants = [m for m in export["messages"] if m["info"]["role"] == "assistant"]
    users = [m for m in export["messages"] if m["info"]["role"] == "user"]
    parts = [p for m in assistants for p in m["parts"]]
    tools = [p for p in parts if p["type"] == "tool"]
    texts = [p for p in parts if p["type"] in ("text", "reasoning") and p["text"].strip()]
    outputs = [p for p in tools if p["state"].get("output") is not None]
    user_texts = [p for m in users for p in m["parts"] if p["type"] == "text" and not p.get("ignored")]
    steps = [p for p in parts if p["type"] == "step-finish"]
    turns = [m for m in assistants if {p["type"] for p in m["parts"]} & {"step-start", "step-finish"}]
    return {
        "messages": len(user_texts) + len(texts) + len(tools) + len(outputs),
        "model_calls": len(steps),
        "tool_calls": len([p for p in tools if p.get("callID")]),
        "subagents": 0 if "parentID" not in export["info"] else 1,
        "turns": len(turns),
        "prompt": sum(
            p["tokens"]["input"] + p["tokens"]["cache"]["read"] + p["tokens"]["cache"]["write"] for p in steps
        ),
        "completion": sum(p["tokens"]["output"] + p["tokens"]["reasoning"] for p in steps),
    }


def test_real_export_builds_with_independent_counts(tmp_path):
    (path,) = sorted(shared_dir("producer-samples", "opencode").glob("*.json"))
    expected = _independent_counts(path)
    assert expected["model_calls"] == 2 and expected["tool_calls"] == 1  # checked by hand against the file
    (record,), _ = _build(tmp_path, path)
    (invocation,) = record["invocations"]
    assert invocation["invocation_id"] == "ses_123" and invocation["status"] == "completed"
    assert len(invocation["conversation"]) == expected["messages"]
    assert len(record["model_calls"]) == expected["model_calls"]
    assert len(record["tool_calls"]) == expected["tool_calls"]
    assert sum(1 for i in record["invocations"] if i["parent_invocation_id"]) == expected["subagents"]
    assert len(record["turns"]) == expected["turns"]
    assert sum(c["token_stats"]["prompt_tokens"] for c in record["model_calls"]) == expected["prompt"]
    assert sum(c["token_stats"]["completion_tokens"] for c in record["model_calls"]) == expected["completion"]
    (tool,) = record["tool_calls"]
    assert (tool["tool_call_id"], tool["tool_name"], tool["duration_ms"]) == (
        "chatcmpl-tool-944dd9d62f6ccf66",
        "read",
        42.0,
    )
    # the export repeats msg_123 for every message: calls are told apart by their position
    assert _gaps(record, "model_call_usage_from_transcript") == [("ses_123", "msg_123@2#1"), ("ses_123", "msg_123@3#1")]


def test_gym_examples_opencode_export_and_rollouts(tmp_path):
    examples = shared_dir("gym-examples")
    export = examples / "opencode_sandboxed_agent__opencode_export_test_data.json"
    rows = examples / "opencode_agent__example_rollout.jsonl"
    records, stderr = _build(tmp_path, rows, export)
    assert len(records) == 5 + 1  # five rollout rows, and the export's session on its own
    (session,) = [r for r in records if r["rollout_id"] == "ses_123"]
    assert [t["turn_no"] for t in session["turns"]] == [1, 2]
    assert "input_unsupported" not in stderr
    for record in records:
        if record is not session:
            assert [i["invocation_id"] for i in record["invocations"]] == ["rollout_record"]


def test_detection_claims_each_form_once(tmp_path):
    db_v1 = materialise(OPENCODE / "db_v1" / "input", tmp_path / "v1") / "opencode.db"
    renamed = tmp_path / "store.sqlite"
    shutil.copyfile(db_v1, renamed)
    exports = OPENCODE / "exports" / "input"
    assert [c.kind for c in claims(db_v1)] == ["opencode"]
    assert [c.kind for c in claims(renamed)] == ["opencode"]  # by its tables, whatever its name
    assert [c.kind for c in claims(exports / "ses_exp.json")] == ["opencode"]
    (future,) = claims(exports / "future.json")
    assert future.kind == "unsupported" and "'3.1.0'" in future.description
    (legacy,) = claims(exports / "legacy-storage" / "ses_old.json")
    assert legacy.kind == "unsupported" and "'1.1.4'" in legacy.description
    message = tmp_path / "msg_1.json"
    message.write_text(json.dumps({"id": "msg_1", "sessionID": "ses_old", "role": "user", "time": {"created": 1}}))
    part = tmp_path / "prt_1.json"
    part.write_text(json.dumps({"id": "prt_1", "sessionID": "ses_old", "messageID": "msg_1", "type": "text"}))
    assert [c.kind for c in claims(message)] == [c.kind for c in claims(part)] == ["unsupported"]
    other = tmp_path / "notes.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE notes (id TEXT)")
    assert [c.kind for c in claims(other)] == ["unsupported"]


def test_v1_database(tmp_path):
    folder = materialise(OPENCODE / "db_v1" / "input", tmp_path / "input")
    before = sorted(p.name for p in folder.iterdir())
    (record,), stderr = _build(tmp_path, folder)
    assert sorted(p.name for p in folder.iterdir()) == before  # the private copy leaves the folder as it was
    root, child = record["invocations"]
    assert (root["invocation_id"], root["status"]) == ("ses_root", "failed")  # msg_05 has an error object
    assert (child["parent_invocation_id"], child["spawned_by_tool_call_id"]) == ("ses_root", "call_task")
    assert child["status"] == "completed"
    kinds = [(i["type"], i.get("role") or i.get("call_id")) for i in root["conversation"]]
    assert kinds == [
        ("message", "user"),  # the ignored user text is left out
        ("reasoning", None),
        ("function_call", "call_bash"),
        ("function_call_output", "call_bash"),
        ("function_call", "call_task"),
        ("function_call_output", "call_task"),
        ("message", "assistant"),
        ("message", "assistant"),  # the compaction summary
        ("function_call", "part:prt_16"),  # no callID: named by its part
        ("function_call_output", "part:prt_16"),
        ("function_call", "call_edit"),
        ("function_call_output", "call_edit"),
    ]
    assert root["conversation"][-1]["output"] == "file is read-only"
    stats = [(c["token_stats"]["prompt_tokens"], c["token_stats"]["completion_tokens"]) for c in record["model_calls"]]
    assert stats == [(60 + 200 + 20, 30 + 10), (40 + 200, 20), (500, 40), (30, 12)]
    assert record["model_calls"][1]["token_stats"]["total_tokens"] == 260  # the step's own total
    tools = {t["tool_call_id"]: (t["status"], t["duration_ms"]) for t in record["tool_calls"]}
    assert tools == {
        "call_bash": ("completed", 1500.0),
        "call_task": ("completed", 3300.0),
        "call_edit": ("failed", None),
    }
    assert _gaps(record, "tool_call_identity_unavailable") == [("ses_root", "prt_16")]
    assert _gaps(record, "tool_timing_unavailable") == [("ses_root", "call_edit")]
    assert _gaps(record, "agent_artifact_record_unowned") == [(None, "msg_06")]
    assert _gaps(record, "agent_artifact_record_unparseable") == [("ses_root", "msg_05:parts=1")]
    assert _gaps(record, "turns_unavailable") == [(None, "msg_05,msg_07")]
    assert "warning[opencode_record_unowned]" in stderr
    turns = sorted((t["invocation_id"], t["turn_no"], t["step_count"]) for t in record["turns"])
    # msg_04 is a summary (no turn); msg_05 has no step-finish but content, so it is a turn
    assert turns == [("ses_child", 1, 1), ("ses_root", 1, 2), ("ses_root", 2, 2)]
    first = next(t for t in record["turns"] if (t["invocation_id"], t["turn_no"]) == ("ses_root", 1))
    assert first["answer"][0] == {
        "id": "msg_02",
        "type": "message",
        "role": "assistant",
        "content": [{"id": "prt_09", "type": "output_text", "text": "Fixed parse()."}],
    }
    assert first["answer"][1]["arguments"] == {"command": "pytest -q"}  # an object, as upstream
    assert first["reasoning_content"] == [{"id": "prt_04", "type": "reasoning", "text": "Run the tests first."}]
    assert first["timestamp"] == 1785000000.02


def test_v1_compaction(tmp_path):
    folder = materialise(OPENCODE / "db_v1" / "input", tmp_path / "input")
    out = tmp_path / "out.jsonl"
    assert run_cli("build", folder, "-o", out, "--attach").exit_code == 0
    (record,) = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    bundle = record["ng_agent_observations"]
    (compaction,) = [r for r in bundle["records"] if r["kind"] == "context_compaction"]
    assert compaction["summary"] == "Summary: parse() fixed; tests pass."
    assert (compaction["trigger"], compaction["outcome"], compaction["first_kept_item_id"]) == (
        "automatic",
        "completed",
        "prt_04",
    )
    assert compaction["observed_at"] == 1785000006.0


def test_v2_database_with_fork(tmp_path):
    folder = materialise(OPENCODE / "db_v2_fork" / "input", tmp_path / "input")
    (record,), _ = _build(tmp_path, folder)
    main, fork = record["invocations"]
    assert (main["invocation_id"], fork["invocation_id"], fork["parent_invocation_id"]) == (
        "ses_main",
        "ses_fork",
        "ses_main",
    )
    # the inherited history is counted once, in its source: the fork holds only its own messages
    assert fork["conversation"][0]["content"] == "Now count the lines."
    assert len(fork["conversation"]) == 2 and len(main["conversation"]) == 4
    assert _gaps(record, "copied_context") == [("ses_fork", "ses_main:msg_a3")]
    assert _gaps(record, "subagent_spawn_tool_unavailable") == []
    assert len(record["model_calls"]) == 3
    assert sorted((t["invocation_id"], t["turn_no"]) for t in record["turns"]) == [
        ("ses_fork", 1),
        ("ses_main", 1),
        ("ses_main", 2),
    ]


def test_exports_sub_agent_damage_and_unsupported_versions(tmp_path):
    records, stderr = _build(tmp_path, OPENCODE / "exports" / "input", extra=("--verbose",))
    (record,) = records
    root, sub = record["invocations"]
    assert root["invocation_id"] == "ses_exp"
    assert (sub["invocation_id"], sub["parent_invocation_id"], sub["spawned_by_tool_call_id"]) == (
        "ses_sub",
        "ses_exp",
        "call_sub",
    )
    assert _gaps(record, "agent_artifact_record_unparseable") == [(None, "messages[1]")]
    assert _gaps(record, "turns_unavailable") == [(None, "msg_e2")]  # an `agent` part, as upstream
    assert record["model_calls"][0]["token_stats"] == {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "reasoning_tokens": 1,
        "total_tokens": 15,
        "cached_tokens": 0,
    }
    assert "future.json: info[input_unsupported]: recognised as OpenCode export of version '3.1.0'" in stderr
    assert "ses_old.json: info[input_unsupported]: recognised as OpenCode '1.1.4' JSON storage file" in stderr
    assert "warning[opencode_record_invalid]: 1 message whose object did not decode (messages[1])" in stderr


def test_database_without_session_tables_is_named(tmp_path):
    db = tmp_path / "opencode.db"
    with sqlite3.connect(db) as connection:
        connection.execute("CREATE TABLE project (id TEXT)")
    result = run_cli("build", db, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 1
    assert "error[opencode_db_unreadable]: no session tables of OpenCode 1.x" in result.stderr
    assert "Traceback" not in result.stderr


def test_outputs_do_not_depend_on_jobs_or_input_order(tmp_path):
    v1 = materialise(OPENCODE / "db_v1" / "input", tmp_path / "v1")
    v2 = materialise(OPENCODE / "db_v2_fork" / "input", tmp_path / "v2")
    exports = OPENCODE / "exports" / "input"
    outputs = []
    for n, (jobs, inputs) in enumerate([("1", (v1, v2, exports)), ("2", (exports, v2, v1))]):
        out = tmp_path / f"out{n}.jsonl"
        assert run_cli("build", *inputs, "-o", out, "--jobs", jobs).exit_code == 0
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] and outputs[0].count(b"\n") == 3


def _rollout_row(observations: dict | None = None) -> dict:
    row = {
        "_ng_task_index": 0,
        "_ng_rollout_index": 1,
        "agent_ref": {"name": "opencode_agent"},
        "responses_create_params": {"input": [{"role": "user", "content": "list files"}]},
        "response": {"id": "r-0-1", "output": []},
        "reward": 1.0,
    }
    if observations is not None:
        row["ng_agent_observations"] = observations
    return row


def test_session_in_a_rollout_folder_attaches_to_its_row(tmp_path):
    materialise(OPENCODE / "db_v2_fork" / "input", tmp_path / "sessions" / "0-1")
    rows = tmp_path / "rollouts.jsonl"
    rows.write_text(json.dumps(_rollout_row()) + "\n")
    summary = run_json("build", rows, tmp_path / "sessions", "-o", tmp_path / "out.jsonl")
    assert summary.exit_code == 0, summary.stderr
    (record,) = [orjson.loads(line) for line in (tmp_path / "out.jsonl").read_bytes().splitlines()]
    assert (record["task_id"], record["rollout_id"]) == ("0", "0-1")
    assert [i["invocation_id"] for i in record["invocations"]] == ["ses_main", "ses_fork"]
    assert {t["rollout_id"] for t in record["turns"]} == {"0-1"} and len(record["turns"]) == 3


def test_row_bundle_of_opencode_wins_over_its_session_files(tmp_path):
    materialise(OPENCODE / "db_v2_fork" / "input", tmp_path / "sessions" / "0-1")
    bundle = {"source": "opencode", "records": [{"kind": "agent_invocation", "invocation_id": "from_row"}], "gaps": []}
    rows = tmp_path / "rollouts.jsonl"
    rows.write_text(json.dumps(_rollout_row(bundle)) + "\n")
    records, stderr = _build(tmp_path, rows, tmp_path / "sessions")
    (record,) = records
    invocations = [i["invocation_id"] for i in record["invocations"]]
    assert invocations[0] == "from_row" and "ses_main" not in invocations and "ses_fork" not in invocations
    assert record["turns"] == []
    assert "native_superseded" in stderr


def test_a_part_type_that_is_not_text_costs_the_message_turn_not_the_session(tmp_path):
    export = json.loads((OPENCODE / "exports" / "input" / "ses_sub.json").read_text())
    export["messages"][1]["parts"][0]["type"] = ["step-start"]  # a list where the type belongs
    path = tmp_path / "ses_sub.json"
    path.write_text(json.dumps(export))
    (record,), stderr = _build(tmp_path, path)
    assert "native_load_failed" not in stderr
    assert [i["invocation_id"] for i in record["invocations"]] == ["ses_sub"]
    assert _gaps(record, "turns_unavailable") == [(None, "msg_s2")]
    assert len(record["model_calls"]) == 1  # its step-finish still counts


def test_store_gaps_go_to_one_tree_and_a_duplicate_session_is_read_once(tmp_path):
    spec = json.loads((OPENCODE / "db_v1" / "input" / "opencode.db.json").read_text())
    for row in spec["rows"]["session"]:
        row["parent_id"] = None  # two trees in one database
    folder = tmp_path / "input"
    (folder / "db").mkdir(parents=True)
    (folder / "db" / "opencode.db.json").write_text(json.dumps(spec))
    materialise(folder, tmp_path / "built")
    exports = tmp_path / "built" / "exports"
    exports.mkdir()
    shutil.copyfile(OPENCODE / "exports" / "input" / "ses_sub.json", exports / "a.json")
    shutil.copyfile(OPENCODE / "exports" / "input" / "ses_sub.json", exports / "b.json")
    records, stderr = _build(tmp_path, tmp_path / "built")
    by_id = {r["rollout_id"]: r for r in records}
    assert sorted(by_id) == ["ses_child", "ses_root", "ses_sub"]
    assert [_gaps(by_id[k], "agent_artifact_record_unowned") for k in ("ses_child", "ses_root")] == [
        [(None, "msg_06")],
        [],
    ]
    assert f"{exports / 'b.json'}: warning[opencode_session_duplicate]: session ses_sub is also in" in stderr
    (sub,) = by_id["ses_sub"]["invocations"]
    assert len(sub["conversation"]) == 2  # read from a.json only


def test_a_message_time_that_is_not_an_object_is_no_time(tmp_path):
    export = json.loads((OPENCODE / "exports" / "input" / "ses_sub.json").read_text())
    export["messages"][0]["info"]["time"] = [1]
    path = tmp_path / "ses_sub.json"
    path.write_text(json.dumps(export))
    (record,), stderr = _build(tmp_path, path)
    assert "native_load_failed" not in stderr
    assert len(record["invocations"][0]["conversation"]) == 2


def _captured(n: int, session: str, tool_call: str | None) -> dict:
    message = {"role": "assistant", "content": "" if tool_call else "done"}
    if tool_call:
        message["tool_calls"] = [{"id": tool_call, "type": "function", "function": {"name": "bash", "arguments": "{}"}}]
    return {
        "model_call_id": f"{n:032d}",
        "dialect": "chat",
        "model_ref": {"type": "responses_api_models", "name": "policy_model"},
        "client_session_id": session,
        "started_at": 1790000000.0 + n,
        "completed_at": 1790000000.5 + n,
        "latency_ms": 500.0,
        "status_code": 200,
        "error_category": None,
        "request": {"model": "qwen3", "messages": []},
        "response": {
            "object": "chat.completion",
            "id": f"chatcmpl-{n}",
            "model": "qwen3",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_call else "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        },
    }


def test_steps_of_a_captured_session_are_not_counted_twice(tmp_path):
    materialise(OPENCODE / "db_v2_fork" / "input", tmp_path / "sessions" / "0-1")
    rows = tmp_path / "rollouts.jsonl"
    rows.write_text(json.dumps(_rollout_row()) + "\n")
    store = tmp_path / "capture"
    store.mkdir()
    lines = [_captured(1, "ses_main", "call_ls"), _captured(2, "ses_main", None)]
    (store / "0-1.capture.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (record,), _ = _build(tmp_path, rows, tmp_path / "sessions", store)
    # ses_main's two steps are the two captured calls; ses_fork (captured under no session) keeps its usage
    assert [c["model_call_id"] for c in record["model_calls"]] == [f"{1:032d}", f"{2:032d}", None]
    assert _gaps(record, "model_call_usage_from_transcript") == [("ses_fork", "msg_b2#1")]
    main = record["invocations"][0]
    assert [ref["model_call_id"] for ref in main["model_calls"]] == [f"{1:032d}", f"{2:032d}"]


@pytest.mark.parametrize("scenario", ["db_v1", "db_v2_fork", "exports"])
def test_golden(tmp_path, scenario):
    """Every byte of each scenario's build, after the values above were checked by hand;
    ``NG_TRAJ_UPDATE_GOLDEN=1`` rewrites ``expected.jsonl`` for review with ``git diff``."""
    folder = materialise(OPENCODE / scenario / "input", tmp_path / "input")
    out = tmp_path / "out.jsonl"
    assert run_cli("build", folder, "-o", out).exit_code == 0
    expected = OPENCODE / scenario / "expected.jsonl"
    if os.environ.get("NG_TRAJ_UPDATE_GOLDEN") == "1":
        expected.write_bytes(out.read_bytes())
    assert out.read_bytes() == expected.read_bytes()
