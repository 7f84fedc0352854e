"""Opening input files: regular files only, never blocking, and paths resolved without raising.

Discovery skips what is not a regular file, but some files are opened by name later (an OpenClaw or
PinchBench ``sessions.json`` store next to a transcript, a row read again by byte offset), and a file
can be replaced between the two. A FIFO with no writer blocks its reader forever and a device such as
``/dev/zero`` never ends, so every input is opened without blocking and checked on the open
descriptor itself: there is no moment between the check and the read.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from ng_traj.diagnostics import Diagnostic, DiagnosticSink
from ng_traj.io.lines import BOM, decode_line

NOT_REGULAR = "not a regular file (a pipe, device or socket); not read"
"""The ``strerror`` of the ``OSError`` :func:`open_regular` raises for such a file."""


def open_regular(path: str | Path, buffering: int = -1) -> BinaryIO:
    """Open ``path`` for binary reading, refusing anything that is not a regular file.

    The file is opened with ``O_NONBLOCK`` (opening a FIFO does not wait for a writer), checked with
    ``fstat``, and then switched back to blocking reads.

    Raises:
        OSError: It cannot be opened, or it is not a regular file (``errno.EINVAL``,
            :data:`NOT_REGULAR`); callers report either as ``unreadable_file``.
    """
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(errno.EINVAL, NOT_REGULAR, str(path))
        os.set_blocking(descriptor, True)
        handle = os.fdopen(descriptor, "rb", buffering=buffering)
    except BaseException:
        os.close(descriptor)
        raise
    return handle  # type: ignore[return-value]


def read_regular(path: str | Path) -> bytes:
    """The whole content of the regular file ``path``.

    Raises:
        OSError: As :func:`open_regular`.
    """
    with open_regular(path) as handle:
        return handle.read()


def read_line_at(path: str | Path, offset: int, size: int) -> bytes:
    """The ``size`` bytes of the line at byte ``offset`` of ``path`` (recorded on a first read), without
    a byte-order mark that opens the file, as the line reader reads that line.

    Raises:
        OSError: As :func:`open_regular`.
    """
    with open_regular(path) as handle:
        handle.seek(offset)
        raw = handle.read(size)
    return raw.removeprefix(BOM) if offset == 0 else raw


def resolved(path: Path) -> Path:
    """``path`` made absolute with symlinks resolved, as far as they resolve.

    ``Path.resolve()`` raises ``RuntimeError`` on a symlink loop (Python 3.11 and 3.12) and
    ``OSError`` where a component cannot be read; such a path is returned absolute, unresolved (it is
    reported where it is read).
    """
    try:
        return path.resolve()
    except (RuntimeError, OSError):
        return path.absolute()


def read_json_file(path: Path, sink: DiagnosticSink) -> Any:
    """The JSON value of a whole ``.json`` file (a lone surrogate repaired, with a warning, as for a
    line), or ``None`` with an ``unreadable_file`` or ``invalid_json`` error (native readers' JSON
    documents: Hermes snapshots and stores, OpenCode exports)."""
    try:
        data = read_regular(path)
    except OSError as exc:
        sink.add(Diagnostic("error", "unreadable_file", exc.strerror or str(exc), path=str(path)))
        return None
    value, problem = decode_line(data.removeprefix(BOM).strip(), (str(path), 1, 0), at_eof=True)
    if problem is not None:
        sink.add(problem)
    return value
