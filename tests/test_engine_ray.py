"""``--engine ray``: Ray Data tasks write what the local engine writes, byte for byte, with the same
diagnostics and summary. One local Ray (two CPUs) serves the whole module."""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson
import pytest
from test_hermes_golden import materialise
from test_opencode import materialise as materialise_opencode

from conftest import FIXTURES, run_cli
from ng_traj.assemble.build import BuildOptions, encode_line
from ng_traj.assemble.chunks import ChunkResult
from ng_traj.assemble.engine_ray import SCRATCH, in_order
from ng_traj.assemble.pipeline import build, prepare
from ng_traj.diagnostics import Diagnostic, DiagnosticSink
from ng_traj.io.atomic import atomic_file

LEGACY_ROWS = FIXTURES / "build" / "legacy_attachments" / "input" / "rollouts.jsonl"
FIXTURE_INPUTS = [
    "build/legacy_attachments/input",
    "build/retained_run/input",
    "native_e2e",
    "pi",
    "openclaw",
    "hermes",
    "claude_code",
    "codex",
    "judge",
]
WHEELS = sys.version_info < (3, 15) and sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64")
"""Where Ray 2.60 publishes wheels (the ``ray`` extra's marker)."""


def _ray():
    try:
        import ray
    except ImportError:
        message = "Ray is not installed (pip install 'ng-traj[ray]')"
        if WHEELS and os.environ.get("NG_TRAJ_REQUIRE_RAY") == "1":
            pytest.fail(f"{message}, though Ray has wheels for this Python and platform")
        where = "" if WHEELS else ", and none for this Python or platform"
        pytest.skip(f"{message}; Ray 2.60 publishes wheels for CPython 3.11 to 3.14{where}")
    return ray


@pytest.fixture(scope="module")
def local_ray():
    ray = _ray()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    yield ray
    ray.shutdown()


def _files(path: Path) -> dict[str, bytes]:
    if not path.is_dir():
        return {"": path.read_bytes()}
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _both(tmp_path: Path, name: str, *args: object) -> tuple[dict[str, bytes], dict[str, bytes], str]:
    """Build with each engine; returns both outputs' files and the (equal) report: diagnostics and summary."""
    runs = {}
    for engine in ("local", "ray"):
        out = tmp_path / engine / name
        out.parent.mkdir(parents=True, exist_ok=True)
        result = run_cli("build", *args, "-o", out, "--engine", engine)
        assert result.exit_code == 0, result.stderr
        runs[engine] = (_files(out), (result.stderr + result.stdout).replace(str(out), "OUT"))
    assert runs["ray"][1] == runs["local"][1]
    return runs["local"][0], runs["ray"][0], runs["local"][1]


@pytest.mark.parametrize("name", ["out.jsonl", "out.parquet"])
def test_the_fixtures_build_to_the_same_bytes(local_ray, tmp_path, name):
    local, ray, report = _both(tmp_path, name, *(FIXTURES / fixture for fixture in FIXTURE_INPUTS), "--verbose")
    assert ray == local
    assert len(local) == (1 if name == "out.jsonl" else 9)  # the file, or the manifest and eight tables
    assert "built 70 trajectories" in report and "11 errors, 41 warnings" in report


def _library_build(inputs: Path, out: Path, chunk_size: int, fmt: str, engine: str) -> list[Diagnostic]:
    """Build through the library with ``chunk_size`` rollouts per chunk; returns every diagnostic."""
    from ng_traj.assemble.engine_ray import RayEngine
    from ng_traj.writers.parquet import open_dataset

    diagnostics: list[Diagnostic] = []
    sink = DiagnosticSink(diagnostics.append)
    inputs_, slots, stats = prepare([inputs], sink, max_line_bytes=1 << 26)
    options = BuildOptions(capture_enabled=inputs_.capture_enabled)
    if engine == "ray":
        ray = RayEngine(chunk_size=chunk_size)
        with ray.open(str(out), fmt, {}) as (write, target):
            build(inputs_, slots, stats, options, sink, write, encode=target, engine=ray.run)
    elif fmt == "parquet":
        with open_dataset(out, chunk_size=chunk_size) as dataset:
            build(inputs_, slots, stats, options, sink, dataset.add_rows, encode=dataset.encoder())
    else:
        with atomic_file(out) as handle:
            build(inputs_, slots, stats, options, sink, handle.write, encode=encode_line)
    return diagnostics


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_generated_corpus_in_many_chunks_builds_to_the_same_bytes(local_ray, tmp_path, small_corpus, fmt):
    outputs, reports = {}, {}
    for engine in ("local", "ray"):
        out = tmp_path / f"{engine}.{fmt}"
        reports[engine] = _library_build(small_corpus, out, 16, fmt, engine)
        outputs[engine] = _files(out)
    assert outputs["ray"] == outputs["local"]
    assert reports["ray"] == reports["local"]
    assert [d.code for d in reports["local"]].count("invalid_json") == 1  # rollout 125's corrupt capture line
    if fmt == "parquet":
        assert sorted(outputs["ray"])[:2] == ["compactions/part-00000.parquet", "compactions/part-00001.parquet"]
        assert len([name for name in outputs["ray"] if name.startswith("trajectories/")]) == 9  # 130 rollouts / 16
        assert not any(name.startswith(".") for name in outputs["ray"])
    else:
        assert len(outputs["ray"][""].splitlines()) == 130


