"""What a sniffer sees of an input and what it may claim (shared by ``detect`` and the native readers)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ng_traj.io.compression import CompressedStreamError, logical_path, open_input
from ng_traj.io.lines import BOM, DEFAULT_MAX_LINE_BYTES, decode_line

SNIFF_LINE_BYTES = DEFAULT_MAX_LINE_BYTES
"""A line is read whole to tell what a file is (up to the longest line a build reads: a valid row of
hundreds of megabytes is still a row); only the first JSON line of a file is kept."""
SNIFF_JSON_BYTES = 64 << 20
"""A ``.json`` file is sniffed when it holds at most this much text (its value read whole)."""
_JSON_STEP = 1 << 20
"""Bytes read at a time from a ``.json`` file being sniffed: what it holds, not the 64 MiB bound."""


@dataclass(frozen=True, slots=True)
class Claim:
    """A reader's claim on an input: ``kind`` is a readable kind, or ``unsupported`` with a description."""

    kind: str
    description: str


@dataclass(frozen=True, slots=True)
class Sniffed:
    """What a sniffer sees of a file: its path and its first JSON record (``None`` if unparseable).

    ``facts`` holds what a sniffer worked out about the file for the others that ask the same (say,
    whether a pi-family transcript is OpenClaw's, which the pi and the OpenClaw sniffer both need and
    which reads the file's first lines): worked out once per file, not once per sniffer.
    """

    path: Path
    first: Any
    facts: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


SNIFF_LINES = 16
"""Lines a sniffer looks at to find the first JSON value in a file not named ``*.jsonl*`` (a corrupt
first line does not hide a file). A file named as JSON Lines is read until its first JSON value, so
that any number of corrupt lines at its start cannot hide the rest."""


def json_named(path: Path) -> bool:
    """Whether ``path`` is named as JSON Lines (also archives such as ``x.jsonl.reset.<ts>``) or JSON,
    a compression suffix (``x.jsonl.gz``) aside."""
    return ".jsonl" in path.name or logical_path(path).suffix == ".json"


def first_record(path: Path) -> Any:
    """The first JSON value of a JSONL file (also archives such as ``x.jsonl.reset.<ts>``; among the
    first :data:`SNIFF_LINES` lines of a file otherwise named), or the whole value of a ``.json``
    file; ``None`` when none parses. A UTF-8 byte-order mark at the start is ignored; a gzip or
    Zstandard file is read decompressed (up to the point its stream breaks)."""
    try:
        with open_input(path) as handle:
            if logical_path(path).suffix == ".json":
                data = _head(handle, SNIFF_JSON_BYTES + 1).removeprefix(BOM).strip()
                return _value(data) if len(data) <= SNIFF_JSON_BYTES else None
            return _first_line_value(handle, None if ".jsonl" in path.name else SNIFF_LINES)
    except (OSError, CompressedStreamError):
        return None


def first_problem(path: Path) -> str | None:
    """Why a file of which :func:`first_record` found no JSON value holds none: how its first
    non-blank line (of a ``.json`` file, its whole text) fails to decode, as the line reader says it
    (``line 1: number is infinity when parsed as double: at column 7``, ``line 2: invalid UTF-8 at
    column 5``); ``None`` when that decodes, the line is longer than a sniff reads, or the file cannot
    be read. Read as :func:`first_record` reads it."""
    try:
        with open_input(path) as handle:
            if logical_path(path).suffix == ".json":
                data = _head(handle, SNIFF_JSON_BYTES + 1).removeprefix(BOM).strip()
                return _problem(data, True) if len(data) <= SNIFF_JSON_BYTES else None
            for number, line in enumerate(iter(lambda: handle.readline(SNIFF_LINE_BYTES), b""), 1):
                at_eof = not line.endswith(b"\n")
                if at_eof and len(line) == SNIFF_LINE_BYTES:
                    return None  # cut short by the sniff, not by the file
                if line := line.removeprefix(BOM).strip():
                    problem = _problem(line, at_eof)
                    return None if problem is None else f"line {number}: {problem}"
    except (OSError, CompressedStreamError):
        pass
    return None


def _problem(data: bytes, at_eof: bool) -> str | None:
    """The error message of decoding ``data`` (stripped, non-blank), ``None`` when it decodes."""
    _, problem = decode_line(data, ("", 0, 0), at_eof=at_eof)
    return problem.message if problem is not None and problem.severity == "error" else None


def _head(handle: Any, size: int) -> bytes:
    """The first ``size`` bytes of ``handle`` (all of it when shorter), as ``handle.read(size)`` gives
    them, but read in steps of :data:`_JSON_STEP`: a buffered file's ``read(size)`` allocates
    ``size`` bytes before it reads any, 64 MiB for every ``.json`` file sniffed."""
    pieces: list[bytes] = []
    left = size
    while left > 0:
        piece = handle.read(min(left, _JSON_STEP))
        if not piece:
            break
        pieces.append(piece)
        left -= len(piece)
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def _value(data: bytes) -> Any:
    """The JSON value of ``data`` as the readers take it (a lone surrogate repaired), or ``None``."""
    value, problem = decode_line(data, ("", 0, 0), at_eof=True)
    return None if problem is not None and problem.severity == "error" else value


def _first_line_value(handle: Any, limit: int | None) -> Any:
    return next(_line_values(handle, limit), None)


def _line_values(handle: Any, limit: int | None) -> Iterator[Any]:
    """The JSON values of the lines read (up to ``limit`` non-blank lines, or every line)."""
    seen = 0
    while limit is None or seen < limit:
        line = handle.readline(SNIFF_LINE_BYTES)
        if not line:
            return
        line = line.removeprefix(BOM).strip()
        if not line:
            continue
        seen += 1
        value = _value(line)
        if value is not None:
            yield value


def later_records(path: Path) -> Iterator[Any]:
    """The JSON values of the :data:`SNIFF_LINES` lines after the first JSON line of a JSON Lines file
    (a sniffer that cannot tell the first record, a stray fragment say, looks at these)."""
    try:
        with open_input(path) as handle:
            values = _line_values(handle, None)
            next(values, None)
            yield from itertools.islice(values, SNIFF_LINES)
    except (OSError, CompressedStreamError):
        return
