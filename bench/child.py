"""Running an ``ng-traj`` command in a child process and measuring it (shared by the benchmarks)."""

from __future__ import annotations

import resource
import subprocess
import sys
import time


def measure(*args: str) -> tuple[float, float, int]:
    """Run ``python -m ng_traj ARGS`` in a child; return (wall seconds, peak RSS MiB, exit code).

    ``ru_maxrss`` of children is the maximum over every child so far: measure the smallest input first.
    """
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ng_traj", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
    )
    seconds = time.perf_counter() - start
    return seconds, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, done.returncode
