"""Damaged inputs found by mutating fixtures and samples: each costs the damaged part, never the build.

One test per failure shape, each on a small input made here from the project's fixtures.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from conftest import FIXTURES, run_cli, run_json
from ng_traj.diagnostics import Diagnostic, DiagnosticSink
from ng_traj.io.lines import BOM
from ng_traj.sources.native import READERS, NativeUnit, index_units, unit_response_ids

LEGACY_ROWS = FIXTURES / "build" / "legacy_attachments" / "input" / "rollouts.jsonl"


def _records(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _calls(path: Path) -> dict[str, tuple[int, int]]:
    return {r["rollout_id"]: (len(r["model_calls"]), len(r["tool_calls"])) for r in _records(path)}


def test_bom_before_the_first_row_keeps_its_attachments(tmp_path):
    plain, marked = tmp_path / "plain.jsonl", tmp_path / "bom" / "rollouts.jsonl"
    marked.parent.mkdir()
    marked.write_bytes(BOM + LEGACY_ROWS.read_bytes())
    assert run_cli("build", LEGACY_ROWS, "-o", plain).exit_code == 0
    result = run_cli("build", marked, "-o", tmp_path / "marked.jsonl")
    assert result.exit_code == 0, result.stderr
    expected = _calls(plain)
    assert expected["0-0"][0] > 0
    assert _calls(tmp_path / "marked.jsonl") == expected


PI_V1 = FIXTURES / "pi" / "same_v1.jsonl"
DEPTH = 1000
"""Nesting the line reader accepts (orjson: 1,024 levels) but ``repr``, ``str`` and recursive walks do not."""


DEEP = "[" * DEPTH + "]" * DEPTH
"""JSON text of an array nested :data:`DEPTH` levels (too deep for the standard library to write)."""


def _write(path: Path, records: list) -> Path:
    """JSONL of ``records``, each ``"DEEP"`` string written as :data:`DEEP`."""
    path.write_bytes(b"".join(orjson.dumps(record).replace(b'"DEEP"', DEEP.encode()) + b"\n" for record in records))
    return path


def _pi_v1_with(tmp_path: Path, line: int, update) -> Path:
    """``same_v1.jsonl`` with ``update`` applied to the entry of ``line`` (1-based)."""
    entries = [orjson.loads(raw) for raw in PI_V1.read_bytes().splitlines()]
    update(entries[line - 1])
    return _write(tmp_path / "session.jsonl", entries)


def test_a_deep_entry_type_is_one_warning_not_an_internal_error(tmp_path):
    path = _pi_v1_with(tmp_path, 3, lambda entry: entry.update(type="DEEP"))
    result = run_cli("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    [line] = [text for text in result.stderr.splitlines() if "pi_entry_invalid" in text]
    assert line.startswith(f"{path}:3: warning[pi_entry_invalid]: type is not text ([[[[[")
    assert len(line) < len(str(path)) + 300  # Python 3.11 cannot repr it at all, 3.12 shows a prefix


def test_a_deep_message_api_costs_the_dialect_not_the_session(tmp_path):
    path = _pi_v1_with(tmp_path, 3, lambda entry: entry["message"].update(api="DEEP"))
    result = run_cli("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert "native_load_failed" not in result.stderr
    [record] = _records(tmp_path / "out.jsonl")
    assert (len(record["model_calls"]), len(record["tool_calls"])) == (2, 1)


def test_deep_tool_call_arguments_are_written_as_the_standard_library_writes_them(tmp_path):
    shallow = {"command": "ls | wc -l", "env": {"LANG": "é"}}
    for arguments, expected in (("DEEP", DEEP.replace("][", "], [")), (shallow, json.dumps(shallow))):
        path = _pi_v1_with(
            tmp_path, 3, lambda entry, value=arguments: entry["message"]["content"][0].update(arguments=value)
        )
        result = run_cli("build", path, "-o", tmp_path / "out.jsonl")
        assert result.exit_code == 0, result.stderr
        [record] = _records(tmp_path / "out.jsonl")
        items = record["invocations"][0]["conversation"]
        [call] = [item for item in items if item["type"] == "function_call"]
        assert call["arguments"] == expected


def test_a_diagnostic_quotes_a_bounded_prefix_of_a_huge_value(tmp_path):
    huge = list(range(300_000))
    path = _pi_v1_with(tmp_path, 3, lambda entry: entry.update(type=huge))
    result = run_cli("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    [line] = [text for text in result.stderr.splitlines() if "pi_entry_invalid" in text]
    shown = repr(huge)
    assert f"({shown[:200]}… ({len(shown)} bytes)); passed over" in line
    assert len(line) < 400


def _deep_row(tmp_path: Path) -> Path:
    rows = [orjson.loads(raw) for raw in LEGACY_ROWS.read_bytes().splitlines()]
    rows[0]["metadata"] = {"api_key": "sk-live-0123456789abcdefghij", "deep": "DEEP"}
    (tmp_path / "rows").mkdir()
    return _write(tmp_path / "rows" / "rollouts.jsonl", rows)


def _depth(value) -> int:
    depth = 0
    while isinstance(value, list):
        value, depth = (value[0] if value else None), depth + 1
    return depth


def test_attach_writes_a_row_holding_a_deep_value(tmp_path):
    path = _deep_row(tmp_path)
    out = tmp_path / "out.jsonl"
    result = run_cli("build", path, "-o", out, "--attach")
    assert result.exit_code == 0, result.stderr
    first = orjson.loads(out.read_bytes().splitlines()[0])
    assert _depth(first["metadata"]["deep"]) == DEPTH
    assert first["metadata"]["api_key"] == "sk-live-0123456789abcdefghij"
    assert first["ng_trajectory"]["rollout_id"] == "0-0"


def test_redacted_attach_writes_a_row_holding_a_deep_value(tmp_path):
    path = _deep_row(tmp_path)
    out = tmp_path / "out.jsonl"
    result = run_cli("build", path, "-o", out, "--attach", "--redact")
    assert result.exit_code == 0, result.stderr
    first = orjson.loads(out.read_bytes().splitlines()[0])
    assert _depth(first["metadata"]["deep"]) == DEPTH
    assert first["metadata"]["api_key"] == "[REDACTED]"


NATIVE_E2E = FIXTURES / "native_e2e"


def _deep_capture(tmp_path: Path) -> Path:
    """The native run with a captured response holding a value :data:`DEPTH` levels deep (and a key to mask)."""
    folder = tmp_path / "run"
    shutil.copytree(NATIVE_E2E, folder)
    store = folder / "capture" / "0-1.capture.jsonl"
    calls = [orjson.loads(raw) for raw in store.read_bytes().splitlines()]
    calls[0]["response"]["deep"] = "DEEP"
    calls[0]["request"]["api_key"] = "sk-live-0123456789abcdefghij"
    _write(store, calls)
    return folder


def _deep_capture_build(tmp_path: Path, *flags: str) -> tuple[dict, list[str]]:
    folder, out = _deep_capture(tmp_path), tmp_path / "out.jsonl"
    result = run_json("build", *sorted(folder.iterdir()), "-o", out, *flags)
    assert result.exit_code == 0, result.stderr
    lines = [orjson.loads(raw) for raw in out.read_bytes().splitlines()]
    records = {r.get("ng_trajectory", r)["rollout_id"]: r.get("ng_trajectory", r) for r in lines}
    return records["0-1"], [d["code"] for d in result.diagnostics]


def test_a_captured_payload_nested_1000_deep_is_written_as_text_not_dropped(tmp_path):
    """Found by the fuzzer: the JSON-text fallback itself hit the recursion limit, so the whole rollout
    became the minimal failed-projection record (its invocation and calls lost)."""
    record, codes = _deep_capture_build(tmp_path)
    assert codes == ["payload_as_text"]
    assert (len(record["invocations"]), len(record["model_calls"]), len(record["tool_calls"])) == (1, 2, 1)
    response = record["model_calls"][0]["response"]
    assert _depth(orjson.loads(response)["deep"]) == DEPTH


def test_redacting_a_captured_payload_nested_1000_deep_masks_it_and_keeps_the_build(tmp_path):
    """Found by the fuzzer: ``--redact`` dumped the record through pydantic, which stops at ~255
    levels: an internal error and no output at all."""
    record, codes = _deep_capture_build(tmp_path, "--attach", "--redact")
    assert codes == ["payload_as_text"]
    assert len(record["model_calls"]) == 2
    assert orjson.loads(record["model_calls"][0]["request"])["api_key"] == "[REDACTED]"
    assert _depth(orjson.loads(record["model_calls"][0]["response"])["deep"]) == DEPTH


SHAREGPT = FIXTURES / "hermes" / "sharegpt" / "input" / "trajectory_samples.jsonl"


def test_a_sharegpt_turn_whose_from_is_not_text_costs_that_turn(tmp_path):
    lines = SHAREGPT.read_bytes().splitlines()
    damaged = orjson.loads(lines[-1])
    damaged["conversations"][1]["from"] = ["human"]
    path = tmp_path / "trajectory_samples.jsonl"
    path.write_bytes(b"\n".join([*lines[:-1], orjson.dumps(damaged)]) + b"\n")
    result = run_cli("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert "native_load_failed" not in result.stderr
    last = _records(tmp_path / "out.jsonl")[-1]
    assert last["invocations"][0]["conversation"]


def test_a_line_deeper_than_the_reader_allows_is_skipped_on_every_python(tmp_path):
    """Python 3.12+ parse such a line (3.11 does not); the surrogate repair must not recurse through it."""
    deep = "[" * 1100 + "]" * 1100
    path = tmp_path / "rollouts.jsonl"
    path.write_text(f'{{"note": "\\ud800", "deep": {deep}}}\n' + LEGACY_ROWS.read_text())
    result = run_cli("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert f"{path}:1: error[invalid_json]" in result.stderr
    assert "internal error" not in result.stderr
    assert len(_records(tmp_path / "out.jsonl")) == len(LEGACY_ROWS.read_bytes().splitlines())


class _FragileReader:
    """A reader whose own code raises on one file (``bad.jsonl``), as a reader meeting a shape it does
    not expect does; every other file is one unit."""

    name = "fragile"
    source = "fragile"

    def sniff(self, sniffed):
        return None

    def index(self, files, sink):
        sink.add(Diagnostic("info", "session_unattributed", "indexed", path=str(files[0])))
        if any(path.name == "bad.jsonl" for path in files):
            raise KeyError("kind")
        return [NativeUnit(self.name, path.stem, (str(path),)) for path in files]

    def load(self, unit, sink):
        raise AssertionError("not loaded here")


def test_a_reader_failing_on_one_file_while_indexing_costs_that_file(tmp_path):
    READERS["fragile"] = _FragileReader()
    try:
        files = [tmp_path / name for name in ("a.jsonl", "bad.jsonl", "c.jsonl")]
        seen: list[Diagnostic] = []
        units = index_units("fragile", files, DiagnosticSink(seen.append))
    finally:
        del READERS["fragile"]
    assert [unit.key for unit in units] == ["a", "c"]
    assert [(d.code, d.path, d.message) for d in seen] == [
        (
            "native_load_failed",
            str(files[1]),
            "could not be indexed (KeyError: 'kind'); the sessions it holds are left out",
        ),
        ("session_unattributed", str(files[0]), "indexed"),
    ]


class _StreamingReader(_FragileReader):
    """The fragile reader making its units one at a time: it raises on ``bad.jsonl`` after the units
    of the files before it were made (and taken)."""

    name = "streaming"

    def index(self, files, sink):
        sink.add(Diagnostic("info", "session_unattributed", "indexed", path=str(files[0])))
        for path in files:
            if path.name == "bad.jsonl":
                raise KeyError("kind")
            yield NativeUnit(self.name, path.stem, (str(path),))


def test_a_streaming_reader_failing_midway_costs_that_file_and_each_unit_is_taken_once(tmp_path):
    READERS["streaming"] = _StreamingReader()
    made: list[str] = []

    def each(unit):
        made.append(unit.key)
        return unit.key.upper()

    try:
        files = [tmp_path / name for name in ("a.jsonl", "bad.jsonl", "c.jsonl")]
        seen: list[Diagnostic] = []
        results = index_units("streaming", files, DiagnosticSink(seen.append), each)
        with pytest.raises(ZeroDivisionError):  # what each raises is the caller's, not the reader's failure
            index_units("streaming", files[:1], DiagnosticSink(), lambda unit: 1 / 0)
    finally:
        del READERS["streaming"]
    assert results == ["A", "C"]  # the failed attempt's results are dropped, not returned twice
    assert made == ["a", "a", "c"]
    assert [(d.code, d.path) for d in seen] == [
        ("native_load_failed", str(files[1])),
        ("session_unattributed", str(files[0])),
    ]


class _LazyReader(_FragileReader):
    """A reader leaving each unit's response ids to its ``scan_ids``, which raise for ``bad.jsonl``."""

    name = "lazy"

    def index(self, files, sink):
        for path in files:
            yield NativeUnit(self.name, path.stem, (str(path),), scan_ids=lambda path=path: _scan(path))


