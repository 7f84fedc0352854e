"""``--jobs N``: worker processes give the same bytes, diagnostics and summary as one process."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path

import orjson
import pytest
from test_hermes_golden import materialise
from test_opencode import materialise as materialise_opencode

from conftest import FIXTURES, generated_corpus
from ng_traj.assemble import workers
from ng_traj.assemble.build import BuildOptions, encode_line
from ng_traj.assemble.pipeline import prepare
from ng_traj.assemble.run import run_slots
from ng_traj.diagnostics import DiagnosticSink
from ng_traj.io.atomic import interrupt
from ng_traj.sources import sqlite_copy
from ng_traj.writers.spool import read_payloads


def _build(inputs: Path, out: Path, jobs: int, *extra: str, tmp: Path | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "ng_traj", "build", str(inputs), "-o", str(out), "--jobs", str(jobs), *extra]
    env = {**os.environ, "TMPDIR": str(tmp)} if tmp is not None else None
    return subprocess.run(command, capture_output=True, check=False, env=env)


def _json_lines(stdout: bytes) -> list[dict]:
    """The JSON output's lines, the output path (which differs per run) left out of the summary."""
    lines = [orjson.loads(line) for line in stdout.splitlines()]
    lines[-1].pop("output")
    return lines


def _files(path: Path) -> dict[str, bytes]:
    if not path.is_dir():
        return {"": path.read_bytes()}
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", ["out.jsonl", "out.parquet"])
def test_two_jobs_write_what_one_job_writes(tmp_path, small_corpus, name):
    one, two = tmp_path / "1" / name, tmp_path / "2" / name
    one.parent.mkdir()
    two.parent.mkdir()
    first, second = _build(small_corpus, one, 1), _build(small_corpus, two, 2)
    assert first.returncode == second.returncode == 0
    assert _files(one) == _files(two)
    # Diagnostics (the corrupt capture line of rollout 125) and the summary line, in the same order.
    assert first.stderr.replace(bytes(one), b"OUT") == second.stderr.replace(bytes(two), b"OUT")
    assert b"error[invalid_json]" in first.stderr and b"built 130 trajectories" in first.stderr


def test_summary_json_and_diagnostics_are_identical(tmp_path):
    inputs = FIXTURES / "build" / "retained_run" / "input"
    runs = [_build(inputs, tmp_path / f"{jobs}.jsonl", jobs, "--output-format", "json") for jobs in (1, 2, 3)]
    outputs = [_json_lines(run.stdout) for run in runs]
    assert outputs[0] == outputs[1] == outputs[2]  # every diagnostic, in order, and the summary
    assert outputs[0][-1]["trajectories"] == 13 and outputs[0][-1]["lines_skipped"] == 2
    assert [line["code"] for line in outputs[0][:-1]] == ["invalid_json", "capture_duplicate_conflict", "invalid_json"]
    assert runs[0].stderr == runs[1].stderr == runs[2].stderr == b""
    expected = (FIXTURES / "build" / "retained_run" / "expected.jsonl").read_bytes()
    assert all((tmp_path / f"{jobs}.jsonl").read_bytes() == expected for jobs in (1, 2, 3))


def test_jobs_must_be_positive(tmp_path):
    result = _build(FIXTURES / "build" / "retained_run" / "input", tmp_path / "o.jsonl", 0)
    assert result.returncode == 2 and b"--jobs" in result.stderr


def test_role_totals_and_session_totals_survive_workers(tmp_path):
    judge = FIXTURES / "judge" / "stores" / "input"
    hermes = materialise(FIXTURES / "hermes" / "db_v6_lineage" / "input", tmp_path / "hermes")
    roles = ("--role", "judge_model=judge", "--role", "policy_model=policy")
    runs = [
        _build(judge, tmp_path / f"{jobs}.jsonl", jobs, "--output-format", "json", *roles, str(hermes))
        for jobs in (1, 2)
    ]
    outputs = [_json_lines(run.stdout) for run in runs]
    assert outputs[0] == outputs[1]
    assert outputs[0][-1]["roles"]["judge"]["calls"] == 5
    assert outputs[0][-1]["native_session_totals"]["sessions"] == 7
    assert runs[0].stderr == runs[1].stderr == b""
    assert (tmp_path / "1.jsonl").read_bytes() == (tmp_path / "2.jsonl").read_bytes()


