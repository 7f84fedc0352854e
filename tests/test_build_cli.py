"""``ng-traj build`` as a user runs it: real samples, flags, exit codes, outputs."""

from __future__ import annotations

import csv
import json
import os
import shutil
import threading
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from conftest import FIXTURES, run_cli, shared_dir
from ng_traj.checks import check_line

RETAINED = FIXTURES / "build" / "retained_run" / "input"
RETAINED_EXPECTED = FIXTURES / "build" / "retained_run" / "expected.jsonl"
POLICY = {"type": "responses_api_models", "name": "policy_model"}


def _records(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _expected_rollout_rows(folder: Path) -> dict[str, int]:
    """Rows per file counted independently: a line whose object has a ``response`` key."""
    counts = {}
    for path in sorted(folder.glob("*.jsonl")):
        counts[path.name] = sum(1 for line in path.read_bytes().splitlines() if "response" in json.loads(line))
    return {name: count for name, count in counts.items() if count}


def test_gym_examples_build_one_valid_trajectory_per_rollout_row(tmp_path):
    examples = shared_dir("gym-examples")
    out = tmp_path / "out.jsonl"
    result = run_cli("build", examples, "-o", out)
    assert result.exit_code == 0, result.stderr
    records = _records(out)
    expected = _expected_rollout_rows(examples)
    # the OpenCode export is a session of its own, attributed to no rollout row: one more trajectory
    (export,) = [r for r in records if r["rollout_id"] == "ses_123"]
    assert [inv["invocation_id"] for inv in export["invocations"]] == ["ses_123"]
    records = [r for r in records if r is not export]
    assert len(records) == sum(expected.values())
    for record in records:
        assert check_line(record) == ([], True)
        assert [inv["invocation_id"] for inv in record["invocations"]] == ["rollout_record"]
        codes = [gap["code"] for gap in record["gaps"]]
        assert codes[-3:] == ["conversation_from_rollout_record", "model_calls_unavailable", "turns_unavailable"]
    pinch = [r for r in records if r["rollout_id"].startswith("pinchbench__example_rollouts.jsonl:")]
    assert [r["rollout_id"] for r in pinch] == [f"pinchbench__example_rollouts.jsonl:{n}" for n in range(1, 6)]
    assert {r["task_id"] for r in pinch} == {"unknown"}
    assert all(
        r["gaps"][0] == {"code": "rollout_identity_unavailable", "invocation_id": None, "detail": "no_identity_keys"}
        for r in pinch
    )
    for name in ("claude_code_agent__example_math_rollouts_materialized_inputs.jsonl", "pinchbench__example.jsonl"):
        assert f"{examples / name}: warning[task_input_rows]: 5 rows are task inputs" in result.stderr
    assert "opencode_export_test_data.json: info[session_unattributed]: session ses_123" in result.stderr


def test_rollout_ids_sort_numerically(tmp_path):
    out = tmp_path / "out.jsonl"
    assert run_cli("build", RETAINED, "-o", out).exit_code == 0
    ids = [r["rollout_id"] for r in _records(out)]
    assert ids.index("2-1-a1") < ids.index("3-0") < ids.index("10-0") < ids.index("s7.eval-0")


def test_task_input_file_alone_exits_1(tmp_path):
    path = _write_jsonl(tmp_path / "inputs.jsonl", [{"responses_create_params": {"input": "x"}}])
    result = run_cli("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 1
    assert "nothing usable was built from this input" in result.stderr
    assert f"-> {tmp_path / 'out.jsonl'} (not written); " in result.stderr  # the summary agrees
    assert not (tmp_path / "out.jsonl").exists()  # nothing built: no output written


def test_a_build_that_builds_nothing_leaves_the_previous_output(tmp_path):
    previous = tmp_path / "keep.jsonl"
    previous.write_text("earlier output\n")
    path = _write_jsonl(tmp_path / "inputs.jsonl", [{"responses_create_params": {"input": "x"}}])
    assert run_cli("build", path, "-o", previous).exit_code == 1
    assert previous.read_text() == "earlier output\n"


def test_fail_on_turns_the_diagnostics_reported_into_exit_1_and_still_writes_the_output(tmp_path):
    out = tmp_path / "out.jsonl"
    # The retained run has a cut row and a cut capture line: two errors.
    assert run_cli("build", RETAINED, "-o", out).exit_code == 0
    out.unlink()
    failed = run_cli("build", RETAINED, "-o", out, "--fail-on", "error")
    assert failed.exit_code == 1, failed.stderr
    assert "2 errors" in failed.stderr and len(out.read_bytes().splitlines()) == 13
    # Its rows without the cut one, and a --role naming no model server: a warning and no error.
    clean = tmp_path / "rollouts.jsonl"
    clean.write_bytes(b"".join(row for row in (RETAINED / "rollouts.jsonl").open("rb") if _parses(row)))
    warned = ("--role", "no_such_model=judge")
    assert run_cli("build", clean, "-o", out, "--fail-on", "warning").exit_code == 0
    assert run_cli("build", clean, "-o", out, *warned, "--fail-on", "error").exit_code == 0
    result = run_cli("build", clean, "-o", out, *warned, "--fail-on", "warning")
    assert result.exit_code == 1 and "0 errors, 1 warning" in result.stderr, result.stderr


def _parses(line: bytes) -> bool:
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return True


def test_usage_errors_exit_2_without_traceback(tmp_path):
    for args in (
        [tmp_path / "missing", "-o", tmp_path / "o.jsonl"],
        [RETAINED, "-o", tmp_path / "no_such_dir" / "o.jsonl"],
        [RETAINED, "-o", tmp_path / "o.jsonl", "--as", "nonsense"],
        [RETAINED, "-o", tmp_path / "o.jsonl", "--format", "csv"],
        [RETAINED, "-o", tmp_path / "o.jsonl", "--fail-on", "errors"],
        [RETAINED, "-o", tmp_path],
    ):
        result = run_cli("build", *args)
        assert result.exit_code == 2, args
        assert "Traceback" not in result.stderr and "error:" in result.stderr


def test_failed_run_leaves_previous_output_and_no_temporary_files(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text("previous\n")
    assert run_cli("build", tmp_path / "missing", "-o", out).exit_code == 2
    assert out.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


def test_stdout_output_and_json_summary_placement(tmp_path):
    to_stdout = run_cli("build", RETAINED, "-o", "-", "--output-format", "json", "-q")
    assert to_stdout.exit_code == 0
    lines = to_stdout.stdout.splitlines()
    assert len(lines) == 13 and all(orjson.loads(line)["schema_version"] == "1.0" for line in lines)
    reported = [orjson.loads(line) for line in to_stdout.stderr.splitlines()]
    assert [line["type"] for line in reported] == ["diagnostic"] * 3 + ["summary"]  # -q hides nothing in json
    summary = reported[-1]
    assert (summary["command"], summary["trajectories"], summary["output"], summary["exit_code"]) == (
        "build",
        13,
        "-",
        0,
    )
    assert summary["diagnostics"]["warnings"] == sum(line.get("severity") == "warning" for line in reported)
    to_file = run_cli("build", RETAINED, "-o", tmp_path / "o.jsonl", "--json", "-q")  # the deprecated spelling
    assert to_file.stderr == ""
    in_file = {**summary, "output": str(tmp_path / "o.jsonl")}
    assert [orjson.loads(line) for line in to_file.stdout.splitlines()] == [*reported[:-1], in_file]


def test_no_payloads(tmp_path):
    out = tmp_path / "out.jsonl"
    assert run_cli("build", RETAINED, "-o", out, "--no-payloads").exit_code == 0
    calls = [call for record in _records(out) for call in record["model_calls"]]
    assert len(calls) == 17
    assert all(call["request"] is None and call["response"] is None for call in calls)
    assert calls[0]["token_stats"]["prompt_tokens"] == 20


def test_attach_writes_rows_with_trajectories_and_recomputed_capture(tmp_path):
    out = tmp_path / "out.jsonl"
    assert run_cli("build", RETAINED, "-o", out, "--attach").exit_code == 0
    rows = _records(out)
    assert len(rows) == 13
    for row in rows:
        assert check_line(row)[1] is True
        assert [e.code for e in check_line(row)[0] if e.severity == "error"] == []
    by_id = {row["ng_trajectory"]["rollout_id"]: row for row in rows}
    assert by_id["0-0"]["reward"] == 1.0 and by_id["0-0"]["_ng_task_index"] == 0
    capture = by_id["1-1"]["ng_model_call_capture"]
    assert capture["rollout_id"] == "1-1" and capture["metrics"]["num_calls"] == 2
    assert capture["metrics"]["tokens_in"] == 100
    assert capture["gaps"] == [
        {"code": "model_call_capture_records_unreadable", "detail": "count=1"},
        {"code": "model_call_capture_incomplete"},
    ]
    assert "request" not in capture["calls"][0] and capture["calls"][1]["call_index"] == 2
    joined = by_id["0-1"]["ng_agent_observations"]
    assert joined["records"][0]["model_calls"][0]["model_call_id"] == f"{11:032x}"
    assert set(by_id["3-0"]) == {"_ng_rollout_id", "task_id", "ng_model_call_capture", "ng_trajectory"}


def test_redact_masks_secrets_but_not_usage_fields(tmp_path):
    row = {
        "_ng_task_index": 0,
        "_ng_rollout_index": 0,
        "responses_create_params": {
            "input": [{"role": "user", "content": "my key is sk-PLACEHOLDER0123456789abcdef, use it"}],
            "max_output_tokens": 512,
        },
        "response": {"output": [], "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}},
    }
    capture_dir = tmp_path / "capture"
    capture_dir.mkdir()
    line = {
        "model_call_id": "1" * 32,
        "dialect": "chat",
        "model_ref": POLICY,
        "status_code": 200,
        "request": {
            "model": "m",
            "max_output_tokens": 512,
            "api_key": "sk-PLACEHOLDER",
            "headers": {"authorization": "Bearer PLACEHOLDER123"},
        },
        "response": {"id": "c", "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}},
    }
    _write_jsonl(capture_dir / "0-0.capture.jsonl", [line])
    rollouts = _write_jsonl(tmp_path / "rollouts.jsonl", [row])
    out = tmp_path / "out.jsonl"
    assert run_cli("build", rollouts, capture_dir, "-o", out, "--redact").exit_code == 0
    (record,) = _records(out)
    request = record["model_calls"][0]["request"]
    assert request["api_key"] == "[REDACTED]" and request["headers"]["authorization"] == "[REDACTED]"
    assert request["max_output_tokens"] == 512
    assert record["model_calls"][0]["response"]["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 3,
        "total_tokens": 13,
    }
    assert record["model_calls"][0]["token_stats"]["total_tokens"] == 13
    text = record["invocations"][0]["conversation"][0]["content"]
    assert text == "my key is [REDACTED], use it"
    assert "sk-PLACEHOLDER" in (tmp_path / "capture" / "0-0.capture.jsonl").read_text()


def _two_runs(tmp_path: Path) -> tuple[Path, Path, Path]:
    row = {
        "_ng_task_index": 0,
        "_ng_rollout_index": 0,
        "response": {"output": []},
        "responses_create_params": {"input": "q"},
    }
    run_a = _write_jsonl(tmp_path / "run_a.jsonl", [row])
    run_b = _write_jsonl(tmp_path / "run_b.jsonl", [row])
    store = tmp_path / "store"
    store.mkdir()
    exchange = {"model_call_id": "2" * 32, "dialect": "chat", "model_ref": POLICY, "response": {"id": "x"}}
    _write_jsonl(store / "odd-name.jsonl", [exchange])
    _write_jsonl(store / "0-0.capture.jsonl", [exchange])
    return run_a, run_b, store


def test_capture_id_in_two_runs_is_ambiguous_unless_the_manifest_names_the_run(tmp_path):
    run_a, run_b, store = _two_runs(tmp_path)
    (store / "odd-name.jsonl").unlink()
    out = tmp_path / "out.jsonl"
    result = run_cli("build", run_a, run_b, store, "-o", out)
    assert "warning[capture_ambiguous]" in result.stderr
    records = _records(out)
    assert [len(r["model_calls"]) for r in records] == [0, 0, 1]
    assert records[2]["gaps"][0] == {
        "code": "rollout_attribution_ambiguous",
        "invocation_id": None,
        "detail": "runs=run_a.jsonl,run_b.jsonl",
    }
    manifest = _write_jsonl(
        tmp_path / "manifest.jsonl", [{"rollout_id": "0-0", "path": "store/0-0.capture.jsonl", "run": "run_b.jsonl"}]
    )
    assert run_cli("build", run_a, run_b, store, "-o", out, "--manifest", manifest).exit_code == 0
    assert [len(r["model_calls"]) for r in _records(out)] == [0, 1]


@pytest.mark.parametrize("bom", ["", "\ufeff"], ids=["plain", "bom"])
def test_manifest_attributes_a_file_not_named_by_its_rollout_id(tmp_path, bom):
    run_a, _, store = _two_runs(tmp_path)
    (store / "0-0.capture.jsonl").unlink()
    manifest = tmp_path / "manifest.csv"  # its relative paths are resolved against its own folder
    manifest.write_text(f"{bom}rollout_id,path,kind\n0-0,store/odd-name.jsonl,capture\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert run_cli("build", run_a, "-o", out, "--manifest", manifest).exit_code == 0
    (record,) = _records(out)
    assert record["model_calls"][0]["model_call_id"] == "2" * 32


def test_a_csv_manifest_field_longer_than_the_csv_modules_limit_is_read(tmp_path):
    run_a, _, store = _two_runs(tmp_path)
    (store / "0-0.capture.jsonl").unlink()
    manifest = tmp_path / "manifest.csv"
    note = "n" * 200_000  # the csv module refuses fields over 131,072 characters by default
    manifest.write_text(f"rollout_id,path,kind,note\n0-0,store/odd-name.jsonl,capture,{note}\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    result = run_cli("build", run_a, "-o", out, "--manifest", manifest)
    assert result.exit_code == 0, result.stderr
    (record,) = _records(out)
    assert record["model_calls"][0]["model_call_id"] == "2" * 32
    assert csv.field_size_limit() == 131072  # the module's limit is left as it was


def test_as_capture_forces_the_kind(tmp_path):
    _, _, store = _two_runs(tmp_path)
    out = tmp_path / "out.jsonl"
    result = run_cli("build", store / "odd-name.jsonl", "-o", out, "--as", "capture")
    assert result.exit_code == 0
    (record,) = _records(out)
    assert record["rollout_id"] == "odd-name"
    assert record["gaps"][0]["code"] == "rollout_record_unavailable"


@pytest.mark.parametrize(
    ("sample", "description"),
    [
        ("hermes/hermes_request-dump_cron_max-retries-exhausted.json", None),
    ],
)
def test_recognised_but_unsupported_producer_files_are_named(tmp_path, sample, description):
    path = shared_dir("producer-samples") / sample
    result = run_cli("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 1
    assert "Traceback" not in result.stderr
    if description:
        assert f"warning[input_unsupported]: recognised as {description}" in result.stderr


def test_a_dataset_or_a_file_of_one_given_to_build_is_named_as_already_built(tmp_path):
    run = FIXTURES / "build" / "retained_run" / "input"
    dataset, out = tmp_path / "ds.parquet", tmp_path / "out.jsonl"
    assert run_cli("build", run, "-o", dataset, "-q").exit_code == 0
    result = run_cli("build", dataset, "-o", out)
    assert result.exit_code == 1 and not out.exists()
    assert (
        f"{dataset}: warning[input_unsupported]: recognised as an ng-traj Parquet dataset (already built; "
        "use validate, matrix, show or report, or convert it to JSONL); skipped"
    ) in result.stderr
    assert result.stderr.count("input_unsupported") == 1
    table = dataset / "trajectories" / "part-00000.parquet"
    result = run_cli("build", table, dataset / "ng_traj.json", "-o", out)
    assert result.exit_code == 1 and not out.exists()
    assert (
        f"{table}: warning[input_unsupported]: recognised as a Parquet table file of the ng-traj dataset {dataset} "
        "(already built; name the dataset folder); skipped"
    ) in result.stderr
    assert f"recognised as the manifest of the ng-traj Parquet dataset {dataset}" in result.stderr
    loose = tmp_path / "loose.parquet"
    loose.write_bytes(table.read_bytes())
    result = run_cli("build", loose, "-o", out)
    assert "recognised as a Parquet file (ng-traj reads Parquet only as a dataset folder it wrote)" in result.stderr


def test_inputs_are_never_modified(tmp_path):
    copy = tmp_path / "input"
    shutil.copytree(RETAINED, copy)
    before = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    assert run_cli("build", copy, "-o", tmp_path / "out.jsonl", "--attach", "--redact").exit_code == 0
    assert {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()} == before


def test_same_file_name_in_two_folders_is_two_runs_and_repeated_ids_attach_nothing(tmp_path):
    row = {"_ng_task_index": 0, "_ng_rollout_index": 0, "response": {"output": []}}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    run_a = _write_jsonl(tmp_path / "a" / "rollouts.jsonl", [row])
    run_b = _write_jsonl(tmp_path / "b" / "rollouts.jsonl", [row])
    store = tmp_path / "cap"
    store.mkdir()
    _write_jsonl(store / "0-0.capture.jsonl", [{"model_call_id": "9" * 32, "dialect": "chat", "response": {"id": "x"}}])
    out = tmp_path / "out.jsonl"
    result = run_cli("build", run_a, run_b, store, "-o", out)
    assert "warning[capture_ambiguous]" in result.stderr
    records = _records(out)
    assert [len(r["model_calls"]) for r in records] == [0, 0, 1]
    twice = _write_jsonl(tmp_path / "twice.jsonl", [row, row])
    result = run_cli("build", twice, store, "-o", out)
    assert "warning[rollout_id_repeated]" in result.stderr
    records = _records(out)
    assert [len(r["model_calls"]) for r in records] == [0, 0, 1]
    assert {"code": "rollout_attribution_ambiguous", "invocation_id": None, "detail": "rows=twice.jsonl"} in records[2][
        "gaps"
    ]


def test_output_inside_an_input_folder_is_not_read_back_and_output_cannot_be_an_input(tmp_path):
    row = {"_ng_task_index": 0, "_ng_rollout_index": 0, "response": {"output": []}}
    folder = tmp_path / "in"
    folder.mkdir()
    rollouts = _write_jsonl(folder / "rollouts.jsonl", [row])
    out = folder / "out.jsonl"
    for _ in range(2):  # an earlier output (trajectories) is not read back
        assert run_cli("build", folder, "-o", out).exit_code == 0
        assert len(_records(out)) == 1
    # Rows an input's rows are: replacing them is refused (an earlier --attach output is not one).
    attached = folder / "attached.jsonl"
    assert run_cli("build", rollouts, "--attach", "-o", attached).exit_code == 0
    before = attached.read_bytes()
    os.link(rollouts, tmp_path / "hard.jsonl")
    for named, output in [(attached, attached), (rollouts, rollouts), (folder, tmp_path / "hard.jsonl")]:
        result = run_cli("build", named, "-o", output)
        assert result.exit_code == 2 and "is one of the inputs" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert attached.read_bytes() == before and _records(rollouts) == [row]


def test_overlapping_named_inputs_are_not_reported_empty(tmp_path):
    (tmp_path / "link").symlink_to(RETAINED, target_is_directory=True)
    for named in [(RETAINED, RETAINED / "rollouts.jsonl"), (RETAINED, tmp_path / "link")]:
        result = run_cli("build", *named, "-o", tmp_path / "out.jsonl", "-q")
        assert result.exit_code == 0, result.stderr
        assert _records(tmp_path / "out.jsonl") == _records(RETAINED_EXPECTED)


def test_pipes_in_input_folders_are_skipped_and_corrupt_json_files_are_warned(tmp_path):
    folder = tmp_path / "in"
    shutil.copytree(RETAINED, folder)
    os.mkfifo(folder / "pipe.jsonl")
    (folder / "truncated.json").write_text('{"session_id": "s", "messages": [')
    (folder / "huge.jsonl").write_text('\n{"x": 1e999}\n')  # the first non-blank line says why
    result = run_cli("build", folder, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert "pipe.jsonl: warning[input_unclaimed]: not a regular file" in result.stderr
    assert (
        "truncated.json: error[input_unclaimed]: not JSON (unexpected end of data: at column 34; corrupt or truncated?)"
    ) in result.stderr
    assert (
        "huge.jsonl: error[input_unclaimed]: no line is JSON (line 2: number is infinity when parsed as double: "
        "at column 7; corrupt or truncated?)"
    ) in result.stderr
    assert len(_records(tmp_path / "out.jsonl")) == 13


def test_special_files_are_written_in_place_and_unwritable_folders_are_a_clear_error(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    assert run_cli("build", RETAINED, "-o", fifo, "-q").exit_code == 0
    reader.join(timeout=30)
    assert received and len(received[0].splitlines()) == 13
    assert fifo.is_fifo()
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        result = run_cli("build", RETAINED, "-o", locked / "o.jsonl")
        if os.geteuid() != 0:
            assert result.exit_code == 2 and "cannot write output" in result.stderr
    finally:
        locked.chmod(0o700)


def test_a_corrupt_first_line_or_byte_order_mark_does_not_hide_a_rollouts_file(tmp_path):
    row = json.dumps({"_ng_task_index": 0, "_ng_rollout_index": 0, "response": {"output": []}})
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "bad_first.jsonl").write_text("{garbage\n" + row + "\n")
    (folder / "bom.jsonl").write_bytes(
        b"\xef\xbb\xbf" + row.replace('"_ng_rollout_index": 0', '"_ng_rollout_index": 1').encode() + b"\n"
    )
    out = tmp_path / "out.jsonl"
    result = run_cli("build", folder, "-o", out)
    assert "bad_first.jsonl:1: error[invalid_json]" in result.stderr
    assert [r["rollout_id"] for r in _records(out)] == ["0-0", "0-1"]


def _nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


def test_deep_json_is_a_skipped_line_or_written_as_text_never_a_crash(tmp_path):
    def row(rollout: int, depth: int) -> str:
        head = json.dumps({"_ng_task_index": 0, "_ng_rollout_index": rollout, "response": {"output": []}})
        return head[:-1] + ', "extra": ' + _nested(depth) + "}"

    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text(row(0, 1100) + "\n" + row(1, 300) + "\n")
    store = tmp_path / "cap"
    store.mkdir()
    line = json.dumps(
        {"model_call_id": "d", "dialect": "chat", "request": {"messages": "DEEP"}, "response": {"id": "r"}}
    )
    (store / "0-1.capture.jsonl").write_text(line.replace('"DEEP"', _nested(300)) + "\n")
    out = tmp_path / "out.jsonl"
    result = run_cli("build", rollouts, store, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert "rollouts.jsonl:1: error[invalid_json]" in result.stderr
    assert "warning[payload_as_text]" in result.stderr
    (record,) = _records(out)
    request = record["model_calls"][0]["request"]
    assert isinstance(request, str)
    assert json.loads(request)["messages"] == json.loads(_nested(300))  # the payload kept whole, as JSON text
    attached = tmp_path / "attached.jsonl"
    assert run_cli("build", rollouts, store, "-o", attached, "--attach").exit_code == 0
    (row_out,) = _records(attached)
    assert row_out["ng_trajectory"]["rollout_id"] == "0-1" and row_out["extra"][0][0][0][0] is not None
    # The Parquet dataset degrades the same way, in worker processes too.
    for jobs in ("1", "2"):
        dataset = tmp_path / f"out{jobs}.parquet"
        result = run_cli("build", rollouts, store, "-o", dataset, "--jobs", jobs)
        assert result.exit_code == 0, result.stderr
        assert "warning[payload_as_text]" in result.stderr
        calls = pq.read_table(dataset / "model_calls").to_pylist()
        assert [json.loads(json.loads(call["request"]))["messages"] for call in calls] == [json.loads(_nested(300))]


def test_an_interrupt_while_serialising_stops_the_build_and_is_not_a_deep_payload(monkeypatch):
    from ng_traj.contract import TrajectoryRecord
    from ng_traj.writers import jsonl

    record = TrajectoryRecord(task_id="0", rollout_id="0-0")

    def interrupted(value):
        raise KeyboardInterrupt

    monkeypatch.setattr(jsonl, "model_fields", interrupted)
    with pytest.raises(KeyboardInterrupt):
        jsonl.record_json(record)


@pytest.mark.parametrize("producer", ["openclaw", "pi"])
def test_a_session_whose_header_line_is_corrupt_is_still_read(tmp_path, producer):
    if producer == "openclaw":
        source = shared_dir("producer-samples", "openclaw", "openclaw_v3_subagent_done_exec-tools.jsonl")
    else:
        source = FIXTURES / "pi" / "branch.jsonl"
    lines = source.read_bytes().splitlines(keepends=True)
    session = tmp_path / source.name
    session.write_bytes(lines[0][:40] + b"\n" + b"".join(lines[1:]))
    result = run_cli("build", session, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert f"{session}:1: error[" in result.stderr
    (record,) = _records(tmp_path / "out.jsonl")
    assert record["invocations"] and record["model_calls"]


def test_max_line_bytes_applies_to_capture_lines(tmp_path):
    result = run_cli("build", RETAINED, "-o", tmp_path / "out.jsonl", "--max-line-bytes", "300")
    assert "capture" in result.stderr and "error[line_too_long]" in result.stderr
    lines = [line for line in result.stderr.splitlines() if "line_too_long" in line]
    assert any(".capture.jsonl:" in line for line in lines), lines


def test_two_copies_of_one_unattributed_session_are_built_once(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        shutil.copy(FIXTURES / "pi" / "branch.jsonl", tmp_path / name / "branch.jsonl")
    for order in ((tmp_path / "a", tmp_path / "b"), (tmp_path / "b", tmp_path / "a")):
        result = run_cli("build", *order, "-o", tmp_path / "out.jsonl", "-v")
        assert result.exit_code == 0, result.stderr
        skipped = [line for line in result.stderr.splitlines() if "info[session_copy_skipped]" in line]
        assert len(skipped) == 1 and skipped[0].startswith(str(tmp_path / "b" / "branch.jsonl"))
        assert f"a copy of {tmp_path / 'a' / 'branch.jsonl'}; built once" in skipped[0]
        (record,) = _records(tmp_path / "out.jsonl")
        assert record["rollout_id"] == record["invocations"][0]["invocation_id"]


PI_SAMPLES = (
    "pi_v1-legacy_compaction-bashExecution_excerpt_lines-0-and-600-660.jsonl",
    "pi_v1-legacy_model-change-burst_excerpt_lines-0-and-700-720.jsonl",
)


def test_two_excerpts_of_one_pi_session_get_distinct_rollout_ids(tmp_path):
    samples = shared_dir("producer-samples", "pi")
    for name in PI_SAMPLES:
        shutil.copy(samples / name, tmp_path / name)
    result = run_cli("build", tmp_path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    session = "ffae836b-9420-4060-ac13-7745215f90ff"
    first, second = _records(tmp_path / "out.jsonl")
    assert (first["rollout_id"], second["rollout_id"]) == (session, f"{session}~2")
    # The second (by file name) says which session it repeats; the first is as it was.
    assert {"code": "session_id_repeated", "invocation_id": None, "detail": session} in second["gaps"]
    assert not [gap for gap in first["gaps"] if gap["code"] == "session_id_repeated"]
    assert len(first["model_calls"]) == 28 and len(second["model_calls"]) == 8
    (warned,) = [line for line in result.stderr.splitlines() if "warning[session_repeated]" in line]
    assert warned.startswith(f"{tmp_path / PI_SAMPLES[1]}: warning[session_repeated]: session {session}")
    assert f"built as rollout {session}~2" in warned


def test_an_openclaw_store_adopts_its_renamed_transcripts(tmp_path):
    samples = shared_dir("producer-samples", "openclaw")
    store = "openclaw_sessions-store_subset_root-and-2-subagents.json"
    root = "openclaw_v3_root-session_provider-errors_bedrock.jsonl"
    shutil.copy(samples / store, tmp_path / store)
    shutil.copy(samples / root, tmp_path / root)
    result = run_cli("build", tmp_path, "-o", tmp_path / "out.jsonl", "-v")
    assert result.exit_code == 0, result.stderr
    (record,) = _records(tmp_path / "out.jsonl")  # one session, not the store's and the transcript's
    session = "003d9e5b-51f2-496b-911f-3564cacac047"
    assert record["rollout_id"] == session
    root_invocation = record["invocations"][0]
    # The root's transcript is read for it: its conversation is there (the store alone has none).
    assert root_invocation["invocation_id"] == "agent:main:main" and len(root_invocation["conversation"]) == 9
    missing = [g["invocation_id"] for g in record["gaps"] if g["code"] == "agent_transcript_unavailable"]
    assert missing == [
        "agent:main:subagent:4d666967-5fba-475a-96eb-7df2a2b2cc2c",
        "agent:main:subagent:b6f01560-d6ef-4e0c-ae20-cb988307845e",
    ]
    (renamed,) = [line for line in result.stderr.splitlines() if "info[session_transcript_renamed]" in line]
    assert renamed.startswith(f"{tmp_path / root}: info[session_transcript_renamed]: session agent:main:main:")
    assert f"the store names {session}.jsonl, which is not there" in renamed


@pytest.mark.parametrize("output", ["", "/nonexistent-ng-traj/out.jsonl", "/nonexistent-ng-traj/out.parquet"])
def test_a_bad_output_is_refused_before_any_input_is_read(tmp_path, output):
    result = run_cli("build", RETAINED, "-o", output)
    assert result.exit_code == 2
    assert "invalid_json" not in result.stderr  # the inputs' diagnostics never came
    assert ("-o needs a path" if not output else "output folder /nonexistent-ng-traj does not exist") in result.stderr


def test_messages_print_names_and_line_numbers_as_they_are(tmp_path):
    rows = [json.dumps({"_ng_task_index": 0, "_ng_rollout_index": i, "response": {"output": []}}) for i in range(99)]
    rollouts = tmp_path / "r[b].jsonl"
    rollouts.write_text("\n".join([*rows, "{bad"]) + "\n")
    result = run_cli("build", rollouts, "-o", tmp_path / "out.jsonl")
    assert f"{rollouts}:100: error[invalid_json]" in result.stderr  # not an emoji for :100:
    result = run_cli("validate", tmp_path / "nope[/]")
    assert result.exit_code == 2 and "nope[/]: no such file" in result.stderr


def test_runs_sharing_a_file_name_are_labelled_by_their_shortest_distinct_tail(tmp_path, monkeypatch):
    run_a, run_b, store = _two_runs(tmp_path)
    (store / "odd-name.jsonl").unlink()
    for run, folder in [(run_a, "zz/nested"), (run_b, "aa/nested")]:
        (tmp_path / folder).mkdir(parents=True)
        run.rename(tmp_path / folder / "rollouts.jsonl")
    outputs = []
    monkeypatch.chdir(tmp_path)
    typed = [("zz/nested", "aa/nested", "store"), (tmp_path / "aa/nested", "./zz/nested/../nested", str(store))]
    for n, inputs in enumerate(typed):
        assert run_cli("build", *inputs, "-o", tmp_path / f"out{n}.jsonl").exit_code == 0
        outputs.append((tmp_path / f"out{n}.jsonl").read_bytes())
    assert outputs[0] == outputs[1]  # however the paths were typed
    details = [
        g["detail"] for r in _records(tmp_path / "out0.jsonl") for g in r["gaps"] if g["code"].endswith("ambiguous")
    ]
    assert details == ["runs=aa/nested/rollouts.jsonl,zz/nested/rollouts.jsonl"]


def test_attached_rows_of_rollouts_without_a_row_keep_their_identity_when_built_again(tmp_path):
    attached, again = tmp_path / "attached.jsonl", tmp_path / "again.jsonl"
    assert run_cli("build", RETAINED, "--attach", "-o", attached, "-q").exit_code == 0
    orphan = next(row for row in _records(attached) if row["ng_trajectory"]["rollout_id"] == "3-0")
    assert (orphan["_ng_rollout_id"], orphan["task_id"]) == ("3-0", "3")
    assert run_cli("build", attached, "-o", again).exit_code == 0
    rebuilt = {record["rollout_id"]: record for record in _records(again)}
    assert [r["rollout_id"] for r in _records(RETAINED_EXPECTED)] == list(rebuilt)
    assert "producer_trajectory_identity_mismatch" not in {g["code"] for g in rebuilt["3-0"]["gaps"]}


@pytest.mark.parametrize(
    ("start", "reported"),
    [
        (b'{"_ng_task_index": 0, "resp\n' * 40, "41 invalid_json"),  # the 40 added and the fixture's own
        (b'{"type": "output_text", "text": "partial"}\n', "rollout_row_unrecognised"),  # JSON, but no row
    ],
    ids=["corrupt_lines", "stray_fragment"],
)
def test_lines_at_the_start_of_a_rollouts_file_do_not_hide_it(tmp_path, start, reported):
    folder = tmp_path / "in"
    shutil.copytree(RETAINED, folder)
    rows = (folder / "rollouts.jsonl").read_bytes()
    (folder / "rollouts.jsonl").write_bytes(start + rows)
    result = run_cli("build", folder, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    corrupt = [line for line in result.stderr.splitlines() if "rollouts.jsonl:" in line and "invalid_json" in line]
    if reported == "rollout_row_unrecognised":
        assert (
            "rollouts.jsonl:1: warning[rollout_row_unrecognised]: not a rollout row nor a task input" in result.stderr
        )
        assert "task_input_rows" not in result.stderr
    else:
        assert f"{len(corrupt)} invalid_json" == reported
    assert _records(tmp_path / "out.jsonl") == _records(RETAINED_EXPECTED)


def test_a_manifest_row_naming_an_unknown_run_is_reported_at_its_line(tmp_path):
    run_a, _, store = _two_runs(tmp_path)
    (store / "0-0.capture.jsonl").unlink()
    rows = [
        {"rollout_id": "0-0", "path": "store/odd-name.jsonl", "kind": "capture", "run": "nowhere.jsonl"},
    ]
    manifest = _write_jsonl(tmp_path / "manifest.jsonl", rows)
    result = run_cli("build", run_a, "-o", tmp_path / "out.jsonl", "--manifest", manifest)
    assert result.exit_code == 0, result.stderr
    assert f"{manifest}:1: warning[manifest_run_unknown]: run 'nowhere.jsonl' names no rollouts file" in result.stderr
    # As the warning says, the row's artifact attaches by rollout id alone.
    (record,) = _records(tmp_path / "out.jsonl")
    assert [call["model_call_id"] for call in record["model_calls"]] == ["2" * 32]


def test_a_call_repeated_within_one_capture_file_is_kept_once(tmp_path):
    folder = tmp_path / "in"
    shutil.copytree(RETAINED, folder)
    capture = folder / "capture" / "0-0.capture.jsonl"
    capture.write_bytes(capture.read_bytes() + capture.read_bytes().splitlines(keepends=True)[0])
    result = run_cli("build", folder, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert f"{capture}:4: warning[capture_call_repeated]: model_call_id {1:032x} repeats line 1" in result.stderr
    assert _records(tmp_path / "out.jsonl") == _records(RETAINED_EXPECTED)


def test_a_rollouts_file_whose_lines_hold_lone_surrogates_is_recognised(tmp_path):
    rows = [orjson.loads(line) for line in (RETAINED / "rollouts.jsonl").read_bytes().splitlines()[:6]]
    source = tmp_path / "rollouts.jsonl"
    source.write_bytes(b"".join(orjson.dumps(row)[:-1] + b', "note": "x\\udc00"}\n' for row in rows))
    result = run_cli("build", source, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.count("warning[lone_surrogate]") == 6
    assert len(_records(tmp_path / "out.jsonl")) == 6


@pytest.mark.parametrize(
    ("output", "chosen", "says"),
    [
        ("x.jsonl", "parquet", "names a JSONL file, but --format parquet writes a dataset folder"),
        ("x.jsonl.gz", "parquet", "names a JSONL file, but --format parquet writes a dataset folder"),
        ("x.parquet", "jsonl", "names a Parquet dataset, but --format jsonl writes a JSONL file"),
    ],
)
def test_a_format_the_output_name_contradicts_is_refused(tmp_path, output, chosen, says):
    """Not a folder named ``x.jsonl`` (or a JSONL file named ``x.parquet``): exit 2, nothing read or written."""
    target = tmp_path / output
    result = run_cli("build", RETAINED, "-o", target, "--format", chosen)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: -o {target} {says}: name the {'folder (x.parquet)' if chosen == 'parquet' else 'file (x.jsonl)'} or drop --format"
    ]
    assert list(tmp_path.iterdir()) == []
    agreeing = run_cli("build", RETAINED, "-o", tmp_path / "y.parquet", "--format", "parquet", "-q")
    assert agreeing.exit_code == 0 and (tmp_path / "y.parquet").is_dir()


def test_a_row_longer_than_64_mib_is_recognised_and_built(tmp_path):
    """A file is told apart by its first line read whole (before, by its first 64 MiB: a valid row of
    70 MB was called "no line is JSON")."""
    row = {
        "responses_create_params": {"input": [{"role": "user", "content": "x" * (70 << 20)}]},
        "response": {"output": []},
        "reward": 1.0,
        "_ng_task_index": 0,
        "_ng_rollout_index": 0,
    }
    source = tmp_path / "rows.jsonl"
    source.write_bytes(orjson.dumps(row) + b"\n")
    result = run_cli("build", source, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert "built 1 trajectory" in result.stderr
    (record,) = [orjson.loads(line) for line in (tmp_path / "out.jsonl").read_bytes().splitlines()]
    assert record["rollout_id"] == "0-0"


@pytest.mark.parametrize("name", ["out.jsonl.gz", "out.jsonl.zst", "out.JSONL.GZ", "out.jsonl.Zst"])
def test_an_output_named_like_a_compressed_file_is_refused_before_reading(tmp_path, name):
    result = run_cli("build", RETAINED, "-o", tmp_path / name)
    assert result.exit_code == 2
    assert f"the output is written as plain JSONL, not compressed; name it {name.rsplit('.', 1)[0]}" in result.stderr
    assert list(tmp_path.iterdir()) == []
    dataset = tmp_path / "ds.parquet"
    assert run_cli("build", RETAINED, "-o", dataset).exit_code == 0
    converted = run_cli("convert", dataset, "-o", tmp_path / name)
    assert converted.exit_code == 2 and "not compressed" in converted.stderr


def test_a_file_output_named_as_a_folder_is_refused_and_a_folder_output_may_end_in_a_slash(tmp_path):
    """``-o results/`` lost its ``/`` and a file named ``results`` was written, by every command."""
    dataset, rows = tmp_path / "ds.parquet", tmp_path / "rows.jsonl"
    result = run_cli("build", RETAINED, "-o", f"{dataset}/")  # a dataset is a folder: named as one
    assert result.exit_code == 0 and (dataset / "ng_traj.json").is_file(), result.stderr
    assert run_cli("convert", f"{dataset}/", "-o", rows).exit_code == 0
    made = set(tmp_path.iterdir())
    for command, example in (
        (["build", RETAINED], "out.jsonl"),
        (["convert", dataset], "out.jsonl"),
        (["report", rows], "report.html"),
        (["export", rows, "--format", "otlp"], "traces.jsonl"),
    ):
        result = run_cli(*command, "-o", f"{tmp_path}/results/")
        assert result.exit_code == 2, (command, result.stderr)
        assert result.stderr == (
            f"error: -o {tmp_path}/results/ names a folder (it ends in /), and this output is one file: name the "
            f"file, such as {tmp_path}/results/{example}, or drop the / to write the file {tmp_path}/results\n"
        )
    assert set(tmp_path.iterdir()) == made
    (tmp_path / "results").mkdir()  # a folder of that name: dropping the / would name it, so not suggested
    result = run_cli("build", RETAINED, "-o", f"{tmp_path}/results/")
    assert result.exit_code == 2 and result.stderr.endswith(f"such as {tmp_path}/results/out.jsonl\n"), result.stderr


@pytest.mark.parametrize(
    ("options", "name", "why"),
    [
        (["--format", "otlp"], "traces.jsonl.gz", "the output is written as plain JSONL, not compressed"),
        (
            ["--format", "otlp", "--split"],
            "traces.jsonl",
            "--split writes a folder of files, and traces.jsonl is named",
        ),
        (["--format", "atif"], "atif.json", "ATIF writes a folder of files, and atif.json is named as one JSON file"),
    ],
)
def test_export_refuses_an_output_its_name_contradicts(tmp_path, options, name, why):
    rows = tmp_path / "rows.jsonl"
    assert run_cli("build", RETAINED, "-o", rows).exit_code == 0
    result = run_cli("export", rows, *options, "-o", tmp_path / name)
    assert result.exit_code == 2 and why in result.stderr, result.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["rows.jsonl"]


def test_an_output_link_to_an_input_is_refused_and_the_input_left_alone(tmp_path):
    source = tmp_path / "in"
    shutil.copytree(RETAINED, source)
    before = (source / "rollouts.jsonl").read_bytes()
    link = tmp_path / "out.jsonl"
    link.symlink_to(source / "rollouts.jsonl")
    result = run_cli("build", source, "-o", link)
    assert result.exit_code == 2
    assert "is one of the inputs (a rollouts file under" in result.stderr
    assert (source / "rollouts.jsonl").read_bytes() == before and link.is_symlink()


def test_the_same_attach_build_runs_again_and_rows_that_are_an_input_are_still_refused(tmp_path):
    """``build DIR --attach -o DIR/x.jsonl`` twice: the second run replaces its earlier output (it is
    the target, as a plain output is), rather than taking it for an input and stopping."""
    own = tmp_path / "own"
    shutil.copytree(RETAINED, own)
    out = own / "rows_attached.jsonl"
    first = run_cli("build", own, "--attach", "-o", out)
    assert first.exit_code == 0, first.stderr
    once = out.read_bytes()
    second = run_cli("build", own, "--attach", "-o", out)
    assert second.exit_code == 0, second.stderr
    assert out.read_bytes() == once
    assert str(out) not in second.stderr.replace(f"-> {out}", "")
    # The original rows named as the output are still refused, and so are rows carrying trajectories
    # that are no earlier output of another input (a collector's, with observability on).
    before = (own / "rollouts.jsonl").read_bytes()
    refused = run_cli("build", own, "--attach", "-o", own / "rollouts.jsonl")
    assert refused.exit_code == 2 and "is one of the inputs (a rollouts file under" in refused.stderr
    assert (own / "rollouts.jsonl").read_bytes() == before
    collected = tmp_path / "collected"
    collected.mkdir()
    rows = collected / "rows.jsonl"
    rows.write_bytes(once)
    kept = rows.read_bytes()
    refused = run_cli("build", collected, "--attach", "-o", rows)
    assert refused.exit_code == 2 and "is one of the inputs (a rollouts file under" in refused.stderr, refused.stderr
    assert rows.read_bytes() == kept


def test_an_earlier_output_left_in_the_input_folder_is_skipped_not_built_twice(tmp_path):
    copy = tmp_path / "input"
    shutil.copytree(RETAINED, copy)
    once = tmp_path / "once.jsonl"
    assert run_cli("build", copy, "-o", once, "-q").exit_code == 0
    attached, plain = copy / "attached.jsonl", copy / "out.jsonl"
    assert run_cli("build", copy, "-o", attached, "--attach", "-q").exit_code == 0
    assert run_cli("build", copy, "-o", plain, "-q").exit_code == 0
    again = tmp_path / "again.jsonl"
    result = run_cli("build", copy, "-o", again)
    assert result.exit_code == 0, result.stderr
    assert again.read_bytes() == once.read_bytes()
    assert (
        f"{attached}: warning[input_unsupported]: recognised as rollout rows an earlier build --attach wrote "
        f"from {copy / 'rollouts.jsonl'} (already built; use validate or matrix); skipped, so its rollouts are "
        "not built twice"
    ) in result.stderr
    assert result.stderr.count(str(attached)) == 1
    verbose = run_cli("build", copy, "-o", again, "--verbose").stderr
    assert f"{plain}: info[input_unsupported]: recognised as ng_trajectory records (already built" in verbose


def test_rollout_rows_carrying_a_trajectory_in_every_file_are_all_built(tmp_path):
    """Rows a collector wrote with observability on carry ng_trajectory in the main file and its
    failures file alike: neither is taken for an earlier --attach output."""
    copy = tmp_path / "input"
    shutil.copytree(RETAINED, copy)
    attached = tmp_path / "attached.jsonl"
    assert run_cli("build", copy / "rollouts.jsonl", "-o", attached, "--attach", "-q").exit_code == 0
    other = tmp_path / "run2"
    other.mkdir()
    shutil.copy(attached, other / "a.jsonl")
    shutil.copy(attached, other / "b.jsonl")
    result = run_cli("build", other, "-o", tmp_path / "out.jsonl", "--verbose")
    assert result.exit_code == 0, result.stderr
    assert "input_unsupported" not in result.stderr
    assert len(_records(tmp_path / "out.jsonl")) == 2 * len(_records(attached))


def test_manifest_repeats_unknown_columns_and_conflicts_are_each_reported(tmp_path):
    run_a, _, store = _two_runs(tmp_path)
    (store / "0-0.capture.jsonl").unlink()
    row = {"rollout_id": "0-0", "path": "store/odd-name.jsonl", "kind": "capture"}
    manifest = _write_jsonl(tmp_path / "manifest.jsonl", [row, {**row, "sesion_id": "x"}, row, {**row, "note": 1}])
    out = tmp_path / "out.jsonl"
    result = run_cli("build", run_a, "-o", out, "--manifest", manifest)
    assert result.exit_code == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if "[manifest_" in line] == [
        f"{manifest}:2: warning[manifest_column_unknown]: unknown column 'sesion_id' (a manifest has rollout_id, "
        "path, kind, run, session_id); ignored",
        f"{manifest}:4: warning[manifest_column_unknown]: unknown column 'note' (a manifest has rollout_id, path, "
        "kind, run, session_id); ignored",
        f"{manifest}:2: warning[manifest_row_repeated]: the same row as line 1; used once",
        f"{manifest}:3: warning[manifest_row_repeated]: the same row as line 1; used once",
        f"{manifest}:4: warning[manifest_row_repeated]: the same row as line 1; used once",
    ]
    (record,) = _records(out)
    assert [call["model_call_id"] for call in record["model_calls"]] == ["2" * 32]
    conflict = _write_jsonl(tmp_path / "conflict.jsonl", [row, {**row, "rollout_id": "0-1"}])
    result = run_cli("build", run_a, "-o", out, "--manifest", conflict)
    assert (
        f"{conflict}:2: error[manifest_row_conflict]: path {tmp_path / 'store' / 'odd-name.jsonl'} is given to rollout "
        "'0-1', kind 'capture' here and to rollout '0-0', kind 'capture' at line 1; neither row is used"
    ) in result.stderr
    (record,) = [r for r in _records(out) if r["rollout_id"] == "0-0"]
    assert record["model_calls"] == []  # neither row used: the file is no capture file of 0-0


@pytest.mark.parametrize("text", ["", "rollout_id,path\n"], ids=["empty", "header"])
def test_an_empty_manifest_is_a_warning(tmp_path, text):
    run_a, _, _ = _two_runs(tmp_path)
    manifest = tmp_path / "manifest.csv"
    manifest.write_text(text)
    result = run_cli("build", run_a, "-o", tmp_path / "out.jsonl", "--manifest", manifest)
    assert result.exit_code == 0, result.stderr
    assert f"{manifest}: warning[manifest_empty]: holds no rows; nothing is attributed by it" in result.stderr


NOT_A_MANIFEST = "is not a manifest (JSONL or CSV rows of rollout_id, path, kind, run, session_id)"


def test_a_csv_manifest_row_with_more_fields_than_its_header_says_they_are_ignored(tmp_path):
    manifest = tmp_path / "m.csv"
    manifest.write_text(f"rollout_id,path\n0-0,{RETAINED / 'capture' / '0-0.capture.jsonl'},stray\n")
    result = run_cli("build", RETAINED, "-o", tmp_path / "out.jsonl", "--manifest", manifest)
    assert result.exit_code == 0, result.stderr
    assert (
        f"{manifest}:2: warning[manifest_column_unknown]: 1 field more than the header's columns (['stray']); ignored"
        in result.stderr
    )


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("rollout_id,path\n0-0,capture/0-0.capture.jsonl\n".encode("utf-16"), "the file looks UTF-16LE"),
        (b"rollout_id,path\n\xff0-0,capture/0-0.capture.jsonl\n", "it is not UTF-8 text (byte ff)"),
    ],
    ids=["utf-16", "latin-1"],
)
def test_a_csv_manifest_that_is_not_utf8_says_so_in_words(tmp_path, content, why):
    """Its reason was Python's: ``'utf-8' codec can't decode byte 0xff in position 0``."""
    manifest = tmp_path / "m.csv"
    manifest.write_bytes(content)
    result = run_cli("build", RETAINED, "-o", tmp_path / "out.jsonl", "--manifest", manifest)
    assert result.exit_code == 2 and f"error: manifest {manifest} cannot be read: {why}" in result.stderr
    assert "codec" not in result.stderr


@pytest.mark.parametrize(
    ("name", "content", "why", "reported"),
    [
        (
            "m.jsonl",
            b'garbage\n{"rollout_id": "0-0"\n',
            "none of its lines is a JSON object",
            ["m.jsonl:1:", "m.jsonl:2:"],
        ),
        ("m.csv", b"\x00\x01binary\n", "its CSV header has no rollout_id and path columns ('\\x00\\x01binary')", []),
        ("m.csv", b"id,file\n0-0,a.jsonl\n", "its CSV header has no rollout_id and path columns ('id', 'file')", []),
        (
            "m.jsonl",
            b'{"_ng_task_index": 0}\n{"rollout_id": "0-0"}\n',
            "no row has rollout_id and path (2 rows read; line 1: no rollout_id; no path)",
            [],
        ),
        (
            "m.jsonl",
            b'{"rollout_id": 5, "path": "capture"}\n',
            "no row has rollout_id and path (1 row read; line 1: rollout_id is not text (int 5))",
            [],
        ),
    ],
    ids=["jsonl-no-object", "csv-binary", "csv-other-columns", "jsonl-other-rows", "jsonl-number-id"],
)
def test_a_manifest_that_is_no_manifest_stops_the_build_before_any_output(tmp_path, name, content, why, reported):
    """A named manifest none of whose lines is a manifest row is the wrong file: building without the
    attribution asked for would mislead, so it is a run error (exit 2), each damaged line reported."""
    manifest = tmp_path / name
    manifest.write_bytes(content)
    out = tmp_path / "out.jsonl"
    result = run_cli("build", RETAINED, "-o", out, "--manifest", manifest)
    assert result.exit_code == 2, result.stderr
    assert f"error: manifest {manifest} {NOT_A_MANIFEST}: {why}" in result.stderr
    assert [f"{tmp_path}/{at}" for at in reported] == [
        line.split(" error[")[0] for line in result.stderr.splitlines() if " error[invalid_json]" in line
    ]
    assert not out.exists() and manifest.read_bytes() == content


def test_a_manifest_with_one_damaged_line_is_used_and_the_line_reported(tmp_path):
    run_a, _, _ = _two_runs(tmp_path)
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_bytes(b'{"rollout_id": "0-0"\n{"rollout_id": "0-0", "path": "nowhere.jsonl"}\n')
    result = run_cli("build", run_a, "-o", tmp_path / "out.jsonl", "--manifest", manifest)
    assert result.exit_code == 0, result.stderr
    assert f"{manifest}:1: error[invalid_json]" in result.stderr
    assert (
        f"{manifest}:2: error[manifest_row_invalid]: path {tmp_path / 'nowhere.jsonl'} does not exist" in result.stderr
    )


@pytest.mark.parametrize("suffix", ["x.jsonl", "x.parquet", "sub/x.jsonl"])
def test_an_output_under_a_file_or_a_missing_folder_names_the_path_and_why(tmp_path, suffix):
    afile = tmp_path / "notadir"
    afile.write_text("mine")
    result = run_cli("build", RETAINED, "-o", afile / suffix)
    assert result.exit_code == 2 and "invalid_json" not in result.stderr
    assert f"error: cannot write output {afile / suffix}: {afile} is a file, not a folder" in result.stderr
    assert afile.read_text() == "mine"
    missing = tmp_path / "my missing"
    result = run_cli("build", RETAINED, "-o", missing / suffix)
    assert result.exit_code == 2
    parent = (missing / suffix).parent
    assert (
        f"error: cannot write output {missing / suffix}: output folder {parent} does not exist (make it first: "
        f"mkdir -p '{parent}')"
    ) in result.stderr
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    result = run_cli("build", RETAINED, "-o", tmp_path / "link" / suffix)
    assert f"{tmp_path / 'link'} is a symbolic link to a path that does not exist" in result.stderr


@pytest.mark.parametrize("name", ["manifest.jsonl", "manifest.csv"])
def test_the_manifest_inside_an_input_folder_is_not_reported_as_an_unclaimed_input(tmp_path, name):
    folder = tmp_path / "run"
    shutil.copytree(RETAINED, folder)
    manifest = folder / name
    if name.endswith(".csv"):
        manifest.write_text("rollout_id,path\n0-0,capture/0-0.capture.jsonl\n")
    else:
        manifest.write_text('{"rollout_id": "0-0", "path": "capture/0-0.capture.jsonl"}\n')
    result = run_cli("build", folder, "--manifest", manifest, "-o", tmp_path / "out.jsonl", "--verbose")
    assert result.exit_code == 0, result.stderr
    assert f"{manifest}:" not in result.stderr, result.stderr
    # Another file of the same shape that is not the manifest is still reported.
    shutil.copy(manifest, folder / f"other_{name}")
    result = run_cli("build", folder, "--manifest", manifest, "-o", tmp_path / "out.jsonl", "--verbose")
    assert f"{folder / f'other_{name}'}: info[input_unclaimed]" in result.stderr, result.stderr
    assert f"{manifest}:" not in result.stderr


@pytest.mark.parametrize(("loop", "form"), [("self", "jsonl"), ("pair", "jsonl"), ("pair", "parquet")])
def test_an_output_that_is_a_loop_of_links_is_refused_and_the_links_kept(tmp_path, loop, form):
    """Writing through a link keeps the link; a link that never reaches a file cannot be written
    through, and replacing it with a file would lose it: refused before anything is read."""
    out, other = tmp_path / f"out.{form}", tmp_path / f"other.{form}"
    if loop == "self":
        out.symlink_to(out.name)
    else:
        out.symlink_to(other.name)
        other.symlink_to(out.name)
    result = run_cli("build", RETAINED, "-o", out)
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: output {out} is a loop of symbolic links; name another output"
    assert out.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        {out.name, other.name} if loop == "pair" else {out.name}
    )


def test_a_file_no_reader_claims_by_its_name_says_how_to_read_it_and_read_so_is_not_warned_of(tmp_path):
    """A rollouts file named ``rollouts`` (no suffix) is claimed by no reader, since the name comes
    first: named on its own, the warning says ``--as`` reads it; read ``--as rollouts``, nothing
    contradicts the choice, so there is no ``forced_kind_mismatch``, and it builds as the file would."""
    named = tmp_path / "rollouts"
    shutil.copy(RETAINED / "rollouts.jsonl", named)
    result = run_cli("build", named, "-o", tmp_path / "out.jsonl")
    assert (
        f"{named}: warning[input_unclaimed]: no reader recognises this file (readers go by its name, then its "
        "first record); skipped; --as KIND reads it as one kind\n"
    ) in result.stderr
    matrix = run_cli("matrix", named)  # a command without --as does not offer it
    assert "no reader recognises this file" in matrix.stderr and "--as" not in matrix.stderr, matrix.stderr
    forced = run_cli("build", "--as", "rollouts", named, "-o", tmp_path / "out.jsonl")
    assert forced.exit_code == 0, forced.stderr
    assert "forced_kind_mismatch" not in forced.stderr and "input_unclaimed" not in forced.stderr
    assert len(_records(tmp_path / "out.jsonl")) == 10  # its 11 lines, one corrupt
    walked = run_cli("build", tmp_path, "-o", tmp_path / "out2.jsonl", "-v")  # found in a folder: no hint
    assert (
        "rollouts: info[input_unclaimed]: no reader recognises this file (readers go by its name, then its "
        "first record); skipped\n" in walked.stderr
    ), walked.stderr


def test_a_file_holding_only_a_byte_order_mark_is_empty_not_corrupt(tmp_path):
    """The mark is not content (every reader skips it): the file is empty, not 'no line is JSON'."""
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf\n\n")
    result = run_cli("build", path, "-o", tmp_path / "out.jsonl")
    assert f"{path}: warning[input_unclaimed]: empty (or blank lines only); skipped\n" in result.stderr, result.stderr
    assert "no line is JSON" not in result.stderr
