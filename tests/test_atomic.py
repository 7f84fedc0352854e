"""Atomic outputs: a full disk is one error line naming the output (exit 2), never a traceback."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, run_cli
from ng_traj.diagnostics import RunError
from ng_traj.io.atomic import atomic_directory, atomic_file

RETAINED = FIXTURES / "build" / "retained_run"
DEV_FULL = Path("/dev/full")
FULL = os.strerror(errno.ENOSPC)


def _ng_traj(*args: object, stdout: Path | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "ng_traj", *map(str, args)]
    with open(stdout or os.devnull, "wb") as out:
        return subprocess.run(command, stdout=out, stderr=subprocess.PIPE, check=False)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """The retained run as a Parquet dataset."""
    path = tmp_path_factory.mktemp("dataset") / "d.parquet"
    assert run_cli("convert", RETAINED / "expected.jsonl", "-o", path).exit_code == 0
    return path


@pytest.mark.skipif(not DEV_FULL.exists(), reason="needs /dev/full")
@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("build", RETAINED / "input", "-q", "-o", DEV_FULL), DEV_FULL),
        (("build", RETAINED / "input", "-q", "-o", DEV_FULL, "--jobs", "2"), DEV_FULL),
        (("build", RETAINED / "input", "-q", "-o", "-"), "standard output"),
        (("convert", "DATASET", "-o", DEV_FULL), DEV_FULL),
        (("convert", "DATASET", "-o", "-"), "standard output"),
    ],
    ids=["build-file", "build-jobs", "build-stdout", "convert-file", "convert-stdout"],
)
def test_a_full_disk_is_one_error_line(dataset, args, named):
    """Standard output goes to /dev/full too; the last line of standard error is the one error."""
    result = _ng_traj(*(dataset if arg == "DATASET" else arg for arg in args), stdout=DEV_FULL)
    assert result.returncode == 2
    assert result.stderr.decode().splitlines()[-1] == f"error: cannot write {named}: {FULL}"
    assert b"internal error" not in result.stderr and b"Traceback" not in result.stderr


def test_write_errors_name_the_output_and_leave_nothing_behind(tmp_path):
    target = tmp_path / "out.parquet"
    with pytest.raises(RunError, match=re.escape(f"cannot write {target}: {FULL}")), atomic_directory(target):
        raise OSError(errno.ENOSPC, "Error writing bytes to file")  # as pyarrow raises it
    quota = re.escape(f"cannot write {target}.jsonl: {os.strerror(errno.EDQUOT)}")
    with pytest.raises(RunError, match=quota), atomic_file(f"{target}.jsonl") as handle:
        handle.write(b"{}\n")
        raise OSError(errno.EDQUOT, "quota")
    # Other errors are not the output's: they propagate as they are.
    with pytest.raises(FileNotFoundError), atomic_directory(target):
        raise FileNotFoundError(errno.ENOENT, "gone")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the swallowed interrupt
def test_an_interrupt_whose_exception_was_swallowed_still_stops_the_commit(tmp_path, monkeypatch):
    from ng_traj.io import atomic

    monkeypatch.setattr(atomic, "_interrupts", [])
    target = tmp_path / "out.jsonl"
    target.write_bytes(b"old\n")

    class Finalised:
        def __del__(self):
            atomic.interrupt(2, None)  # as if the signal landed while a finalizer ran

    with pytest.raises(KeyboardInterrupt), atomic.atomic_file(target) as handle:
        handle.write(b"new\n")
        Finalised()  # the KeyboardInterrupt raised in __del__ is dropped by Python ("Exception ignored")
    assert target.read_bytes() == b"old\n"
    assert not [p for p in tmp_path.iterdir() if p.name != "out.jsonl"]
    with pytest.raises(KeyboardInterrupt), atomic.atomic_directory(tmp_path / "ds.parquet"):
        pass
    assert not (tmp_path / "ds.parquet").exists()


def test_an_interrupt_a_library_wrapped_in_another_exception_exits_130_without_a_traceback(monkeypatch, capsys):
    import typer

    from ng_traj.cli.common import guarded
    from ng_traj.io import atomic

    def body() -> int:
        raise RuntimeError("SchemaError: KeyboardInterrupt")  # as pydantic wraps it while building a model

    monkeypatch.setattr(atomic, "_interrupts", [])
    with pytest.raises(typer.Exit) as unexpected:
        guarded(False, body)
    assert unexpected.value.exit_code == 2 and "internal error" in capsys.readouterr().err
    monkeypatch.setattr(atomic, "_interrupts", [2])
    with pytest.raises(typer.Exit) as interrupted:
        guarded(False, body)
    assert interrupted.value.exit_code == 130 and "internal error" not in capsys.readouterr().err


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc, where no file can be created")
@pytest.mark.parametrize("name", ["out.jsonl", "out.parquet"])
def test_an_output_folder_nothing_can_be_created_in_is_refused_before_reading(name):
    result = run_cli("build", RETAINED / "input", "-o", f"/proc/{name}")
    assert result.exit_code == 2
    assert "error[" not in result.stderr  # no input was read: its corrupt lines went unreported
    assert f"cannot write output /proc/{name}" in result.stderr


def test_an_interrupt_inside_a_deferred_block_is_raised_at_its_end(monkeypatch):
    from ng_traj.io import atomic

    monkeypatch.setattr(atomic, "_interrupts", [])
    finished = []
    with pytest.raises(KeyboardInterrupt), atomic.deferred_interrupts():
        atomic.interrupt(2, None)  # as the handler runs when the signal arrives
        atomic.interrupt(2, None)  # a second one
        finished.append(True)
    assert finished == [True]
    with pytest.raises(KeyboardInterrupt):
        atomic.interrupt(2, None)  # outside a deferred block it raises at once


def _leftovers(folder: Path, name: str) -> dict[str, Path]:
    """A killed run's temporaries of ``name`` (file and folder), a live one, and look-alikes to keep."""
    made = {
        "stale_file": folder / f".{name}.tmp-ab12_z9q",
        "stale_folder": folder / f".{name}.tmp-0000abcd",
        "live": folder / f".{name}.tmp-live0001",
        "other_output": folder / ".other.jsonl.tmp-ab12_z9q",
        "longer_suffix": folder / f".{name}.tmp-ab12_z9q.keep",
        "user_file": folder / f"{name}.tmp-ab12_z9q",
        "old_copy": folder / f".{name}.old-ab12_z9q",
        "symlink": folder / f".{name}.tmp-link0001",
    }
    for key, path in made.items():
        if key == "stale_folder":
            path.mkdir()
            (path / "part.parquet").write_bytes(b"x")
        elif key == "symlink":
            path.symlink_to(made["user_file"])
        else:
            path.write_bytes(b"partial")
    return made