def _scan(path):
    if path.name == "bad.jsonl":
        raise KeyError("kind")
    return (f"resp_{path.stem}",)


def test_a_unit_whose_ids_cannot_be_scanned_when_asked_costs_its_file_as_an_indexing_failure(tmp_path):
    READERS["lazy"] = _LazyReader()
    try:
        files = [tmp_path / name for name in ("a.jsonl", "bad.jsonl", "c.jsonl")]
        seen: list[Diagnostic] = []
        asked = index_units("lazy", files, DiagnosticSink(seen.append), unit_response_ids)
        unasked = index_units("lazy", files, DiagnosticSink(), lambda unit: unit.key)
    finally:
        del READERS["lazy"]
    assert asked == [("resp_a",), ("resp_c",)]
    assert [(d.code, d.path, d.message) for d in seen] == [
        (
            "native_load_failed",
            str(files[1]),
            "could not be indexed (KeyError: 'kind'); the sessions it holds are left out",
        )
    ]
    assert unasked == ["a", "bad", "c"]  # ids nobody asks are never read


def test_a_symlink_loop_under_a_manifest_path_is_one_unreadable_file(tmp_path):
    folder = tmp_path / "sessions" / "0-0"
    folder.mkdir(parents=True)
    (folder / "a.jsonl").symlink_to(folder / "b.jsonl")
    (folder / "b.jsonl").symlink_to(folder / "a.jsonl")
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text('{"rollout_id": "0-0", "path": "sessions/0-0"}\n')
    result = run_cli("build", LEGACY_ROWS, tmp_path / "sessions", "--manifest", manifest, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 1, result.stderr  # the sessions folder gave nothing; the rows were built
    assert f"{folder / 'a.jsonl'}: error[unreadable_file]: Too many levels of symbolic links" in result.stderr
    assert len(_records(tmp_path / "out.jsonl")) == len(LEGACY_ROWS.read_bytes().splitlines())


PINCHBENCH = FIXTURES / "openclaw" / "pinchbench"
PINCH_STORE = "task_sanity_run-7/openclaw_sessions/agents/main/sessions/sessions.json"


def _build_bounded(folder: Path) -> subprocess.CompletedProcess:
    """``ng-traj build`` of a PinchBench layout in a child limited to 60 s and 2 GiB of memory."""
    limit = 2 << 30

    def bounded() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    command = [sys.executable, "-m", "ng_traj", "build", "rollouts.jsonl", "task_sanity_run-7", "-o", "out.jsonl"]
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=60, preexec_fn=bounded)


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_a_pinchbench_store_that_is_not_a_regular_file_is_never_opened(tmp_path, kind):
    folder = tmp_path / "run"
    shutil.copytree(PINCHBENCH, folder)
    store = folder / PINCH_STORE
    store.unlink()
    if kind == "fifo":
        os.mkfifo(store)
    else:
        store.symlink_to("/dev/zero")
    result = _build_bounded(folder)
    assert result.returncode == 0, result.stderr
    assert f"{PINCH_STORE}: warning[input_unclaimed]: not a regular file" in result.stderr
    [record] = _records(folder / "out.jsonl")
    assert record["invocations"]


