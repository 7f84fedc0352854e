"""Classifying inputs: which reader claims a file, by a cheap sniff of its name and first record.

Sniffers never raise. Exactly one claim wins; none means the input is unclaimed, two or more that it
is ambiguous, and both are reported, never guessed. Formats that ng-traj recognises
but does not read yet get a named claim so the user learns what the file is.
Directories are walked in sorted order; a capture store is simply a folder of capture files.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ng_traj.diagnostics import Diagnostic
from ng_traj.io.compression import logical_name, logical_path
from ng_traj.io.files import os_reason
from ng_traj.sources import registry  # noqa: F401  (registers the native readers)
from ng_traj.sources.capture.store import capture_rollout_id
from ng_traj.sources.native import READERS
from ng_traj.sources.rollouts.rows import is_rollout_row
from ng_traj.sources.sniff import Claim, Sniffed, first_record, json_named, later_records
from ng_traj.writers.dataset_paths import MANIFEST, parquet_kind

KINDS = ("rollouts", "capture")
"""Kinds ng-traj builds from besides the native readers'; ``--as`` accepts these."""


def forcible_kinds() -> tuple[str, ...]:
    """Every kind ``--as`` and a manifest row's ``kind`` may force: :data:`KINDS`, then the name of
    each registered native reader, sorted (``claude_code``, ``codex``, ``hermes``, ...)."""
    return (*KINDS, *sorted(READERS))


def _capture(s: Sniffed) -> Claim | None:
    if capture_rollout_id(s.path.name) is not None:
        return Claim("capture", "model-call capture file")
    return None


def _is_capture_line(value: Any) -> bool:
    return isinstance(value, dict) and {"model_call_id", "dialect"} <= value.keys()


def _rollouts(s: Sniffed) -> Claim | None:
    if logical_path(s.path).suffix != ".jsonl" or not isinstance(s.first, dict) or capture_rollout_id(s.path.name):
        return None
    if _is_capture_line(s.first):
        return None
    if is_rollout_row(s.first) or "responses_create_params" in s.first:
        return Claim("rollouts", "rollout records")
    return None


def _capture_shaped(s: Sniffed) -> Claim | None:
    if logical_name(s.path.name).endswith((".capture.jsonl", ".capture.incomplete")) and not _capture(s):
        return Claim("unsupported", "a capture file whose name is not a rollout id NeMo Gym could write")
    if _is_capture_line(s.first) and not _capture(s):
        return Claim("unsupported", "capture lines in a file not named <rollout_id>.capture.jsonl")
    return None


TRAJECTORIES = Claim("unsupported", "ng_trajectory records (already built; use validate or matrix)")
"""The claim on a file of built trajectories (``input_kind`` tells it from other kinds)."""


def _trajectories(s: Sniffed) -> Claim | None:
    first = s.first
    if isinstance(first, dict) and {"schema_version", "rollout_id", "task_id"} <= first.keys():
        return TRAJECTORIES
    return None


def _parquet(s: Sniffed) -> Claim | None:
    """A Parquet file (by its name and magic bytes) or a dataset's manifest: what ``build`` wrote."""
    kind = parquet_kind(s.path) if s.path.name.endswith(".parquet") or s.path.name == MANIFEST else None
    return Claim("unsupported", kind) if kind is not None else None


OWN_OUTPUT_NOTE = "ng-traj's own output, not an input"

REPORT_MARKERS = (b'<meta name="generator" content="ng-traj">', b'<script type="application/json" id="data-rollouts">')
"""What an HTML report ``ng-traj report`` wrote holds in its first :data:`REPORT_HEAD_BYTES` (the
generator line; reports written before it had the rollouts' data block, after the page's styles)."""
REPORT_HEAD_BYTES = 64 << 10


def _own_export(s: Sniffed) -> Claim | None:
    """What ``ng-traj export`` and ``ng-traj report`` write: ATIF documents, OTLP traces, completeness
    reports (each carrying ng-traj's name) and HTML reports; recognised so that an export or report
    inside a folder named again is skipped as ng-traj's own output, not read as a foreign input."""
    first = s.first
    if isinstance(first, dict):
        if "ng_traj_completeness" in first:
            return Claim("unsupported", f"an ng-traj export's completeness report ({OWN_OUTPUT_NOTE})")
        if str(first.get("schema_version", "")).startswith("ATIF-"):
            exporter = first.get("extra", {}).get("ng_traj", {}).get("exporter", {})
            if exporter.get("name") == "ng-traj":
                return Claim("unsupported", f"an ATIF document ng-traj export wrote ({OWN_OUTPUT_NOTE})")
        spans = first.get("resourceSpans")
        if isinstance(spans, list) and spans:
            scopes = spans[0].get("scopeSpans") or [{}]
            if scopes[0].get("scope", {}).get("name") == "ng-traj":
                return Claim("unsupported", f"OpenTelemetry traces ng-traj export wrote ({OWN_OUTPUT_NOTE})")
        return None
    if first is None and s.path.name.endswith(".html"):
        try:
            with open(s.path, "rb") as handle:
                head = handle.read(REPORT_HEAD_BYTES)
        except OSError:
            return None
        if any(marker in head for marker in REPORT_MARKERS):
            return Claim("unsupported", f"an HTML report ng-traj report wrote ({OWN_OUTPUT_NOTE})")
    return None


