"""``--jobs N``: assembling slots in worker processes, results consumed in output order.

Slots are independent (each is assembled from its own artifacts, ``assemble/build.py``), so workers
take consecutive chunks of the planned slots and return, per slot, the payload to write, the facts
the summary counts and the diagnostics raised. The parent writes the payloads and replays the
diagnostics strictly in slot order, so output bytes, diagnostics and summary are the same as with
one process (PRODUCT.md §8). At most :data:`WINDOW` chunks per worker are in flight, which bounds
memory by a few chunks of rollouts whatever the corpus size.

Workers are forked where the platform can (they start at once with the build modules loaded and
only ever use their own sink, never the parent's console or outputs), else started by a fork
server that has imported the build modules.
"""

from __future__ import annotations

import dataclasses
import gc
import multiprocessing
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from ng_traj.assemble.build import BUILD_GC_THRESHOLD, BuildOptions, Encode, Outcome, assemble_slot, outcome
from ng_traj.assemble.plan import Slot
from ng_traj.diagnostics import Diagnostic, DiagnosticSink

CHUNK = 4
"""Slots per task sent to a worker."""
WINDOW = 4
"""Chunks in flight per worker."""

_state: dict[str, Any] = {}


def _start(options: BuildOptions, encode: Encode) -> None:
    _state["options"], _state["encode"] = options, encode
    gc.freeze()
    gc.set_threshold(*BUILD_GC_THRESHOLD)


def _build_chunk(start: int, chunk: Sequence[Slot]) -> list[Outcome]:
    options, encode = _state["options"], _state["encode"]
    done = []
    for offset, slot in enumerate(chunk):
        collected: list[Diagnostic] = []
        sink = DiagnosticSink(collected.append)
        result = outcome(start + offset, assemble_slot(slot, options, sink), encode)
        done.append(dataclasses.replace(result, diagnostics=(*collected, *result.diagnostics)))
    return done


def _context() -> multiprocessing.context.BaseContext:
    if "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["ng_traj.assemble.workers"])
    return context


def run_parallel(
    slots: Sequence[Slot], options: BuildOptions, encode: Encode, jobs: int
) -> Iterator[tuple[Slot, Outcome]]:
    """Assemble ``slots`` in ``jobs`` processes; yield ``(slot, outcome)`` in slot order.

    Raises:
        Exception: Whatever a worker raised unexpectedly (the build stops).
    """
    starts = range(0, len(slots), CHUNK)
    pending: deque[tuple[int, Future[list[Outcome]]]] = deque()
    with ProcessPoolExecutor(jobs, mp_context=_context(), initializer=_start, initargs=(options, encode)) as pool:
        queue = iter(starts)
        try:
            for start in queue:
                pending.append((start, pool.submit(_build_chunk, start, slots[start : start + CHUNK])))
                if len(pending) >= jobs * WINDOW:
                    yield from _drain(slots, pending.popleft())
            while pending:
                yield from _drain(slots, pending.popleft())
        except BaseException:
            for _, future in pending:
                future.cancel()
            raise


def _drain(slots: Sequence[Slot], entry: tuple[int, Future[list[Outcome]]]) -> Iterator[tuple[Slot, Outcome]]:
    start, future = entry
    for offset, done in enumerate(future.result()):
        yield slots[start + offset], done