def test_the_cli_corpus_output_and_json_report_match(local_ray, tmp_path, small_corpus):
    local, ray, report = _both(tmp_path, "out.parquet", small_corpus, "--output-format", "json")
    assert ray == local
    summary = orjson.loads(report.splitlines()[-1])
    assert (summary["trajectories"], summary["output"], summary["diagnostics"]["errors"]) == (130, "OUT", 1)


def test_a_failed_projection_is_the_same_minimal_record(local_ray, tmp_path):
    rows = [orjson.loads(line) for line in LEGACY_ROWS.read_bytes().splitlines()]
    calls = rows[0]["ng_model_call_capture"]["calls"]
    calls.append({**copy.deepcopy(calls[0]), "call_index": 1})  # a model_call_id twice: the record cannot validate
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    local, ray, report = _both(tmp_path, "out.jsonl", path)
    assert ray == local
    assert orjson.loads(ray[""].splitlines()[0]) == {
        "schema_version": "1.0",
        "task_id": "0",
        "rollout_id": "0-0",
        "invocations": [],
        "turns": [],
        "model_calls": [],
        "tool_calls": [],
        "gaps": [{"code": "trajectory_projection_failed", "invocation_id": None, "detail": "ValidationError"}],
    }
    assert f"{path}:1: warning[projection_failed]: rollout 0-0: projection failed (model_call_id" in report


def _cli(*args: object, hide_ray: bool = False, tmp: Path | None = None) -> subprocess.CompletedProcess:
    hide = "import sys; sys.modules['ray'] = None; " if hide_ray else ""
    code = f"{hide}from ng_traj.__main__ import main; main()"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    if tmp is not None:  # ng-traj's temporary folder; Ray's stays where it was (its socket paths are short)
        env.update(TMPDIR=str(tmp), RAY_TMPDIR=os.environ.get("RAY_TMPDIR", tempfile.gettempdir()))
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, check=False, env=env)


def test_without_ray_the_engine_is_a_clear_error_naming_the_extra(tmp_path):
    out = tmp_path / "out.jsonl"
    result = _cli("build", FIXTURES / "pi", "-o", out, "--engine", "ray", hide_ray=True)
    assert result.returncode == 2
    assert (
        b"--engine ray needs Ray, which is not installed: pip install 'ng-traj[ray]' "
        b"(from a source checkout: pip install -e '.[ray]')"
    ) in result.stderr
    assert b"Traceback" not in result.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--engine", "spark"), b"--engine 'spark': choose from local, ray"),
        (("--ray-address", "auto"), b"--ray-address names the Ray cluster of --engine ray: add --engine ray"),
        (("--engine", "ray", "--ray-address", "ray://head:10001"), b"Ray Client connections are not supported"),
    ],
)
def test_engine_flags_are_checked(tmp_path, args, message):
    result = run_cli("build", FIXTURES / "pi", "-o", tmp_path / "out.jsonl", *args)
    assert result.exit_code == 2
    assert message.decode() in result.stderr


def test_a_build_that_starts_its_own_ray_writes_only_ng_trajs_output(tmp_path):
    """A separate process starts (and stops) a local Ray of one CPU: its logs stay off standard error."""
    _ray()
    out = tmp_path / "out.jsonl"
    inputs = FIXTURES / "build" / "retained_run" / "input"
    result = _cli("build", inputs, "-o", out, "--engine", "ray", "--jobs", "1", "--output-format", "json")
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    lines = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert [line["code"] for line in lines[:-1]] == ["invalid_json", "capture_duplicate_conflict", "invalid_json"]
    assert lines[-1]["trajectories"] == 13
    assert out.read_bytes() == (FIXTURES / "build" / "retained_run" / "expected.jsonl").read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]  # no segment folder or temporary file left