def _signal_handlers() -> tuple[object, object]:
    return signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)


def test_workers_leave_interrupts_to_the_parent():
    # The CLI turns SIGTERM into KeyboardInterrupt; forked workers must not inherit that handler.
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        context, options = workers._context(), (BuildOptions(), encode_line)
        with ProcessPoolExecutor(1, mp_context=context, initializer=workers._start, initargs=options) as pool:
            sigint, sigterm = pool.submit(_signal_handlers).result()
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert sigint == signal.SIG_IGN
    assert sigterm is workers._terminated


def _term_worker(building: bool, report: Connection) -> None:
    workers._start(BuildOptions(), encode_line)
    workers._state["building"] = building
    os.kill(os.getpid(), signal.SIGTERM)
    report.send("handed over")
    workers._build_chunk(0, [])
    report.send("took the next chunk")


@pytest.mark.parametrize(("building", "reports"), [(True, []), (False, ["handed over"])])
def test_sigterm_kills_a_worker_only_outside_the_pools_pipes(building, reports):
    """While building a worker dies at once; between chunks only when it takes the next one."""
    reader, writer = multiprocessing.Pipe(duplex=False)
    worker = workers._context().Process(target=_term_worker, args=(building, writer))
    worker.start()
    writer.close()
    worker.join()
    received = []
    with contextlib.suppress(EOFError):
        while True:
            received.append(reader.recv())
    assert worker.exitcode == -signal.SIGTERM
    assert received == reports


@pytest.mark.parametrize(
    ("signum", "code", "said"), [(signal.SIGTERM, 143, b"terminated"), (signal.SIGINT, 130, b"interrupted")]
)
def test_a_signal_stops_a_build_with_its_shell_status_and_the_previous_output_in_place(
    tmp_path, small_corpus, signum, code, said
):
    hermes = materialise(FIXTURES / "hermes" / "db_v6_lineage" / "input", tmp_path / "inputs" / "hermes")
    tmp = tmp_path / "inputs" / "tmp"  # the build's private copy of the state.db must not stay behind
    tmp.mkdir()
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"previous\n")
    command = [sys.executable, "-m", "ng_traj", "build", str(small_corpus), hermes, "-o", str(out), "--jobs", "2"]
    environment = {**os.environ, "TMPDIR": str(tmp)}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment)
    deadline = time.monotonic() + 120
    copied = "ng-traj-sqlite-*/ng-traj-hermes-*/state.db"
    while not (list(tmp_path.glob(".out.jsonl.*")) and list(tmp.glob(copied))):  # planned, writing its output
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.005)
    process.send_signal(signum)
    _stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == code, stderr
    assert stderr.splitlines()[-1].endswith(said) and b"Traceback" not in stderr
    assert out.read_bytes() == b"previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inputs", "out.jsonl"]
    assert list(tmp.iterdir()) == []