def own_output(path: Path) -> str | None:
    """The description of ``path`` when it is one of ng-traj's own export or report outputs
    (:func:`_own_export`), else ``None``."""
    claim = _sniff(_own_export, Sniffed(path, first_record(path) if json_named(path) else None))
    return claim.description if claim is not None else None


SNIFFERS: list[Callable[[Sniffed], Claim | None]] = [
    _capture,
    _rollouts,
    _capture_shaped,
    _trajectories,
    _parquet,
    _own_export,
]
"""Every sniffer; a new reader adds its own here."""


def claims(path: Path, capture_folders: dict[str, list[Claim]] | None = None) -> list[Claim]:
    """All claims on one file (the caller reports zero or several).

    A file named as a capture file (``<rollout_id>.capture.jsonl``, or its marker) is sniffed by name
    alone, and such a name is no database, sidecar or companion file name, so what the sniffers make
    of it depends only on its folder (a Claude Code ``tool-results`` folder, say): with
    ``capture_folders`` (a dict the caller keeps for one discovery, by folder) the sniffers are asked
    once per folder, not once per capture file.
    """
    if capture_rollout_id(path.name) is not None:
        if capture_folders is None:
            return _claims(Sniffed(path, None))
        folder = os.path.dirname(path)
        found = capture_folders.get(folder)
        if found is None:
            found = capture_folders[folder] = _claims(Sniffed(path, None))
        return list(found)
    if not json_named(path):
        return _claims(Sniffed(path, None))
    found = _claims(Sniffed(path, first_record(path)))
    if found or ".jsonl" not in path.name:
        return found
    for record in later_records(path):  # a first record nothing claims (a stray fragment) does not hide the file
        if found := _claims(Sniffed(path, record)):
            return found
    return []


def _claims(sniffed: Sniffed) -> list[Claim]:
    sniffers = [*SNIFFERS, *(reader.sniff for reader in READERS.values())]
    return [claim for sniffer in sniffers if (claim := _sniff(sniffer, sniffed)) is not None]


def _sniff(sniffer: Callable[[Sniffed], Claim | None], sniffed: Sniffed) -> Claim | None:
    """A sniffer's claim; one that trips over an unexpected shape (a list where text belongs) claims nothing."""
    try:
        return sniffer(sniffed)
    except (TypeError, AttributeError, KeyError, ValueError):
        return None


def walk(
    path: Path, on_error: Callable[[OSError], None] | None = None, on_link: Callable[[Path], None] | None = None
) -> Iterator[Path]:
    """Files under ``path`` in sorted order (hidden entries skipped); ``path`` itself when a file.

    What ``os.walk`` gives (top-down, no symlinked folder entered, each folder's files before its
    subfolders, both in sorted order), read with ``os.scandir``: an entry is told a folder, a file or
    a symlink by the type its folder's listing gives (no ``stat`` or ``lstat`` per entry where the
    file system gives types), and each file's ``Path`` is its folder's joined with the name. A folder
    that cannot be listed is handed to ``on_error`` and skipped; a symbolic link to a folder, which
    is not entered (a link can loop, or lead out of the folder named), is handed to ``on_link``.
    """
    if not path.is_dir():
        yield path
        return
    yield from _walk_folder(str(path), on_error, on_link)


def unreadable(exc: OSError) -> Diagnostic:
    """The ``unreadable_file`` error of a folder :func:`walk` could not list (or a file that could
    not be opened): the system's reason, at the path it names."""
    return Diagnostic("error", "unreadable_file", os_reason(exc, exc.filename), path=str(exc.filename))


def skipped_link(folder: Path) -> Diagnostic:
    """The ``folder_link_skipped`` info of a symbolic link to a folder that :func:`walk` did not enter."""
    return Diagnostic(
        "info",
        "folder_link_skipped",
        "a symbolic link to a folder, not followed inside a named folder; name it to read what it links to",
        path=str(folder),
    )


def _walk_folder(
    root: str, on_error: Callable[[OSError], None] | None, on_link: Callable[[Path], None] | None
) -> Iterator[Path]:
    try:
        with os.scandir(root) as listing:
            entries = [entry for entry in listing if not entry.name.startswith(".")]
    except OSError as exc:
        if on_error is not None:
            on_error(exc)
        return
    folders: list[os.DirEntry[str]] = []
    files: list[str] = []
    for entry in entries:
        if _is_folder(entry):
            folders.append(entry)
        else:
            files.append(entry.name)
    folder = Path(root)
    for name in sorted(files):
        yield folder / name
    for entry in sorted(folders, key=lambda entry: entry.name):
        if not _is_link(entry):  # as os.walk: a symlinked folder is listed, never entered
            yield from _walk_folder(entry.path, on_error, on_link)
        elif on_link is not None:
            on_link(Path(entry.path))


def _is_folder(entry: os.DirEntry[str]) -> bool:
    """``os.walk``'s test: a folder, or a symlink to one (which is then not entered); an entry whose
    type cannot be told is a file."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _is_link(entry: os.DirEntry[str]) -> bool:
    """``os.walk``'s test of a folder it may enter: a symlink (one whose type cannot be told is none)."""
    try:
        return entry.is_symlink()
    except OSError:
        return False
