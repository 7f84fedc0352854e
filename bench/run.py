"""The build benchmark: speed against the parse and copy floors, ``--jobs`` scaling and memory, at two corpus sizes.

    python bench/run.py --sizes-mb 500 2000 --workdir /tmp/ng-traj-bench

For each size a corpus is generated with ``bench/corpus.py`` (kept in the work folder and reused),
then timed in child processes, one at a time:

* the *parse floor*: read every line of every input file and ``orjson.loads`` it (whole ``.json``
  files at once), nothing else, in one process;
* the *copy floor*: the parse floor, and every value ``orjson.dumps``-ed again and written to one
  output file, which is ``fsync``-ed at the end (the output is about as large as the input, as
  payloads are kept, so this is the least any build writing them can do);
* ``ng-traj build`` to JSONL and to Parquet with ``--engine ray --jobs 2`` (a local Ray of two CPUs,
  started by the build and included in its time; when Ray is installed, ``--no-ray`` leaves it out),
  whose CPU-seconds per rollout are printed with Ray's start-up (a Ray build of the 13-rollout
  fixture, timed first) taken off;
* ``ng-traj build`` to JSONL and to Parquet, with ``--jobs 1`` and ``--jobs 2``, and to JSONL with
  ``--no-payloads`` (``--jobs 1``), whose output is small, so it is compared with the parse floor;

each ``--repeat`` times (the fastest run is shown, peak RSS is the largest seen). Then, at the
smallest size, the same bytes as many small rollouts (``--small-calls`` policy calls per rollout
instead of ``--calls``): both floors and a JSONL build with one job, which shows what a rollout
costs apart from its bytes.

First, and again before each ``--jobs`` pair, how much parallel capacity the machine has right now
(two busy processes against one), since ``--jobs 2`` cannot go faster than that. Printed per run: input MB, seconds, MB/s, rollouts/s, peak
RSS (of the largest process, from ``wait4``), the ratio to the parse floor's and to the copy floor's
speed, and the speed-up of two jobs over one. Last, how peak RSS grew per rollout between the two
sizes. The targets: JSONL with one job >= 0.8 of the copy floor, Parquet >= 0.6 of it, JSONL
``--no-payloads`` >= 0.6 of the parse floor; speed-up >= 1.6 with two jobs (when the capacity is
about 2); growth of at most 512 bytes per rollout.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus import generate  # noqa: E402


def parse_floor(root: Path) -> int:
    """Read and ``orjson.loads`` every input line under ``root``; return the number of values."""
    count = 0
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder) / name
            if name.endswith(".json"):
                orjson.loads(path.read_bytes())
                count += 1
                continue
            with open(path, "rb", buffering=1 << 20) as handle:  # the build's read buffer (io/lines.py)
                for line in handle:
                    if line.strip():
                        with contextlib.suppress(orjson.JSONDecodeError):
                            orjson.loads(line)
                        count += 1
    return count


def copy_floor(root: Path, out: Path) -> int:
    """The parse floor, and every value serialised again and written to ``out`` (one line each), fsync-ed;
    returns the number of values."""
    count = 0
    with open(out, "wb", buffering=1 << 20) as target:
        for folder, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(files):
                path = Path(folder) / name
                if name.endswith(".json"):
                    target.write(orjson.dumps(orjson.loads(path.read_bytes()), option=orjson.OPT_APPEND_NEWLINE))
                    count += 1
                    continue
                with open(path, "rb", buffering=1 << 20) as handle:
                    for line in handle:
                        if line.strip():
                            with contextlib.suppress(orjson.JSONDecodeError):
                                target.write(orjson.dumps(orjson.loads(line), option=orjson.OPT_APPEND_NEWLINE))
                            count += 1
        target.flush()
        os.fsync(target.fileno())
    return count


@dataclass
class Run:
    """One timed child process."""

    label: str
    seconds: float
    peak_mib: float
    code: int


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def timed(label: str, command: list[str], repeat: int = 1, output: Path | None = None) -> Run:
    """Run ``command`` ``repeat`` times; return its best wall time and the peak RSS of its largest process.

    The best of several runs is the one least disturbed by other work on a shared machine. ``output``
    is removed before each run (and after the last), so every build writes a fresh output. Children
    may write bytecode caches (``PYTHONDONTWRITEBYTECODE`` is dropped), as an installed package has
    them: otherwise every run would compile ng-traj's modules again.
    """
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    runs = []
    for _ in range(repeat):
        if output is not None:
            _remove(output)
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        runs.append(Run(label, seconds, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)))
    if output is not None:
        _remove(output)
    best = min(runs, key=lambda run: run.seconds)
    return Run(label, best.seconds, max(run.peak_mib for run in runs), max(run.code for run in runs))


_BUSY = "x = 0\nfor i in range(20_000_000):\n    x += i\n"


def parallel_capacity() -> float:
    """How much more work two busy processes do than one, now, on this machine (2.0 on two free cores)."""
    command = [sys.executable, "-c", _BUSY]
    start = time.perf_counter()
    subprocess.run(command, check=True)
    one = time.perf_counter() - start
    start = time.perf_counter()
    for process in [subprocess.Popen(command) for _ in range(2)]:
        process.wait()
    return 2 * one / (time.perf_counter() - start)


def corpus(workdir: Path, size_mb: int, calls: int, seed: int) -> tuple[Path, int, int]:
    """The corpus of ``size_mb`` (generated once); returns its folder, bytes and rollouts."""
    root = workdir / f"corpus_{size_mb}mb_c{calls}_s{seed}"
    marker = root / ".done"
    if not marker.exists():
        shutil.rmtree(root, ignore_errors=True)
        totals = generate(root, rollouts=None, calls=calls, seed=seed, size_bytes=size_mb * 1_000_000)
        marker.write_text(f"{totals.rollouts} {totals.bytes}")
    rollouts, size = (int(part) for part in marker.read_text().split())
    return root, size, rollouts


HEADER = (
    f"{'run':<32}{'seconds':>9}{'MB/s':>9}{'rollouts/s':>12}{'peak RSS MiB':>14}"
    f"{'vs parse':>10}{'vs copy':>10}{'x jobs 1':>10}"
)


@dataclass
class Floors:
    """The two floors of one corpus, timed."""

    parse: Run
    copy: Run


def floors(root: Path, workdir: Path, repeat: int) -> Floors:
    """Time the parse floor and the copy floor of the corpus at ``root``."""
    script = str(HERE / "run.py")
    parse = timed("parse floor", [sys.executable, script, "--floor", str(root)], repeat)
    out = workdir / "copy_floor.jsonl"
    copy = timed("copy floor", [sys.executable, script, "--copy-floor", str(root), str(out)], repeat, out)
    return Floors(parse, copy)


def build_command(root: Path, out: Path, jobs: int, *extra: str) -> list[str]:
    """``ng-traj build ROOT -o OUT -q --jobs JOBS EXTRA...`` in this interpreter."""
    return [sys.executable, "-m", "ng_traj", "build", str(root), "-o", str(out), "-q", "--jobs", str(jobs), *extra]


def bench_size(workdir: Path, size_mb: int, args: argparse.Namespace) -> list[tuple[str, float, int]]:
    """Floors and builds of one corpus size; returns ``(label, peak RSS MiB, rollouts)`` per build."""
    root, size, rollouts = corpus(workdir, size_mb, args.calls, args.seed)
    mb = size / 1e6
    measured = floors(root, workdir, args.repeat)
    print(f"\ncorpus {root.name}: {mb:.0f} MB, {rollouts} rollouts")
    print(HEADER)
    _line(measured.parse, mb, rollouts, measured, None)
    _line(measured.copy, mb, rollouts, measured, None)
    results = []
    for fmt in args.formats:
        single = None
        if len(args.jobs) > 1:
            print(f"{'(parallel capacity now)':<32}{parallel_capacity():>9.2f}")
        for jobs in args.jobs:
            out = workdir / f"out_{size_mb}.{fmt}"
            run = timed(f"build {fmt} --jobs {jobs}", build_command(root, out, jobs), args.repeat, out)
            single = single or run.seconds
            _line(run, mb, rollouts, measured, single)
            results.append((run.label, run.peak_mib, rollouts))
        if args.ray:
            out = workdir / f"out_{size_mb}.{fmt}"
            run = timed(f"build {fmt} ray, 2 CPUs", build_command(root, out, 2, "--engine", "ray"), args.repeat, out)
            _line(run, mb, rollouts, measured, single)
            per = 2 * (run.seconds - args.ray_start) / rollouts
            print(f"{'':<32}CPU-seconds per rollout on Ray, its start-up taken off: {per:.4f}")
            results.append((run.label, run.peak_mib, rollouts))
    if "jsonl" in args.formats:
        out = workdir / f"out_{size_mb}_no_payloads.jsonl"
        run = timed("build jsonl --no-payloads", build_command(root, out, 1, "--no-payloads"), args.repeat, out)
        _line(run, mb, rollouts, measured, None)
        results.append((run.label, run.peak_mib, rollouts))
    return results


def bench_small_rollouts(workdir: Path, size_mb: int, args: argparse.Namespace) -> None:
    """The same bytes as many small rollouts: floors and one JSONL build with one job."""
    root, size, rollouts = corpus(workdir, size_mb, args.small_calls, args.seed)
    mb = size / 1e6
    measured = floors(root, workdir, args.repeat)
    print(f"\nmany small rollouts, corpus {root.name}: {mb:.0f} MB, {rollouts} rollouts")
    print(HEADER)
    _line(measured.parse, mb, rollouts, measured, None)
    _line(measured.copy, mb, rollouts, measured, None)
    out = workdir / f"out_{size_mb}_small.jsonl"
    _line(timed("build jsonl --jobs 1", build_command(root, out, 1), args.repeat, out), mb, rollouts, measured, None)


def ray_start(workdir: Path, repeat: int) -> float:
    """Seconds of a ``--engine ray --jobs 2`` build of the 13-rollout fixture: Ray's start and stop, mostly."""
    fixture = HERE.parent / "fixtures" / "build" / "retained_run" / "input"
    out = workdir / "out_ray_start.jsonl"
    run = timed("ray start-up", build_command(fixture, out, 2, "--engine", "ray"), repeat, out)
    print(f"a Ray build of 13 rollouts (its start-up and shutdown): {run.seconds:.1f} s")
    return run.seconds