@pytest.mark.parametrize("jobs", [1, 2])
def test_builds_leave_no_private_copy_of_a_database_behind(tmp_path, jobs):
    """The copies of a Hermes ``state.db`` and an OpenCode ``opencode.db`` are removed when the build
    ends, and the copies folder (and, with workers, the spool folder) a build killed with SIGKILL
    left in the temporary folder are removed by this one."""
    hermes = materialise(FIXTURES / "hermes" / "db_v6_lineage" / "input", tmp_path / "hermes")
    opencode = materialise_opencode(FIXTURES / "opencode" / "db_v1" / "input", tmp_path / "opencode")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    for left in ["ng-traj-sqlite-dead1234"] + (["ng-traj-spool-dead5678"] if jobs > 1 else []):
        (tmp / left / "ng-traj-hermes-x").mkdir(parents=True)
        (tmp / left / "ng-traj-hermes-x" / "state.db").write_bytes(b"a copy")
        os.utime(tmp / left, (time.time() - 3600,) * 2)  # unchanged for an hour: no build's in the making
    inputs = FIXTURES / "build" / "retained_run" / "input"  # with the databases' sessions, 3 chunks: 2 workers
    result = _build(inputs, tmp_path / "out.jsonl", jobs, str(hermes), str(opencode), tmp=tmp)
    assert result.returncode == 0, result.stderr
    assert b"built 18 trajectories" in result.stderr
    assert list(tmp.iterdir()) == []


def _copy_in_child(database: Path, report: Connection) -> None:
    os.utime(database, ns=(1, 1))  # changed since the parent copied it: the child copies it again
    report.send(str(sqlite_copy.private_copy(database)))


