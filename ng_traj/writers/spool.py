"""Handing JSONL output from ``--jobs`` workers to the writing process through segment files.

A worker writes the lines of each chunk of rollouts it assembles to one segment file in a private
temporary folder (``assemble/chunks.py``) and returns only its name and size; the writing process
appends the segments to the output in chunk order with ``os.sendfile`` (a copy inside the kernel)
and deletes each once appended. Compared with returning the lines through the worker pool's pipe,
the bytes are never pickled, piped or copied through Python in the writing process, which would
otherwise compete with the workers for the cores. Segments are appended as they arrive rather than
joined at the end, so the spool holds only the chunks in flight (``assemble/workers.py``), never a
second copy of the output; the folder is removed when the build ends.
"""

from __future__ import annotations

import errno
import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

_COPY_STEP = 1 << 30


@dataclass(frozen=True, slots=True)
class Spooled:
    """Where a worker left output lines: a file of ``size`` bytes."""

    path: str
    size: int


@dataclass(frozen=True)
class SpoolLines:
    """The ``--jobs`` JSONL encoder (picklable, runs in workers): a built slot's line, to be written to
    the segment file of its chunk (:meth:`segment`)."""

    folder: str

    def __call__(self, index: int, built: Any) -> bytes:
        """The output line of ``built`` (an ``assemble.build.Built``) at output position ``index``."""
        return built.line

    def segment(self, chunk: int) -> str:
        """The segment file of chunk number ``chunk``."""
        return os.path.join(self.folder, f"{chunk}.jsonl")


class _Unsupported(Exception):
    """``sendfile`` cannot write to this output (nothing was written)."""


def _copy(source: int, target: int, size: int) -> None:
    offset = 0
    while offset < size:
        try:
            sent = os.sendfile(target, source, offset, min(size - offset, _COPY_STEP))
        except OSError as exc:
            if offset == 0 and exc.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise _Unsupported from exc
            raise
        if sent == 0:
            raise OSError(f"spool file ended after {offset} of {size} bytes")
        offset += sent


def spool_appender(handle: BinaryIO) -> Callable[[Spooled], None]:
    """The writer of spooled segments: appends each file to ``handle`` in order, then deletes it.

    Uses ``os.sendfile`` on a real file descriptor, else (in-memory streams, outputs ``sendfile``
    cannot write to) reads and writes.
    """
    try:
        target = handle.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):
        target = None
    fast = [target is not None and hasattr(os, "sendfile")]
    handle.flush()

    def append(spooled: Spooled) -> None:
        with open(spooled.path, "rb") as source:
            if fast[0]:
                try:
                    _copy(source.fileno(), target, spooled.size)  # type: ignore[arg-type]
                except _Unsupported:
                    fast[0] = False
            if not fast[0]:
                handle.write(source.read())
                handle.flush()
        os.unlink(spooled.path)

    return append
