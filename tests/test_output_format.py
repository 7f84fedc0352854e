"""``--output-format text|json|github`` on every command: where lines go, what they hold, info summaries."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import jsonschema
import orjson
import pytest

from conftest import FIXTURES, ROOT, run_cli, run_json, shared_dir
from ng_traj.diagnostics import Diagnostic
from ng_traj.validate import validate_file

RETAINED = FIXTURES / "build" / "retained_run" / "input"
RETAINED_EXPECTED = FIXTURES / "build" / "retained_run" / "expected.jsonl"
DEFECTS = FIXTURES / "validate" / "defects"
MATRIX = FIXTURES / "matrix"
VALIDATOR = jsonschema.Draft202012Validator(
    json.loads((ROOT / "schemas" / "ng_traj_output.schema.json").read_text(encoding="utf-8"))
)


def _lines(text: str) -> list[dict]:
    """The JSON lines of ``text``, each checked against the committed schema, the summary last and only there."""
    lines = [orjson.loads(line) for line in text.splitlines()]
    for line in lines:
        VALIDATOR.validate(line)
    assert [line["type"] for line in lines] == ["diagnostic"] * (len(lines) - 1) + ["summary"]
    return lines


def _dataset(tmp_path: Path) -> Path:
    dataset = tmp_path / "d.parquet"
    assert run_cli("convert", RETAINED_EXPECTED, "-o", dataset).exit_code == 0
    return dataset


def _every_command(tmp_path: Path) -> list[tuple[list, str]]:
    """``(arguments, stream holding the JSON lines)`` for every command with ``--output-format`` (``show``
    has none), in its two placements where it has them."""
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(RETAINED_EXPECTED.read_bytes() + b"{not json\n" + b'{"schema_version": "2.0"}\n')
    return [
        (["build", RETAINED, "-o", tmp_path / "b.jsonl"], "stdout"),
        (["build", RETAINED, "-o", "-"], "stderr"),
        (["build", RETAINED, "-o", tmp_path / "b.parquet", "--attach"], "stdout"),  # a usage error: no JSON
        (["validate", *sorted(DEFECTS.glob("*.jsonl"))], "stdout"),
        (["validate", tmp_path / "empty.jsonl"], "stdout"),
        (["matrix", MATRIX / "rows.jsonl", "--format", "json"], "stderr"),
        (["convert", broken, "-o", tmp_path / "c.parquet"], "stdout"),
        (["convert", _dataset(tmp_path), "-o", "-"], "stderr"),
        (["export", RETAINED_EXPECTED, "-f", "atif", "-o", tmp_path / "atif"], "stdout"),
        (["export", broken, "-f", "otlp", "-o", tmp_path / "traces.jsonl"], "stdout"),
        (["export", RETAINED_EXPECTED, "-f", "otlp", "--split", "--strict", "-o", tmp_path / "split"], "stdout"),
        (["report", RETAINED_EXPECTED, "--compare", broken, "-o", tmp_path / "r.html"], "stdout"),
        (["report", tmp_path / "empty.jsonl", "-o", tmp_path / "nothing.html"], "stdout"),
    ]


def test_every_json_line_of_every_command_validates_against_the_committed_schema(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    seen, codes = set(), set()
    for args, stream in _every_command(tmp_path):
        result = run_cli(*args, "--output-format", "json")
        if result.exit_code == 2:
            assert result.stdout == "" and result.stderr.startswith("error:")
            continue
        lines = _lines(getattr(result, stream))
        other = result.stderr if stream == "stdout" else result.stdout
        assert "ng_traj_output" not in other, args  # nothing of the report on the other stream
        assert lines[-1]["exit_code"] == result.exit_code
        codes.add((args[0], result.exit_code))
        seen.update((line["type"], line.get("command"), line.get("severity")) for line in lines)
    commands = ("build", "validate", "matrix", "convert", "export", "report")
    assert {("summary", command, None) for command in commands} <= seen
    assert {("diagnostic", None, severity) for severity in ("error", "warning")} <= seen
    assert {("export", 1), ("report", 0), ("report", 1)} <= codes


def test_json_of_the_shared_samples_has_every_diagnostic_whatever_quiet_says(tmp_path):
    samples = shared_dir("producer-samples")
    quiet = run_cli("build", samples, "-o", tmp_path / "o.jsonl", "--output-format", "json", "-q")
    lines = _lines(quiet.stdout)
    summary = lines[-1]["diagnostics"]
    assert summary["infos"] == sum(line.get("severity") == "info" for line in lines) > 0
    assert summary["by_code"]["session_unattributed"] == 27
    assert sum(line.get("code") == "session_unattributed" for line in lines) == 27


def test_info_is_summarised_by_default_listed_with_verbose_and_hidden_with_quiet(tmp_path):
    samples = shared_dir("producer-samples")
    out = tmp_path / "o.jsonl"
    default = run_cli("build", samples, "-o", out).stderr.splitlines()
    unattributed = [line for line in default if "[session_unattributed]" in line]
    assert unattributed == [
        "info[session_unattributed]: 27 times: a native session no manifest, folder, response id or run id "
        "ties to a rollout (--verbose lists each)"
    ]
    single = [line for line in default if "info[hermes_store_unused]" in line]  # a code seen once is shown itself
    assert single == [
        f"{samples / 'hermes' / 'hermes_gateway-sessions-store.json'}: info[hermes_store_unused]: gateway session "
        "store naming 1 session, none of them among the inputs; nothing to build"
    ]
    verbose = run_cli("build", samples, "-o", out, "--verbose").stderr.splitlines()
    assert sum("info[session_unattributed]:" in line for line in verbose) == 27
    assert all(line.startswith(str(samples)) for line in verbose if "info[session_unattributed]" in line)
    quiet = run_cli("build", samples, "-o", out, "-q").stderr.splitlines()
    assert not [line for line in quiet if "info[" in line]
    assert sum("warning[session_repeated]" in line for line in quiet) == 1  # -q keeps warnings
    assert quiet[-1].startswith("built 27 trajectories")
    assert run_cli("build", samples, "-o", out, "-q", "-v").exit_code == 2


def test_github_annotations_escape_data_and_properties():
    from ng_traj.cli.output import github_annotation, workflow_command

    diagnostic = Diagnostic(
        "error", "invalid_json", "50% done\r\nnext: \x1b[2J", path="runs/a:b,c%.jsonl", line=7, pointer="x.0"
    )
    assert github_annotation(diagnostic) == (
        "::error file=runs/a%3Ab%2Cc%25.jsonl,line=7::[invalid_json] x.0: 50%25 done%0D%0Anext: \\x1b[2J"
    )
    info = Diagnostic("info", "native_superseded", "m")
    assert github_annotation(info) == "::notice::[native_superseded] m"
    assert workflow_command("warning", "a,b:c", "p") == "::warning file=p::a,b:c"  # the text keeps : and ,


def test_github_output_of_validate_and_build(tmp_path):
    result = run_cli("validate", DEFECTS / "nul_bytes.jsonl", "--output-format", "github")
    assert result.exit_code == 1 and result.stderr == ""
    path = DEFECTS / "nul_bytes.jsonl"
    assert result.stdout.splitlines()[0] == f"::error file={path},line=2::[nul_byte] raw NUL byte at column 15"
    assert result.stdout.splitlines()[-1].startswith("invalid: 1 file,")
    built = run_cli("build", RETAINED, "-o", "-", "--output-format", "github")
    assert built.stdout.encode() == RETAINED_EXPECTED.read_bytes()
    annotations = built.stderr.splitlines()
    assert sorted(line.split(" ", 1)[0] for line in annotations[:-1]) == ["::error", "::error", "::warning"]
    assert annotations[-1].startswith("built 13 trajectories")


def test_matrix_diagnostics_go_to_standard_error_and_its_table_stays_on_standard_output():
    text = run_cli("matrix", MATRIX / "rows.jsonl", "--format", "json")
    as_json = run_cli("matrix", MATRIX / "rows.jsonl", "--format", "json", "--output-format", "json")
    assert as_json.stdout == text.stdout and orjson.loads(as_json.stdout)["records"] == 5
    (summary,) = _lines(as_json.stderr)
    assert (summary["command"], summary["records"], summary["groups"], summary["exit_code"]) == ("matrix", 5, 2, 0)


def test_conflicting_format_options_are_a_usage_error():
    for args in (["--json", "--output-format", "github"], ["--output-format", "xml"]):
        result = run_cli("validate", DEFECTS / "nul_bytes.jsonl", *args)
        assert result.exit_code == 2 and "Traceback" not in result.stderr
        assert "--output-format" in result.stderr


@pytest.mark.parametrize("command", ["build", "validate"])
@pytest.mark.parametrize("chosen", ["text", "github"])
def test_json_with_another_output_format_is_refused_naming_both(tmp_path, command, chosen):
    """An explicit --output-format text beside --json was quietly overridden (JSON was written)."""
    out = tmp_path / "out.jsonl"
    args = ("-o", out) if command == "build" else ()
    for order in (("--json", "--output-format", chosen), ("--output-format", chosen, "--json")):
        result = run_cli(command, RETAINED if command == "build" else RETAINED_EXPECTED, *args, *order)
        assert result.exit_code == 2 and result.stdout == "" and "Traceback" not in result.stderr
        (line,) = result.stderr.splitlines()
        assert "--json" in line and f"--output-format {chosen}" in line
        assert not out.exists()


@pytest.mark.parametrize("command", ["build", "validate"])
def test_json_with_output_format_json_agrees(tmp_path, command):
    args = (RETAINED, "-o", tmp_path / "out.jsonl") if command == "build" else (RETAINED_EXPECTED,)
    alias = run_cli(command, *args, "--json", "--output-format", "json")
    plain = run_cli(command, *args, "--output-format", "json")
    assert alias.exit_code == plain.exit_code and alias.stdout == plain.stdout
    assert orjson.loads(alias.stdout.splitlines()[-1])["command"] == command


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("\n\n", "warning[empty_input]: the file holds no records"),
        ('{"responses_create_params": {"input": "x"}, "response": {"output": []}}\n', "warning[trajectory_missing]"),
    ],
    ids=["empty", "rows_without_trajectory"],
)
def test_validate_with_nothing_to_check_exits_1(tmp_path, content, message):
    path = tmp_path / "in.jsonl"
    path.write_text(content)
    result = run_cli("validate", path)
    assert result.exit_code == 1
    assert message in result.stderr
    assert "revision" not in result.stderr  # no record: no claim of fitting a contract revision
    summary = orjson.loads(run_cli("validate", path, "--output-format", "json").stdout.splitlines()[-1])
    assert (summary["records"], summary["revision"]) == (0, "no records: nothing to measure")
    assert f"error: {path}: nothing was validated: it holds no trajectory record" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("nothing validated: 1 file, 0 records")
    (summary,) = [line for line in _lines(run_cli("validate", path, "--output-format", "json").stdout)[-1:]]
    assert (summary["exit_code"], summary["nothing_validated"]) == (1, [str(path)])
    with_valid = run_cli("validate", path, *sorted((FIXTURES / "validate" / "valid").glob("*.jsonl")))
    assert with_valid.exit_code == 1  # as build: a named input that yields nothing fails the run


def test_validate_reports_progress_in_bytes_up_to_the_end_of_a_small_file(tmp_path):
    from ng_traj.diagnostics import DiagnosticSink

    path = FIXTURES / "validate" / "valid"
    source = sorted(path.glob("*.jsonl"))[0]
    reported = []
    validate_file(source, DiagnosticSink(), on_progress=reported.append)
    assert reported == [source.stat().st_size]


def test_progress_shows_only_for_text_on_a_terminal():
    import io

    from rich.console import Console

    from ng_traj.cli.output import Reporter

    def shown(output_format: str, terminal: bool) -> bool:
        console = Console(file=io.StringIO(), force_terminal=terminal)
        with Reporter("validate", output_format, console=console).feedback() as feedback:
            return feedback.progress is not None

    assert shown("text", True)
    assert not shown("text", False) and not shown("json", True) and not shown("github", True)


def _on_a_terminal(*args) -> str:
    """Run ``ng-traj`` with standard error on a pseudo-terminal; return what was drawn there."""
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "200", "TERM": "xterm"}
    env.pop("NO_COLOR", None)
    command = [sys.executable, "-m", "ng_traj", *map(str, args)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=follower, env=env)
    os.close(follower)
    drawn = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        drawn += chunk
    process.communicate(timeout=120)
    os.close(leader)
    return drawn.decode("utf-8", "replace")


def test_build_shows_planning_and_building_steps_and_validate_counts_bytes(tmp_path):
    drawn = _on_a_terminal("build", RETAINED, "-o", tmp_path / "o.jsonl")
    assert "planning: reading and attributing inputs" in drawn and "building trajectories" in drawn
    assert "13/13" in drawn
    size = RETAINED_EXPECTED.stat().st_size  # 28 kB in 13 records: once drawn as 0 bytes read
    drawn = _on_a_terminal("validate", RETAINED_EXPECTED)
    assert f"{size / 1000:.1f}/{size / 1000:.1f} kB" in drawn
    quiet = _on_a_terminal("build", RETAINED, "-o", tmp_path / "o.jsonl", "--output-format", "json")
    assert "planning" not in quiet


DEV_FULL = Path("/dev/full")
VALID = FIXTURES / "validate" / "valid" / "trajectories.jsonl"
ROWS = FIXTURES / "validate" / "valid" / "rollout_rows.jsonl"
NO_SPACE = os.strerror(28)  # ENOSPC


def _ng_traj(*args: object, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) -> subprocess.Popen:
    command = [sys.executable, "-m", "ng_traj", *map(str, args)]
    return subprocess.Popen(command, stdout=stdout, stderr=stderr)


@pytest.mark.skipif(not DEV_FULL.exists(), reason="needs /dev/full")
@pytest.mark.parametrize(
    "args",
    [
        ("matrix", VALID),
        ("matrix", VALID, "--format", "json"),
        ("schema",),
        ("validate", VALID, "--output-format", "json"),
        ("validate", VALID, "--output-format", "github"),
        ("build", RETAINED, "-o", "OUT", "--output-format", "json"),
        ("build", "DAMAGED", "-o", "OUT", "--output-format", "json"),
    ],
    ids=["matrix-table", "matrix-json", "schema", "validate-json", "validate-github", "build-json", "build-midway"],
)
def test_a_full_standard_output_is_one_error_line(tmp_path, args):
    """Whatever writes to standard output (results, json or github lines) says so in one line, exit 2;
    also when the write fails midway, inside the build (the diagnostics of a damaged file fill the
    buffer long before the summary)."""
    damaged = tmp_path / "rollouts.jsonl"
    damaged.write_bytes(b"not json\n" * 3000)
    named = {"OUT": tmp_path / "out.jsonl", "DAMAGED": damaged}
    with open(DEV_FULL, "wb") as full:
        process = _ng_traj(*(named.get(arg, arg) for arg in args), stdout=full)
        stderr = process.communicate(timeout=120)[1].decode()
    assert process.returncode == 2, stderr
    assert stderr.splitlines()[-1] == f"error: cannot write standard output: {NO_SPACE}"
    assert "internal error" not in stderr and "Traceback" not in stderr and "Exception ignored" not in stderr


@pytest.mark.skipif(not DEV_FULL.exists(), reason="needs /dev/full")
@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("validate", VALID), 0),
        (("validate", DEFECTS / "missing_join_key.jsonl"), 1),
        (("validate", "/nonexistent-ng-traj.jsonl"), 2),
        (("build", RETAINED, "-o", "OUT"), 0),  # its errors (damaged lines) unsaid, the output written
    ],
    ids=["valid", "invalid", "usage", "build"],
)
def test_a_full_standard_error_cannot_be_reported_and_the_exit_code_still_tells(tmp_path, args, code):
    with open(DEV_FULL, "wb") as full:
        process = _ng_traj(*(tmp_path / "out.jsonl" if arg == "OUT" else arg for arg in args), stderr=full)
        assert process.wait(timeout=120) == code
    if "OUT" in args:
        assert (tmp_path / "out.jsonl").read_bytes() == RETAINED_EXPECTED.read_bytes()


@pytest.mark.parametrize(
    "args",
    [
        ("matrix", VALID),
        ("matrix", VALID, "--format", "csv"),
        ("schema",),
        ("validate", VALID, "--output-format", "json"),
        ("build", ROWS, "-o", "-"),
        ("convert", "DATASET", "-o", "-"),
    ],
    ids=["matrix-table", "matrix-csv", "schema", "validate-json", "build", "convert"],
)
def test_a_closed_standard_output_stops_every_command_quietly_with_141(tmp_path, args):
    """The reader went away before the first write (``| head`` that already exited): the conventional
    SIGPIPE status, 128 + 13, and nothing on standard error."""
    args = tuple(_dataset(tmp_path) if arg == "DATASET" else arg for arg in args)
    process = _ng_traj(*args, stdout=subprocess.PIPE)
    process.stdout.close()  # no reader left: the first write to the pipe fails
    stderr = process.communicate(timeout=120)[1]
    assert (process.returncode, stderr) == (141, b"")


def _many_rollouts(tmp_path: Path, count: int) -> Path:
    """``count`` copies of a valid trajectory, each under its own rollout id."""
    line = VALID.read_text().splitlines()[0]
    path = tmp_path / "many.jsonl"
    with open(path, "w") as handle:
        for n in range(count):
            handle.write(line.replace('"7-0-a1"', f'"{n}-0"').replace('"task-7"', f'"{n}"') + "\n")
    return path


@pytest.mark.parametrize("command", ["show", "build"])
def test_a_reader_that_leaves_during_a_long_write_stops_the_command_with_141(tmp_path, command):
    """The reader takes a little, then goes while the write that fills the pipe is under way: a
    buffered write cut short reports the bytes the pipe took, and what was left is not dropped in
    silence with exit 0 (a listing of 4,000 rollouts, a line of 1 MB: far more than a pipe holds)."""
    if command == "show":
        args = ("show", _many_rollouts(tmp_path, 4000))
    else:
        row = {"_ng_task_index": 0, "_ng_rollout_index": 0, "response": {"output": []}}
        rows = tmp_path / "rows.jsonl"
        rows.write_text(json.dumps({**row, "responses_create_params": {"input": "x" * 1_000_000}}) + "\n")
        args = ("build", rows, "-o", "-")
    with open(tmp_path / "stderr", "wb") as stderr:
        process = _ng_traj(*args, stdout=subprocess.PIPE, stderr=stderr)
        assert process.stdout.read(10)
        process.stdout.close()
        assert process.wait(timeout=120) == 141
    assert (tmp_path / "stderr").read_bytes() == b""


def test_counts_in_summaries_agree_with_their_nouns(tmp_path):
    """One of a thing is singular, any other number plural, in every command's summary."""
    out = tmp_path / "one.jsonl"
    built = run_cli("build", ROWS, "-o", out)
    assert built.exit_code == 0, built.stderr
    summary = built.stderr.splitlines()[-1]
    assert summary.startswith("built 1 trajectory (")
    assert "; 0 lines skipped, 0 orphan capture files, 0 errors, 0 warnings" in summary
    validated = run_cli("validate", out)
    assert validated.stderr.splitlines()[-1].startswith(
        "valid: 1 file, 1 record, 0 invalid, 0 lines skipped; 0 errors,"
    )
    matrix = run_cli("matrix", out)
    assert matrix.stdout.startswith("C1–C7 by agent over 1 record")
    assert "evaluated 1 record in 1 group; 0 errors, 0 warnings;" in matrix.stderr
    converted = run_cli("convert", out, "-o", tmp_path / "one.parquet")
    assert (
        "converted 1 trajectory: " in converted.stderr
        and "; 0 lines skipped, 0 records skipped, 0 errors, 0 warnings" in converted.stderr
    )