def test_a_worker_copying_a_changed_database_leaves_its_parents_copy_and_its_own_to_the_parent(tmp_path, monkeypatch):
    """A forked worker inherits the parent's copies; one it makes again (the database changed since)
    goes into the parent's folder, and the parent's copy stays (the worker once removed it)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setattr(sqlite_copy, "_COPIES", {})
    monkeypatch.setitem(sqlite_copy._FOLDER, "path", None)
    database = materialise(FIXTURES / "hermes" / "db_v1" / "input", tmp_path / "hermes") / "state.db"
    parents = sqlite_copy.private_copy(database)
    folder = Path(sqlite_copy.copies_folder())
    reader, writer = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(target=_copy_in_child, args=(database, writer))
    child.start()
    writer.close()
    childs = Path(reader.recv())
    child.join()
    assert child.exitcode == 0
    assert parents.is_file() and childs.is_file() and childs != parents
    assert parents.parent.parent == childs.parent.parent == folder
    assert list(tmp.iterdir()) == [folder]
    sqlite_copy._remove_folder(str(folder), os.getpid())  # what the parent does at exit
    assert list(tmp.iterdir()) == []


def test_an_interrupted_build_stops_its_workers_before_returning():
    sink = DiagnosticSink(lambda diagnostic: None)
    inputs, slots, _ = prepare([FIXTURES / "build" / "retained_run" / "input"], sink, max_line_bytes=1 << 20)
    written = []

    def write(line: bytes) -> None:
        written.append(line)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as interrupted:
        run_slots(slots, BuildOptions(capture_enabled=inputs.capture_enabled), sink, write, jobs=2)
    # The pool is shut down while the interrupt propagates, not when its traceback is released.
    assert interrupted.traceback and len(written) == 1
    assert multiprocessing.active_children() == []


def test_payloads_other_than_spooled_lines_come_through_segment_files_removed_after(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the build's spool folder is made
    read = []
    monkeypatch.setattr(workers, "read_payloads", lambda spooled: read.append(spooled) or read_payloads(spooled))
    sink = DiagnosticSink(lambda diagnostic: None)
    inputs, slots, _ = prepare([FIXTURES / "build" / "retained_run" / "input"], sink, max_line_bytes=1 << 20)
    written: list[bytes] = []
    run_slots(slots, BuildOptions(capture_enabled=inputs.capture_enabled), sink, written.append, jobs=2)
    assert b"".join(written) == (FIXTURES / "build" / "retained_run" / "expected.jsonl").read_bytes()
    assert [spooled.count for spooled in read] == [workers.CHUNK, len(slots) - workers.CHUNK]
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def short_tmp() -> Path:
    """An empty folder for a build's ``TMPDIR`` under a fork server, on a short path: the server's
    socket is made in it (``pymp-*/listener-*``), and a socket's path holds at most 107 bytes, which a
    test's own ``tmp_path`` below a long ``TMPDIR`` can pass (``OSError: AF_UNIX path too long``)."""
    folder = Path(tempfile.mkdtemp(prefix="ngt-", dir="/tmp" if os.path.isdir("/tmp") else None))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _forkserver() -> multiprocessing.context.BaseContext:
    """The context ``workers._context`` gives where ``fork`` is missing."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["ng_traj.assemble.workers", "ng_traj.contract.conversation"])
    return context


FORKSERVER_BUILD = """
import sys
from ng_traj.assemble import workers
from test_jobs import _forkserver
workers._context = _forkserver
from ng_traj.__main__ import main
main()
"""
"""``python -c`` code running ng-traj with its workers started by a fork server (arguments follow)."""


def test_a_parallel_build_under_the_forkserver_start_method_writes_what_one_process_writes(monkeypatch):
    """A fork server's child has the server, not the build, as its parent: the worker must not take
    that for a build that died (every worker killed itself at start)."""
    monkeypatch.setattr(workers, "_context", _forkserver)
    sink = DiagnosticSink(lambda diagnostic: None)
    inputs, slots, _ = prepare([FIXTURES / "build" / "retained_run" / "input"], sink, max_line_bytes=1 << 20)
    written: list[bytes] = []
    assert len(slots) > workers.CHUNK  # two chunks: two workers
    run_slots(slots, BuildOptions(capture_enabled=inputs.capture_enabled), sink, written.append, jobs=2)
    assert b"".join(written) == (FIXTURES / "build" / "retained_run" / "expected.jsonl").read_bytes()
    assert multiprocessing.active_children() == []


def test_the_cli_under_the_forkserver_start_method_builds_databases_and_leaves_no_copy(tmp_path, short_tmp):
    hermes = materialise(FIXTURES / "hermes" / "db_v6_lineage" / "input", tmp_path / "hermes")
    tmp = short_tmp
    inputs = (FIXTURES / "build" / "retained_run" / "input", hermes)
    expected = _build(inputs[0], tmp_path / "1.jsonl", 1, str(hermes))
    command = [sys.executable, "-c", FORKSERVER_BUILD, "build", *inputs, "-o", tmp_path / "2.jsonl", "--jobs", "2"]
    environment = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(command, capture_output=True, check=False, env=environment)
    assert result.returncode == expected.returncode == 0, result.stderr
    assert result.stderr.replace(b"2.jsonl", b"1.jsonl") == expected.stderr
    assert (tmp_path / "2.jsonl").read_bytes() == (tmp_path / "1.jsonl").read_bytes()
    assert list(tmp.iterdir()) == []


@pytest.mark.parametrize(("start_method", "sent"), [("fork", int), ("forkserver", list)])
def test_forked_workers_are_sent_positions_and_others_the_slots(monkeypatch, start_method, sent):
    """A forked worker inherits the plan, so a chunk's task names its slots by position; a worker a
    fork server started is sent the slots themselves. Both write what one process writes."""
    if start_method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {start_method} start method here")
    if start_method == "forkserver":
        monkeypatch.setattr(workers, "_context", _forkserver)
    chunks: list[type] = []
    results = workers._results

    def recorded(pool, slots, jobs, inherited=False):
        submit = pool.submit

        def submitted(task, start, chunk):
            chunks.append(type(chunk))
            return submit(task, start, chunk)

        pool.submit = submitted
        return results(pool, slots, jobs, inherited)

    monkeypatch.setattr(workers, "_results", recorded)
    sink = DiagnosticSink(lambda diagnostic: None)
    inputs, slots, _ = prepare([FIXTURES / "build" / "retained_run" / "input"], sink, max_line_bytes=1 << 20)
    written: list[bytes] = []
    run_slots(slots, BuildOptions(capture_enabled=inputs.capture_enabled), sink, written.append, jobs=2)
    assert b"".join(written) == (FIXTURES / "build" / "retained_run" / "expected.jsonl").read_bytes()
    assert chunks == [sent] * -(-len(slots) // workers.CHUNK)


def _children(pid: int) -> set[int]:
    """Pids whose parent is ``pid`` (``/proc``), zombies left out."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False


