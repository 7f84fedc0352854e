"""Damaged input the mutation fuzzer and newcomers found passed over without a word: each is now reported
where it stands (file, line, pointer) and costs only the value that is wrong."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from conftest import FIXTURES, build_valid, run_cli, run_json

SHAREGPT = FIXTURES / "hermes" / "sharegpt" / "input" / "trajectory_samples.jsonl"


def _records(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _of(result, code: str) -> list[tuple]:
    return [(d["severity"], d["line"], d["pointer"], d["message"]) for d in result.diagnostics if d["code"] == code]


# --- ShareGPT turns ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sender", "why"),
    [
        (["gpt"], "from is not text (['gpt']); the turn is passed over"),
        (
            "observation",
            "from 'observation' is not a ShareGPT role (system, human, gpt, tool); the turn is passed over",
        ),
    ],
    ids=["list", "unknown"],
)
def test_a_sharegpt_turn_whose_from_is_no_role_is_reported_and_counted(tmp_path, sender, why):
    lines = SHAREGPT.read_bytes().splitlines()
    value = orjson.loads(lines[1])
    value["conversations"][1]["from"] = sender
    path = tmp_path / "trajectory_samples.jsonl"
    path.write_bytes(lines[0] + b"\n" + orjson.dumps(value) + b"\n")
    result = run_json("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert _of(result, "hermes_turn_invalid") == [("warning", 2, "conversations.1", why)]
    assert result.summary["gaps_by_code"]["agent_artifact_record_unparseable"] == 1
    second = next(r for r in _records(tmp_path / "out.jsonl") if r["rollout_id"].endswith(":2"))
    gap = next(g for g in second["gaps"] if g["code"] == "agent_artifact_record_unparseable")
    assert gap["detail"] == "trajectory_samples.jsonl:2:conversations.1"
    conversation = second["invocations"][0]["conversation"]
    assert [i["role"] for i in conversation if i["type"] == "message"][:2] == ["system", "assistant"]


def test_a_sharegpt_turn_without_from_costs_only_that_turn(tmp_path):
    lines = SHAREGPT.read_bytes().splitlines()
    value = orjson.loads(lines[1])
    del value["conversations"][1]["from"]
    path = tmp_path / "trajectory_samples.jsonl"
    path.write_bytes(orjson.dumps(value) + b"\n" + lines[0] + b"\n")
    result = run_json("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert not _of(result, "hermes_record_invalid")
    why = "a turn without from; the turn is passed over"
    assert _of(result, "hermes_turn_invalid") == [("warning", 1, "conversations.1", why)]
    first = next(r for r in _records(tmp_path / "out.jsonl") if r["rollout_id"].endswith(":1"))
    conversation = first["invocations"][0]["conversation"]
    assert [i["role"] for i in conversation if i["type"] == "message"][:2] == ["system", "assistant"]


def test_a_sharegpt_line_with_no_turn_that_can_be_read_is_still_rejected(tmp_path):
    lines = SHAREGPT.read_bytes().splitlines()
    bad = {"conversations": [{"value": "hi"}, {"from": ["gpt"], "value": "x"}]}
    path = tmp_path / "trajectory_samples.jsonl"
    path.write_bytes(lines[0] + b"\n" + orjson.dumps(bad) + b"\n")
    result = run_json("build", path, "-o", tmp_path / "out.jsonl")
    assert [(d["severity"], d["line"]) for d in result.diagnostics if d["code"] == "hermes_record_invalid"] == [
        ("error", 2)
    ]


# --- rollout rows --------------------------------------------------------------------------------


ROW = {"_ng_task_index": 3, "_ng_rollout_index": 0, "reward": 1.0, "response": {"output": []}}


def _rows(tmp_path: Path, *rows: dict) -> Path:
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    return path


def test_a_row_with_neither_rollout_nor_task_input_keys_is_reported_as_such(tmp_path):
    path = _rows(tmp_path, {}, {"note": "x"}, ROW, {"responses_create_params": {"input": "hi"}})
    result = run_json("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0
    unrecognised = _of(result, "rollout_row_unrecognised")
    assert [(severity, line) for severity, line, _, _ in unrecognised] == [("warning", 1), ("warning", 2)]
    assert unrecognised[0][3].startswith("not a rollout row nor a task input (none of response, reward,")
    assert unrecognised[0][3].endswith("; no keys); skipped")
    assert unrecognised[1][3].endswith("; its keys: 'note'); skipped")
    assert [d["message"] for d in result.diagnostics if d["code"] == "task_input_rows"] == [
        "1 row is a task input (no response, reward or attachment): not rollouts, not built"
    ]
    assert result.summary["task_input_rows"] == 1 and result.summary["lines_skipped"] == 2
    levels = [d["severity"] for d in result.diagnostics]
    counts = result.summary["diagnostics"]
    assert [counts[k] for k in ("errors", "warnings", "infos")] == [
        levels.count(k) for k in ("error", "warning", "info")
    ]


@pytest.mark.parametrize(
    ("reward", "why"),
    [
        ("1.0", "reward is JSON string ('1.0'), expected a number; not read, the rollout has no reward"),
        (True, "reward is JSON boolean (True), expected a number; not read, the rollout has no reward"),
        ([1], "reward is JSON array ([1]), expected a number; not read, the rollout has no reward"),
    ],
    ids=["string", "boolean", "array"],
)
def test_a_reward_that_is_not_a_number_is_reported_and_the_row_kept(tmp_path, reward, why):
    path = _rows(tmp_path, {**ROW, "_ng_task_index": 1}, {**ROW, "reward": reward}, {**ROW, "_ng_task_index": 4})
    result = run_json("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0
    assert _of(result, "row_value_invalid") == [("warning", 2, "reward", why)]
    assert [r["rollout_id"] for r in _records(tmp_path / "out.jsonl")] == ["1-0", "3-0", "4-0"]
    attached = tmp_path / "attached.jsonl"
    assert run_cli("build", path, "--attach", "-o", attached, "-q").exit_code == 0
    assert [row["reward"] for row in _records(attached)] == [1.0, reward, 1.0]  # kept as written


@pytest.mark.parametrize(
    ("key", "value", "kind"),
    [
        ("ng_trajectory", [1, 2], "array"),
        ("ng_model_call_capture", "calls", "string"),
        ("ng_agent_observations", 7, "number"),
        ("responses_create_params", True, "boolean"),
        ("response", ["x"], "array"),
        ("raw_rollout", "run-1", "string"),
    ],
)
def test_a_known_row_key_holding_no_object_is_reported(tmp_path, key, value, kind):
    path = _rows(tmp_path, {**ROW, "_ng_task_index": 1}, {**ROW, key: value})
    result = run_json("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    message = f"{key} is JSON {kind}, expected an object; not read"
    assert _of(result, "row_value_invalid") == [("warning", 2, key, message)]
    assert len(_records(tmp_path / "out.jsonl")) == 2


def test_known_row_keys_that_are_null_or_objects_are_not_reported(tmp_path):
    path = _rows(tmp_path, {**ROW, "ng_trajectory": None, "ng_model_call_capture": None, "raw_rollout": {}})
    result = run_json("build", path, "-o", tmp_path / "out.jsonl")
    assert _of(result, "row_value_invalid") == []


# --- row ids -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (b"1e30", "1e+30"),
        (b"100000000000000000000000", "1e+23"),
        (b"2.5", "2.5"),
        (b"1e3", "1000.0"),
        (b"-1", "-1"),
        (b"true", "true"),
        (b"[1]", "[1]"),
        (b"{}", "{}"),
    ],
    ids=["exponent", "huge", "float", "exponent-integral", "negative", "boolean", "list", "object"],
)
@pytest.mark.parametrize("key", ["_ng_task_index", "_ng_rollout_index"])
def test_a_row_index_that_is_no_non_negative_integer_is_rejected_per_row(tmp_path, raw, shown, key):
    """A present index that is no non-negative integer (nor text) is malformed, reported as such with
    its value as the file wrote it in JSON, not missing; the row is named by file and line."""
    good = orjson.dumps({**ROW, "_ng_task_index": 1})
    bad = orjson.dumps({**ROW, key: "@@"}).replace(b'"@@"', raw)
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(good + b"\n" + bad + b"\n")
    result = run_json("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    message = f"{key} {shown} is not a non-negative integer; identified as rollouts.jsonl:2"
    assert _of(result, "rollout_identity_invalid") == [("warning", 2, None, message)]
    assert _of(result, "rollout_identity_unavailable") == []
    records = _records(tmp_path / "out.jsonl")
    ids = sorted((r["task_id"], r["rollout_id"]) for r in records)
    assert ids == [("1", "1-0"), ("3" if key == "_ng_rollout_index" else "unknown", "rollouts.jsonl:2")]
    gaps = [g for r in records for g in r["gaps"] if g["code"] == "rollout_identity_unavailable"]
    assert [g["detail"] for g in gaps] == ["invalid_identity_keys"]


@pytest.mark.parametrize("key", ["_ng_task_index", "_ng_rollout_index"])
def test_a_null_row_index_is_a_missing_one(tmp_path, key):
    """JSON null is no value: the row has no identity keys, reported as without them (not malformed)."""
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(orjson.dumps({**ROW, key: None}) + b"\n")
    result = run_json("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    message = "no _ng_rollout_id and no task/rollout indices; identified as rollouts.jsonl:1"
    assert _of(result, "rollout_identity_unavailable") == [("warning", 1, None, message)]
    assert _of(result, "rollout_identity_invalid") == []
    [record] = _records(tmp_path / "out.jsonl")
    assert [g["detail"] for g in record["gaps"] if g["code"] == "rollout_identity_unavailable"] == ["no_identity_keys"]


def test_row_indexes_that_are_non_negative_integers_make_the_id(tmp_path):
    path = _rows(tmp_path, {**ROW, "_ng_task_index": 0}, {**ROW, "_ng_task_index": 2**63, "_ng_rollout_index": 7})
    [first, second] = build_valid(tmp_path, path)
    assert (first["task_id"], first["rollout_id"]) == ("0", "0-0")
    assert (second["task_id"], second["rollout_id"]) == (str(2**63), f"{2**63}-7")


# --- an empty folder -----------------------------------------------------------------------------


def test_building_an_empty_folder_names_it(tmp_path):
    empty = tmp_path / "nothing here"
    empty.mkdir()
    result = run_cli("build", f"{empty}/", "-o", tmp_path / "out.jsonl")
    assert result.exit_code != 0
    assert str(empty) in result.stderr
    assert not (tmp_path / "out.jsonl").exists()


# --- Hermes values deeper than orjson writes ----------------------------------------------------

GATEWAY = FIXTURES / "hermes" / "forms" / "input" / "sessions" / "20260402_090000_gate01.jsonl"


def _nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


def _sharegpt_line(depth: int) -> bytes:
    call = '{"name": "terminal", "arguments": {"command": ' + _nested(depth) + "}}"
    response = '{"tool_call_id": "call_1", "name": "terminal", "content": ' + _nested(depth) + "}"
    turns = [
        {"from": "human", "value": "hi"},
        {"from": "gpt", "value": f"<think>\n</think>\nok\n<tool_call>\n{call}\n</tool_call>"},
        {"from": "tool", "value": f"<tool_response>\n{response}\n</tool_response>"},
        {"from": "gpt", "value": "<think>\n</think>\ndone"},
    ]
    return orjson.dumps({"conversations": turns, "timestamp": "2026-04-13T21:38:56", "completed": True})


@pytest.mark.parametrize("depth", [300, 1000])
def test_a_sharegpt_tool_call_nested_deeper_than_orjson_writes_is_kept(tmp_path, depth):
    path = tmp_path / "trajectory_samples.jsonl"
    path.write_bytes(_sharegpt_line(1) + b"\n" + _sharegpt_line(depth) + b"\n")
    result = run_json("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert [d["code"] for d in result.diagnostics if d["severity"] != "info"] == []
    records = {r["rollout_id"]: r for r in _records(tmp_path / "out.jsonl")}
    [tool] = records["trajectory_samples.jsonl:2"]["tool_calls"]
    assert tool["tool_call_id"] == "call_1"
    items = records["trajectory_samples.jsonl:2"]["invocations"][0]["conversation"]
    [call] = [item for item in items if item["type"] == "function_call"]
    assert call["arguments"] == '{"command":' + _nested(depth) + "}"
    [output] = [item for item in items if item["type"] == "function_call_output"]
    assert output["output"] == _nested(depth)


def test_a_sharegpt_line_deeper_than_the_reader_accepts_costs_that_line(tmp_path):
    path = tmp_path / "trajectory_samples.jsonl"
    deep = b'{"conversations": [{"from": "human", "value": "x"}], "extra": ' + _nested(1030).encode() + b"}"
    path.write_bytes(deep + b"\n" + _sharegpt_line(1) + b"\n")
    result = run_json("build", path, "-o", tmp_path / "out.jsonl")
    assert [(d["severity"], d["code"], d["line"]) for d in result.diagnostics if d["severity"] == "error"] == [
        ("error", "invalid_json", 1)
    ]
    assert [r["rollout_id"] for r in _records(tmp_path / "out.jsonl")] == ["trajectory_samples.jsonl:2"]


def test_gateway_tool_call_arguments_nested_deeper_than_orjson_writes_are_kept(tmp_path):
    lines = GATEWAY.read_bytes().splitlines()[:4]
    message = orjson.loads(lines[2])
    message["tool_calls"][0]["function"]["arguments"] = {"pattern": "@@"}
    lines[2] = orjson.dumps(message).replace(b'"@@"', _nested(600).encode())
    path = tmp_path / "sessions" / GATEWAY.name
    path.parent.mkdir()
    path.write_bytes(b"\n".join([*lines, lines[2]]) + b"\n")  # the deep message written twice, too
    result = run_json("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert [d["code"] for d in result.diagnostics if d["severity"] == "warning"] == ["hermes_message_repeated"]
    [record] = _records(tmp_path / "out.jsonl")
    [call] = [i for i in record["invocations"][0]["conversation"] if i["type"] == "function_call"]
    assert call["arguments"] == '{"pattern":' + _nested(600) + "}"
    assert [tool["tool_call_id"] for tool in record["tool_calls"]] == ["call_g1"]


# --- values of a type their reader does not read -------------------------------------------------

SNAPSHOT = FIXTURES / "hermes" / "forms" / "input" / "sessions" / "session_20260403_070000_snaps1.json"


def test_a_hermes_snapshot_message_or_part_that_is_not_read_is_reported(tmp_path):
    value = orjson.loads(SNAPSHOT.read_bytes())
    value["system_prompt"] = 7
    value["messages"] = [
        {"role": "user", "content": [{"type": "text", "text": "what day is it?"}, 5, {"type": "audio"}]},
        "not a message",
        *value["messages"][1:],
    ]
    path = tmp_path / "sessions" / SNAPSHOT.name
    path.parent.mkdir()
    path.write_bytes(orjson.dumps(value, option=orjson.OPT_INDENT_2))
    result = run_json("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert _of(result, "hermes_message_invalid") == [
        ("warning", None, "system_prompt", "system_prompt is not text (7); the session has no system prompt"),
        ("warning", None, "messages.0.content.1", "a content part that is not an object (5); passed over"),
        (
            "warning",
            None,
            "messages.0.content.2",
            "a content part with neither text nor an image ('audio'); passed over",
        ),
        ("warning", None, "messages.1", "a message that is not an object (str); passed over"),
    ]
    [record] = _records(tmp_path / "out.jsonl")
    texts = [i["content"] for i in record["invocations"][0]["conversation"] if i.get("role") == "user"]
    assert texts == ["what day is it?"]


def test_a_gateway_content_part_that_is_not_read_is_reported(tmp_path):
    lines = GATEWAY.read_bytes().splitlines()[:4]
    message = orjson.loads(lines[1])
    message["content"] = [{"type": "text", "text": "find notes.md"}, [1]]
    lines[1] = orjson.dumps(message)
    path = tmp_path / "sessions" / GATEWAY.name
    path.parent.mkdir()
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = run_json("build", path, "-o", tmp_path / "out.jsonl")
    assert _of(result, "hermes_message_invalid") == [
        ("warning", 2, "content.1", "a content part that is not an object ([1]); passed over")
    ]


PI_V3 = FIXTURES / "pi" / "same_v3.jsonl"


@pytest.mark.parametrize(
    ("block", "why"),
    [
        (5, "content block 0 is not an object (int); passed over"),
        ({"type": "text", "text": ["x"]}, "content block 0: text is not text (['x']); passed over"),
        ({"type": 3, "text": "x"}, "content block 0 has a type that is not text (3); passed over"),
        ({"type": "text", "text": None}, "content block 0: text is not text (None); passed over"),
    ],
    ids=["not_object", "text_not_text", "type_not_text", "text_null"],
)
def test_a_pi_content_block_that_is_not_read_is_reported(tmp_path, block, why):
    lines = PI_V3.read_bytes().splitlines()
    n = next(i for i, line in enumerate(lines) if b'"role":"assistant"' in line or b'"role": "assistant"' in line)
    entry = orjson.loads(lines[n])
    entry["message"]["content"] = [block, *entry["message"]["content"]]
    lines[n] = orjson.dumps(entry)
    path = tmp_path / PI_V3.name
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = run_json("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert _of(result, "pi_entry_invalid") == [("warning", n + 1, None, why)]


def test_rollout_ids_whose_digit_runs_fall_differently_sort_without_an_internal_error(tmp_path):
    """Found by the long fuzzer: an empty ``_ng_rollout_index`` gives the id ``0-``; sorting it beside
    ``0-1`` compared the tie-breaking text with a number (``TypeError``, exit 2, no output)."""
    path = _rows(
        tmp_path,
        {**ROW, "_ng_task_index": 0, "_ng_rollout_index": 1},
        {**ROW, "_ng_task_index": 0, "_ng_rollout_index": ""},
    )
    records = build_valid(tmp_path, path)
    assert [r["rollout_id"] for r in records] == ["0-", "0-1"]


@pytest.mark.parametrize("damaged", [7, ["x"], None], ids=["number", "list", "null"])
def test_a_hermes_snapshot_whose_session_id_is_not_text_is_named_after_its_file(tmp_path, damaged):
    (tmp_path / "plain").mkdir()
    expected = build_valid(tmp_path / "plain", SNAPSHOT)
    value = orjson.loads(SNAPSHOT.read_bytes())
    value["session_id"] = damaged
    path = tmp_path / "sessions" / SNAPSHOT.name
    path.parent.mkdir()
    path.write_bytes(orjson.dumps(value, option=orjson.OPT_INDENT_2))
    result = run_json("build", tmp_path / "sessions", "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    why = f"session_id is not text ({damaged!r}); the session is named after its file"
    assert _of(result, "hermes_session_id_invalid") == [("warning", None, "session_id", why)]
    assert _records(tmp_path / "out.jsonl") == expected


def test_row_items_left_out_of_the_fallback_conversation_are_reported(tmp_path):
    """Found by the long fuzzer once content that is not text was no longer a known loss."""
    params = {"input": [{"type": "message", "role": "user", "content": 5}, {"role": "user", "content": "hi"}]}
    path = _rows(tmp_path, {**ROW, "responses_create_params": params})
    result = run_json("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    message = (
        "rollout 3-0: 1 item(s) of the row's request input and response output are not conversation items; "
        "left out of its conversation"
    )
    assert _of(result, "rollout_item_invalid") == [("warning", 1, None, message)]
    [record] = _records(tmp_path / "out.jsonl")
    assert [i["content"] for i in record["invocations"][0]["conversation"]] == ["hi"]


def test_a_state_db_parent_session_id_that_is_not_text_is_a_session_without_a_parent(tmp_path):
    """Found by the long fuzzer: a byte flipped in a state.db left a value that is not text in
    parent_session_id (SQLite keeps any type in any column); its tree failed
    to load (native_load_failed, a gap detail that is not text) and every session in it was left out."""
    import json

    from conftest import build_db

    export = json.loads((FIXTURES / "hermes" / "db_v6_lineage" / "input" / "state.db.json").read_text())
    export["ddl"]["sessions"] = export["ddl"]["sessions"].replace("parent_session_id TEXT,", "parent_session_id,")
    child = next(row for row in export["sessions"] if row["id"] == "20260325_090010_child1")
    child["parent_session_id"] = 1785585600  # kept as a number: the column has no type here
    db = build_db(export, tmp_path / "state.db")
    result = run_json("build", db, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert "native_load_failed" not in result.summary["diagnostics"]["by_code"]
    message = (
        "session 20260325_090010_child1: parent_session_id is not text (1785585600); read as a session without a parent"
    )
    assert _of(result, "hermes_column_invalid") == [("warning", None, None, message)]
    assert "20260325_090010_child1" in {r["rollout_id"] for r in _records(tmp_path / "out.jsonl")}


def test_attach_keeps_a_captured_tool_call_whose_arguments_nest_deeper_than_pydantic_writes(tmp_path):
    """Found by the long fuzzer: ``--attach`` wrote a captured call's ``tool_calls`` through pydantic,
    whose dump stops at about 255 levels; a call whose ``arguments`` nest 1,000 deep stopped the build
    with an internal error (exit 2, no output)."""
    import shutil

    source = FIXTURES / "hermes" / "rollout_capture_db" / "input"
    import json

    from conftest import build_db
    from ng_traj.contract.capture import PAYLOAD_KEYS, ModelCallRecord

    shutil.copytree(source, tmp_path / "in")
    export = tmp_path / "in" / "0-0" / "state.db.json"
    build_db(json.loads(export.read_text()), export.with_suffix(""))
    export.unlink()
    capture = tmp_path / "in" / "capture" / "0-0.capture.jsonl"
    lines = capture.read_bytes().splitlines()
    call = orjson.loads(lines[0])
    call["response"]["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = "@@"
    deep = '{"a":' * 1000 + "1" + "}" * 1000
    lines[0] = orjson.dumps(call).replace(b'"@@"', deep.encode())
    capture.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "out.jsonl"
    result = run_cli("build", *sorted((tmp_path / "in").iterdir()), "-o", out, "--attach")
    assert result.exit_code == 0, result.stderr
    [row] = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    [first, *_] = row["ng_model_call_capture"]["calls"]
    value = first["tool_calls"][0]["arguments"]
    for _ in range(1000):  # walked, not compared: == recurses once per level
        value = value["a"]
    assert value == 1
    assert list(first) == [key for key in ModelCallRecord.model_fields if key not in PAYLOAD_KEYS]