PI_V3 = FIXTURES / "pi" / "same_v3.jsonl"


def _observed(path: Path, out: Path) -> tuple:
    """What a build reads from one session: conversation items, model-call count, tool calls; and stderr."""
    result = run_cli("build", path, "-o", out)
    assert result.exit_code == 0, result.stderr
    [record] = _records(out)
    conversation = record["invocations"][0]["conversation"]
    return (conversation, len(record["model_calls"]), record["tool_calls"]), result.stderr


def _with_lines(tmp_path: Path, source: Path, edit) -> Path:
    lines = source.read_bytes().splitlines()
    path = tmp_path / "damaged" / source.name
    path.parent.mkdir()
    path.write_bytes(b"\n".join(edit(lines)) + b"\n")
    return path


def test_a_copy_of_an_earlier_entry_as_the_last_line_does_not_take_over_the_path(tmp_path):
    expected, _ = _observed(PI_V3, tmp_path / "plain.jsonl")
    path = _with_lines(tmp_path, PI_V3, lambda lines: [*lines, lines[2]])
    observed, stderr = _observed(path, tmp_path / "out.jsonl")
    assert observed == expected
    assert expected[2] and len(expected[0]) > 2
    assert f"{path}:7: warning[pi_entry_repeated]: a copy of entry a2 (line 3); read as one entry" in stderr


