"""Atomic outputs: a file or directory appears complete or not at all.

Data is written to a hidden temporary sibling of the target and renamed over it only when the
writer finished without an exception; a killed or failed run leaves the previous output (or none)
and at most a stale ``.<name>.tmp-*`` sibling, which the next run writing the same output removes
(:func:`remove_stale`). A full disk met while writing (by whichever writer:
JSONL lines, spooled lines, pyarrow) is reported here as one run error naming the output.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shlex
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from ng_traj.diagnostics import RunError

STDOUT = "-"
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
"""Errors only writing can meet (a full disk, a quota, the file size limit): reported as the run's error."""


def output_folder(target: Path, *, probe: bool = True) -> Path:
    """The folder output ``target`` (a file or a dataset directory) is written in.

    With ``probe``, a temporary sibling is created and removed, so that a folder nothing can be
    created in (read-only, ``/proc``) fails before any input is read, not after the build.

    Raises:
        RunError: The folder does not exist, is inside a Parquet dataset folder (a file there is no
            part of the dataset, a dataset there would nest one dataset in another), or (``probe``)
            no file can be created in it; or ``target`` is a symbolic link that never reaches a file
            or folder (a loop: an output is written through a link, and this one would be replaced).
    """
    if target.is_symlink():
        try:
            os.stat(target)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise RunError(f"output {target} is a loop of symbolic links; name another output") from exc
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise RunError(f"cannot write output {target}: {_no_folder(parent)}")
    _refuse_inside_dataset(target, parent)
    if probe:
        with deferred_interrupts():  # a signal between making the probe and removing it is raised after
            try:
                fd, name = tempfile.mkstemp(prefix=f".{target.name}.tmp-", dir=parent)
            except OSError as exc:
                raise RunError(f"cannot write output {target}: {exc.strerror or exc}") from exc
            os.close(fd)
            os.unlink(name)
    return parent


def _no_folder(parent: Path) -> str:
    """Why ``parent`` (no folder) cannot hold an output: the nearest path above it (or it) that exists
    is no folder (a file), or the folder is missing (with the command that makes it)."""
    for above in (parent, *parent.parents):
        if above.is_symlink() and not above.exists():
            return f"{above} is a symbolic link to a path that does not exist"
        if above.exists():
            if not above.is_dir():
                return f"{above} is a file, not a folder" if above.is_file() else f"{above} is not a folder"
            break
    return f"output folder {parent} does not exist (make it first: mkdir -p {shlex.quote(str(parent))})"


def _refuse_inside_dataset(target: Path, parent: Path) -> None:
    """Stop when ``parent`` (resolved) is a Parquet dataset folder or inside one.

    Raises:
        RunError: Naming the output and the dataset folder.
    """
    from ng_traj.writers.dataset_paths import is_dataset

    folder = Path(os.path.realpath(parent))
    for candidate in (folder, *folder.parents):
        if is_dataset(candidate):
            raise RunError(
                f"output {target} is inside the Parquet dataset {candidate}: a dataset folder holds only its "
                "own tables; name an output outside it"
            )


def check_file_target(target: Path, *, probe: bool = True) -> Path:
    """The folder an output file ``target`` is written in (checked before any input is read, and again
    when writing starts). Without ``probe`` nothing is created: a command checks so first, refuses an
    output that is one of its inputs, and only then probes the folder (a refused run writes nothing).

    Raises:
        RunError: The folder does not exist or (``probe``) no file can be created in it (unless
            ``target`` is a device or FIFO, written in place), or ``target`` is a directory or a loop
            of symbolic links (:func:`output_folder`).
    """
    parent = output_folder(target, probe=probe and not is_special(target))
    if target.is_dir() and not target.is_symlink():
        raise RunError(f"output {target} is a directory; give a file path")
    return parent


@contextlib.contextmanager
def _write_errors(name: str) -> Iterator[None]:
    """Turn a full disk met while writing output ``name`` into one :class:`RunError` naming it.

    Raises:
        RunError: An ``OSError`` with one of :data:`WRITE_ERRNOS` left the block.
    """
    try:
        yield
    except OSError as exc:
        if exc.errno not in WRITE_ERRNOS:
            raise
        raise RunError(f"cannot write {name}: {os.strerror(exc.errno)}") from exc


