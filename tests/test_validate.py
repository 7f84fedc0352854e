"""``ng-traj validate``: defect fixtures give exactly their expected diagnostics."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from conftest import FIXTURES, run_cli, shared_dir
from ng_traj.diagnostics import DiagnosticSink
from ng_traj.validate import validate_file

DEFECTS = FIXTURES / "validate" / "defects"
VALID = FIXTURES / "validate" / "valid"


def _diagnostics(path: Path, **kwargs) -> list[list]:
    found = []
    sink = DiagnosticSink(lambda d: found.append([d.line, d.code, d.pointer]))
    validate_file(path, sink, **kwargs)
    return found


@pytest.mark.parametrize("path", sorted(DEFECTS.glob("*.jsonl")), ids=lambda p: p.stem)
def test_defect_fixture_gives_expected_diagnostics(path: Path):
    expected = json.loads(path.with_suffix(".expected.json").read_text())
    limit = {"max_line_bytes": 4096} if path.stem == "line_too_long" else {}
    assert _diagnostics(path, **limit) == expected


@pytest.mark.parametrize("path", sorted(VALID.glob("*.jsonl")), ids=lambda p: p.stem)
def test_valid_fixture_has_no_diagnostics(path: Path):
    assert _diagnostics(path) == []


def test_every_defect_fixture_has_an_expectation_and_every_code_is_exercised():
    from ng_traj.diagnostics import VALIDATE_CODES

    seen = set()
    for path in DEFECTS.glob("*.jsonl"):
        seen.update(code for _, code, _ in json.loads(path.with_suffix(".expected.json").read_text()))
    untested = set(VALIDATE_CODES) - seen - {"unreadable_file"}
    assert not untested


def test_exit_codes_and_summary():
    ok = run_cli("validate", *sorted(VALID.glob("*.jsonl")))
    assert ok.exit_code == 0
    assert "valid: 2 files, 3 records, 0 invalid" in ok.stderr
    warnings_only = run_cli("validate", DEFECTS / "cross_reference_warnings.jsonl")
    assert warnings_only.exit_code == 0
    bad = run_cli("validate", DEFECTS / "nul_bytes.jsonl")
    assert bad.exit_code == 1
    assert f"{DEFECTS / 'nul_bytes.jsonl'}:2: error[nul_byte]: raw NUL byte at column 15" in bad.stderr
    missing = run_cli("validate", DEFECTS / "no_such_file.jsonl")
    assert missing.exit_code == 2
    assert "no such file" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_pointer_appears_in_rendered_line():
    result = run_cli("validate", DEFECTS / "tool_timing_reversed.jsonl")
    assert (
        ":1: error[tool_timing_reversed] tool_calls.0.completed_at: completed_at precedes started_at" in result.stderr
    )


def test_json_output_is_one_object_per_line_ending_with_the_summary():
    result = run_cli("validate", "--output-format", "json", DEFECTS / "missing_join_key.jsonl")
    assert result.exit_code == 1 and result.stderr == ""
    lines = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert [line["type"] for line in lines] == ["diagnostic", "diagnostic", "summary"]
    assert lines[0] == {
        "ng_traj_output": 1,
        "type": "diagnostic",
        "path": str(DEFECTS / "missing_join_key.jsonl"),
        "line": 1,
        "offset": 0,
        "severity": "error",
        "code": "missing_join_key",
        "pointer": "invocations.0.model_calls.0",
        "message": "needs model_call_id, or both model_ref and response_id",
    }
    assert lines[-1] == {
        "ng_traj_output": 1,
        "type": "summary",
        "command": "validate",
        "exit_code": 1,
        "diagnostics": {"errors": 2, "warnings": 0, "infos": 0, "by_code": {"missing_join_key": 2}},
        "files": 1,
        "records": 2,
        "valid": 0,
        "invalid": 2,
        "lines_skipped": 0,
        "nothing_validated": [],
        "revision": "fits both revisions (nemo-gym 0.7.0 and earlier)",
    }
    deprecated = run_cli("validate", "--json", DEFECTS / "missing_join_key.jsonl")
    assert (deprecated.exit_code, deprecated.stdout) == (1, result.stdout)


def test_a_folder_is_validated_as_the_files_and_datasets_found_in_it(tmp_path):
    """``validate DIR`` reads a folder as build, show, export and matrix do (it was refused: "a
    directory but not an ng-traj Parquet dataset"): its JSONL files and datasets, sorted, recursively."""
    folder = tmp_path / "runs"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "b.jsonl").write_bytes((VALID / "trajectories.jsonl").read_bytes())
    (folder / "a.jsonl").write_bytes((DEFECTS / "missing_join_key.jsonl").read_bytes())
    (folder / "notes.md").write_text("not a trajectory\n")
    assert (
        run_cli("build", FIXTURES / "build" / "retained_run" / "input", "-o", folder / "z.parquet", "-q").exit_code == 0
    )
    result = run_cli("validate", folder, "--output-format", "json")
    lines = [orjson.loads(line) for line in result.stdout.splitlines()]
    summary = lines[-1]
    assert result.exit_code == 1  # a.jsonl holds an invalid record
    assert summary["files"] == 3 and summary["nothing_validated"] == []
    places = [line.get("path") for line in lines[:-1]]
    assert places.index(str(folder / "a.jsonl")) < places.index(str(folder / "z.parquet"))  # sorted
    unclaimed = next(line for line in lines if line.get("path") == str(folder / "notes.md"))
    assert (unclaimed["severity"], unclaimed["code"]) == ("info", "input_unclaimed")
    only_valid = tmp_path / "valid"
    only_valid.mkdir()
    (only_valid / "b.jsonl").write_bytes((VALID / "trajectories.jsonl").read_bytes())
    result = run_cli("validate", only_valid)
    assert result.exit_code == 0, result.stderr
    assert "valid: 1 file, " in result.stderr
    # A dataset folder is still one dataset; a folder with nothing to validate is not valid.
    dataset = run_cli("validate", folder / "z.parquet")
    assert dataset.exit_code == 0 and "valid: 1 file, 13 records" in dataset.stderr, dataset.stderr
    (tmp_path / "nothing").mkdir()
    (tmp_path / "nothing" / "notes.md").write_text("x\n")
    empty = run_cli("validate", tmp_path / "nothing")
    assert empty.exit_code == 1 and "nothing was validated" in empty.stderr


