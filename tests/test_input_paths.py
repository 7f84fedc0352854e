"""A named input that cannot be read, the same one line for every command (``io.files.check_inputs``).

Each command that takes input paths (build and its ``--manifest``, validate, matrix, show, report
and its ``--compare``, export, convert) says ``error: cannot read input PATH: REASON`` (``manifest``
for the manifest), exits 2, and makes nothing: no usage block, no traceback. The reasons below were
written from the operating system's errors: ``ENOENT`` (a dangling link also names its target),
``ELOOP``, and ``EACCES`` from a file or folder of mode 000.

The superuser reads any file, so as root the unreadable cases run in one child process started by
``setpriv`` without the two capabilities that override file permissions; as any other user they
run in that child directly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import FIXTURES, run_cli

TRAJECTORIES = FIXTURES / "views" / "parallel_subagent.jsonl"
MISSING = "no such file or directory"
LOOP = "a loop of symbolic links (too many levels of symbolic links: ELOOP)"
DANGLING = "no such file or directory (a symbolic link to nowhere, which does not exist)"
UNREADABLE_FILE = "permission denied (this user may not read it)"
UNREADABLE_FOLDER = "permission denied (a folder this user may not list or enter)"
OUTPUTS = ("out.jsonl", "r.html", "e", "c.parquet")


def _commands(path: str) -> list[tuple[list[str], str]]:
    """Each command naming ``path`` as an input, and what the message calls it."""
    return [
        (["build", path, "-o", "out.jsonl"], "input"),
        (["build", "ok.jsonl", "--manifest", path, "-o", "out.jsonl"], "manifest"),
        (["validate", path], "input"),
        (["matrix", path], "input"),
        (["show", path], "input"),
        (["report", path, "-o", "r.html"], "input"),
        (["report", "ok.jsonl", "--compare", path, "-o", "r.html"], "input"),
        (["export", path, "-f", "atif", "-o", "e"], "input"),
        (["convert", path, "-o", "c.parquet"], "input"),
    ]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """``tmp_path`` as the working folder, holding ``ok.jsonl`` (one trajectory)."""
    shutil.copy(TRAJECTORIES, tmp_path / "ok.jsonl")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda folder: None, MISSING),
        (lambda folder: (folder / "bad").symlink_to("bad"), LOOP),
        (lambda folder: (folder / "bad").symlink_to("nowhere"), DANGLING),
    ],
    ids=["missing", "loop", "dangling"],
)
def test_a_missing_or_looped_input_is_one_line_naming_it_in_every_command(folder, make, reason):
    make(folder)
    for args, what in _commands("bad"):
        result = run_cli(*args)
        assert (result.exit_code, result.stderr) == (2, f"error: cannot read {what} bad: {reason}\n"), args
    assert not any((folder / name).exists() for name in OUTPUTS)


def test_a_path_through_a_file_says_so(folder):
    result = run_cli("validate", "ok.jsonl/x.jsonl")
    expected = (
        "error: cannot read input ok.jsonl/x.jsonl: not a directory (a part of the path is a file, not a folder)\n"
    )
    assert (result.exit_code, result.stderr) == (2, expected)


CHILD = """
import json, sys
from typer.testing import CliRunner
from ng_traj.cli import app
print(json.dumps([list((r.exit_code, r.stderr)) for r in (CliRunner().invoke(app, a) for a in json.loads(sys.argv[1]))]))
"""


def _without_permission_overrides() -> list[str]:
    """The command prefix that runs a child without the superuser's power to read any file."""
    if os.geteuid() != 0:
        return []
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    if shutil.which("setpriv") is None or subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        pytest.skip("root, and setpriv cannot drop the capabilities that override file permissions")
    return prefix