_interrupts: list[int] = []
_deferring: list[bool] = []
_commands: list[list[int | None]] = []
"""One entry per :func:`command_outputs` block running: ``[None]``, or once an output was committed
in it, ``[how many interrupts were recorded before]``."""


def interrupt(signum: int, frame: object) -> None:
    """Handler for SIGINT and SIGTERM: record the signal, then raise ``KeyboardInterrupt``
    (at the end of the block when inside :func:`deferred_interrupts`; not at all once the command
    committed an output, see :func:`command_outputs`).

    Python drops an exception raised while a finalizer runs (the cycle collector's, say), so the
    raise alone can be lost and the command would run on; the record is not lost, and no output is
    committed once it is set (:func:`check_interrupted`).
    """
    _interrupts.append(signum)
    if not _deferring and not _committed():
        raise KeyboardInterrupt


@contextlib.contextmanager
def command_outputs() -> Iterator[Callable[[], bool]]:
    """The run of one command. Until it commits an output, SIGINT and SIGTERM stop it as
    :func:`interrupt` says (the output left as it was). From the moment an output is committed
    (renamed over its target, or written whole to standard output or a device) to the end of the
    block, the command's outcome is decided: a signal arriving then is recorded, not raised, and
    forgotten at the end, so the command finishes what it reports (a second output it commits with
    the first, its summary) and exits with its own code, never with success said and 130 or 143.

    Yields:
        A function saying whether an output was committed in the block so far.
    """
    entry: list[int | None] = [None]
    _commands.append(entry)
    try:
        yield lambda: entry[0] is not None
    finally:
        _commands.pop()
        if entry[0] is not None:
            del _interrupts[entry[0] :]


def _committed() -> bool:
    """Whether the running command has committed an output (:func:`command_outputs`)."""
    return bool(_commands) and _commands[-1][0] is not None


