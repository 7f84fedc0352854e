"""Opening input files: regular files only, never blocking, and paths resolved without raising.

Discovery skips what is not a regular file, but some files are opened by name later (an OpenClaw or
PinchBench ``sessions.json`` store next to a transcript, a row read again by byte offset), and a file
can be replaced between the two. A FIFO with no writer blocks its reader forever and a device such as
``/dev/zero`` never ends, so every input is opened without blocking and checked on the open
descriptor itself: there is no moment between the check and the read.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import stat
import sys
from collections.abc import Iterable, Iterator
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
    descriptor = open_descriptor(path)
    try:
        os.set_blocking(descriptor, True)
        handle = os.fdopen(descriptor, "rb", buffering=buffering)
    except BaseException:
        os.close(descriptor)
        raise
    return handle  # type: ignore[return-value]


def check_regular(path: str | Path) -> None:
    """Check that ``path`` opens as :func:`open_regular` opens it, without making a file object.

    Raises:
        OSError: As :func:`open_regular`.
    """
    os.close(open_descriptor(path))


def open_descriptor(path: str | Path) -> int:
    """A descriptor of ``path`` opened for reading (``O_NONBLOCK``, which a regular file's reads
    ignore), checked with ``fstat`` to be a regular file; the caller closes it.

    Raises:
        OSError: As :func:`open_regular`.
    """
    return open_sized(path)[0]


def open_sized(path: str | Path) -> tuple[int, int]:
    """:func:`open_descriptor`'s descriptor and the file's size in bytes when it was opened (``fstat``).

    Raises:
        OSError: As :func:`open_regular`.
    """
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise OSError(errno.EINVAL, NOT_REGULAR, str(path))
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor, status.st_size


def input_problem(path: str | Path) -> str | None:
    """Why the named input ``path`` (a file or a folder, as given on the command line) cannot be
    read, or ``None`` when it can: one ``stat`` (through symbolic links) and one ``access`` check,
    nothing opened (an input is read only after the command's other checks).

    The reasons are the operating system's, said in words: a missing path (or a symbolic link to
    one), a loop of symbolic links (``ELOOP``), a file without read permission, a folder without
    read or search permission (its entries could be neither listed nor opened), a part of the path
    that is a file. ``access`` asks with the real user's rights, as the shell does; the superuser
    passes it unless it lacks the capability to override file permissions.
    """
    try:
        status = os.stat(path)
    except OSError as exc:
        return _reason(exc.errno, path)
    folder = stat.S_ISDIR(status.st_mode)
    if not os.access(path, os.R_OK | (os.X_OK if folder else 0)):
        what = "a folder this user may not list or enter" if folder else "this user may not read it"
        return f"permission denied ({what})"
    return None


def check_inputs(paths: Iterable[str | Path], what: str = "input") -> None:
    """Stop the run at the first of the named inputs ``paths`` that cannot be read (:func:`input_problem`).

    Args:
        what: What the inputs are, for the message: ``cannot read input run/x.jsonl: no such file or
            directory``, ``cannot read manifest m.csv: ...``.

    Raises:
        RunError: Naming the path and the reason (a usage error: exit 2, no traceback).
    """
    from ng_traj.diagnostics import RunError

    for path in paths:
        problem = input_problem(path)
        if problem is not None:
            raise RunError(f"cannot read {what} {path}: {problem}")


def os_reason(exc: OSError, path: str | Path | None) -> str:
    """The reason an ``unreadable_file`` diagnostic gives for ``exc``, met opening or reading ``path``:
    the system's (``Permission denied``, ``Too many levels of symbolic links``), except that a
    dangling symbolic link names what it links to (``exc.strerror`` alone would say "No such file or
    directory" of a path that is there)."""
    if path is not None and exc.errno == errno.ENOENT and os.path.islink(path):
        with contextlib.suppress(OSError):
            return f"No such file or directory (a symbolic link to {os.readlink(path)}, which does not exist)"
    return exc.strerror or str(exc)


def _reason(code: int | None, path: str | Path) -> str:
    """The reason :func:`input_problem` gives for the ``errno`` ``code`` a ``stat`` of ``path`` met."""
    if code == errno.ENOENT and os.path.islink(path):
        return f"no such file or directory (a symbolic link to {os.readlink(path)}, which does not exist)"
    if code == errno.ELOOP:
        return "a loop of symbolic links (too many levels of symbolic links: ELOOP)"
    if code in (errno.EACCES, errno.EPERM):
        return "permission denied (this user may not enter a folder above it)"
    if code == errno.ENOTDIR:
        return "not a directory (a part of the path is a file, not a folder)"
    return os.strerror(code).lower() if code else "cannot be looked at"


def read_regular(path: str | Path) -> bytes:
    """The whole content of the regular file ``path``.

    Raises:
        OSError: As :func:`open_regular`.
    """
    with open_regular(path) as handle:
        return handle.read()


RESOLVED_FOLDERS = 4096
"""Folders :func:`resolved_folders` keeps at most (then it starts again): its memory is bounded
(about a megabyte) whatever the number of sessions, and files are met folder by folder (discovery
walks in sorted order), so the folders above the next files are the ones kept."""
_FOLDERS: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("resolved_folders", default=None)


@contextlib.contextmanager
def resolved_folders() -> Iterator[None]:
    """Within the block, :func:`resolved` resolves each folder once and what is below it by name.

    For discovery and planning, which resolve every session file's path (attribution by the names of
    the folders above it, manifest paths) while the inputs do not change: resolving a path walks
    every component with an ``lstat``, and a build's files share their upper folders. A component
    that is a symlink (or ``.`` or ``..``) is still resolved with everything above it, so every path
    resolves to what :func:`resolved` gives without the block. The cache is this context's only
    (another thread sees none), holds at most :data:`RESOLVED_FOLDERS` folders, and is dropped at the end.
    """
    token = _FOLDERS.set({})
    regular = _REGULAR.set(set())
    try:
        yield
    finally:
        _REGULAR.reset(regular)
        _FOLDERS.reset(token)


_REGULAR: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar("regular_files", default=None)


def note_regular(path: str | Path) -> None:
    """Record, within :func:`resolved_folders`, that ``path`` is a regular file and no symlink (its
    ``lstat`` said so), so that :func:`is_regular` and :func:`resolved` take no ``lstat`` of it again.

    Discovery notes the files native readers claim (one string per file, held by the readers' units
    anyway); outside the block it does nothing.
    """
    files = _REGULAR.get()
    if files is not None:
        files.add(str(path))


def forget_regular(paths: Iterable[str | Path]) -> None:
    """Drop ``paths`` from what :func:`note_regular` was told (a reader's files once it has indexed
    them: the set then holds only the files still to be indexed)."""
    files = _REGULAR.get()
    if files is not None:
        files.difference_update(map(str, paths))


def path_order(text: str) -> str:
    """A sort key putting paths as text (``str`` of a ``Path``) in ``Path`` order, without a ``Path``.

    ``Path`` objects compare by their parts, so ``a/b/c`` sorts before ``a/b-c`` (``b`` before ``b-c``)
    where their text sorts after (``/`` after ``-``): each separator becomes ``\\0``, which sorts before
    every character a name can hold. What the parts are differs by Python version: from 3.12 ``pathlib``
    compares the text split at each separator (the root gives empty parts, ``.`` is the part ``.``);
    before, the root (``/``, or ``//``) is a part of its own and ``.`` has none. Parsing a ``Path``
    interns each of its parts (``sys.intern``), and an interpreter whose table of interned strings has
    held every file name of a build keeps it at that size.
    """
    if sys.version_info >= (3, 12):
        return text.replace("/", "\0")
    if text == ".":
        return ""  # no parts
    root = "//" if text.startswith("//") and not text.startswith("///") else "/" if text.startswith("/") else ""
    rest = text[len(root) :].replace("/", "\0")
    return f"{root}\0{rest}" if root else rest


def is_regular(path: Path) -> bool:
    """Whether ``path`` is a regular file and no symlink: known within :func:`resolved_folders` for a
    file :func:`note_regular` was told of, else by an ``lstat`` (``False`` when it cannot be taken)."""
    files = _REGULAR.get()
    if files is not None and str(path) in files:
        return True
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except (OSError, ValueError):  # no such file, or a name the file system refuses (too long, a NUL)
        return False


def is_link(path: str | Path) -> bool:
    """``Path.is_symlink`` of ``path`` (a ``Path``, or its text), without an ``lstat`` (nor a ``Path``
    made of text) for a file :func:`note_regular` was told of."""
    files = _REGULAR.get()
    if files is not None and str(path) in files:
        return False
    return Path(path).is_symlink()


def resolved(path: Path) -> Path:
    """``path`` made absolute with symlinks resolved, as far as they resolve.

    ``Path.resolve()`` raises ``RuntimeError`` on a symlink loop (Python 3.11 and 3.12) and
    ``OSError`` where a component cannot be read; such a path is returned absolute, unresolved (it is
    reported where it is read). Inside :func:`resolved_folders`, a path whose last component is no
    symlink (nor ``.`` or ``..``) is its folder's resolution joined with its name: the same path, as
    resolving leaves such a name as it is.
    """
    folders = _FOLDERS.get()
    if folders is None or not _plain(path):
        return _resolved(path)
    return Path(os.path.join(_folder(path.parent, folders), path.name))


def resolved_folder(folder: Path) -> str:
    """:func:`resolved` of a folder, as text; inside :func:`resolved_folders` a folder resolved before
    costs a look-up (not even the ``lstat`` :func:`resolved` takes of the last component)."""
    folders = _FOLDERS.get()
    return str(resolved(folder)) if folders is None else _folder(folder, folders)


def resolved_parent(path: Path) -> str:
    """The folder of :func:`resolved` ``(path)``, as text (for a file that is no symlink, its folder's
    resolution: one ``lstat`` of the file inside :func:`resolved_folders`, no ``Path`` made)."""
    folders = _FOLDERS.get()
    if folders is None or not _plain(path):
        return str(resolved(path).parent)
    return _folder(path.parent, folders)


def _plain(path: Path) -> bool:
    """Whether resolving ``path`` only resolves its folder: its last part is a name that is no symlink."""
    if path.name in ("", ".", ".."):
        return False
    files = _REGULAR.get()
    return (files is not None and str(path) in files) or not os.path.islink(path)


def _folder(path: Path, folders: dict[str, str]) -> str:
    """:func:`resolved` of a folder as text, from (and into) ``folders``: the nearest folder above it
    that is cached, or whose last part is not :func:`_plain`, resolved, and the names below it joined
    on (text, not ``Path`` objects: a build has a folder per session)."""
    if len(folders) >= RESOLVED_FOLDERS:
        folders.clear()
    names: list[tuple[str, str]] = []  # (key, name) of the plain folders between, deepest first
    key = str(path)
    while (found := folders.get(key)) is None:
        if not _plain(path):
            found = folders[key] = str(_resolved(path))
            break
        names.append((key, path.name))
        path = path.parent
        key = str(path)
    for key, name in reversed(names):
        joined = os.path.join(found, name)
        found = folders[key] = key if joined == key else joined  # a folder without symlinks: its own text
    return found


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (RuntimeError, OSError):
        return path.absolute()