def _line(run: Run, mb: float, rollouts: int, measured: Floors, single: float | None) -> None:
    speedup = f"{single / run.seconds:>10.2f}" if single else f"{'':>10}"
    print(
        f"{run.label:<32}{run.seconds:>9.1f}{mb / run.seconds:>9.1f}{rollouts / run.seconds:>12.1f}"
        f"{run.peak_mib:>14.1f}{measured.parse.seconds / run.seconds:>10.2f}"
        f"{measured.copy.seconds / run.seconds:>10.2f}{speedup}" + ("" if run.code == 0 else f"  (exit {run.code})")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[200, 2000])
    parser.add_argument("--calls", type=int, default=16)
    parser.add_argument("--small-calls", type=int, default=2, help="policy calls per rollout of the many-small corpus")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--formats", nargs="+", default=["jsonl", "parquet"])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement; the fastest is shown")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ng-traj-bench"))
    parser.add_argument(
        "--ray",
        action=argparse.BooleanOptionalAction,
        default=importlib.util.find_spec("ray") is not None,
        help="time --engine ray on a local Ray of two CPUs (default: when Ray is installed)",
    )
    parser.add_argument("--floor", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--copy-floor", type=Path, nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor is not None:
        parse_floor(args.floor)
        return
    if args.copy_floor is not None:
        copy_floor(*args.copy_floor)
        return
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"parallel capacity now: two busy processes do {parallel_capacity():.2f}x the work of one (2.00 when free)")
    args.ray_start = ray_start(args.workdir, args.repeat) if args.ray else 0.0
    sizes = sorted(args.sizes_mb)
    measured = {size: bench_size(args.workdir, size, args) for size in sizes}
    if args.small_calls:
        bench_small_rollouts(args.workdir, sizes[0], args)
    if len(sizes) < 2:
        return
    print(f"\npeak RSS growth per rollout between {sizes[0]} MB and {sizes[-1]} MB:")
    for (label, small, n_small), (_, large, n_large) in zip(measured[sizes[0]], measured[sizes[-1]], strict=True):
        per = (large - small) * 1024 * 1024 / max(1, n_large - n_small)
        print(f"  {label:<32}{small:>8.1f} -> {large:>8.1f} MiB  ({per:+.0f} bytes per rollout)")


if __name__ == "__main__":
    main()
