"""Handing output from ``--jobs`` workers to the writing process through segment files.

A worker writes the lines of each chunk of rollouts it assembles to one segment file in a private
temporary folder (``assemble/chunks.py``) and returns only its name and size; the writing process
appends the segments to the output in chunk order with ``os.sendfile`` (a copy inside the kernel)
and deletes each once appended. Compared with returning the lines through the worker pool's pipe,
the bytes are never pickled, piped or copied through Python in the writing process, which would
otherwise compete with the workers for the cores. Segments are appended as they arrive rather than
joined at the end, so the spool holds only the chunks in flight (``assemble/workers.py``), never a
second copy of the output; the folder is removed when the build ends.

Payloads that are not lines (Parquet rows) are pickled to a segment file one after another
(:func:`write_payload`) and loaded back by the writing process one at a time as it writes them
(:func:`read_payloads`): the pool's pipe would carry them too, but through a pipe buffer of 64 KiB,
each worker waiting for the parent's result thread to read every piece, and copied several times
on the way; a file is one copy each way, and the chunks waiting to be written wait on disk rather
than in the parent's memory.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import io
import os
import pickle
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from ng_traj.io.atomic import deferred_interrupts, locked_temp_folder

SPOOL_PREFIX = "ng-traj-spool-"

_COPY_STEP = 1 << 30


@contextlib.contextmanager
def spool_folder() -> Iterator[str]:
    """The private temporary folder (``ng-traj-spool-*``) of one build's segments, removed with what
    is left in it when the block ends, however it ends. It is locked while it is in use, and the
    unlocked ones a killed build left in the temporary folder are removed first
    (``io/atomic.locked_temp_folder``).

    It is made with interrupts deferred (``io/atomic.deferred_interrupts``): a SIGINT or SIGTERM
    that arrives while the folder is being made is raised once its removal is arranged, not
    between making it and arranging that (which left an empty folder behind).

    Raises:
        OSError: The folder could not be made.
    """
    with contextlib.ExitStack() as stack:
        with deferred_interrupts():
            folder, held = locked_temp_folder(SPOOL_PREFIX)
            stack.callback(shutil.rmtree, folder, ignore_errors=True)
            stack.callback(os.close, held)  # closed before the folder is removed
        yield folder


@dataclass(frozen=True, slots=True)
class Spooled:
    """Where a worker left output lines: a file of ``size`` bytes."""

    path: str
    size: int


@dataclass(frozen=True, slots=True)
class SpooledPayloads:
    """Where a worker left the payloads of ``count`` slots, pickled one after another."""

    path: str
    count: int


def write_payload(handle: BinaryIO, payload: Any) -> None:
    """Append ``payload``, pickled, to a segment file open for writing (read back by :func:`read_payloads`).

    Raises:
        OSError: The file could not be written.
    """
    pickle.dump(payload, handle, protocol=pickle.HIGHEST_PROTOCOL)


def read_payloads(spooled: SpooledPayloads) -> Iterator[Any]:
    """The payloads :func:`write_payload` left, in order; the file is deleted once they are read
    (or when the iteration is given up).

    Raises:
        OSError: The file could not be read.
    """
    try:
        with open(spooled.path, "rb") as handle:
            for _ in range(spooled.count):
                yield pickle.load(handle)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(spooled.path)


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


SYNC_FILE_RANGE_WRITE = 2
"""``sync_file_range`` flag (``<linux/fs.h>``): start writing the range's dirty pages, without waiting."""


def _writeback(fd: int) -> Callable[[int, int], object] | None:
    """``(offset, size)`` -> start writing that range of ``fd`` to its disk, without waiting for it
    (Linux's ``sync_file_range`` with :data:`SYNC_FILE_RANGE_WRITE`, through glibc); ``None`` for a
    descriptor that is not a regular file or where the call is missing. Its result is not looked at:
    it only schedules writing that the ``fsync`` at the end would otherwise do."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    call.restype = ctypes.c_int
    return lambda offset, size: call(fd, offset, size, SYNC_FILE_RANGE_WRITE)


def spool_appender(handle: BinaryIO) -> Callable[[Spooled], None]:
    """The writer of spooled segments: appends each file to ``handle`` in order, then deletes it.

    Uses ``os.sendfile`` on a real file descriptor, else (in-memory streams, outputs ``sendfile``
    cannot write to) reads and writes. On Linux, each segment appended to a regular file is handed to
    the disk as soon as it is appended (:func:`_writeback`), while the workers build the next ones,
    so the output's ``fsync`` at the end waits for the last few segments rather than the whole output
    (about 0.3 s less of a 750 MB build's wall time).
    """
    try:
        target = handle.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):
        target = None
    fast = [target is not None and hasattr(os, "sendfile")]
    handle.flush()
    writeback = _writeback(target) if target is not None else None
    position = [os.lseek(target, 0, os.SEEK_CUR) if writeback is not None else 0]  # type: ignore[arg-type]

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
        if writeback is not None:
            writeback(position[0], spooled.size)
            position[0] += spooled.size

    return append
