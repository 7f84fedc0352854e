"""The attribution manifest (``--manifest``): explicit links from rollouts to artifact paths.

Format: JSONL (one object per line) or CSV with a header, columns ``rollout_id``
and ``path`` (required), ``kind``, ``run`` (the rollouts file name) and ``session_id`` (optional).
Relative paths are resolved against the manifest's folder. A manifest entry outranks every other
way of attributing an artifact to a rollout.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ng_traj.diagnostics import Diagnostic, DiagnosticSink, RunError, plural, printable, quoted
from ng_traj.io.files import check_inputs, resolved
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES, file_utf16, read_json_objects

COLUMNS = ("rollout_id", "path", "kind", "run", "session_id")
"""The columns a manifest row may have; others are reported once each and ignored."""


@dataclass(frozen=True, slots=True)
class ManifestEntry:
    """One manifest row: ``path`` belongs to ``rollout_id`` (of run ``run`` when given)."""

    rollout_id: str
    path: Path
    kind: str | None = None
    run: str | None = None
    session_id: str | None = None
    where: tuple[str, int] | None = field(default=None, compare=False)
    """The manifest file and the row's line, for diagnostics about the row."""


def _entry(row: dict[str, object], base: Path) -> ManifestEntry | None:
    rollout, path = row.get("rollout_id"), row.get("path")
    if not isinstance(rollout, str) or not rollout or not isinstance(path, str) or not path:
        return None
    optional = {key: row.get(key) or None for key in ("kind", "run", "session_id")}
    return ManifestEntry(
        rollout,
        (base / path) if not Path(path).is_absolute() else Path(path),
        **{key: str(value) if value is not None else None for key, value in optional.items()},
    )


def read_manifest(path: Path, sink: DiagnosticSink) -> list[ManifestEntry]:
    """Read a JSONL or CSV manifest; rows without ``rollout_id`` and ``path`` are reported and skipped.

    A row whose ``path`` exists but cannot be looked at (a symlink loop, a folder without search
    permission) is an ``unreadable_file`` error at the row, giving the OS reason; it is skipped too.
    Also reported: a manifest without rows (``manifest_empty``, a warning), each column other than
    :data:`COLUMNS` once, at its first row (``manifest_column_unknown``, a warning; ignored), a row
    identical to an earlier one (``manifest_row_repeated``, a warning; used once), and rows that give
    one path (and session id) different rollouts, kinds or runs (``manifest_row_conflict``, an error
    naming both lines; none of them is used, so the artifact is attributed as without a manifest).

    Raises:
        RunError: The manifest cannot be read (``io.files.check_inputs``: missing, a loop of symbolic
            links, no permission), is a folder or no regular file, or is no manifest at all: a CSV
            file whose header lacks ``rollout_id`` or ``path``, a JSONL file with lines none of which
            is a JSON object, or rows none of which has ``rollout_id`` and ``path`` (the wrong file
            named, most likely: building without the attribution asked for would mislead). Each
            damaged line is reported before (file and line); an empty file is ``manifest_empty``.
    """
    check_inputs([path], "manifest")
    if path.is_dir():
        raise RunError(f"manifest {path} is a folder; give a JSONL or CSV file")
    if not path.is_file():
        raise RunError(f"manifest {path} is not a regular file (a pipe or device); give a JSONL or CSV file")
    base = path.parent
    entries: list[ManifestEntry] = []
    if path.suffix.lower() == ".csv":
        try:
            header, rows = _csv_rows(path)
        except UnicodeDecodeError as exc:
            why = file_utf16(path) or f"it is not UTF-8 text (byte {exc.object[exc.start : exc.start + 1].hex()})"
            raise RunError(f"manifest {path} cannot be read: {why}") from exc
        except (OSError, csv.Error) as exc:
            raise RunError(f"manifest {path} cannot be read: {exc}") from exc
        if header is not None and not {"rollout_id", "path"} <= set(header):
            shown = ", ".join(quoted(column) for column in header[:5]) + (", …" if len(header) > 5 else "")
            raise RunError(f"{_not_a_manifest(path)}: its CSV header has no rollout_id and path columns ({shown})")
    else:
        damaged = DiagnosticSink(emit=sink.add)  # counts the lines that are no JSON object, and reports each
        rows = [(line.line, line.value) for line in read_json_objects(path, damaged)]
        if not rows and damaged.errors:
            raise RunError(f"{_not_a_manifest(path)}: none of its lines is a JSON object")
    if rows and not any(_entry(row, base) for _, row in rows):
        line, first = rows[0]
        raise RunError(
            f"{_not_a_manifest(path)}: no row has rollout_id and path ({plural(len(rows), 'row')} read; "
            f"line {line}: {_incomplete(first)})"
        )
    if not rows:
        message = "holds no rows; nothing is attributed by it"
        sink.add(Diagnostic("warning", "manifest_empty", message, path=str(path)))
    unknown: set[str] = set()
    for number, row in rows:
        for column in row:
            if column not in COLUMNS and column not in unknown and isinstance(column, str):
                unknown.add(column)
                message = f"unknown column {quoted(column)} (a manifest has {', '.join(COLUMNS)}); ignored"
                sink.add(Diagnostic("warning", "manifest_column_unknown", message, path=str(path), line=number))
        extra = row.get(None)  # type: ignore[call-overload]  # a CSV row's fields beyond its header's
        if extra:
            message = (
                f"{plural(len(extra), 'field')} more than the header's columns ({printable(repr(extra))[:60]}); ignored"
            )
            sink.add(Diagnostic("warning", "manifest_column_unknown", message, path=str(path), line=number))
        entry = _entry(row, base)
        problem = _problem(entry, row)
        if problem is not None:
            sink.add(Diagnostic("error", problem[0], problem[1], path=str(path), line=number))
            continue
        entries.append(replace(entry, where=(str(path), number)))  # type: ignore[arg-type]
    return _distinct(entries, path, sink)