def _commit_point() -> None:
    """Mark every running :func:`command_outputs` block as past its commit (an output is being put
    in place now; what it records from here is not raised)."""
    for entry in _commands:
        if entry[0] is None:
            entry[0] = len(_interrupts)


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Run a short block that must not be cut in the middle; an interrupt met inside is raised at its end."""
    _deferring.append(True)
    try:
        yield
    finally:
        _deferring.pop()
    check_interrupted()


def was_interrupted() -> bool:
    """True once SIGINT or SIGTERM arrived (see :func:`interrupt`)."""
    return bool(_interrupts)


def interrupting_signal() -> int | None:
    """The number of the first SIGINT or SIGTERM that arrived (see :func:`interrupt`), else ``None``."""
    return _interrupts[0] if _interrupts else None


def check_interrupted() -> None:
    """Raise ``KeyboardInterrupt`` if an interrupt was recorded (see :func:`interrupt`) and the
    command has not committed an output yet (:func:`command_outputs`)."""
    if _interrupts and not _committed():
        raise KeyboardInterrupt


class AbortWrite(Exception):
    """Raised inside an ``atomic_file`` block to drop what was written and leave the target as it was."""


def is_special(target: Path) -> bool:
    """True for an existing target that is not a regular file (a device, a FIFO), or a link to an open
    descriptor (``/dev/stdout``, ``/dev/fd/1``: a link into ``/proc``, whatever it names)."""
    if target.is_symlink() and _descriptor_link(target):
        return True
    return target.exists() and not target.is_file() and not target.is_dir()


def _descriptor_link(link: Path) -> bool:
    try:
        named = os.readlink(link)
    except OSError:
        return False
    return named.startswith("/proc/") or os.path.realpath(link.parent).startswith("/proc/")


def written_path(target: Path) -> Path:
    """The file an output named ``target`` replaces: ``target``, or what it links to when it is a
    symbolic link (the link is kept). A build never reads that file as an input."""
    return Path(os.path.realpath(target)) if target.is_symlink() else target


TEMP_RANDOM = r"[a-z0-9_]{8}"
"""The random part ``tempfile`` gives the names it makes (8 of ``a-z0-9_``)."""
STALE_AFTER = 60.0
"""Seconds unchanged before an unlocked temporary folder whose name other runs share (a spool, the
database copies) is taken for a killed run's: another run may have just made its own, not locked
it yet (:func:`remove_unlocked`)."""


def _temp_pattern(target: Path) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(target.name)}\.tmp-{TEMP_RANDOM}")


def hold(descriptor: int) -> None:
    """Lock an open temporary (output, spool) for as long as it is open: a running build's temporary
    is never taken for a stale one (the kernel drops the lock of a killed process)."""
    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)


def remove_stale(target: Path, parent: Path) -> None:
    """Remove the temporary outputs of ``target`` a killed run left in ``parent``.

    Only our own naming (``.<name>.tmp-`` and :data:`TEMP_RANDOM`, exactly) is considered, only
    files and folders (never a symlink, and ``shutil.rmtree`` follows none inside), and only those
    no process holds locked: a running build holds its own. Anything else is left alone; an error
    leaves the temporary where it is.
    """
    remove_unlocked(parent, _temp_pattern(target))


def remove_unlocked(parent: str | Path, pattern: re.Pattern[str], min_age: float = 0.0) -> None:
    """Remove the files and folders of ``parent`` whose names ``pattern`` matches in full that no
    process holds locked (:func:`hold`): the temporaries of killed runs. Never a symlink (and
    ``shutil.rmtree`` follows none inside); an error leaves the entry where it is.

    Args:
        min_age: Seconds since an entry was last changed before it is looked at: a name another
            run shares is left alone while that run may not have locked it yet (a probe's lock
            would then make its own fail).
    """
    newest = time.time() - min_age
    with contextlib.suppress(OSError), os.scandir(parent) as entries:
        for entry in entries:
            if not pattern.fullmatch(entry.name) or entry.is_symlink():
                continue
            with contextlib.suppress(OSError):
                if min_age and entry.stat(follow_symlinks=False).st_mtime > newest:
                    continue
            if _unlocked(entry.path):
                with contextlib.suppress(OSError):
                    shutil.rmtree(entry.path) if entry.is_dir(follow_symlinks=False) else os.unlink(entry.path)


def locked_temp_folder(prefix: str) -> tuple[str, int]:
    """A new folder ``<prefix>XXXXXXXX`` in the system's temporary folder and a descriptor of it,
    locked (:func:`hold`) until the caller closes it. The unlocked folders of that name a killed run
    left, unchanged for :data:`STALE_AFTER`, are removed first (:func:`remove_unlocked`).

    Raises:
        OSError: The folder could not be made or locked.
    """
    parent = tempfile.gettempdir()
    remove_unlocked(parent, re.compile(rf"{re.escape(prefix)}{TEMP_RANDOM}"), STALE_AFTER)
    folder = tempfile.mkdtemp(prefix=prefix, dir=parent)
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        os.rmdir(folder)
        raise
    try:
        hold(descriptor)
    except OSError:
        os.close(descriptor)
        os.rmdir(folder)
        raise
    return folder, descriptor


def _unlocked(path: str) -> bool:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    try:
        hold(descriptor)
    except OSError:
        return False
    finally:
        os.close(descriptor)
    return True


def write_all(stream: BinaryIO, data: bytes | memoryview) -> int:
    """Write every byte of ``data`` to the buffered ``stream``; returns ``len(data)``.

    A buffered write to a pipe whose reader leaves while the write is under way returns the bytes the
    pipe took and drops the rest in silence (CPython's ``BufferedWriter``: the system call was cut
    short); the rest is written again here, so that the closed pipe raises ``BrokenPipeError``.

    Raises:
        OSError: The write failed (``BrokenPipeError`` for a closed pipe), or wrote nothing.
    """
    view = memoryview(data)
    while view:
        written = stream.write(view)
        if not written:
            raise OSError(errno.EIO, "the write was not taken")
        view = view[written:]
    return len(data)


class WholeWrites:
    """A binary stream whose ``write`` writes everything it is given (:func:`write_all`); every other
    attribute is the wrapped stream's."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream

    def write(self, data: bytes | memoryview) -> int:
        """Write all of ``data``."""
        return write_all(self._stream, data)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def _kept_mode(target: Path, default: int) -> int:
    """The permission bits of the output ``target`` replaces (a file's ``chmod 600`` stays as it was),
    or ``default`` for a new output (``0o644`` a file, ``0o755`` a dataset folder)."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        return default


@contextlib.contextmanager
def atomic_file(path: str | Path) -> Iterator[BinaryIO]:
    """Open ``path`` for binary writing, atomically; ``-`` is standard output.

    A device or FIFO (``/dev/stdout``, a named pipe) is written in place, since it cannot be replaced;
    through a symbolic link, the file it names is replaced and the link kept. ``AbortWrite`` raised
    in the block discards the new content and leaves ``path`` untouched.

    Raises:
        RunError: The parent folder is missing or unwritable, the target is a directory, or the
            disk is full (:data:`WRITE_ERRNOS`).
    """
    if str(path) == STDOUT:
        with _write_errors("standard output"):
            yield WholeWrites(sys.stdout.buffer)  # type: ignore[misc]
            sys.stdout.buffer.flush()
        _commit_point()
        return
    target = Path(path)
    if is_special(target):
        check_file_target(target)
        with _write_errors(str(target)), contextlib.suppress(AbortWrite), open(target, "wb") as handle:
            yield WholeWrites(handle)  # type: ignore[misc]
        _commit_point()
        return
    target = written_path(target)
    parent = check_file_target(target)
    remove_stale(target, parent)
    tmp: str | None = None
    held: int | None = None
    try:
        with deferred_interrupts():  # a signal while the temporary is made is raised once it is known
            try:
                fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.tmp-", dir=parent)
            except OSError as exc:
                raise RunError(f"cannot write output {target}: {exc.strerror or exc}") from exc
            held = os.dup(fd)  # the lock lasts until the rename, after the handle is closed
            handle = os.fdopen(fd, "wb")
        hold(fd)
        with _write_errors(str(target)), handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        check_interrupted()
        os.chmod(tmp, _kept_mode(target, 0o644))
        _commit_point()  # from here a signal no longer undoes the output (command_outputs)
        os.replace(tmp, target)
    except AbortWrite:
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # type: ignore[arg-type]
    except BaseException:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
    finally:
        if held is not None:
            os.close(held)


_REPLACED_WHOLE = "permission denied (the folder is replaced whole, by renaming it, which needs write permission on it)"


def check_replaceable_folder(target: Path) -> None:
    """Refuse an existing folder output this user may not write: replacing it renames it away,
    which needs that (checked before the work, as :func:`atomic_directory` checks it again).

    Raises:
        RunError: ``target`` is a folder without write permission for this user.
    """
    if target.is_dir() and not os.access(target, os.W_OK):
        raise RunError(f"cannot write output {target}: {_REPLACED_WHOLE}")


@contextlib.contextmanager
def atomic_directory(path: str | Path, check: Callable[[Path], None] | None = None) -> Iterator[Path]:
    """Yield a temporary directory that replaces ``path`` when the block completes.

    An existing directory at ``path`` is replaced whole; an existing file there is an error.
    ``check(path)`` runs before the block and again just before the replacement (the block may
    run for minutes); what it raises leaves ``path`` as it was. Through a symbolic link, the folder
    it names is replaced and the link kept (:func:`written_path`), as for a file.

    Raises:
        RunError: The parent folder is missing, ``path`` is a file, an existing folder there may
            not be written (renaming it away needs that), or the disk is full (:data:`WRITE_ERRNOS`).
    """
    target = written_path(Path(path))
    parent = output_folder(target)
    if check is not None:
        check(target)
    if target.exists() and not target.is_dir():
        raise RunError(f"output {target} exists and is not a directory")
    check_replaceable_folder(target)
    remove_stale(target, parent)
    tmp: Path | None = None
    held: int | None = None
    try:
        with deferred_interrupts():  # a signal while the temporary is made is raised once it is known
            try:
                tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=parent))
                held = os.open(tmp, os.O_RDONLY)
            except OSError as exc:
                raise RunError(f"cannot write output {target}: {exc.strerror or exc}") from exc
        hold(held)
        with _write_errors(str(target)):
            yield tmp
        check_interrupted()
        os.chmod(tmp, _kept_mode(target, 0o755))
        if check is not None:
            check(target)
        _commit_point()  # from here a signal no longer undoes the output (command_outputs)
        if target.exists():
            with deferred_interrupts():  # the swap runs whole: a signal inside it is raised once it is done
                old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=parent))
                try:
                    os.replace(target, old / target.name)
                except OSError as exc:  # moving a folder into another needs write permission on it
                    os.rmdir(old)
                    raise RunError(f"cannot write output {target}: {_REPLACED_WHOLE}") from exc
                try:
                    os.replace(tmp, target)
                except OSError as exc:
                    os.replace(old / target.name, target)  # the previous output back in place
                    os.rmdir(old)
                    raise RunError(f"cannot write output {target}: {exc.strerror or exc}") from exc
                shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if held is not None:
            os.close(held)
