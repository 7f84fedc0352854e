"""Driving a build: every planned slot assembled in order, here or in worker processes, and tallied.

``run_slots`` is the one loop both engines share: it takes the slots' outcomes in plan order (from
``assemble_slot`` in this process, or from ``assemble/workers.py``), forwards their diagnostics,
hands each payload to the writer and adds it to the build's :class:`BuildTally`.
"""

from __future__ import annotations

import contextlib
import gc
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ng_traj.assemble.build import (
    BUILD_GC_THRESHOLD,
    BuildOptions,
    Encode,
    Outcome,
    assemble_slot,
    encode_line,
    outcome,
)
from ng_traj.assemble.plan import Slot
from ng_traj.assemble.workers import run_parallel
from ng_traj.diagnostics import DiagnosticSink
from ng_traj.io.atomic import check_interrupted
from ng_traj.roles import RoleTally


@dataclass
class BuildTally:
    """Totals over written trajectories."""

    trajectories: int = 0
    by_origin: Counter[str] = field(default_factory=Counter)
    gaps_by_code: Counter[str] = field(default_factory=Counter)
    model_calls: int = 0
    tool_calls: int = 0
    invocations: int = 0
    projection_failures: int = 0
    by_named: Counter[str] = field(default_factory=Counter)
    session_totals: Counter[str] = field(default_factory=Counter)
    by_role: RoleTally = field(default_factory=RoleTally)

    def add(self, slot: Slot, done: Outcome) -> None:
        self.trajectories += 1
        self.by_origin[_origin(slot)] += 1
        self.gaps_by_code.update(done.gap_codes)
        self.invocations += done.counts[0]
        self.model_calls += done.counts[1]
        self.tool_calls += done.counts[2]
        self.projection_failures += done.failed
        self.by_named.update(slot.named)
        self.session_totals.update(done.session_totals)
        self.by_role.add(done.usage)


def _origin(slot: Slot) -> str:
    if slot.path is None:
        return "capture_without_row" if slot.capture else "session_without_row"
    return "rollout_row" if slot.identity.derived else "rollout_row_without_identity"


def run_slots(
    slots: Sequence[Slot],
    options: BuildOptions,
    sink: DiagnosticSink,
    write: Callable[[Any], Any],
    on_slot: Callable[[Slot], None] | None = None,
    *,
    encode: Encode = encode_line,
    jobs: int = 1,
) -> BuildTally:
    """Assemble every slot in order, writing each payload as soon as it is built.

    With ``jobs`` > 1 slots are assembled in that many worker processes (``assemble/workers.py``);
    payloads, diagnostics and the tally are the same as with one. A payload of ``None`` is not
    written (the slot's line is in a segment written with an earlier slot of its chunk).
    """
    tally = BuildTally(by_role=RoleTally(options.roles))
    with young_collections(), _assembled(slots, options, sink, encode, jobs) as done_slots:
        for slot, done in done_slots:
            check_interrupted()  # an interrupt whose exception a finalizer swallowed stops the build here
            for diagnostic in done.diagnostics:
                sink.add(diagnostic)
            if done.payload is not None:  # a chunk's segment is written with its first slot
                write(done.payload)
            tally.add(slot, done)
            if on_slot is not None:
                on_slot(slot)
    return tally


@contextlib.contextmanager
def _assembled(
    slots: Sequence[Slot], options: BuildOptions, sink: DiagnosticSink, encode: Encode, jobs: int
) -> Iterator[Iterator[tuple[Slot, Outcome]]]:
    """``(slot, outcome)`` in slot order, assembled here or in ``jobs`` workers (stopped when the block ends)."""
    if jobs > 1:
        with run_parallel(slots, options, encode, jobs) as done_slots:
            yield done_slots
        return
    yield ((slot, outcome(i, assemble_slot(slot, options, sink), encode)) for i, slot in enumerate(slots))


@contextlib.contextmanager
def young_collections() -> Iterator[None]:
    """Keep the cycle collector off the long-lived objects (modules, schemas, the plan) while building.

    A rollout's objects die with it (reference counting frees them), so full collections would only
    walk the objects that live for the whole build, again and again; they are frozen instead and the
    collector runs less often. Restored afterwards.
    """
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*BUILD_GC_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()
