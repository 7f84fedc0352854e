"""Converting between trajectory JSONL and the Parquet dataset (``ng-traj convert``), both ways.

JSONL -> Parquet reads ``ng_trajectory`` records, or rollout rows carrying one (the ``--attach``
output, whose ``agent_ref.name``, ``ng_agent_observations.source``, reward, identity indexes and
compaction observations fill the convenience columns and the ``compactions`` table). The ``run``
column holds the converted file's name, which is all a converted file says of its run. Every record is validated and serialised
with ``record_json``, the one serialiser of a record, before it is split into rows.

Parquet -> JSONL joins each trajectory's rows back, validates the value and serialises it with
``record_json`` again, so JSONL -> Parquet -> JSONL gives the same bytes (the ``compactions`` table
and the convenience columns have no place in ``ng_trajectory`` and are not written back).

Records that fail the contract are reported (``ng-traj validate`` diagnostics) and skipped.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ng_traj.checks import TRAJECTORY_MISSING, findings_from_error, is_bare_trajectory
from ng_traj.contract import AgentObservationBundle, TrajectoryRecord
from ng_traj.contract.revisions import Release, earlier_loss, lost_in_earlier
from ng_traj.diagnostics import Diagnostic, DiagnosticSink, plural, safe_text
from ng_traj.input_kind import CODE as NOT_TRAJECTORIES
from ng_traj.input_kind import not_trajectories
from ng_traj.io.atomic import AbortWrite
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES, read_json_objects
from ng_traj.writers.jsonl import record_json
from ng_traj.writers.parquet import open_dataset
from ng_traj.writers.parquet_layout import CHUNK_SIZE
from ng_traj.writers.parquet_read import DatasetRecord, read_dataset
from ng_traj.writers.parquet_rows import Extras, extras_of


@dataclass
class Converted:
    """Counts of one conversion: trajectories written and records skipped."""

    written: int = 0
    skipped: int = 0


def _record(value: Any, sink: DiagnosticSink, path: str, line: int, prefix: str = "") -> TrajectoryRecord | None:
    try:
        return TrajectoryRecord.model_validate(value)
    except ValidationError as exc:
        for finding in findings_from_error(exc, value, prefix):
            sink.add(finding.at(path, line))
        return None


def _bundle(row: dict[str, Any], sink: DiagnosticSink, path: str, line: int) -> tuple[bool, Any]:
    """The row's ``ng_agent_observations`` validated (``None`` when absent), and whether it is usable;
    an invalid one is reported with the validate codes."""
    value = row.get("ng_agent_observations")
    if value is None:
        return True, None
    try:
        return True, AgentObservationBundle.model_validate(value)
    except ValidationError as exc:
        for finding in findings_from_error(exc, value, "ng_agent_observations"):
            sink.add(finding.at(path, line))
        return False, None


def jsonl_to_dataset(
    source: Path,
    target: str | Path,
    sink: DiagnosticSink,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    on_progress: Callable[[int], Any] | None = None,
    chunk_size: int = CHUNK_SIZE,
) -> Converted:
    """Write the trajectories of a JSONL file as a dataset at ``target`` (atomically), ``chunk_size``
    trajectories per chunk file.

    ``on_progress`` is called with the bytes of ``source`` read so far, after every line.

    When no trajectory converts, nothing is written: what ``target`` held stays as it was. A file that
    holds no trajectory records (``input_kind``) is one ``input_not_trajectories`` error.

    Raises:
        RunError: ``target`` cannot be written or holds something other than a dataset.
    """
    counts = Converted()
    name, run = str(source), safe_text(source.name)  # the run column is text: no surrogate escapes
    reason = not_trajectories(source, max_line_bytes=max_line_bytes)
    if reason is not None:  # a session transcript, a capture file: said once, not once per line
        sink.add(Diagnostic("error", NOT_TRAJECTORIES, reason, path=name))
        return counts
    with contextlib.suppress(AbortWrite), open_dataset(target, chunk_size=chunk_size) as dataset:
        for line in read_json_objects(source, sink, max_line_bytes=max_line_bytes):
            if on_progress is not None:
                on_progress(line.offset + line.size)
            row = line.value
            is_row = not is_bare_trajectory(row)
            value = row.get("ng_trajectory") if is_row else row
            if value is None:
                sink.add(TRAJECTORY_MISSING.at(name, line.line, line.offset))
                counts.skipped += 1
                continue
            record = _record(value, sink, name, line.line, "ng_trajectory" * is_row)
            usable, bundle = _bundle(row, sink, name, line.line) if is_row else (True, None)
            if record is None or not usable:
                counts.skipped += 1
                continue
            extras = extras_of(row, [bundle], run=run, source_file=run) if is_row else Extras(run=run)
            for problem in dataset.add(record, extras):
                sink.add(Diagnostic("warning", "value_out_of_range", problem, path=name, line=line.line))
            counts.written += 1
        if not counts.written:
            raise AbortWrite  # nothing to convert: a dataset already at ``target`` stays as it was
    return counts


def dataset_records(source: Path, sink: DiagnosticSink) -> Iterator[tuple[int, Any]]:
    """Yield ``(trajectory_index, JSON value)`` of every trajectory of a dataset; report broken rows
    (:func:`dataset_entries`)."""
    for record in dataset_entries(source, sink):
        yield record.index, record.value


def dataset_entries(source: Path, sink: DiagnosticSink) -> Iterator[DatasetRecord]:
    """Yield every trajectory of a dataset with its convenience columns; report broken rows.

    A trajectory whose rows do not form a value is reported (``dataset_invalid``) and yielded with
    the value ``None``.

    Raises:
        DatasetError: The dataset lacks a table or a column.
    """
    name = str(source)
    for record in read_dataset(source):
        if record.missing_before:
            first, end = record.index - record.missing_before, record.index - 1
            message = f"the trajectories table has no row for trajectory_index {first}{f'..{end}' * (end > first)}"
            sink.add(Diagnostic("error", "dataset_invalid", message, path=name, line=record.index + 1))
        if record.stray_rows:
            stray = record.stray_rows
            message = (
                f"{plural(stray, 'row')} before this trajectory {'names' if stray == 1 else 'name'} no trajectory "
                f"(or {'is' if stray == 1 else 'are'} out of order)"
            )
            sink.add(Diagnostic("error", "dataset_invalid", message, path=name, line=record.index + 1))
        if record.problem is not None:
            line = record.index + 1 if record.index >= 0 else None
            sink.add(Diagnostic("error", "dataset_invalid", record.problem, path=name, line=line))
        yield record


def dataset_to_jsonl(
    source: Path,
    write: Callable[[bytes], Any],
    sink: DiagnosticSink,
    on_record: Callable[[], Any] | None = None,
    release: Release = "0.7",
) -> Converted:
    """Write every trajectory of a dataset as JSONL through ``write``, in dataset order.

    ``on_record`` is called once per trajectory read (written or skipped). ``release`` is the
    contract revision written (``contract/revisions.py``): with ``pre-0.7`` a trajectory whose
    0.7-only fields hold values is reported (``earlier_release_dropped``, a warning naming them), as
    ``ng-traj build`` reports it.

    Raises:
        DatasetError: The dataset lacks a table or a column.
    """
    counts = Converted()
    for index, value in dataset_records(source, sink):
        if on_record is not None:
            on_record()
        record = _record(value, sink, str(source), index + 1) if value is not None else None
        if record is None:
            counts.skipped += 1
            continue
        if release == "pre-0.7" and (lost := lost_in_earlier(record)):
            message = f"rollout {record.rollout_id}: {earlier_loss(lost)}"
            sink.add(Diagnostic("warning", "earlier_release_dropped", message, path=str(source), line=index + 1))
        write(record_json(record, release) + b"\n")
        counts.written += 1
    return counts