@pytest.mark.parametrize("kind", ["file", "dataset"])
def test_a_killed_runs_temporaries_are_removed_by_the_next_run_and_nothing_else(tmp_path, kind):
    name = "out.jsonl" if kind == "file" else "out"
    made = _leftovers(tmp_path, name)
    with open(made["live"], "rb") as live:
        fcntl.flock(live, fcntl.LOCK_EX)  # a build still writing holds its temporary locked
        writer = atomic_file(tmp_path / name) if kind == "file" else atomic_directory(tmp_path / name)
        with writer as handle:
            if kind == "file":
                handle.write(b"{}\n")
            else:
                (handle / "trajectories.parquet").write_bytes(b"x")
    left = {key for key, path in made.items() if path.exists() or path.is_symlink()}
    assert left == {"live", "other_output", "longer_suffix", "user_file", "old_copy", "symlink"}
    assert (tmp_path / name).exists()
    temporaries = [p.name for p in tmp_path.iterdir() if p.name.startswith(f".{name}.tmp-")]
    assert sorted(temporaries) == sorted(made[key].name for key in ("live", "longer_suffix", "symlink"))


def test_an_output_through_a_link_replaces_the_file_it_names_and_keeps_the_link(tmp_path):
    target, link = tmp_path / "target.jsonl", tmp_path / "link.jsonl"
    target.write_bytes(b"old\n")
    link.symlink_to(target.name)
    with atomic_file(link) as handle:
        handle.write(b"new\n")
    assert link.is_symlink() and os.readlink(link) == target.name
    assert target.read_bytes() == b"new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.jsonl", "target.jsonl"]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux /proc")
def test_a_link_to_an_open_descriptor_is_written_in_place(tmp_path):
    captured, link = tmp_path / "captured.txt", tmp_path / "stdout.jsonl"
    link.symlink_to("/proc/self/fd/1")  # as /dev/stdout is
    code = (
        f"from ng_traj.io.atomic import atomic_file\nwith atomic_file({str(link)!r}) as h:\n    h.write(b'line\\n')\n"
    )
    with captured.open("wb") as stdout:
        subprocess.run([sys.executable, "-c", code], stdout=stdout, check=True)
    assert captured.read_bytes() == b"line\n"
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"


