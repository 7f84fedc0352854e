"""File names that are not valid UTF-8 (surrogate escapes in Python): every command takes them, and
writes them as ``validate`` does (``diagnostics.safe_text``: each byte as U+FFFD) into JSON, Parquet,
HTML and the terminal; an export never leaves documents without their completeness report."""

from __future__ import annotations

import os
import shutil

import orjson
import pyarrow.parquet as pq
import pytest

from ng_traj.diagnostics import printable, safe_json, safe_text
from tests.conftest import FIXTURES, run_cli

RECORDS = FIXTURES / "build" / "retained_run" / "expected.jsonl"
INPUT = FIXTURES / "build" / "retained_run" / "input"
ODD = os.fsdecode(b"\xff\xfe.jsonl")
SHOWN = "\ufffd\ufffd.jsonl"


@pytest.fixture
def odd_records(tmp_path):
    path = tmp_path / ODD
    shutil.copyfile(RECORDS, path)
    return path


def _trajectories(dataset, columns):
    with open(next((dataset / "trajectories").iterdir()), "rb") as handle:  # pyarrow takes no surrogates
        return pq.read_table(handle, columns=columns)


def _no_crash(result) -> None:
    assert "internal error" not in result.stderr, result.stderr
    assert "\\udc" not in result.stderr + result.stdout


def test_safe_text_and_printable_write_each_byte_as_one_replacement_character():
    assert safe_text(ODD) == SHOWN
    assert printable(f"{ODD}\n") == f"{SHOWN}\\n"
    assert safe_text("a\ud800b") == "a\ufffdb"  # a lone surrogate no file name gives
    assert safe_json({"output": ODD, "inputs": (ODD,), "n": 1}) == {"output": SHOWN, "inputs": [SHOWN], "n": 1}


@pytest.mark.parametrize(("fmt", "split"), [("atif", False), ("otlp", False), ("otlp", True)])
def test_export_of_an_odd_input_writes_its_report_and_can_run_again(tmp_path, odd_records, fmt, split):
    out = tmp_path / "normal_out"
    args = ["export", odd_records, "-f", fmt, "-o", out, *(["--split"] if split else [])]
    for _ in range(2):  # a second run replaces the first export's output
        result = run_cli(*args)
        _no_crash(result)
        assert result.exit_code in (0, 1, 3), result.stderr  # 1: some rollouts had no time
    report = orjson.loads((tmp_path / "normal_out.completeness.json").read_bytes())
    assert {item["source"] for item in report["rollouts"]} == {safe_text(odd_records)}


def test_export_to_an_odd_output_names_it_as_validate_does(tmp_path):
    out = tmp_path / os.fsdecode(b"\xffout")
    for _ in range(2):
        result = run_cli("export", RECORDS, "-f", "atif", "-o", out, "--output-format", "json")
        _no_crash(result)
        assert result.exit_code == 0, result.stderr
    report = orjson.loads(out.with_name(out.name + ".completeness.json").read_bytes())
    assert report["output"] == safe_text(out)
    assert all(item["output"].startswith(safe_text(out) + "/") for item in report["rollouts"])


def test_an_export_whose_report_cannot_be_written_leaves_no_documents(tmp_path, monkeypatch):
    from ng_traj.exports import run

    def fail(request, result):
        raise OSError("no report today")

    monkeypatch.setattr(run, "report_bytes", fail)
    for fmt in ("atif", "otlp"):
        out = tmp_path / fmt
        result = run_cli("export", RECORDS, "-f", fmt, "-o", out)
        assert result.exit_code != 0
        assert not out.exists()
        assert not out.with_name(out.name + ".completeness.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temporary sibling left either


def test_convert_both_ways_with_odd_names(tmp_path, odd_records):
    dataset = tmp_path / os.fsdecode(b"\xffc.parquet")
    result = run_cli("convert", odd_records, "-o", dataset, "--output-format", "json")
    _no_crash(result)
    assert result.exit_code == 0, result.stderr
    summary = orjson.loads(result.stdout.splitlines()[-1] if result.stdout else result.stderr.splitlines()[-1])
    assert (summary["source"], summary["output"]) == (safe_text(odd_records), safe_text(dataset))
    runs = _trajectories(dataset, ["run"]).column(0)
    assert set(runs.to_pylist()) == {SHOWN}
    back = tmp_path / os.fsdecode(b"\xfeback.jsonl")
    result = run_cli("convert", dataset, "-o", back)
    _no_crash(result)
    assert result.exit_code == 0, result.stderr
    assert back.read_bytes() == RECORDS.read_bytes()
    assert safe_text(back) in result.stderr


def test_build_to_an_odd_parquet_output_and_from_an_odd_rollouts_file(tmp_path):
    inputs = tmp_path / "in"
    shutil.copytree(INPUT, inputs)
    (inputs / "rollouts.jsonl").rename(inputs / os.fsdecode(b"\xffrollouts.jsonl"))
    out = tmp_path / os.fsdecode(b"\xffb.parquet")
    result = run_cli("build", *sorted(inputs.iterdir()), "-o", out)
    _no_crash(result)
    assert result.exit_code in (0, 1), result.stderr
    assert f"-> {safe_text(out)}" in result.stderr
    table = _trajectories(out, ["run", "source_file"])
    assert "\ufffdrollouts.jsonl" in table.column("run").to_pylist()


def test_report_and_show_of_an_odd_input(tmp_path, odd_records):
    page = tmp_path / os.fsdecode(b"\xffn.html")
    result = run_cli("report", odd_records, "-o", page, "--output-format", "json")
    _no_crash(result)
    assert result.exit_code == 0, result.stderr
    assert SHOWN.encode() in page.read_bytes()
    result = run_cli("show", odd_records)
    _no_crash(result)
    assert result.exit_code == 0, result.stderr
    assert SHOWN in result.stdout + result.stderr
