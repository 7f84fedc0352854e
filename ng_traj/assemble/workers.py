"""``--jobs N``: assembling slots in worker processes, results consumed in output order.

Slots are independent (each is assembled from its own artifacts, ``assemble/build.py``), so workers
take consecutive chunks of the planned slots and assemble each with ``assemble/chunks.py``'s
``assemble_chunk``: JSONL lines go to one segment file per chunk (``writers/spool.py``), other
payloads (Parquet rows) are pickled to one such file per chunk, and the facts the summary counts and
the diagnostics raised come back through the pool. The parent appends the segments (or loads and
writes the payloads, one slot at a time) and replays the diagnostics strictly in slot order, so
output bytes, diagnostics and summary are the same as with one process. At most :data:`WINDOW`
chunks per worker are in flight, which bounds memory (and the spool) by a few chunks of rollouts
whatever the corpus size.

Workers are forked where the platform can (they start at once with the build modules loaded and
only ever use their own sink, never the parent's console or outputs), else started by a fork
server that has imported the build modules; either way a worker dies with the build, however the
build dies (``_die_with_parent``). A forked worker inherits the plan, so a chunk's task names its
slots by position (``start``, ``stop``) and nothing of the plan is pickled; a worker the fork server
started is sent each chunk's slots, pickled.

Interrupts are the parent's to handle. Ctrl-C and ``kill -- -PGID`` reach the whole process group,
and a forked worker would inherit the parent's handler that turns SIGTERM into
``KeyboardInterrupt``; an exception (or death) inside the pool's own pipe reads and writes leaves a
message half-sent, and the parent's pool then waits for its end forever. So a worker ignores
SIGINT, and on SIGTERM dies at once while it builds a chunk (or once orphaned), else as soon as it
has handed its result over and takes the next chunk; a worker told to stop by the pool exits as
usual. The interrupted parent cancels the chunks not started and shuts the pool down (the workers
finish the few chunks they hold) before its outputs are cleaned up. Submitting a chunk and shutting
the pool down are never cut short: an interrupt meanwhile (a second Ctrl-C, or the copy of the
signal ``timeout`` sends to the process group) is recorded and raised when they end; cut short,
they leave workers nobody tells to exit, and the interpreter waits for them forever.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gc
import multiprocessing
import os
import select
import signal
import sys
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ng_traj.assemble.build import BUILD_GC_THRESHOLD, BuildOptions, Encode, Outcome
from ng_traj.assemble.chunks import ChunkResult, assemble_chunk
from ng_traj.assemble.plan import Slot
from ng_traj.diagnostics import RunError
from ng_traj.io.atomic import deferred_interrupts, was_interrupted
from ng_traj.sources import sqlite_copy
from ng_traj.writers.spool import SpooledPayloads, SpoolLines, read_payloads, spool_folder

CHUNK = 8
"""Slots per task sent to a worker. Each task costs both sides a round trip through the pool's pipes
(pickling the slots and the result, waking the threads that move them); with four slots, 4-10 % of a
worker's time went between tasks, and a build took more CPU."""
WINDOW = 2
"""Chunks in flight per worker: :data:`CHUNK` x :data:`WINDOW` slots (16) are what a worker may
have built, or have queued, ahead of the slot the parent writes next, which bounds the memory of
Parquet rows waiting in the parent and the spool's disk space. A worker finishing its chunks waits
while the oldest chunk, another worker's, is still being built; one chunk per worker left workers
waiting about a fifth of the time."""

_state: dict[str, Any] = {}


def _start(
    options: BuildOptions,
    encode: Encode,
    spool: str | None = None,
    copies: str | None = None,
    plan: Sequence[Slot] | None = None,
    forked: bool = True,
) -> None:
    """A worker's set-up: ``spool`` is the folder its chunks' pickled payloads go to (``None``: they
    come back through the pool, or are lines ``encode`` spools itself); ``copies`` the build's folder
    of private SQLite copies (``sources/sqlite_copy.py``), which the build removes however the
    worker ends; ``plan`` the planned slots, inherited by a forked worker (never pickled: the fork
    copies the parent's memory), whose tasks then name their slots by position
    (:func:`_build_chunk`); ``forked`` false for a worker a fork server started (its parent process
    is the fork server, not the build)."""
    if copies is not None:
        sqlite_copy.use_copies_folder(copies)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _terminated)
    build = multiprocessing.parent_process()
    _state.update(
        options=options,
        encode=encode,
        spool=spool,
        plan=plan,
        build=build.pid if build is not None else os.getppid(),
        forked=forked,
        building=False,
        terminated=False,
    )
    _die_with_parent()
    gc.freeze()
    gc.set_threshold(*BUILD_GC_THRESHOLD)