@pytest.mark.parametrize(
    "args",
    [
        ["report", "{ds}", "-o", "{ds}/report.html"],
        ["export", "{ds}", "--format", "otlp", "-o", "{ds}/traces.jsonl"],
        ["export", "{ds}", "--format", "atif", "-o", "{ds}/trajectories/atif"],
        ["build", "{run}", "-o", "{ds}/inner.parquet"],
        ["build", "{run}", "-o", "{ds}/model_calls/out.jsonl"],
        ["convert", "{jsonl}", "-o", "{ds}/inner.parquet"],
    ],
    ids=["report", "export-otlp", "export-atif-in-a-table", "build-nested-dataset", "build-jsonl", "convert"],
)
def test_an_output_inside_a_dataset_folder_is_a_usage_error_naming_the_dataset(tmp_path, args):
    run = FIXTURES / "build" / "retained_run" / "input"
    dataset, jsonl = tmp_path / "ds.parquet", tmp_path / "out.jsonl"
    assert run_cli("build", run, "-o", dataset, "-q").exit_code == 0
    assert run_cli("build", run, "-o", jsonl, "-q").exit_code == 0
    before = sorted(path.relative_to(dataset) for path in dataset.rglob("*"))
    result = run_cli(*[arg.format(ds=dataset, run=run, jsonl=jsonl) for arg in args])
    assert result.exit_code == 2, result.stderr
    assert f"is inside the Parquet dataset {dataset}: a dataset folder holds only its own tables" in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(path.relative_to(dataset) for path in dataset.rglob("*")) == before


def test_an_output_that_replaces_a_file_or_a_dataset_keeps_its_permissions(tmp_path):
    private = tmp_path / "private.jsonl"
    private.write_text("earlier\n")
    private.chmod(0o600)
    with atomic_file(private) as handle:
        handle.write(b"new\n")
    assert private.read_text() == "new\n" and (private.stat().st_mode & 0o777) == 0o600
    new = tmp_path / "new.jsonl"
    with atomic_file(new) as handle:
        handle.write(b"x\n")
    assert (new.stat().st_mode & 0o777) == 0o644
    dataset = tmp_path / "out.parquet"
    dataset.mkdir(mode=0o700)
    dataset.chmod(0o700)
    with atomic_directory(dataset) as folder:
        (folder / "part").write_text("x")
    assert (dataset / "part").exists() and (dataset.stat().st_mode & 0o777) == 0o700
    fresh = tmp_path / "fresh.parquet"
    with atomic_directory(fresh) as folder:
        (folder / "part").write_text("x")
    assert (fresh.stat().st_mode & 0o777) == 0o755


@pytest.mark.parametrize("failing", [1, 2])
def test_a_folder_swap_that_fails_leaves_the_previous_folder_in_place_and_no_hidden_folder(
    tmp_path, monkeypatch, failing
):
    """The previous folder is renamed away, then the new one into place; either rename failing (the
    folder's permissions changed while the run wrote, a full disk's metadata) leaves the previous
    folder where it was, and neither the temporary nor the ``.NAME.old-*`` folder behind."""
    target = tmp_path / "ds"
    target.mkdir()
    (target / "kept").write_text("previous")
    real, calls = os.replace, []

    def replace(source, destination):
        calls.append(source)
        if len(calls) == failing:
            raise PermissionError(errno.EACCES, "Permission denied", str(source))
        return real(source, destination)

    monkeypatch.setattr(os, "replace", replace)
    with (
        pytest.raises(RunError, match=f"^cannot write output {re.escape(str(target))}: "),
        atomic_directory(target) as folder,
    ):
        (folder / "new").write_text("new")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ds"]
    assert [path.name for path in target.iterdir()] == ["kept"]


def test_a_folder_output_named_through_a_symbolic_link_replaces_the_folder_it_names_and_keeps_the_link(tmp_path):
    """As a file output does (``written_path``); before, the link was replaced by a folder and the
    folder it named kept its old content."""
    real = tmp_path / "real.parquet"
    real.mkdir()
    (real / "old").write_text("old")
    link = tmp_path / "link.parquet"
    link.symlink_to("real.parquet")
    with atomic_directory(link) as folder:
        (folder / "new").write_text("new")
    assert link.is_symlink() and os.readlink(link) == "real.parquet"
    assert [path.name for path in real.iterdir()] == ["new"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["link.parquet", "real.parquet"]