def test_convert_and_export_count_unreadable_lines_as_lines_not_records(tmp_path):
    """Lines that are no record at all (not JSON, cut short, an array) are lines skipped; a JSON
    object that breaks the contract is a record skipped, once however many errors it has."""
    good = [line for line in RETAINED_EXPECTED.read_bytes().splitlines() if line]
    bad_record = orjson.loads(good[0])
    bad_record["task_id"], bad_record["reward"] = 123, "high"  # two contract errors, one record
    lines = [good[0], b"garbage", good[1], b'{"x":', orjson.dumps(bad_record), b"[1]", good[2]]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(b"\n".join(lines) + b"\n")
    converted = run_cli("convert", mixed, "-o", tmp_path / "out.parquet")
    assert converted.exit_code == 1
    assert converted.stderr.splitlines()[-1].endswith("; 3 lines skipped, 1 record skipped, 5 errors, 0 warnings")
    summary = run_json("convert", mixed, "-o", tmp_path / "out2.parquet").summary
    assert (summary["written"], summary["skipped"], summary["lines_skipped"]) == (3, 1, 3)
    exported = run_cli("export", mixed, "--format", "atif", "-o", tmp_path / "atif", "-q")
    assert exported.exit_code == 1
    text = exported.stderr.splitlines()[-1]
    assert text.startswith("exported 3 of 4 records read as atif (") and ", 1 skipped as invalid)" in text, text
    assert "; 3 lines skipped, " in text, text
    summary = run_json("export", mixed, "--format", "atif", "-o", tmp_path / "atif2").summary
    assert (summary["written"], summary["read"], summary["skipped_invalid"], summary["lines_skipped"]) == (3, 4, 1, 3)


def test_export_counts_a_row_without_a_trajectory_as_a_record_skipped(tmp_path):
    """A rollout row that carries no ng_trajectory is reported (a warning) and not exported: it is a
    record skipped, and the export exits 1, as for any rollout the input holds but the output lacks."""
    good = [line for line in RETAINED_EXPECTED.read_bytes().splitlines() if line]
    row = orjson.dumps({"responses_create_params": {"input": []}, "reward": 1.0})
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(b"\n".join([good[0], row]) + b"\n")
    exported = run_cli("export", mixed, "--format", "atif", "-o", tmp_path / "atif", "-q")
    assert exported.exit_code == 1, exported.stderr
    assert f"{mixed}:2: warning[trajectory_missing]" in exported.stderr
    text = exported.stderr.splitlines()[-1]
    assert text.startswith("exported 1 of 2 records read as atif (") and ", 1 skipped as invalid)" in text, text
    summary = run_json("export", mixed, "--format", "atif", "-o", tmp_path / "atif2").summary
    assert (summary["written"], summary["read"], summary["skipped_invalid"], summary["lines_skipped"]) == (1, 2, 1, 0)