PR_SET_PDEATHSIG = 1
"""``prctl`` option (``<linux/prctl.h>``): the signal the kernel sends this process when its parent dies."""


def _die_with_parent() -> None:
    """Have this worker killed when the build dies, however it dies (``SIGKILL`` included, which no
    handler of the build sees), so that no worker outlives the build. Linux only.

    A worker forked by the build has the kernel kill it when its parent dies
    (``prctl(PR_SET_PDEATHSIG, SIGKILL)``); a build that died before the call is caught by comparing
    the parent's pid with the build's. A worker started by a fork server is that server's child, not
    the build's: the server outlives the build while a worker holds its pipe, and dies with a SIGTERM
    sent to the process group, which must not kill a worker in the middle of a message. So such a
    worker watches the build itself: a thread waits on a pidfd of the build (``os.pidfd_open``,
    Linux 5.3) and kills the worker when the build ends; a build already gone kills it at once.
    Elsewhere (or without pidfds) an orphaned worker ends at its next SIGTERM or when the pool's pipe
    closes.
    """
    if not sys.platform.startswith("linux"):
        return
    build = _state["build"]
    if not _state["forked"]:
        _watch(build)
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != build:
        os.kill(os.getpid(), signal.SIGKILL)


def _watch(build: int) -> None:
    """Kill this worker when process ``build`` ends (a daemon thread waiting on its pidfd)."""
    try:
        pidfd = os.pidfd_open(build)
    except ProcessLookupError:
        os.kill(os.getpid(), signal.SIGKILL)
        return
    except (OSError, AttributeError):  # no pidfds (a kernel before 5.3)
        return
    threading.Thread(target=_kill_when_ready, args=(pidfd,), name="ng-traj-build-watch", daemon=True).start()


def _kill_when_ready(pidfd: int) -> None:
    select.select([pidfd], [], [])  # readable once the process has ended
    os.kill(os.getpid(), signal.SIGKILL)


def _orphaned() -> bool:
    """True once the build is gone (nobody reads the pool's pipes any more)."""
    if _state["forked"]:
        return os.getppid() != _state["build"]
    try:
        os.kill(_state["build"], 0)
    except OSError:  # gone, or its pid taken by a process of another user
        return True
    return False


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM in a worker: die now unless a message is on its way through the pool's pipes."""
    if _state["building"] or _orphaned():
        _die()
    _state["terminated"] = True


def _die() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _build_chunk(start: int, chunk: Sequence[Slot] | int) -> ChunkResult:
    """The worker's task: chunk number ``start // CHUNK`` assembled (JSONL lines, or other payloads
    pickled, to its segment file). ``chunk`` is the chunk's slots, or the position after its last
    slot in the plan the worker inherited (``_start``'s ``plan``)."""
    if _state["terminated"]:
        _die()
    if isinstance(chunk, int):
        chunk = _state["plan"][start:chunk]
    options, encode, spool = _state["options"], _state["encode"], _state["spool"]
    index = start // CHUNK
    segment, pickled = None, False
    if isinstance(encode, SpoolLines):
        segment = encode.segment(index)
    elif spool is not None:
        segment, pickled = os.path.join(spool, f"{index}.pickle"), True
    _state["building"] = True
    try:
        return assemble_chunk(options, chunk, index, start=start, encode=encode, segment=segment, pickled=pickled)
    finally:
        _state["building"] = False


def _context() -> multiprocessing.context.BaseContext:
    if "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["ng_traj.assemble.workers", "ng_traj.contract.conversation"])
    return context


def _load_conversation_models() -> None:
    """Import the conversation models and build the schemas that hold them, before the workers fork.

    A build imports them with its first conversation item (``contract/observations.py``), which is
    usually met in a worker: each worker would import and build them again (about 0.5 s of CPU, and
    memory no longer shared with the parent). Loaded here, they are loaded once.
    """
    from ng_traj.contract import AgentInvocation, AgentObservationBundle, TrajectoryRecord
    from ng_traj.contract.conversation import items_adapter

    items_adapter()
    for model in (AgentInvocation, AgentObservationBundle, TrajectoryRecord):
        model.model_rebuild()


