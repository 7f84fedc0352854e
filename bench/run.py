"""The build benchmark: speed against the parse floor, ``--jobs`` scaling and memory, at two corpus sizes.

    python bench/run.py --sizes-mb 200 2000 --workdir /tmp/ng-traj-bench

For each size a corpus is generated with ``bench/corpus.py`` (kept in the work folder and reused),
then timed in child processes, one at a time:

* the *parse floor*: read every line of every input file and ``orjson.loads`` it (whole ``.json``
  files at once), nothing else, in one process;
* ``ng-traj build`` to JSONL and to Parquet, with ``--jobs 1`` and ``--jobs 2``, and with
  ``--engine ray --jobs 2`` (a local Ray of two CPUs, started by the build and included in its time;
  when Ray is installed, ``--no-ray`` leaves it out), whose CPU-seconds per rollout are printed
  with Ray's start-up (a Ray build of the 13-rollout fixture, timed first) taken off;

each ``--repeat`` times (the fastest run is shown, peak RSS is the largest seen).

First, how much parallel capacity the machine has right now (two busy processes against one), since
``--jobs 2`` cannot go faster than that. Printed per run: input MB, seconds, MB/s, rollouts/s, peak
RSS (of the largest process, from ``wait4``), the ratio to the parse floor's speed, and the speed-up
of two jobs over one. Last, how peak RSS grew per rollout between the two sizes. The targets: ratio >= 0.5 with one
job, speed-up >= 1.6 with two, growth of at most a few hundred bytes per rollout.
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
    is removed before each run (and after the last), so every build writes a fresh output.
    """
    runs = []
    for _ in range(repeat):
        if output is not None:
            _remove(output)
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


def bench_size(workdir: Path, size_mb: int, args: argparse.Namespace) -> list[tuple[str, float, float, float]]:
    root, size, rollouts = corpus(workdir, size_mb, args.calls, args.seed)
    mb = size / 1e6
    floor = timed("parse floor", [sys.executable, str(HERE / "run.py"), "--floor", str(root)], args.repeat)
    print(f"\ncorpus {root.name}: {mb:.0f} MB, {rollouts} rollouts")
    print(f"{'run':<28}{'seconds':>9}{'MB/s':>9}{'rollouts/s':>12}{'peak RSS MiB':>14}{'vs floor':>10}{'x jobs 1':>10}")
    _line(floor, mb, rollouts, floor.seconds, None)
    results = []
    for fmt in args.formats:
        single = None
        for jobs in args.jobs:
            out = workdir / f"out_{size_mb}.{fmt}"
            command = [sys.executable, "-m", "ng_traj", "build", str(root), "-o", str(out), "-q", "--jobs", str(jobs)]
            run = timed(f"build {fmt} --jobs {jobs}", command, args.repeat, out)
            single = single or run.seconds
            _line(run, mb, rollouts, floor.seconds, single)
            results.append((run.label, run.peak_mib, floor.seconds / run.seconds, single / run.seconds))
        if args.ray:
            out = workdir / f"out_{size_mb}.{fmt}"
            command = [sys.executable, "-m", "ng_traj", "build", str(root), "-o", str(out), "-q", "--engine", "ray"]
            run = timed(f"build {fmt} ray, 2 CPUs", [*command, "--jobs", "2"], args.repeat, out)
            _line(run, mb, rollouts, floor.seconds, single)
            per = 2 * (run.seconds - args.ray_start) / rollouts
            print(f"{'':<28}CPU-seconds per rollout on Ray, its start-up taken off: {per:.4f}")
            results.append((run.label, run.peak_mib, floor.seconds / run.seconds, single / run.seconds))
    return [(label, peak, ratio, rollouts) for label, peak, ratio, _ in results]


def ray_start(workdir: Path, repeat: int) -> float:
    """Seconds of a ``--engine ray --jobs 2`` build of the 13-rollout fixture: Ray's start and stop, mostly."""
    fixture = HERE.parent / "fixtures" / "build" / "retained_run" / "input"
    out = workdir / "out_ray_start.jsonl"
    command = [sys.executable, "-m", "ng_traj", "build", str(fixture), "-o", str(out), "-q", "--engine", "ray"]
    run = timed("ray start-up", [*command, "--jobs", "2"], repeat, out)
    print(f"a Ray build of 13 rollouts (its start-up and shutdown): {run.seconds:.1f} s")
    return run.seconds


def _line(run: Run, mb: float, rollouts: int, floor_seconds: float, single: float | None) -> None:
    speedup = f"{single / run.seconds:>10.2f}" if single else f"{'':>10}"
    print(
        f"{run.label:<28}{run.seconds:>9.1f}{mb / run.seconds:>9.1f}{rollouts / run.seconds:>12.1f}"
        f"{run.peak_mib:>14.1f}{floor_seconds / run.seconds:>10.2f}{speedup}"
        + ("" if run.code == 0 else f"  (exit {run.code})")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[200, 2000])
    parser.add_argument("--calls", type=int, default=16)
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
    args = parser.parse_args()
    if args.floor is not None:
        parse_floor(args.floor)
        return
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"parallel capacity now: two busy processes do {parallel_capacity():.2f}x the work of one (2.00 when free)")
    args.ray_start = ray_start(args.workdir, args.repeat) if args.ray else 0.0
    sizes = sorted(args.sizes_mb)
    measured = {size: bench_size(args.workdir, size, args) for size in sizes}
    if len(sizes) < 2:
        return
    print(f"\npeak RSS growth per rollout between {sizes[0]} MB and {sizes[-1]} MB:")
    for (label, small, _, n_small), (_, large, _, n_large) in zip(measured[sizes[0]], measured[sizes[-1]], strict=True):
        per = (large - small) * 1024 * 1024 / max(1, n_large - n_small)
        print(f"  {label:<28}{small:>8.1f} -> {large:>8.1f} MiB  ({per:+.0f} bytes per rollout)")


if __name__ == "__main__":
    main()
