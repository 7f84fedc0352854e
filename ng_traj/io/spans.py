"""Re-reading a line by its byte offset, in plain and compressed files alike.

The build reads a rollouts file twice: once to index its rows (number, offset, size), and again,
row by row in output order, to assemble each one. A plain file is re-read with a seek. A gzip or
Zstandard stream cannot seek backwards without decompressing again from its start, which, for rows
taken in an order unlike the file's, would cost time quadratic in the file's size. So the text of a
compressed file is copied, as it is decompressed, to a file in a temporary folder of this process;
offsets are those of the text, and rows are re-read from the copy with a seek. Memory holds one read
buffer; the disk holds the file's text once. Copies made inside :func:`text_copies` (a build) are
removed when it ends, any others with their folder when the process exits.

The indexing pass writes the copy as it reads (:func:`text_copy`), so the text is decompressed once.
A process that needs a row of a compressed file it did not index (a worker started without the
parent's memory) decompresses the file to its own copy on first use, removed when it exits. Worker
processes forked from the parent share the parent's copies and leave their removal to it.
"""

from __future__ import annotations

import contextlib
import multiprocessing.util
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ng_traj.io.compression import CompressedStreamError, is_compressed, open_input
from ng_traj.io.files import open_descriptor
from ng_traj.io.lines import BOM

_COPY_BUFFER = 1 << 20
_copies: dict[str, str] = {}
"""Path of a compressed input (as named) -> its text copy."""
_plain: set[str] = set()
"""Paths found not compressed (each is looked at once)."""
_kept: list[tuple[str, int]] = []
"""The file :func:`read_span` read last and its open descriptor (rows are re-read in runs of one file)."""
_folder: list[tempfile.TemporaryDirectory[str]] = []


@contextlib.contextmanager
def text_copies() -> Iterator[None]:
    """Remove, when the block ends, the copies made inside it (a build's; without such a block they
    stay until the process exits)."""
    before = set(_copies)
    try:
        yield
    finally:
        _let_go()
        for path in [path for path in _copies if path not in before]:
            with contextlib.suppress(OSError):
                os.unlink(_copies.pop(path))


def _new_copy() -> tuple[str, BinaryIO]:
    if not _folder:
        folder = tempfile.TemporaryDirectory(prefix="ng-traj-text-")
        _folder.append(folder)
        multiprocessing.util.Finalize(folder, folder.cleanup, exitpriority=0)  # a worker skips atexit
    descriptor, name = tempfile.mkstemp(dir=_folder[0].name, suffix=".jsonl")
    return name, os.fdopen(descriptor, "wb", buffering=_COPY_BUFFER)


@contextlib.contextmanager
def text_copy(path: str | Path) -> Iterator[BinaryIO | None]:
    """A file to hand the line reader as ``copy`` while it reads ``path``: for a compressed file,
    one that keeps its text for :func:`read_span`; ``None`` for a plain file (nothing to keep)."""
    if not is_compressed(path):
        yield None
        return
    name, handle = _new_copy()
    try:
        yield handle
    finally:
        handle.close()
        _copies[str(path)] = name


def read_span(path: str | Path, offset: int, size: int) -> bytes:
    """The ``size`` bytes of text at ``offset`` of ``path`` (decompressed text for a compressed file),
    without the UTF-8 byte-order mark a file may open with, as the line reader read that line.

    Raises:
        OSError: The file (or its copy) cannot be read, or is not a regular file (``io/files.py``).
    """
    source = _copies.get(str(path))
    if source is None and str(path) not in _plain:
        if is_compressed(path):
            source = _copy_of(path)
        else:
            _plain.add(str(path))
    raw = os.pread(_descriptor(str(source or path)), size, offset)
    return raw.removeprefix(BOM) if offset == 0 else raw  # the line reader reads a first line without it


def _descriptor(path: str) -> int:
    """An open descriptor of ``path``, checked as :func:`~ng_traj.io.files.open_regular` checks it,
    kept open until a span of another file is read (or :func:`text_copies` ends). Reads use
    ``pread``, so a descriptor a forked worker inherits is shared without sharing a position."""
    if _kept and _kept[0][0] == path:
        return _kept[0][1]
    _let_go()
    descriptor = open_descriptor(path)
    _kept.append((path, descriptor))
    return descriptor


def _let_go() -> None:
    while _kept:
        os.close(_kept.pop()[1])


def _copy_of(path: str | Path) -> str:
    """Decompress ``path`` into a new copy and remember it; read by lines, as the line reader reads,
    so that a stream that breaks leaves in the copy every whole line the reader had handed out."""
    name, handle = _new_copy()
    with handle, open_input(path, _COPY_BUFFER) as source, contextlib.suppress(CompressedStreamError):
        for piece in iter(lambda: source.readline(_COPY_BUFFER), b""):
            handle.write(piece)
    _copies[str(path)] = name
    return name