def test_text_from_the_data_cannot_split_a_diagnostic_line(tmp_path):
    path = tmp_path / "esc\n.jsonl"
    path.write_text('{"schema_version": "1.0", "task_id": "t", "rollout_id": "r", "gaps": [{"code": "\\u001b[2J"}]}\n')
    result = run_cli("validate", path)
    lines = [line for line in result.stderr.splitlines() if line]
    assert len(lines) == len([line for line in lines if line.startswith(str(tmp_path))]) + 1  # + the summary
    assert "\x1b" not in result.stderr


def test_a_reader_that_stops_early_makes_the_run_stop_quietly_and_not_succeed(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "many.jsonl"
    path.write_text('{"schema_version": "1.0"}\n' * 50_000)  # errors on every line, far more than a pipe holds
    command = [sys.executable, "-m", "ng_traj", "validate", "--json", str(path)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout.read(10)
    process.stdout.close()
    assert process.wait(timeout=120) == 141
    assert process.stderr.read() == b""


def test_a_rows_recorded_bundle_that_fails_the_contract_is_a_warning_after_attach(tmp_path):
    rows = FIXTURES / "build" / "legacy_attachments" / "input"
    out = tmp_path / "attached.jsonl"
    assert run_cli("build", rows, "-o", out, "--attach").exit_code == 0
    recorded = [orjson.loads(line).get("ng_agent_observations") for line in out.read_bytes().splitlines()]
    original = [
        orjson.loads(line).get("ng_agent_observations") for line in (rows / "rollouts.jsonl").read_bytes().splitlines()
    ]
    assert recorded == original  # kept as recorded
    result = run_cli("validate", out)
    assert result.exit_code == 0, result.stderr
    assert f"{out}:4: warning[invalid_value] ng_agent_observations.records.0: Input tag 'turn'" in result.stderr
    assert "(the row's recorded bundle; not used)" in result.stderr
    assert "error[" not in result.stderr
    fourth = orjson.loads(out.read_bytes().splitlines()[3])
    assert "agent_observations_invalid" in [gap["code"] for gap in fourth["ng_trajectory"]["gaps"]]


def _error_lines_of_every_reading_command(path, tmp_path):
    """The ``error[`` lines of validate, report, show, export and convert given ``path``, each of which
    must exit 1 and write nothing."""
    seen = []
    for args in (
        ["validate", path],
        ["report", path, "-o", tmp_path / "report.html"],
        ["show", path],
        ["export", path, "--format", "otlp", "-o", tmp_path / "traces.jsonl"],
        ["convert", path, "-o", tmp_path / "out.parquet"],
    ):
        result = run_cli(*args)
        assert result.exit_code == 1, args
        seen.append([line for line in result.stderr.splitlines() if "error[" in line])
    assert not any((tmp_path / name).exists() for name in ("report.html", "traces.jsonl", "out.parquet"))
    return seen


def test_a_session_transcript_is_named_once_by_every_command_that_reads_trajectories(tmp_path):
    session = DEFECTS / "pi_session.jsonl"
    expected = [
        f"{session}: error[input_not_trajectories]: looks like a pi session, not trajectory records; "
        f"build it first: ng-traj build {session} -o trajectories.jsonl"
    ]
    assert _error_lines_of_every_reading_command(session, tmp_path) == [expected] * 5


@pytest.mark.parametrize(
    "name",
    [
        "hermes_gateway-transcript_20260525_075546_d4b801c7.jsonl",
        "hermes_gateway-transcript_context-compaction-injected.jsonl",
    ],
)
def test_a_hermes_gateway_transcript_is_named_once_though_its_messages_have_tool_calls(tmp_path, name):
    transcript = shared_dir("producer-samples") / "hermes" / name
    expected = [
        f"{transcript}: error[input_not_trajectories]: looks like a Hermes gateway transcript, not trajectory "
        f"records; build it first: ng-traj build {transcript} -o trajectories.jsonl"
    ]
    assert _error_lines_of_every_reading_command(transcript, tmp_path) == [expected] * 5


def test_a_file_no_reader_claims_with_one_trajectory_field_is_still_checked_line_by_line(tmp_path):
    path = tmp_path / "odd.jsonl"
    path.write_text('{"tool_calls": []}\n{"tool_calls": [], "x": 1}\n')
    found = _diagnostics(path)
    assert "input_not_trajectories" not in [code for _, code, _ in found]
    assert [line for line, code, pointer in found if (code, pointer) == ("missing_field", "task_id")] == [1, 2]


def test_a_trajectory_file_with_bad_lines_keeps_one_error_per_line(tmp_path):
    path = tmp_path / "mixed.jsonl"
    valid = (VALID / sorted(p.name for p in VALID.glob("*.jsonl"))[0]).read_text().splitlines()[0]
    path.write_text('{"type":"session","id":"s"}\n' + valid + "\n" + '{"event":"x"}\n')
    found = _diagnostics(path)
    assert "input_not_trajectories" not in [code for _, code, _ in found]
    assert [(line, pointer) for line, code, pointer in found if code == "missing_field"] == [
        (1, "task_id"),
        (1, "rollout_id"),
        (3, "task_id"),
        (3, "rollout_id"),
    ]


def test_a_record_identical_to_an_earlier_one_is_a_warning_in_the_file_and_across_files(tmp_path):
    record = (VALID / "trajectories.jsonl").read_text().splitlines()[0]
    other = record.replace('"duration_ms": 5210.5', '"duration_ms": 1.5')
    assert other != record
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text(f"{record}\n{other}\n{record}\n")
    second.write_text(json.dumps(json.loads(record), separators=(",", ":")) + "\n")  # written another way
    result = run_cli("validate", first, second)
    assert result.exit_code == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if "[" in line] == [
        f"{first}:3: warning[record_repeated]: the same record as line 1: a copy (NeMo Gym writes each rollout once)",
        f"{second}:1: warning[record_repeated]: the same record as {first}:1: a copy (NeMo Gym writes each rollout once)",
    ]


def test_a_file_named_twice_by_any_path_is_validated_once(tmp_path):
    path = tmp_path / "defects.jsonl"
    path.write_bytes((DEFECTS / "missing_fields.jsonl").read_bytes())
    (tmp_path / "link.jsonl").symlink_to(path)
    (tmp_path / "hard.jsonl").hardlink_to(path)
    alone = run_cli("validate", path)
    assert alone.exit_code == 1 and "error[" in alone.stderr
    again = run_cli(
        "validate", path, path, tmp_path / "." / path.name, tmp_path / "link.jsonl", tmp_path / "hard.jsonl"
    )
    assert (again.exit_code, again.stderr) == (alone.exit_code, alone.stderr)
    assert "invalid: 1 file," in again.stderr


def test_a_dataset_named_twice_is_validated_once_and_not_compared_with_its_jsonl(tmp_path):
    source = VALID / "trajectories.jsonl"
    dataset = tmp_path / "x.parquet"
    assert run_cli("convert", source, "-o", dataset).exit_code == 0
    alone = run_cli("validate", dataset)
    assert alone.exit_code == 0, alone.stderr
    assert run_cli("validate", dataset, dataset).stderr == alone.stderr
    beside = run_cli("validate", source, dataset)  # its conversion: a dataset is compared within itself only
    assert beside.exit_code == 0, beside.stderr
    assert "record_repeated" not in beside.stderr and "valid: 2 files," in beside.stderr


def test_a_dataset_without_its_manifest_is_one_error_saying_so_in_every_command(tmp_path):
    """Not eight "no reader recognises" infos and "nothing was validated": the folder is named for
    what it looks like, and the missing manifest is the reason its tables are not read."""
    dataset = tmp_path / "x.parquet"
    assert run_cli("build", FIXTURES / "build" / "retained_run" / "input", "-o", dataset, "-q").exit_code == 0
    (dataset / "ng_traj.json").unlink()
    result = run_cli("validate", dataset)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == (
        f"{dataset}: error[dataset_invalid]: laid out as a Parquet dataset, but its manifest ng_traj.json is "
        "missing: not an ng-traj dataset"
    )
    assert "input_unclaimed" not in result.stderr and "nothing was validated" not in result.stderr
    for command in (
        ["show"],
        ["matrix"],
        ["report", "-o", tmp_path / "r.html"],
        ["export", "-f", "otlp", "-o", tmp_path / "t.jsonl"],
    ):
        other = run_cli(command[0], dataset, *command[1:])
        assert (other.exit_code, other.stderr) == (
            2,
            f"error: {dataset}: laid out as a Parquet dataset, but its manifest ng_traj.json is missing: not an "
            "ng-traj dataset\n",
        ), command


def test_a_dangling_or_looping_link_in_a_folder_is_an_unreadable_file_and_the_rest_is_validated(tmp_path):
    """As the other commands report it, not an internal error that validated nothing."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes((FIXTURES / "views" / "parallel_subagent.jsonl").read_bytes())
    (folder / "dangling.jsonl").symlink_to("nowhere.jsonl")
    (folder / "loop.jsonl").symlink_to("loop.jsonl")
    result = run_cli("validate", folder)
    assert result.exit_code == 1, result.stderr
    assert result.stderr.splitlines()[:2] == [
        f"{folder / 'dangling.jsonl'}: error[unreadable_file]: No such file or directory (a symbolic link to "
        "nowhere.jsonl, which does not exist)",
        f"{folder / 'loop.jsonl'}: error[unreadable_file]: Too many levels of symbolic links",
    ]
    assert "internal error" not in result.stderr and ", 1 record, 0 invalid" in result.stderr


def test_a_dataset_missing_a_chunk_file_names_it_with_the_systems_reason_and_nothing_more(tmp_path):
    """Not pyarrow's text (the path and errno twice), nor "nothing was validated: it holds no
    trajectory record" after "not read to the end"."""
    dataset = tmp_path / "x.parquet"
    assert run_cli("build", FIXTURES / "build" / "retained_run" / "input", "-o", dataset, "-q").exit_code == 0
    part = dataset / "model_calls" / "part-00000.parquet"
    part.unlink()
    result = run_cli("validate", dataset)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"{dataset}: error[dataset_invalid]: {part}: no such file or directory (a chunk file of the table model_calls)",
        "invalid: 1 file, 0 records, 0 invalid, 1 dataset not read to the end; 1 error, 0 warnings",
    ]