def test_workers_leave_no_private_copy_of_a_database_behind(tmp_path):
    """Ray ends its workers without their exit handlers: the copies they make of a Hermes ``state.db``
    and an OpenCode ``opencode.db`` are made in the driver's folder, which the driver removes."""
    _ray()
    hermes = materialise(FIXTURES / "hermes" / "db_v6_lineage" / "input", tmp_path / "hermes")
    opencode = materialise_opencode(FIXTURES / "opencode" / "db_v1" / "input", tmp_path / "opencode")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "out.jsonl"
    result = _cli("build", hermes, opencode, "-o", out, "--engine", "ray", "--jobs", "2", tmp=tmp)
    assert result.returncode == 0, result.stderr
    assert run_cli("build", hermes, opencode, "-o", tmp_path / "local.jsonl").exit_code == 0
    assert out.read_bytes() == (tmp_path / "local.jsonl").read_bytes()
    assert list(tmp.iterdir()) == []


def test_a_usage_error_met_in_a_task_is_said_as_with_the_local_engine(tmp_path):
    _ray()
    out = tmp_path / "out.jsonl"
    source = FIXTURES / "build" / "retained_run" / "input"
    # every string masked: the capture ids collide, which only the assembly of a rollout finds
    result = run_cli("build", source, "-o", out, "--engine", "ray", "--jobs", "1", "--redact-pattern", ".+")
    assert result.exit_code == 2
    assert "error: rollout 0-0: --redact masked a value the trajectory contract constrains" in result.stderr
    assert "internal error" not in result.stderr and not out.exists()


def test_an_interrupted_build_leaves_the_previous_output_and_nothing_else(tmp_path, small_corpus):
    """SIGINT while a task writes its chunk: exit 130, the previous dataset in place, no temporary left."""
    _ray()
    out = tmp_path / "out.parquet"
    assert run_cli("build", FIXTURES / "pi", "-o", out).exit_code == 0
    before = _files(out)
    code = "from ng_traj.__main__ import main; main()"
    command = [sys.executable, "-c", code, "build", str(small_corpus), "-o", str(out), "--engine", "ray", "-j", "1"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(f".out.parquet.tmp-*/{SCRATCH}*")):  # a task is writing its chunk
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    _stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert b"Traceback" not in stderr
    assert _files(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["out.parquet"]


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from ``/proc``)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            parents.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    found, stack = [], [pid]
    while stack:
        children = parents.get(stack.pop(), [])
        found.extend(children)
        stack.extend(children)
    return found


def _chunk_worker() -> int | None:
    """The pid of this test's Ray worker running a chunk task, if one runs."""
    for pid in _descendants(os.getpid()):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::MapBatches(_map_chunks)"):
                return pid
    return None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the Ray worker through /proc")
def test_a_killed_worker_is_retried_and_the_output_is_the_same(local_ray, tmp_path, small_corpus):
    local, ray = tmp_path / "local.parquet", tmp_path / "ray.parquet"
    expected = _library_build(small_corpus, local, 64, "parquet", "local")
    killed = []
    thread = threading.Thread(target=lambda: killed.append(_library_build(small_corpus, ray, 64, "parquet", "ray")))
    thread.start()
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(f".ray.parquet.tmp-*/{SCRATCH}*")):  # a task is writing its chunk
        assert thread.is_alive() and time.monotonic() < deadline
        time.sleep(0.01)
    worker = _chunk_worker()
    assert worker is not None
    os.kill(worker, signal.SIGKILL)
    thread.join(timeout=300)
    assert killed == [expected]  # the same diagnostics, in order
    assert _files(ray) == _files(local)


def test_chunk_results_are_taken_in_plan_order_whatever_order_they_come_in():
    arrived = [ChunkResult(k, ()) for k in (2, 0, 3, 1, 4)]
    assert [result.index for result in in_order(arrived)] == [0, 1, 2, 3, 4]
    with pytest.raises(RuntimeError, match="no result for chunk 1 of the plan"):
        list(in_order([ChunkResult(0, ()), ChunkResult(2, ())]))


@pytest.mark.parametrize("name", ["out.jsonl", "out.parquet"])
def test_a_build_of_nothing_leaves_the_output_as_it_was(tmp_path, name):
    _ray()  # without Ray, --engine ray stops before planning (tested with the missing extra)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "rollouts.jsonl").write_bytes(b"")
    reports = {}
    for engine in ("local", "ray"):
        (tmp_path / engine).mkdir()
        result = run_cli("build", empty, "-o", tmp_path / engine / name, "--engine", engine)
        reports[engine] = (result.exit_code, result.stderr.replace(str(tmp_path / engine / name), "OUT"))
        assert not (tmp_path / engine / name).exists()
    assert reports["ray"] == reports["local"]
    assert reports["ray"][0] == 1 and "no trajectory was built; OUT was not made" in reports["ray"][1]
