"""The shared line reader: numbering, offsets, splitting on newline only, damage handling."""

from __future__ import annotations

import sys

import pytest

from conftest import FIXTURES, run_cli
from ng_traj.diagnostics import DiagnosticSink
from ng_traj.io.lines import MAX_LINE_BYTES_LIMIT, iter_json_lines, read_json_objects

BUILT = FIXTURES / "build" / "retained_run" / "expected.jsonl"
BUILT_INPUT = FIXTURES / "build" / "retained_run" / "input"


def test_numbers_offsets_and_blank_lines(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"a":1}\n\n  \n{"b":2}\r\n{"c":3}')
    lines = list(iter_json_lines(path))
    assert [(line.line, line.offset, line.value) for line in lines] == [
        (1, 0, {"a": 1}),
        (4, 12, {"b": 2}),
        (5, 21, {"c": 3}),
    ]


def test_only_newline_splits_records(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes('{"t":"x\u2028y\u0085z\u2029w"}\n'.encode())
    (line,) = iter_json_lines(path)
    assert line.value == {"t": "x\u2028y\u0085z\u2029w"}


def test_corrupt_line_in_the_middle_does_not_hide_the_rest(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"a":1}\n{"a":\n{"a":3}\n')
    found = []
    values = [line.value for line in read_json_objects(path, DiagnosticSink(found.append))]
    assert values == [{"a": 1}, {"a": 3}]
    assert [(d.line, d.offset, d.code) for d in found] == [(2, 8, "invalid_json")]


def test_lone_surrogate_is_replaced_and_kept(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"k\\udc00":"a\\ud800b","ok":"\\ud83d\\ude00"}\n')
    (line,) = iter_json_lines(path)
    assert line.value == {"k\ufffd": "a\ufffdb", "ok": "\U0001f600"}
    assert line.problem.code == "lone_surrogate" and line.ok


def test_nan_and_infinity_are_read_as_null_with_one_warning(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(
        b'{"a": 1}\n{"a": NaN, "b": [Infinity, -Infinity, NaN], "t": "NaN Infinity", "c": 1.5}\n{"a": 2}\n'
    )
    first, line, last = iter_json_lines(path)
    assert first.problem is None and last.problem is None
    assert line.value == {"a": None, "b": [None, None, None], "t": "NaN Infinity", "c": 1.5}
    assert line.ok and (line.problem.code, line.problem.severity, line.problem.line) == (
        "json_nonfinite_number",
        "warning",
        2,
    )
    assert line.problem.message == "4 non-finite numbers (NaN, Infinity, -Infinity; not JSON) read as null"


def test_nan_with_a_lone_surrogate_names_both(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"a": Infinity, "s": "x\\ud800"}\n')
    (line,) = iter_json_lines(path)
    assert line.value == {"a": None, "s": "x\ufffd"}
    assert line.problem.code == "json_nonfinite_number"
    assert line.problem.message.endswith("; 1 string held lone surrogates; replaced by U+FFFD")


@pytest.mark.parametrize("raw", [b'{"a": nan}', b'{"a": NaN', b'{"a": +Infinity}', b'{"a": NaN,}'])
def test_other_invalid_json_stays_invalid(tmp_path, raw):
    path = tmp_path / "a.jsonl"
    path.write_bytes(raw + b"\n")
    (line,) = iter_json_lines(path)
    assert line.problem.code == "invalid_json" and not line.ok


def test_huge_line_is_skipped_without_reading_it_whole(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"a":"' + b"x" * 3_000_000 + b'"}\n{"b":1}\n')
    lines = list(iter_json_lines(path, max_line_bytes=1000))
    assert [(line.line, line.problem.code if line.problem else None) for line in lines] == [
        (1, "line_too_long"),
        (2, None),
    ]
    assert lines[1].offset == 3_000_009


def test_unreadable_file_is_one_diagnostic(tmp_path):
    found = []
    assert list(read_json_objects(tmp_path / "missing.jsonl", DiagnosticSink(found.append))) == []
    assert [d.code for d in found] == ["unreadable_file"]


def test_nesting_deeper_than_orjson_allows_is_invalid_json_on_every_python(tmp_path):
    # Python 3.12+ decodes 3000 levels where orjson stops at 1024; the line is still one invalid line.
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"a":1}\n' + b"[" * 3000 + b"]" * 3000 + b'\n{"a":3}\n')
    found = []
    values = [line.value for line in read_json_objects(path, DiagnosticSink(found.append))]
    assert values == [{"a": 1}, {"a": 3}]
    assert [(d.line, d.offset, d.severity, d.code) for d in found] == [(2, 8, "error", "invalid_json")]


@pytest.mark.parametrize(
    "args",
    [
        ("build", BUILT_INPUT, "-o", "out.jsonl"),
        ("validate", BUILT),
        ("matrix", BUILT),
        ("convert", BUILT, "-o", "out.parquet"),
        ("export", BUILT, "--format", "otlp", "-o", "traces.jsonl"),
        ("show", BUILT),
        ("report", BUILT, "-o", "report.html"),
    ],
    ids=lambda args: args[0],
)
def test_a_max_line_bytes_past_the_bound_is_a_usage_error(tmp_path, args):
    command, *rest = args
    rest = [tmp_path / part if str(part).startswith(("out.", "traces.", "report.")) else part for part in rest]
    result = run_cli(command, *rest, "--max-line-bytes", str(sys.maxsize))
    assert result.exit_code == 2, result.output
    assert "internal error" not in result.output
    # the wording around the bound is Typer's or Click's own, which differs between their releases
    assert "Invalid value for '--max-line-bytes'" in result.output and str(1 << 40) in result.output
    assert not any(tmp_path.iterdir())


def test_the_largest_max_line_bytes_is_read_with():
    result = run_cli("validate", BUILT, "--max-line-bytes", str(MAX_LINE_BYTES_LIMIT))
    assert result.exit_code == 0, result.output


def test_a_capture_line_with_nan_keeps_its_model_call(tmp_path):
    import shutil

    import orjson

    run = tmp_path / "run"
    shutil.copytree(BUILT_INPUT, run)
    capture = run / "capture" / "1-0.capture.jsonl"
    first, rest = capture.read_bytes().split(b"\n", 1)
    assert b'"latency_ttft_ms":50.0' in first
    capture.write_bytes(first.replace(b'"latency_ttft_ms":50.0', b'"latency_ttft_ms":NaN', 1) + b"\n" + rest)
    out = tmp_path / "out.jsonl"
    result = run_cli("build", run, "-o", out, "--output-format", "json")
    found = [orjson.loads(line) for line in result.stdout.splitlines()]
    warnings = [d for d in found if d.get("code") == "json_nonfinite_number"]
    assert [(d["severity"], d["path"], d["line"]) for d in warnings] == [("warning", str(capture), 1)]
    assert warnings[0]["message"] == "1 non-finite number (NaN; not JSON) read as null"
    calls = [c["model_call_id"] for r in map(orjson.loads, out.read_bytes().splitlines()) for c in r["model_calls"]]
    assert "00000000000000000000000000000015" in calls
    assert len(calls) == 17  # as many as from the fixture itself


@pytest.mark.parametrize(
    ("codec", "encoding", "why"),
    [
        ("utf-16", "UTF-16LE", "byte-order mark FF FE"),
        ("utf-16-le", "UTF-16LE", "a NUL byte every other byte"),
        ("utf-16-be", "UTF-16BE", "a NUL byte every other byte"),
    ],
)
def test_a_utf16_file_is_one_error(tmp_path, codec, encoding, why):
    path = tmp_path / "rollouts.jsonl"
    text = "".join(
        f'{{"_ng_task_index": {n}, "_ng_rollout_index": 0, "reward": 1.0, "response": {{}}}}\n' for n in range(5)
    )
    data = text.encode(codec)
    if codec == "utf-16-be":
        data = b"\xfe\xff" + data  # a big-endian byte-order mark, named in the message
        why = "byte-order mark FE FF"
    path.write_bytes(data)
    (line,) = iter_json_lines(path)
    assert (line.line, line.problem.code, line.ok) == (1, "utf16_input", False)
    assert line.problem.message.startswith(f"the file looks {encoding} ({why}): inputs must be UTF-8")
    for command in ("build", "validate"):
        result = run_cli(command, path, *(("-o", tmp_path / "out.jsonl") if command == "build" else ()))
        assert result.stderr.count("utf16_input") == 1, result.stderr
        assert "nul_byte" not in result.stderr and "no line is JSON" not in result.stderr


def test_a_utf16_file_without_a_byte_order_mark_is_told_by_its_nul_bytes(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes('{"a": 1}\n{"a": 2}\n'.encode("utf-16-le"))
    (line,) = iter_json_lines(path)
    assert line.problem.message == (
        "the file looks UTF-16LE (a NUL byte every other byte): inputs must be UTF-8 "
        "(iconv -f UTF-16LE -t UTF-8 converts it); not read"
    )


def test_a_nul_byte_in_a_utf8_first_line_is_still_a_nul_byte(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"a": "x\x00y"}\n{"a": 2}\n')
    first, second = iter_json_lines(path)
    assert first.problem.code == "nul_byte" and second.value == {"a": 2}


def test_bytes_that_only_start_like_a_utf16_mark_are_invalid_utf8(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"\xff\xfe not json\n")
    (line,) = iter_json_lines(path)
    assert line.problem.code == "invalid_utf8"