def _descendants(pid: int) -> set[int]:
    found, stack = set(), [pid]
    while stack:
        children = _children(stack.pop()) - found
        found |= children
        stack.extend(children)
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal is Linux's")
@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_workers_die_with_a_parent_killed_by_sigkill(tmp_path, short_tmp, method):
    """Forked workers by the kernel's parent-death signal; a fork server's workers (and so the server,
    whose pipe they hold) by watching the build."""
    corpus = generated_corpus(tmp_path / "corpus", 1500, 4, 11)
    start = ["-m", "ng_traj"] if method == "fork" else ["-c", FORKSERVER_BUILD]
    command = [sys.executable, *start, "build", corpus, "-o", tmp_path / "out.jsonl", "--jobs", "2"]
    spool = short_tmp  # a killed build cannot remove its spool folder: keep it out of the system's
    environment = {**os.environ, "TMPDIR": str(spool), "PYTHONPATH": os.pathsep.join(sys.path)}
    parent = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment)
    deadline = time.monotonic() + 60
    workers_seen: set[int] = set()
    wanted = 2 if method == "fork" else 4  # the workers; and the fork server and the resource tracker
    while len(workers_seen) < wanted and parent.poll() is None and time.monotonic() < deadline:
        workers_seen |= _descendants(parent.pid)
        time.sleep(0.01)
    assert len(workers_seen) >= wanted, "the build ended before its workers could be seen"
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers_seen) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [pid for pid in workers_seen if _alive(pid)] == []
    assert not (tmp_path / "out.jsonl").exists()


def test_the_role_summary_counts_calls_summed_per_server_as_it_counts_each_call():
    """Workers sum a trajectory's calls per server (``roles.server_usage``); the tally is the one
    counting every call on its own gives: calls, token sums, and null where no call reports a count."""
    from ng_traj.contract import TrajectoryModelCall
    from ng_traj.roles import RoleTally, call_usage, server_usage

    def call(name, prompt=None, completion=None, total=None):
        return TrajectoryModelCall.model_validate(
            {
                "response_metadata": {"model_ref": {"type": "responses_api_models", "name": name} if name else None},
                "token_stats": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total},
            }
        )

    calls = [call("policy", 3, 2, 5), call("judge", 1), call("policy", None, 4), call(None), call("judge", 2, None, 7)]
    assert server_usage(calls) == (("policy", 2, 3, 6, 5), ("judge", 2, 3, None, 7), (None, 1, None, None, None))
    roles = {"judge": "judge"}
    by_server, by_call = RoleTally(roles), RoleTally(roles)
    by_server.add(server_usage(calls))
    by_server.add(server_usage(calls[:2]))
    by_call.add((name, 1, *counts) for name, *counts in map(call_usage, [*calls, *calls[:2]]))
    assert by_server.to_json() == by_call.to_json()
    assert by_server.servers == by_call.servers == {"policy", "judge"}
    assert by_server.to_json()["judge"] == {
        "calls": 3,
        "prompt_tokens": 4,
        "completion_tokens": None,
        "total_tokens": 7,
    }