def test_a_stray_object_as_the_last_line_does_not_wipe_the_conversation(tmp_path):
    expected, _ = _observed(PI_V3, tmp_path / "plain.jsonl")
    path = _with_lines(tmp_path, PI_V3, lambda lines: [*lines, b'{"foo": 1}'])
    observed, stderr = _observed(path, tmp_path / "out.jsonl")
    assert observed == expected
    assert f"{path}:7: warning[pi_entry_invalid]: type is not text (None); passed over" in stderr


def _without_line_ids(observed: tuple) -> tuple:
    conversation, calls, tools = observed
    return [{k: v for k, v in item.items() if k != "id"} for item in conversation], calls, tools


def test_a_repeated_assistant_line_without_ids_is_one_model_call(tmp_path):
    expected, _ = _observed(PI_V1, tmp_path / "plain.jsonl")
    path = _with_lines(tmp_path, PI_V1, lambda lines: [*lines[:3], lines[2], *lines[3:]])
    observed, stderr = _observed(path, tmp_path / "out.jsonl")
    assert _without_line_ids(observed) == _without_line_ids(expected)  # v1 ids name lines, which moved
    assert expected[1] == 2 and len(expected[2]) == 1
    assert f"{path}:4: warning[pi_entry_repeated]: a copy of line 3; read once" in stderr


