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
from typing import BinaryIO

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