@pytest.mark.parametrize("make", ["spool", "copies"])
def test_a_signal_while_a_temporary_folder_is_made_leaves_no_folder(tmp_path, monkeypatch, make):
    """A SIGINT or SIGTERM arriving just after ``mkdtemp`` returned (before the folder's removal is
    arranged) is raised once the removal is arranged: the build's spool folder and its folder of
    SQLite copies are gone when the interrupt ends the block."""
    from ng_traj.io import atomic
    from ng_traj.writers import spool

    monkeypatch.setattr(atomic, "_interrupts", [])
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(sqlite_copy, "_FOLDER", {"path": None})
    made = tempfile.mkdtemp

    def interrupted(*args, **kwargs):
        folder = made(*args, **kwargs)
        atomic.interrupt(signal.SIGTERM, None)  # what the handler does when the signal arrives here
        return folder

    monkeypatch.setattr(tempfile, "mkdtemp", interrupted)
    with pytest.raises(KeyboardInterrupt):
        if make == "spool":
            with spool.spool_folder():
                pytest.fail("the interrupt is raised before the block runs")
        else:
            sqlite_copy.copies_folder()
    if make == "copies":  # removed when the process exits, as every build's folder of copies is
        registered = sqlite_copy._FOLDER["path"]
        assert registered is not None and Path(registered).parent == tmp_path
        sqlite_copy._remove_folder(registered, os.getpid())
    assert list(tmp_path.iterdir()) == []


KILLED_WORKER_BUILD = """
import os, signal, sys
from ng_traj.assemble import workers
build_chunk = workers._build_chunk
def dies_on_its_second_chunk(start, chunk):
    if start == workers.CHUNK:
        os.kill(os.getpid(), signal.SIGKILL)
    return build_chunk(start, chunk)
workers._build_chunk = dies_on_its_second_chunk
from ng_traj.__main__ import main
main()
"""
"""``python -c`` code running ng-traj whose worker building the second chunk is killed (SIGKILL)."""


@pytest.mark.parametrize("name", ["out.jsonl", "out.parquet"])
def test_a_worker_killed_midway_stops_the_build_with_an_error_that_says_so_and_writes_nothing(tmp_path, name):
    out = tmp_path / name
    command = [sys.executable, "-c", KILLED_WORKER_BUILD, "build", str(FIXTURES / "build" / "retained_run" / "input")]
    command += ["-o", str(out), "--jobs", "2"]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(command, capture_output=True, text=True, check=False, env=environment, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "error: a worker process died while it built rollouts (killed by a signal" in result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no output, no temporary left


def test_a_pool_broken_when_a_chunk_is_submitted_is_the_same_error_as_when_a_result_is_taken():
    """The pool tells of a dead worker to whichever call comes next: a ``submit`` as well as a
    ``result`` (one in nine times, when a worker was killed as the build ran)."""
    from concurrent.futures.process import BrokenProcessPool

    from ng_traj.diagnostics import RunError

    class BrokenPool:
        def submit(self, *args):
            raise BrokenProcessPool("A child process terminated abruptly")

    slots = [object()] * (workers.CHUNK + 1)
    with pytest.raises(RunError, match=r"^a worker process died while it built rollouts \(killed by a signal"):
        next(workers._results(BrokenPool(), slots, 2))  # type: ignore[arg-type]


STUCK_WORKER_BUILD = """
import os, signal, time
from ng_traj.assemble import workers
def first_dies_second_never_exits_on_sigterm(start, chunk):
    if start == 0:
        time.sleep(1)  # the other worker has taken its chunk
        os.kill(os.getpid(), signal.SIGKILL)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as a worker waiting for the task queue's lock does
    time.sleep(600)
workers._build_chunk = first_dies_second_never_exits_on_sigterm
from ng_traj.__main__ import main
main()
"""
"""``python -c`` code running ng-traj whose first worker is killed while the other is one that the
pool's SIGTERM does not stop (the pool then waited for it forever)."""


def test_a_worker_killed_while_another_cannot_be_stopped_ends_the_build_with_the_error(tmp_path):
    command = [sys.executable, "-c", STUCK_WORKER_BUILD, "build", str(FIXTURES / "build" / "retained_run" / "input")]
    command += ["-o", str(tmp_path / "out.jsonl"), "--jobs", "2"]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(command, capture_output=True, text=True, check=False, env=environment, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "error: a worker process died while it built rollouts" in result.stderr, result.stderr
    assert list(tmp_path.iterdir()) == []
