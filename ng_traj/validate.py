"""Validating trajectory files and Parquet datasets: the library behind ``ng-traj validate``.

Every record is checked with :mod:`ng_traj.checks`; this module streams the records of a file (or
the trajectories of a dataset, joined back from its tables), counts them and places each finding at
its file, line and byte offset.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ng_traj.checks import check_line, check_trajectory, is_bare_trajectory
from ng_traj.contract.revisions import keys_0_7
from ng_traj.diagnostics import Diagnostic, DiagnosticSink
from ng_traj.input_kind import CODE as NOT_TRAJECTORIES
from ng_traj.input_kind import not_trajectories
from ng_traj.io.files import os_reason
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES, JsonLine, deep_dumps, iter_json_lines, not_an_object

PROGRESS_BYTES = 1 << 20
"""Bytes between two progress reports of :func:`validate_file`."""


@dataclass
class Repeats:
    """The records seen so far, each as a digest of its JSON text with the place it was first seen:
    a record identical to an earlier one is reported as ``record_repeated`` (a warning).

    The text is the decoded value written again (orjson; the standard library past its depth or
    integer limits), so whitespace and escapes do not count; key order does. 16 bytes and a place
    are kept per record.
    """

    seen: dict[bytes, tuple[str, int]] = field(default_factory=dict)

    def check(self, value: Any, name: str, line: int, offset: int | None, sink: DiagnosticSink) -> None:
        """Report ``value`` at ``name``:``line`` when an identical record was seen before."""
        first = self.seen.setdefault(_digest(value), (name, line))
        if first == (name, line):
            return
        where = f"line {first[1]}" if first[0] == name else f"{first[0]}:{first[1]}"
        message = f"the same record as {where}: a copy (NeMo Gym writes each rollout once)"
        sink.add(Diagnostic("warning", REPEATED, message, path=name, line=line, offset=offset))


REPEATED = "record_repeated"


def _digest(value: Any) -> bytes:
    try:
        text = orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError: deeper than 255 levels, an integer past 64 bits
        text = deep_dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    return hashlib.blake2b(text, digest_size=16).digest()


@dataclass
class FileResult:
    """Counts for one validated file or dataset.

    ``with_0_7_keys`` counts the records carrying a field nemo-gym 0.7.0 added: when it is 0 the file
    fits both revisions of the contract; otherwise it needs nemo-gym 0.7.0's models.

    ``skipped`` counts, for a JSONL file, the lines skipped as unreadable (an unreadable file: one);
    for a dataset, which has no lines, the trajectories whose rows could not be read (a row of a
    table that names no trajectory: one), plus one when the dataset itself is broken and was not
    read to its end (``stopped``).
    """

    records: int = 0
    invalid: int = 0
    skipped: int = 0
    with_0_7_keys: int = 0
    stopped: bool = False
    unreadable: bool = False
    """The file could not be read (an ``unreadable_file`` error): what it holds is not known."""


def validate_file(
    path: Path,
    sink: DiagnosticSink,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    on_progress: Callable[[int], None] | None = None,
    repeats: Repeats | None = None,
) -> FileResult:
    """Validate every line of one JSONL file, streaming; report each finding to ``sink``.

    A file that holds no trajectory records (a session transcript, a capture file: see
    :mod:`ng_traj.input_kind`) is one ``input_not_trajectories`` error, and its lines are not checked.

    Args:
        on_progress: Called with the number of bytes read so far: about every
            :data:`PROGRESS_BYTES`, and once at the end with the whole size read.
        repeats: The records of the files validated before (shared across the files of one run);
            by default, this file's own.

    Returns:
        Records checked, records with at least one error, and lines skipped as unreadable.
    """
    result = FileResult()
    name = str(path)
    reason = not_trajectories(path, max_line_bytes=max_line_bytes)
    if reason is not None:
        sink.add(Diagnostic("error", NOT_TRAJECTORIES, reason, path=name))
        return result
    repeats = Repeats() if repeats is None else repeats
    lines = reported = done = 0
    try:
        for line in iter_json_lines(path, max_line_bytes=max_line_bytes):
            lines += 1
            done = line.offset + line.size
            if on_progress is not None and done - reported >= PROGRESS_BYTES:
                on_progress(reported := done)
            _validate_line(line, sink, result, name, repeats)
    except OSError as exc:
        sink.add(Diagnostic("error", "unreadable_file", os_reason(exc, name), path=name))
        result.skipped += 1
        result.unreadable = True
        return result
    if on_progress is not None:
        on_progress(done)
    if not lines:
        sink.add(Diagnostic("warning", "empty_input", "the file holds no records", path=name))
    return result


def validate_dataset(path: Path, sink: DiagnosticSink) -> FileResult:
    """Validate every trajectory of a Parquet dataset (rows joined back into records), streaming.

    Diagnostics name the dataset directory and, as the line, the trajectory's 1-based position
    (``trajectory_index`` + 1). A trajectory identical to an earlier one of the dataset is
    ``record_repeated`` (a dataset is not compared with the files named beside it: it may be their
    conversion). A missing or wrong manifest, table file or column, and a dataset of
    the first layout (loose table files), is one ``dataset_invalid`` error (``stopped``: what
    follows it is not read).
    """
    from ng_traj.writers.parquet_convert import dataset_records  # pyarrow: imported for datasets only
    from ng_traj.writers.parquet_layout import DatasetError

    result = FileResult()
    name = str(path)
    repeats = Repeats()
    try:
        for index, value in dataset_records(path, sink):
            if value is None:
                result.skipped += 1
                continue
            findings = check_trajectory(value)
            result.records += 1
            result.with_0_7_keys += bool(keys_0_7(value))
            result.invalid += int(any(f.severity == "error" for f in findings))
            for finding in findings:
                sink.add(finding.at(name, index + 1))
            repeats.check(value, name, index + 1, None, sink)
    except DatasetError as exc:
        sink.add(Diagnostic("error", "dataset_invalid", str(exc), path=name))
        result.skipped += 1
        result.stopped = True
    return result


def _validate_line(line: JsonLine, sink: DiagnosticSink, result: FileResult, name: str, repeats: Repeats) -> None:
    if line.problem is not None:
        sink.add(line.problem)
        if not line.ok:
            result.skipped += 1
            return
    if not isinstance(line.value, dict):
        sink.add(not_an_object(line))
        result.skipped += 1
        return
    findings, had_trajectory = check_line(line.value)
    result.records += int(had_trajectory)
    trajectory = line.value if is_bare_trajectory(line.value) else line.value.get("ng_trajectory")
    result.with_0_7_keys += int(isinstance(trajectory, dict) and bool(keys_0_7(trajectory)))
    result.invalid += int(any(f.severity == "error" for f in findings))
    for finding in findings:
        sink.add(finding.at(name, line.line, line.offset))
    if had_trajectory:
        repeats.check(line.value, name, line.line, line.offset, sink)
