"""CPU seconds of each assembly stage of a one-job JSONL build, in one process, best of several passes.

Plans the corpus once, then assembles and encodes every slot ``--passes`` times (nothing is written)
with the stages' entry points wrapped in a ``time.process_time`` timer: deriving the captured calls'
records, the projection, encoding, the reference join, the row bundle's validation, the judge merge,
and, for comparison, loading native sessions and re-reading rows. CPU time rather than wall time, so
a busy machine inflates it less; compare two trees by running them one after the other, several
times, and keeping each stage's best.

    python bench/assembly_stages.py /tmp/ngb/corpus_500mb_c16_s7 --passes 3 [--no-payloads]
"""

from __future__ import annotations

import argparse
import gc
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ng_traj.assemble.build as build
import ng_traj.assemble.run as run
import ng_traj.sources.capture.store as store
from ng_traj.assemble.pipeline import prepare
from ng_traj.diagnostics import DiagnosticSink
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES

BUILD_STAGES = (
    "build_trajectory",
    "join_bundles",
    "validated_bundle",
    "judge_calls_of_row",
    "attach_bundle",
    "capture_from_evidence",
    "load_unit",
    "load_row",
)
"""Functions ``assemble/build.py`` calls by their module-level names (each timed where it is called)."""

ASSEMBLY = (
    "derive",
    "capture_from_evidence",
    "build_trajectory",
    "encode",
    "join_bundles",
    "validated_bundle",
    "judge_calls_of_row",
    "attach_bundle",
)
"""The stages summed as ``assembly+encoding`` (capture derivation to the encoded line)."""


def _timed(seconds: Counter[str], name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            seconds[name] += time.process_time() - start

    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--no-payloads", action="store_true")
    args = parser.parse_args()
    seconds: Counter[str] = Counter()
    store._record = _timed(seconds, "derive", store._record)
    for name in BUILD_STAGES:
        setattr(build, name, _timed(seconds, name, getattr(build, name)))
    run.outcome = _timed(seconds, "encode", run.outcome)
    inputs, slots, _ = prepare([args.corpus], DiagnosticSink(), max_line_bytes=DEFAULT_MAX_LINE_BYTES)
    options = build.BuildOptions(capture_enabled=inputs.capture_enabled, payloads=not args.no_payloads)
    best: dict[str, float] = {}
    for _ in range(args.passes):
        seconds.clear()
        gc.collect()
        start = time.process_time()
        run.run_slots(slots, options, DiagnosticSink(), lambda payload: None)
        passed = {**seconds, "loop": time.process_time() - start}
        passed["assembly+encoding"] = sum(passed.get(name, 0.0) for name in ASSEMBLY)
        best = {key: min(value, best.get(key, value)) for key, value in passed.items()}
    for key, value in sorted(best.items()):
        print(f"{key:24s} {value:7.3f} s")


if __name__ == "__main__":
    main()