def _run_locked(commands: list[list[str]], locked: dict, prefix: list[str]) -> list[tuple[int, str]]:
    """``(exit code, stderr)`` of each command, run in one child without the superuser's power to
    override permissions (``prefix``) while each path of ``locked`` has the mode it maps to (each
    put back to 0o755 for a folder, 0o644 for a file afterwards)."""
    for path, mode in locked.items():
        os.chmod(path, mode)
    try:
        child = subprocess.run(
            [*prefix, sys.executable, "-c", CHILD, json.dumps(commands)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
    finally:
        for path in locked:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
    assert child.returncode == 0, child.stderr
    return [tuple(result) for result in json.loads(child.stdout)]


def test_an_unreadable_file_or_folder_is_one_line_naming_it_in_every_command(folder):
    prefix = _without_permission_overrides()
    (folder / "locked.jsonl").write_bytes(TRAJECTORIES.read_bytes())
    (folder / "locked").mkdir()
    shutil.copy(TRAJECTORIES, folder / "locked" / "inside.jsonl")
    cases = [(*case, "locked.jsonl", UNREADABLE_FILE) for case in _commands("locked.jsonl")]
    cases += [(*case, "locked", UNREADABLE_FOLDER) for case in _commands("locked")]
    results = _run_locked([args for args, *_ in cases], {folder / "locked.jsonl": 0, folder / "locked": 0}, prefix)
    for (args, what, path, reason), (code, stderr) in zip(cases, results, strict=True):
        assert (code, stderr) == (2, f"error: cannot read {what} {path}: {reason}\n"), args
    assert not any((folder / name).exists() for name in OUTPUTS)
    assert (folder / "locked.jsonl").read_bytes() == TRAJECTORIES.read_bytes()


def test_build_checks_its_inputs_before_it_reads_the_manifest(folder):
    """The manifest's bad row would be a ``manifest_row_invalid`` error: never read, never said."""
    (folder / "m.jsonl").write_text('{"rollout_id": "0-0"}\n')
    result = run_cli("build", "gone", "--manifest", "m.jsonl", "-o", "out.jsonl")
    assert (result.exit_code, result.stderr) == (2, f"error: cannot read input gone: {MISSING}\n")


@pytest.mark.parametrize("locked", ["locked", "locked.jsonl"])
def test_a_folder_or_file_that_cannot_be_read_under_a_named_one_is_reported_by_every_command_that_walks(folder, locked):
    """A folder that cannot be listed, or a file that cannot be opened (which ``matrix`` would have
    handed to its build on its own, stopping the run as a named input it cannot read)."""
    prefix = _without_permission_overrides()
    (folder / "run").mkdir()
    shutil.copy(TRAJECTORIES, folder / "run" / "ok.jsonl")
    if locked == "locked":
        (folder / "run" / "locked").mkdir()
        shutil.copy(TRAJECTORIES, folder / "run" / "locked" / "inside.jsonl")
    else:
        shutil.copy(TRAJECTORIES, folder / "run" / "locked.jsonl")
    commands = [
        ["validate", "run"],
        ["matrix", "run"],
        ["show", "run"],
        ["report", "run", "-o", "r.html"],
        ["export", "run", "-f", "atif", "-o", "e"],
    ]
    results = _run_locked(commands, {folder / "run" / locked: 0}, prefix)
    for args, (code, stderr) in zip(commands, results, strict=True):
        assert f"run/{locked}: error[unreadable_file]: Permission denied\n" in stderr, (args, stderr)
        assert stderr.count("unreadable_file") == 1 and "Traceback" not in stderr, (args, stderr)
        assert code in (0, 1), (args, code, stderr)


def test_validate_of_a_folder_holding_a_file_it_cannot_read_says_that_alone(folder):
    prefix = _without_permission_overrides()
    (folder / "run").mkdir()
    shutil.copy(TRAJECTORIES, folder / "run" / "locked.jsonl")
    [(code, stderr)] = _run_locked([["validate", "run"]], {folder / "run" / "locked.jsonl": 0}, prefix)
    assert code == 1
    assert stderr.splitlines()[0] == "run/locked.jsonl: error[unreadable_file]: Permission denied"
    assert "nothing was validated" not in stderr and "holds no trajectory" not in stderr, stderr


def test_an_output_folder_it_may_not_write_is_one_error_and_leaves_it_and_nothing_else(folder):
    """A folder output (an export, a Parquet dataset) replaces the folder whole, by renaming it away,
    which needs write permission on it: without it the run says so before it writes (before, the
    rename failed at the end: an internal error, and a hidden ``.NAME.old-*`` folder left)."""
    prefix = _without_permission_overrides()
    commands = [
        ["export", str(TRAJECTORIES), "-f", "otlp", "--split", "-o", "traces"],
        ["build", str(FIXTURES / "build" / "retained_run" / "input"), "-o", "out.parquet"],
    ]
    for args in commands:
        assert run_cli(*args).exit_code in (0, 1, 3), args
    before = {path: path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}
    results = _run_locked(commands, {folder / "traces": 0o555, folder / "out.parquet": 0o555}, prefix)
    for (code, stderr), name in zip(results, ("traces", "out.parquet"), strict=True):
        assert code == 2, stderr
        assert stderr == (  # before any input is read: none of the build's input diagnostics
            f"error: cannot write output {name}: permission denied (the folder is replaced whole, by renaming it, "
            "which needs write permission on it)\n"
        ), stderr
    assert {path: path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()} == before