@contextlib.contextmanager
def run_parallel(
    slots: Sequence[Slot], options: BuildOptions, encode: Encode, jobs: int
) -> Iterator[Iterator[tuple[Slot, Outcome]]]:
    """Assemble ``slots`` in ``jobs`` processes; the block iterates ``(slot, outcome)`` in slot order.

    ``jobs`` is capped at the number of CPUs and of chunks (at least one worker process is used).

    However the block ends (an interrupt included), the chunks not started are cancelled and the
    pool is shut down before the block's exception propagates.

    Raises:
        RunError: A worker process died (killed by a signal, by the system short of memory, say);
            the build stops.
        Exception: Whatever a worker raised unexpectedly (the build stops).
    """
    jobs = max(1, min(jobs, _cpus(), -(-len(slots) // CHUNK)))  # more could only wait
    _load_conversation_models()
    context = _context()
    inherited = context.get_start_method() == "fork"  # the workers have the plan: tasks name positions
    with contextlib.ExitStack() as stack:
        spool = None
        if not isinstance(encode, SpoolLines):  # payloads pickled to segment files of this folder
            spool = stack.enter_context(spool_folder())
        initargs = (options, encode, spool, sqlite_copy.copies_folder_in_use(), slots if inherited else None, inherited)
        pool = ProcessPoolExecutor(jobs, mp_context=context, initializer=_start, initargs=initargs)
        try:
            yield _results(pool, slots, jobs, inherited)
        finally:
            with deferred_interrupts():  # a second Ctrl-C (or the group's copy of the signal) must not cut it short
                pool.shutdown(wait=True, cancel_futures=True)
                for worker in multiprocessing.active_children():  # none unless the pool lost track of one
                    worker.kill()
                    worker.join()


def _cpus() -> int:
    """CPUs this process may run on (its affinity where the platform tells it, else the machine's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _results(
    pool: ProcessPoolExecutor, slots: Sequence[Slot], jobs: int, inherited: bool = False
) -> Iterator[tuple[Slot, Outcome]]:
    """``(slot, outcome)`` in slot order; ``inherited``: the workers hold ``slots`` (forked with them),
    so each task names its chunk by position instead of carrying its slots pickled.

    Raises:
        RunError: A worker process died; the pool says so to the next ``submit`` or ``result``.
    """
    pending: deque[tuple[int, Future[ChunkResult]]] = deque()
    try:
        for start in range(0, len(slots), CHUNK):
            stop = min(start + CHUNK, len(slots))
            chunk = stop if inherited else slots[start:stop]
            with deferred_interrupts():  # submit forks the workers, then starts the thread that stops them
                future = pool.submit(_build_chunk, start, chunk)
            pending.append((start, future))
            if len(pending) >= jobs * WINDOW:
                yield from _drain(slots, pending.popleft())
        while pending:
            yield from _drain(slots, pending.popleft())
    except BrokenProcessPool as exc:
        _kill_workers(pool)
        if was_interrupted():  # the interrupt killed it: the build stops as interrupted
            raise
        raise RunError(
            "a worker process died while it built rollouts (killed by a signal, or by the system"
            " short of memory?); the build stopped and wrote nothing (with less memory, try fewer --jobs)"
        ) from exc


def _kill_workers(pool: ProcessPoolExecutor) -> None:
    """Kill (SIGKILL) the workers of a pool one of whose workers died.

    The pool then stops the others with SIGTERM and waits for them to exit, but a worker that is
    not building leaves SIGTERM until it has taken its next chunk (see the module docstring), and
    one waiting for the lock of the task queue that the dead worker held never takes one: the build
    waited forever (about one kill in twenty, as the build ran). The pool's own ``_processes`` (a
    worker started by a fork server is no child of this process, so ``active_children`` misses it).
    """
    for worker in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(OSError, ValueError):
            worker.kill()


def _drain(slots: Sequence[Slot], entry: tuple[int, Future[ChunkResult]]) -> Iterator[tuple[Slot, Outcome]]:
    """The chunk's ``(slot, outcome)`` pairs; a segment of lines is the payload of its first slot (the
    others have none), pickled payloads are loaded as their slots come."""
    start, future = entry
    result = future.result()
    if isinstance(result.segment, SpooledPayloads):
        payloads = read_payloads(result.segment)
        for offset, done in enumerate(result.outcomes):
            yield slots[start + offset], dataclasses.replace(done, payload=next(payloads))
        payloads.close()  # the file is deleted
        return
    outcomes = list(result.outcomes)
    if result.segment is not None:
        outcomes[0] = dataclasses.replace(outcomes[0], payload=result.segment)
    for offset, done in enumerate(outcomes):
        yield slots[start + offset], done