def _incomplete(row: dict[str, object]) -> str:
    """Why ``row`` gives no entry (:func:`_entry`): which of ``rollout_id`` and ``path`` it lacks, is
    empty, or is not text (a JSON number, say), as ``no path; rollout_id is not text (int 5)``."""
    reasons = []
    for key in ("rollout_id", "path"):
        value = row.get(key)
        if value is None:
            reasons.append(f"no {key}")
        elif not isinstance(value, str):
            reasons.append(f"{key} is not text ({type(value).__name__} {printable(repr(value))[:40]})")
        elif not value:
            reasons.append(f"{key} is empty")
    return "; ".join(reasons)


def _not_a_manifest(path: Path) -> str:
    return f"manifest {path} is not a manifest (JSONL or CSV rows of {', '.join(COLUMNS)})"


def _distinct(entries: list[ManifestEntry], path: Path, sink: DiagnosticSink) -> list[ManifestEntry]:
    """``entries`` with repeats of an earlier row left out and rows that conflict over one
    ``(path, session_id)`` dropped, each reported (see :func:`read_manifest`)."""
    first: dict[tuple[Path, str | None], ManifestEntry] = {}
    conflicted: set[tuple[Path, str | None]] = set()
    kept: list[ManifestEntry] = []
    for entry in entries:
        key = (resolved(entry.path), entry.session_id)
        earlier = first.get(key)
        line = entry.where[1] if entry.where else None
        at = earlier.where[1] if earlier is not None and earlier.where else None
        if earlier is None:
            first[key] = entry
            kept.append(entry)
        elif earlier == entry:
            message = f"the same row as line {at}; used once"
            sink.add(Diagnostic("warning", "manifest_row_repeated", message, path=str(path), line=line))
        else:
            what = f"path {entry.path}" + (f" (session {quoted(entry.session_id)})" if entry.session_id else "")
            message = (
                f"{what} is given {_described(entry)} here and {_described(earlier)} at line {at}; neither row is used"
            )
            sink.add(Diagnostic("error", "manifest_row_conflict", message, path=str(path), line=line))
            conflicted.add(key)
    return [entry for entry in kept if (resolved(entry.path), entry.session_id) not in conflicted]


def _described(entry: ManifestEntry) -> str:
    parts = [f"to rollout {quoted(entry.rollout_id)}"]
    parts += [f"{name} {quoted(value)}" for name, value in (("kind", entry.kind), ("run", entry.run)) if value]
    return ", ".join(parts)


def _csv_rows(path: Path) -> tuple[list[str] | None, list[tuple[int, dict[str, Any]]]]:
    """The header of a CSV manifest (``None`` for an empty file) and its rows, numbered from 2 (after
    the header); a leading BOM is what spreadsheets write. Fields are allowed as long as a JSONL line (the ``csv`` module's own limit,
    128 KiB, refused the whole manifest for one long field).

    Raises:
        OSError, UnicodeDecodeError, csv.Error: The file cannot be read as CSV.
    """
    previous = csv.field_size_limit(DEFAULT_MAX_LINE_BYTES)
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            rows = [(number, row) for number, row in enumerate(reader, start=2)]
            return (list(reader.fieldnames) if reader.fieldnames is not None else None), rows
    finally:
        csv.field_size_limit(previous)


def _problem(entry: ManifestEntry | None, row: dict[str, object]) -> tuple[str, str] | None:
    """Why a manifest row (``entry``, ``None`` when :func:`_entry` gave none) cannot be used, as
    ``(diagnostic code, message)``, or ``None``.

    ``manifest_row_invalid`` for a row without ``rollout_id`` and ``path`` as text (:func:`_incomplete`
    says which), a ``path`` that does not exist (``ENOENT``, ``ENOTDIR``) or an unknown ``kind``;
    ``unreadable_file`` with the OS reason for a ``path`` that cannot be looked at (``ELOOP``: "Too many
    levels of symbolic links", ``EACCES``).
    """
    if entry is None:
        return "manifest_row_invalid", f"needs rollout_id and path, as text: {_incomplete(row)}"
    try:
        os.stat(entry.path)
    except (FileNotFoundError, NotADirectoryError):
        return "manifest_row_invalid", f"path {entry.path} does not exist"
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        return "unreadable_file", f"path {entry.path} cannot be read ({reason}); the row is skipped"
    except ValueError as exc:  # an embedded NUL byte
        return "manifest_row_invalid", f"path {entry.path!r} is not a valid path ({exc})"
    from ng_traj.sources.detect import forcible_kinds  # the readers: loaded by the build that reads a manifest

    kinds = forcible_kinds()  # those --as accepts
    if entry.kind is not None and entry.kind not in kinds:
        return "manifest_row_invalid", f"kind {entry.kind!r} is not one of {', '.join(kinds)}"
    return None
