"""One chunk of the plan assembled and encoded: the unit of work every parallel engine hands out.

A chunk is consecutive planned slots (``assemble/plan.py``) and its position in the plan. Slots are
independent (each is assembled from its own artifacts, ``assemble/build.py``), so a chunk can be
assembled anywhere the inputs can be read: a forked worker (``assemble/workers.py``) or a process of
another engine. :func:`assemble_chunk` does the whole job for one chunk and returns what the
coordinating process needs to write it in plan order: the encoded output (a segment file, or the
per-slot payloads), the diagnostics raised, in the order one process would raise them, and the facts
the build summary counts.

JSONL segments: given a segment path, the chunk's lines are written to that file (one ``write`` per
line, no copy to join them) and the coordinator appends the file to the output in chunk order
(``writers/spool.py``: ``os.sendfile``, a copy inside the kernel), so the bytes never pass through
the coordinator's Python or a pipe. The output is then byte-identical to a one-process build.
Other payloads (Parquet rows) can be pickled to a segment file the same way, one after another
(``pickled``), for the coordinator to load one at a time as it writes them.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from ng_traj.assemble.build import BuildOptions, Encode, Outcome, assemble_slot, outcome
from ng_traj.assemble.plan import Slot
from ng_traj.diagnostics import Diagnostic, DiagnosticSink
from ng_traj.writers.spool import Spooled, SpooledPayloads, write_payload


@dataclass(frozen=True, slots=True)
class ChunkResult:
    """What assembling one chunk gives the coordinator (small and picklable).

    Attributes:
        index: The chunk's position in the plan (0 for the first chunk).
        outcomes: One :class:`~ng_traj.assemble.build.Outcome` per slot, in slot order: the summary's
            facts and every diagnostic of the slot (assembly's first, then encoding's). Its
            ``payload`` is ``None`` when :attr:`segment` holds the chunk's output.
        segment: The file holding the chunk's encoded output: the JSONL lines of its slots, in
            order (:class:`~ng_traj.writers.spool.Spooled`), or their payloads pickled
            (:class:`~ng_traj.writers.spool.SpooledPayloads`); ``None`` when each outcome carries
            its own payload.
        rows: Rows written per table, when the chunk was written as Parquet files by the process that
            assembled it (``assemble/engine_ray.py``); else empty.
    """

    index: int
    outcomes: tuple[Outcome, ...]
    segment: Spooled | SpooledPayloads | None = None
    rows: dict[str, int] = field(default_factory=dict)


def assemble_chunk(
    options: BuildOptions,
    slots: Sequence[Slot],
    index: int,
    *,
    start: int,
    encode: Encode,
    segment: str | None = None,
    pickled: bool = False,
) -> ChunkResult:
    """Assemble and encode the slots of one chunk.

    Args:
        options: The build's options (the same in every process).
        slots: The chunk's planned slots, consecutive in the plan.
        index: The chunk's position among the chunks (names nothing here; returned for the caller).
        start: The output position of the chunk's first slot (``trajectory_index`` of Parquet rows).
        encode: Turns a built slot at an output position into its payload (``assemble/build.py``).
        segment: A path to write the chunk's payloads to, in order; they must be ``bytes`` (JSONL
            lines) unless ``pickled``. The file is created or truncated. ``None``: payloads stay in
            the outcomes.
        pickled: Pickle each payload to ``segment`` (``writers/spool.write_payload``), whatever
            its type, instead of writing its bytes.

    Returns:
        The chunk's :class:`ChunkResult`; diagnostics are collected, never written anywhere.

    Raises:
        OSError: The segment file could not be written.
    """
    done = []
    size = 0
    with open(segment, "wb") if segment is not None else contextlib.nullcontext() as handle:
        for offset, slot in enumerate(slots):
            collected: list[Diagnostic] = []
            result = outcome(start + offset, assemble_slot(slot, options, DiagnosticSink(collected.append)), encode)
            diagnostics = (*collected, *result.diagnostics)
            payload = result.payload
            if handle is not None:
                if pickled:
                    write_payload(handle, payload)
                else:
                    size += handle.write(payload)
                payload = None
            done.append(dataclasses.replace(result, payload=payload, diagnostics=diagnostics))
    if segment is None:
        return ChunkResult(index, tuple(done))
    spooled = SpooledPayloads(segment, len(done)) if pickled else Spooled(segment, size)
    return ChunkResult(index, tuple(done), spooled)
