"""Model-call capture stores: ``<rollout_id>.capture.jsonl`` files and ``.capture.incomplete`` markers.

Format: NeMo Gym's ``CaptureStore`` (``nemo_gym/base_responses_api_model.py``, unchanged from commit
``07d6b0d07`` to nemo-gym 0.7.0). One directory per model-server run; one append-only
JSONL file per rollout id, one raw exchange per line in completion order; an empty
``<rollout_id>.capture.incomplete`` marker means a write was lost. A capture file's rollout id is its
file name.

Reading is the reference's *tolerant* reader: blank lines skipped; every other line, valid or not,
takes the next ``call_index`` (so valid records may have holes); lines that are not JSON objects, or
that fail to build a ``ModelCallRecord``, are counted as unreadable. Unlike the reference, so is an
object with none of a capture line's keys (``{"foo": 1}``, a trajectory in a misnamed file), which
the reference would turn into an all-null call. Several stores may hold the same
rollout (policy and judge servers): their calls are unioned, ordered by (``completed_at``, store path,
line), and de-duplicated by ``model_call_id``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ng_traj.contract.capture import ModelCallRecord
from ng_traj.diagnostics import Diagnostic, DiagnosticSink
from ng_traj.io.compression import logical_name
from ng_traj.io.files import os_reason
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES, iter_json_lines, not_an_object
from ng_traj.sources.capture.record import derive_record, is_capture_line, not_capture_line_message

VALID_ID = re.compile(r"[A-Za-z0-9._-]+")
RAW_KEYS = {"latency_total_ms": "latency_ms"}
"""Record fields named differently in the raw capture line (for messages)."""
CAPTURE_SUFFIX = ".capture.jsonl"
INCOMPLETE_SUFFIX = ".capture.incomplete"


def capture_rollout_id(name: str) -> str | None:
    """Rollout id named by a capture file or marker name, else ``None``.

    Only names NeMo Gym's store can write count: a non-empty id of ASCII letters, digits, ``.``, ``_``
    and ``-`` (``CaptureStore`` rejects every other id). A compression suffix is dropped first:
    ``<id>.capture.jsonl.zst`` is a capture file of ``<id>``.
    """
    name = logical_name(name)
    for suffix in (CAPTURE_SUFFIX, INCOMPLETE_SUFFIX):
        if name.endswith(suffix) and len(name) > len(suffix):
            rollout = name[: -len(suffix)]
            return rollout if VALID_ID.fullmatch(rollout) else None
    return None


@dataclass(frozen=True, slots=True)
class CaptureFiles:
    """What one store holds for one rollout id: its capture file and/or its incomplete marker.

    The rollout id is not held: it is the id of the trajectory the entry belongs to (the key of its
    index while planning, the slot's rollout id after), which every method is given. So the entries
    of a store's own ``<rollout_id>.capture.jsonl`` files are one equal value for every rollout,
    and planning keeps one object (and one tuple per set of stores) for them all instead of one per
    rollout (about 180 bytes a rollout, held until the build ends).

    Attributes:
        store: The store's folder, as text (one string per store).
        file: The capture file's path as text, ``None`` without one; ``""`` when it is the store's own
            ``<store>/<rollout_id>.capture.jsonl`` (:meth:`of` decides), so that a build holds no
            path text per capture file (about 100 bytes each, two or three per rollout).
        incomplete: The store has the rollout's ``.capture.incomplete`` marker.
    """

    store: str
    file: str | None = None
    incomplete: bool = False

    @classmethod
    def of(cls, store: str, rollout_id: str, path: str | None, incomplete: bool = False) -> CaptureFiles:
        """The entry for ``path`` (the capture file's text, byte for byte), kept as ``""`` when it is
        exactly the store's own name for the rollout (see :meth:`capture`)."""
        own = path is not None and path == f"{store}/{rollout_id}{CAPTURE_SUFFIX}"
        return cls(store, "" if own else path, incomplete)

    def capture(self, rollout_id: str) -> str | None:
        """The capture file's path as text (as discovery found it), or ``None`` when the store has none."""
        return f"{self.store}/{rollout_id}{CAPTURE_SUFFIX}" if self.file == "" else self.file

    def marker(self, rollout_id: str) -> str:
        """The path, as text, of the store's ``.capture.incomplete`` marker for ``rollout_id``."""
        return str(Path(self.store) / f"{rollout_id}{INCOMPLETE_SUFFIX}")


@dataclass(slots=True)
class CapturedCall:
    """One readable captured call with where it came from."""

    record: ModelCallRecord
    exchange: dict[str, Any]
    store: str
    path: str
    line: int


@dataclass(slots=True)
class CaptureEvidence:
    """All capture evidence for one rollout id across the build's stores.

    Attributes:
        calls: Readable calls, in capture order (one store) or the multi-store order.
        invalid: Lines that were not JSON objects or not valid records.
        incomplete: Some store had the ``.capture.incomplete`` marker.
        files: Capture files and markers read.
    """

    calls: list[CapturedCall] = field(default_factory=list)
    invalid: int = 0
    incomplete: bool = False
    files: list[str] = field(default_factory=list)

    @property
    def records(self) -> list[ModelCallRecord]:
        """The ``ModelCallRecord`` of every readable call, in order."""
        return [call.record for call in self.calls]


def read_capture_file(
    path: str, store: str, sink: DiagnosticSink, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> tuple[list[CapturedCall], int]:
    """Read one capture file with the tolerant reader (lines over ``max_line_bytes`` skipped, reported).

    Returns:
        The readable calls and the number of unreadable lines. A file that cannot be opened is
        reported as ``unreadable_file`` and yields nothing (the caller's gap says so); one without a
        line (0 bytes, or blank lines only) as ``empty_input``, a warning (the rollout's gap is
        ``model_call_capture_no_records``).
    """
    calls: list[CapturedCall] = []
    invalid = foreign = 0
    index = -1
    try:
        for index, line in enumerate(iter_json_lines(path, max_line_bytes=max_line_bytes)):
            if not line.ok or not isinstance(line.value, dict):
                sink.add(line.problem if line.problem is not None and not line.ok else not_an_object(line))
                invalid += 1
                continue
            if line.problem is not None:
                sink.add(line.problem)
            try:
                if not is_capture_line(line.value):
                    foreign += 1
                    raise ValueError(not_capture_line_message(line.value))
                record = _record(line.value, index)
            except ValueError as exc:
                invalid += 1
                sink.add(
                    Diagnostic(
                        "error", "capture_record_invalid", str(exc), path=path, line=line.line, offset=line.offset
                    )
                )
                continue
            calls.append(CapturedCall(record, line.value, store, path, line.line))
    except OSError as exc:
        sink.add(Diagnostic("error", "unreadable_file", os_reason(exc, path), path=path))
        raise
    if index < 0:
        sink.add(Diagnostic("warning", "empty_input", "empty capture file: no call captured", path=path))
    elif foreign == index + 1:
        lines = "its line is" if foreign == 1 else f"none of its {foreign} lines is"
        message = f"not a capture file: {lines} a capture line (a model-call record); no call read from it"
        sink.add(Diagnostic("error", "capture_file_unrecognised", message, path=path))
    return calls, invalid


def _record(exchange: dict[str, Any], index: int) -> ModelCallRecord:
    """The record of one capture line (:func:`is_capture_line` holds of it).

    Raises:
        ValueError: A field the record rejects; the message says which.
    """
    try:
        return derive_record(exchange, call_index=index)
    except ValidationError as exc:
        fields = ", ".join(sorted({RAW_KEYS.get(str(e["loc"][0]), str(e["loc"][0])) for e in exc.errors() if e["loc"]}))
        raise ValueError(f"not a valid model-call record (bad {fields or 'shape'})") from None


def collect_capture(
    rollout_id: str, files: Iterable[CaptureFiles], sink: DiagnosticSink, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> CaptureEvidence:
    """Union the capture evidence of rollout ``rollout_id`` over several stores (``files``: its entry in each).

    Raises:
        OSError: A capture file could not be read (reported already; the rollout gets the
            ``model_call_capture_unreadable`` gap).
    """
    evidence = CaptureEvidence()
    per_store: list[list[CapturedCall]] = []
    for entry in sorted(files, key=lambda f: f.store):
        evidence.incomplete = evidence.incomplete or entry.incomplete
        if entry.incomplete:
            evidence.files.append(entry.marker(rollout_id))
        capture = entry.capture(rollout_id)
        if capture is None:
            continue
        evidence.files.append(capture)
        calls, invalid = read_capture_file(capture, entry.store, sink, max_line_bytes)
        evidence.invalid += invalid
        per_store.append(calls)
    merged = [call for calls in per_store for call in calls]
    if len(per_store) > 1:
        merged.sort(key=_multi_store_order)
    evidence.calls = _deduplicate(merged, sink)
    return evidence


def _multi_store_order(call: CapturedCall) -> tuple[bool, float, str, int]:
    completed = call.record.completed_at
    return (completed is None, completed or 0.0, call.store, call.line)


def _deduplicate(calls: list[CapturedCall], sink: DiagnosticSink) -> list[CapturedCall]:
    """Collapse calls sharing a ``model_call_id``; keep the lexically first store's copy (its first line).

    A repeat inside one file (ng-traj; the reference would fail the projection on the duplicate id
    and lose every call of the rollout) is reported as ``capture_call_repeated``.
    """
    by_id: dict[str, list[CapturedCall]] = {}
    for call in calls:
        if call.record.model_call_id:
            by_id.setdefault(call.record.model_call_id, []).append(call)
    dropped: set[int] = set()
    for call_id, copies in by_id.items():
        if len(copies) < 2:
            continue
        keep = min(copies, key=lambda c: (c.store, c.line))
        for copy in copies:
            if copy is keep:
                continue
            dropped.add(id(copy))
            if copy.path == keep.path:
                same = "" if copy.exchange == keep.exchange else ", with different content"
                message = f"model_call_id {call_id} repeats line {keep.line}{same}; the first kept"
                sink.add(Diagnostic("warning", "capture_call_repeated", message, path=copy.path, line=copy.line))
            elif copy.exchange != keep.exchange:
                sink.add(
                    Diagnostic(
                        "warning",
                        "capture_duplicate_conflict",
                        f"model_call_id {call_id} differs from the copy in {keep.store}; that copy kept",
                        path=copy.path,
                        line=copy.line,
                    )
                )
    return [call for call in calls if id(call) not in dropped]