GATEWAY = FIXTURES / "hermes" / "forms" / "input" / "sessions" / "20260402_090000_gate01.jsonl"


def _gateway(tmp_path: Path, name: str, edit) -> Path:
    """The fixture's first four lines (meta, user, assistant with a tool call, tool), edited."""
    path = tmp_path / name / "sessions" / GATEWAY.name
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\n".join(edit(GATEWAY.read_bytes().splitlines()[:4])) + b"\n")
    return path


def test_an_assistant_message_written_twice_is_one_message_and_keeps_its_tool_call(tmp_path):
    plain = _gateway(tmp_path, "plain", lambda lines: lines)
    expected, _ = _observed(plain, tmp_path / "plain.jsonl")
    path = _gateway(tmp_path, "twice", lambda lines: [*lines[:3], lines[2], lines[3]])
    observed, stderr = _observed(path, tmp_path / "out.jsonl")
    assert observed == expected
    assert [tool["tool_call_id"] for tool in expected[2]] == ["call_g1"]
    assert f"{path}:4: warning[hermes_message_repeated]: a copy of the message on line 3; read once" in stderr


JSON_MODE = FIXTURES / "pi" / "json_mode_events.jsonl"


@pytest.mark.parametrize(
    "damage",
    [b'{"type":"session","id":"pi-same","timestamp', b'{"type":"session",\x00"id":"pi-same"}', b'{"type":"\xff"}'],
    ids=["torn", "nul_byte", "invalid_utf8"],
)
def test_a_damaged_pi_v1_header_costs_that_line(tmp_path, damage):
    expected, _ = _observed(PI_V1, tmp_path / "plain.jsonl")
    path = _with_lines(tmp_path, PI_V1, lambda lines: [damage, *lines[1:]])
    result = run_cli("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert f"{path}:1: error[" in result.stderr
    [record] = _records(tmp_path / "out.jsonl")
    assert (len(record["model_calls"]), len(record["tool_calls"])) == (expected[1], len(expected[2])) == (2, 1)


def test_a_pi_json_mode_log_without_its_header_is_read(tmp_path):
    expected, _ = _observed(JSON_MODE, tmp_path / "plain.jsonl")
    path = _with_lines(tmp_path, JSON_MODE, lambda lines: lines[1:])
    result = run_cli("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    [record] = _records(tmp_path / "out.jsonl")
    observed = (record["invocations"][0]["conversation"], len(record["model_calls"]), record["tool_calls"])
    named = [{**tool, "invocation_id": "pi-json"} for tool in record["tool_calls"]]  # no header: named after the file
    assert [tool["invocation_id"] for tool in record["tool_calls"]] == [path.stem]
    observed = (observed[0], observed[1], named)
    assert _without_line_ids(observed) == _without_line_ids(expected)  # ids name lines, which moved
    assert expected[1] > 0


@pytest.mark.parametrize(
    "damage",
    [lambda line: line.replace(b'"from"', b'"frum"', 1).replace(b'"from"', b'"frum"'), lambda line: b"[1, 2]"],
    ids=["no_from_in_any_turn", "array"],
)
def test_a_damaged_first_sharegpt_line_costs_that_line(tmp_path, damage):
    lines = SHAREGPT.read_bytes().splitlines()
    path = _with_lines(tmp_path, SHAREGPT, lambda lines: [damage(lines[0]), *lines[1:]])
    result = run_cli("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert f"{path}:1: error[" in result.stderr
    built = _records(tmp_path / "out.jsonl")
    assert [r["rollout_id"] for r in built] == [f"{path.name}:{n}" for n in range(2, len(lines) + 1)]
    assert all(r["invocations"][0]["conversation"] for r in built)


def test_a_first_sharegpt_line_with_one_turn_without_from_costs_only_that_turn(tmp_path):
    lines = SHAREGPT.read_bytes().splitlines()
    path = _with_lines(tmp_path, SHAREGPT, lambda lines: [lines[0].replace(b'"from"', b'"frum"', 1), *lines[1:]])
    result = run_cli("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert f"{path}:1: warning[hermes_turn_invalid] conversations.0: a turn without from" in result.stderr
    assert "hermes_record_invalid" not in result.stderr
    built = _records(tmp_path / "out.jsonl")
    assert [r["rollout_id"] for r in built] == [f"{path.name}:{n}" for n in range(1, len(lines) + 1)]


def test_a_bom_before_the_first_sharegpt_line_keeps_its_conversation(tmp_path):
    expected = _records(_built(SHAREGPT, tmp_path / "plain.jsonl"))
    path = tmp_path / "bom" / SHAREGPT.name
    path.parent.mkdir()
    path.write_bytes(BOM + SHAREGPT.read_bytes())
    built = _records(_built(path, tmp_path / "out.jsonl"))
    assert [r["invocations"] for r in built] == [r["invocations"] for r in expected]
    assert expected[0]["invocations"][0]["conversation"]


def _built(path: Path, out: Path) -> Path:
    result = run_cli("build", path, "-o", out)
    assert result.exit_code == 0, result.stderr
    return out


def test_an_invalid_call_in_a_rows_capture_attachment_is_reported_and_the_others_kept(tmp_path):
    rows = [orjson.loads(raw) for raw in LEGACY_ROWS.read_bytes().splitlines()]
    calls = rows[0]["ng_model_call_capture"]["calls"]
    negative = {**calls[0], "model_call_id": "d" * 32, "latency_total_ms": -5.0}
    rows[0]["ng_model_call_capture"]["calls"] = ["not a call", calls[0], negative]
    (tmp_path / "rows").mkdir()
    path = _write(tmp_path / "rows" / "rollouts.jsonl", rows)
    result = run_cli("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert (
        f"{path}:1: warning[capture_call_invalid] ng_model_call_capture.calls.0: not an object (string); "
        "the call is left out" in result.stderr
    )
    assert f"{path}:1: warning[capture_call_invalid] ng_model_call_capture.calls.2: duration_ms:" in result.stderr
    first = _records(tmp_path / "out.jsonl")[0]
    assert [call["model_call_id"] for call in first["model_calls"]] == ["c" * 32]
    invalid = [gap for gap in first["gaps"] if gap["code"] == "model_call_capture_call_invalid"]
    assert [gap["detail"] for gap in invalid] == ["calls.0", "calls.2"]


HERMES_FORMS = FIXTURES / "hermes" / "forms" / "input"


def test_a_gateway_store_whose_session_id_is_nested_1000_deep_names_no_session(tmp_path):
    """Found by the fuzzer: the store's session ids were turned into text with ``str``, which recursed
    through a deep list, so the whole store and its transcript's folder failed to index."""
    from test_hermes_golden import materialise

    folder = materialise(HERMES_FORMS, tmp_path / "in")
    store = folder / "sessions" / "sessions.json"
    entries = orjson.loads(store.read_bytes())
    entries["agent:main:telegram:dm:1"]["session_id"] = "DEEP"
    _write(store, [entries])
    out = tmp_path / "out.jsonl"
    result = run_json("build", folder, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert "native_load_failed" not in [d["code"] for d in result.diagnostics]
    assert ("info", "hermes_store_unused", str(store)) in [
        (d["severity"], d["code"], d["path"]) for d in result.diagnostics
    ]
    rollouts = sorted(orjson.loads(line)["rollout_id"] for line in out.read_bytes().splitlines())
    assert "20260402_090000_gate01" in rollouts


def test_a_deep_tool_result_detail_is_written_as_the_output_not_an_internal_error(tmp_path):
    """Found by the fuzzer: a tool result without text content is output as its ``details`` in JSON,
    written by an encoder that recursed once per level: the whole session was left out."""

    def deep_details(entry: dict) -> None:
        entry["message"].update(content=[], details={"tool": "DEEP"})

    path = _pi_v1_with(tmp_path, 4, deep_details)
    result = run_json("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert "native_load_failed" not in [d["code"] for d in result.diagnostics]
    [record] = _records(tmp_path / "out.jsonl")
    [output] = [i["output"] for i in record["invocations"][0]["conversation"] if i["type"] == "function_call_output"]
    assert _depth(orjson.loads(output)["tool"]) == DEPTH


def test_a_row_whose_recorded_bundle_fails_the_contract_is_reported_where_the_row_is(tmp_path):
    """Found by the fuzzer: the row's ``ng_agent_observations`` was ignored (gap
    ``agent_observations_invalid``) with no diagnostic, so its conversation and tool calls went missing
    unexplained; ``validate`` of the row already said why."""
    result = run_json("build", LEGACY_ROWS, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    found = [
        (d["severity"], d["code"], d["line"], d["pointer"])
        for d in result.diagnostics
        if d["code"] != "capture_call_invalid"
    ]
    assert found == [("warning", "invalid_value", 4, "ng_agent_observations.records.0")]
    rows = [orjson.loads(raw) for raw in LEGACY_ROWS.read_bytes().splitlines()]
    rows[0]["ng_agent_observations"]["records"][0]["conversation"][0]["content"] = 5
    path = _write(tmp_path / "rows.jsonl", rows)
    result = run_json("build", path, "-o", tmp_path / "out.jsonl")
    assert ("warning", 1, "ng_agent_observations.records.0.conversation.0") in [
        (d["severity"], d["line"], d["pointer"]) for d in result.diagnostics
    ]


def test_a_row_whose_task_index_is_nested_1000_deep_is_a_row_with_a_malformed_identity(tmp_path):
    """Found by the fuzzer: the rollout id was made with an f-string of ``_ng_task_index``, whose
    ``repr`` recursed through the deep list: an internal error, and no output for any row."""
    rows = [orjson.loads(raw) for raw in LEGACY_ROWS.read_bytes().splitlines()]
    rows[1]["_ng_task_index"] = "DEEP"
    path = _write(tmp_path / "rollouts.jsonl", rows)
    out = tmp_path / "out.jsonl"
    result = run_json("build", path, "-o", out, "--attach")
    assert result.exit_code == 0, result.stderr
    assert ("rollout_identity_invalid", 2) in [(d["code"], d["line"]) for d in result.diagnostics]
    assert len(out.read_bytes().splitlines()) == len(rows)


def test_a_gateway_message_whose_content_is_an_object_nested_1000_deep_costs_its_text(tmp_path):
    """Found by the fuzzer: content that was neither text nor a part list was turned into text with
    ``str``, which recursed through the deep object: the whole session was left out."""

    def deep_content(lines: list[bytes]) -> list[bytes]:
        message = orjson.loads(lines[1])
        message["content"] = {"a": "DEEP"}
        return [lines[0], orjson.dumps(message).replace(b'"DEEP"', DEEP.encode()), *lines[2:]]

    path = _gateway(tmp_path, "deep", deep_content)
    result = run_json("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert "native_load_failed" not in [d["code"] for d in result.diagnostics]
    [record] = _records(tmp_path / "out.jsonl")
    assert len(record["tool_calls"]) == 1


@pytest.mark.parametrize("header", [True, False], ids=["with_header", "without_header"])
@pytest.mark.parametrize("where", ["next", "end"])
def test_a_repeated_message_end_event_is_one_message_and_keeps_its_tool_call(tmp_path, header, where):
    lines = JSON_MODE.read_bytes().splitlines()
    source = lines if header else lines[1:]
    (tmp_path / "plain").mkdir()
    plain = _with_lines(tmp_path / "plain", JSON_MODE, lambda _: source)
    expected, _ = _observed(plain, tmp_path / "plain.jsonl")
    call = next(i for i, line in enumerate(source) if b"toolCall" in line and b"message_end" in line)
    at = call + 1 if where == "next" else len(source)
    path = _with_lines(tmp_path, JSON_MODE, lambda _: [*source[:at], source[call], *source[at:]])
    observed, stderr = _observed(path, tmp_path / "out.jsonl")
    assert _without_line_ids(observed) == _without_line_ids(expected)  # ids name lines, which moved
    assert [tool["tool_call_id"] for tool in expected[2]] == ["call_py"] and expected[1] == 2
    assert f"{path}:{at + 1}: warning[pi_entry_repeated]: a copy of line {call + 1}; read once" in stderr


def test_events_a_json_mode_log_repeats_by_nature_are_no_copies(tmp_path):
    """``turn_start``, ``message_update`` and the like repeat in every real log: no ``pi_entry_repeated``."""
    lines = JSON_MODE.read_bytes().splitlines()[1:]
    events = [line for line in lines if b'"message_end"' not in line and b'"agent_' not in line]
    path = _with_lines(tmp_path, JSON_MODE, lambda _: [*lines[:-1], *events, lines[-1]])
    result = run_json("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert [d["code"] for d in result.diagnostics if d["code"] == "pi_entry_repeated"] == []


RETAINED = FIXTURES / "build" / "retained_run" / "input"


def test_a_content_part_whose_type_is_a_list_costs_its_item_not_the_build(tmp_path):
    """An item's shape is told by its first part's ``type`` and its ``status``; a list there was an
    internal error (``unhashable type``) that stopped the whole build."""
    run = tmp_path / "run"
    shutil.copytree(RETAINED, run)
    rows = (run / "rollouts.jsonl").read_text().split("\n")
    first = json.loads(rows[0])
    first["response"]["output"][0]["content"][0]["type"] = ["output_text"]
    first["response"]["output"][0]["status"] = ["completed"]
    rows[0] = json.dumps(first)
    (run / "rollouts.jsonl").write_text("\n".join(rows))
    out = tmp_path / "out.jsonl"
    result = run_cli("build", run, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert "internal error" not in result.stderr and "warning[rollout_item_invalid]" in result.stderr
    assert len(_records(out)) == 13
    damaged = tmp_path / "damaged.jsonl"
    record = _records(out)[0]
    record["invocations"][0]["conversation"][0]["content"] = [{"type": ["input_text"], "text": "x"}]
    record["invocations"][0]["conversation"][0]["status"] = ["completed"]
    damaged.write_bytes(orjson.dumps(record) + b"\n")
    for command in (["validate"], ["show"], ["matrix"], ["convert", "-o", tmp_path / "d.parquet"]):
        result = run_cli(command[0], damaged, *command[1:])
        assert result.exit_code != 0 and "internal error" not in result.stderr, (command, result.stderr)
        assert "damaged.jsonl:1: error[invalid_conversation_item]" in result.stderr, (command, result.stderr)


@pytest.mark.parametrize(
    ("damage", "where"),
    [
        (lambda r: r.update(invocations=7), "invocations: Input should be a valid list (got 7)"),
        (lambda r: r.update(model_calls={"a": 1}), "model_calls: Input should be a valid list (got dict)"),
        (
            lambda r: r["invocations"][0].update(conversation=1.5),
            "invocations.0.conversation: Input should be a valid list",
        ),
        (lambda r: r["invocations"][0]["conversation"][0].update(type=["message"]), "invocations.0.conversation.0:"),
    ],
    ids=["invocations", "model_calls", "conversation", "item-type"],
)
def test_validate_reports_a_record_of_the_wrong_shape_instead_of_failing(tmp_path, damage, where):
    """What ``validate`` reads for its revision line (the 0.7.0 keys) walked these without looking:
    ``'int' object is not iterable``, ``unhashable type: 'list'``."""
    out = tmp_path / "out.jsonl"
    assert run_cli("build", RETAINED, "-o", out).exit_code == 0
    record = _records(out)[0]
    damage(record)
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_bytes(orjson.dumps(record) + b"\n")
    result = run_cli("validate", damaged)
    assert result.exit_code == 1 and "internal error" not in result.stderr, result.stderr
    assert "damaged.jsonl:1: error[" in result.stderr and where in result.stderr, result.stderr


def test_export_passes_over_reasoning_whose_text_is_not_a_string(tmp_path):
    """A turn's ``reasoning_content`` is any JSON in the contract; ATIF takes the text of its parts,
    and a number there was an internal error (``'float' object is not iterable``)."""
    out = tmp_path / "out.jsonl"
    assert run_cli("build", RETAINED, "-o", out).exit_code == 0
    records = [r for r in _records(out) if r.get("turns")]
    record = records[0]
    record["turns"][0]["reasoning_content"] = [
        {"type": "reasoning", "content": [{"type": "reasoning_text", "text": 1.5}, {"text": "kept"}]},
        {"type": "reasoning", "summary": "not a list"},
        "not an item",
    ]
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_bytes(orjson.dumps(record) + b"\n")
    assert run_cli("validate", damaged).exit_code == 0
    result = run_cli("export", damaged, "--format", "atif", "-o", tmp_path / "atif")
    assert result.exit_code in (0, 3) and "internal error" not in result.stderr, result.stderr
    (document,) = (tmp_path / "atif").glob("*.json")
    steps = orjson.loads(document.read_bytes())["steps"]
    assert [step.get("reasoning_content") for step in steps if step.get("reasoning_content")] == ["kept"]


def test_a_json_document_reader_says_of_the_file_what_is_wrong_with_it(tmp_path):
    """A JSON Lines file read as one document (``--as opencode``) was ``file:1: truncated_line:
    unexpected content after document: line 2 ...``; an empty one ``truncated_line: Input is a
    zero-length, empty document``."""
    lines, empty = tmp_path / "two.jsonl", tmp_path / "empty.json"
    lines.write_bytes(b'{"a": 1}\n{"b": 2}\n')
    empty.write_bytes(b"\n")
    cut = tmp_path / "cut.json"
    cut.write_bytes(b'{"info": {"id": "ses_1"')
    result = run_cli("build", lines, empty, cut, "--as", "opencode", "-o", tmp_path / "out.jsonl")
    assert "internal error" not in result.stderr
    assert (
        f"{lines}: error[invalid_json]: not one JSON document (unexpected content after document: line 2 column 1"
        in result.stderr
    )
    assert f"{empty}: error[invalid_json]: empty: holds no JSON document" in result.stderr
    assert f"{cut}: error[truncated_line]: not one JSON document (unexpected end of data" in result.stderr
