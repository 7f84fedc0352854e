"""SQLite stores of native producers (Hermes ``state.db``, OpenCode ``opencode.db``): recognising one
cheaply, and reading it through a private read-only copy.

Recognition: a file is an SQLite database when its first bytes are the SQLite magic and its name ends
in ``.db``/``.sqlite``/``.sqlite3`` (or is one of the names a reader registers, such as ``state.db``).
Each reader registers a predicate over the name and the first :data:`HEAD_BYTES` bytes (where SQLite
keeps the schema text of a small database) with :func:`register_kind`; a database no predicate
accepts is of kind ``other``, reported as unsupported by the Hermes reader, so that no two readers
claim one file. ``-wal``/``-shm`` files belong to the database they sit beside.

Reading: the database and its ``-wal``/``-shm`` files are copied into a temporary folder and the copy
is opened read-only, so the original and its folder are never touched and a live writer is never
blocked (uncommitted WAL frames are ignored by SQLite itself). One copy serves the index and every
load of a build; it is made again only when the files change (size or modification time).

Where copies go: every copy is a folder of its own inside one folder per build, :func:`copies_folder`
(``ng-traj-sqlite-*`` in the system's temporary folder), which the process that made it removes with
everything in it when it exits, an interrupted build included. Worker processes never own copies:
forked ones inherit the folder and the copies made before the fork, others (a fork server's, Ray's)
are given the folder (:func:`use_copies_folder`), so that a copy a worker makes is removed by the build
however the worker ends (multiprocessing and Ray end their workers without the interpreter's exit
handlers, which left one folder per worker and copy behind). A worker whose copy replaces an inherited
one leaves that copy in place, since it is the parent's.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ng_traj.io.atomic import deferred_interrupts, locked_temp_folder
from ng_traj.io.files import open_regular

SQLITE_MAGIC = b"SQLite format 3\x00"
DB_SUFFIXES = (".db", ".sqlite", ".sqlite3")
SIDECAR_SUFFIXES = ("-wal", "-shm")
HEAD_BYTES = 1 << 16

DB_ERRORS = (sqlite3.Error, UnicodeDecodeError)
"""What reading a damaged database raises: ``sqlite3`` decodes text (a table or index name in
``sqlite_master`` included) as UTF-8 and raises ``UnicodeDecodeError``, not an ``sqlite3.Error``, for
bytes that are not."""


def db_problem(exc: Exception) -> str:
    """What :data:`DB_ERRORS` ``exc`` says of the database, for a diagnostic: SQLite's own error
    (``DatabaseError: file is not a database``), or, for a name the schema holds that is not UTF-8
    (the readers decode every value themselves, so only the module's own decoding of names fails),
    that its schema is damaged, without Python's codec text."""
    if isinstance(exc, UnicodeDecodeError):
        return "its schema (sqlite_master) holds a name that is not UTF-8: the database is damaged"
    return f"{type(exc).__name__}: {exc}"


class SqliteCopyError(Exception):
    """The private copy could not be made (message: the reason, no payload)."""


KindTest = Callable[[Path, bytes], bool]
_KINDS: dict[str, tuple[tuple[str, ...], KindTest]] = {}


def register_kind(kind: str, test: KindTest, names: tuple[str, ...] = ()) -> None:
    """Register a reader's database kind: ``test(path, head)`` accepts it; ``names`` are file names
    that are databases whatever their suffix (``state.db`` is one by its suffix already)."""
    _KINDS[kind] = (names, test)


def sidecar_of(path: Path) -> Path | None:
    """The database a ``-wal``/``-shm`` file belongs to, or ``None`` for any other file."""
    for suffix in SIDECAR_SUFFIXES:
        if path.name.endswith(suffix):
            return path.with_name(path.name[: -len(suffix)])
    return None


def sidecars(path: Path) -> list[Path]:
    """The ``-wal`` and ``-shm`` files beside ``path`` that exist."""
    return [candidate for suffix in SIDECAR_SUFFIXES if (candidate := Path(f"{path}{suffix}")).is_file()]


def database_kind(path: Path) -> str | None:
    """The registered kind of an SQLite database, ``other`` for one no reader knows, else ``None``.

    Never raises: an unreadable file is not a database.
    """
    named = any(path.name in names for names, _ in _KINDS.values())
    if not named and not path.name.endswith(DB_SUFFIXES):
        return None
    try:
        with open_regular(path) as handle:
            head = handle.read(HEAD_BYTES)
    except OSError:
        return None
    if not head.startswith(SQLITE_MAGIC):
        # A reader's own file name with a damaged header (a flipped byte, a BOM) is still its database, so
        # that reading it reports it unreadable instead of passing it over as no one's file.
        owner = next((kind for kind, (names, _) in sorted(_KINDS.items()) if path.name in names), None)
        return owner if head else None
    for kind, (_, test) in sorted(_KINDS.items()):
        if test(path, head):
            return kind
    return "other"


COPIES_PREFIX = "ng-traj-sqlite-"
"""The name of a folder of private copies starts so (then ``tempfile``'s random part)."""
_COPIES: dict[str, tuple[tuple[Any, ...], Path]] = {}
_FOLDER: dict[str, Any] = {"path": None, "held": None}


def copies_folder() -> str:
    """The folder this process makes its private copies in (made on first use).

    One made here is removed, with every copy in it, when this process exits (``atexit``; a forked
    child that inherits it never removes it). It is locked while it is in use, and the unlocked ones
    a killed build left are removed before it is made (``io/atomic.locked_temp_folder``). A folder
    given by :func:`use_copies_folder` is its maker's to remove.

    Raises:
        OSError: The folder could not be made.
    """
    folder = _FOLDER["path"]
    if folder is None or not os.path.isdir(folder):
        with deferred_interrupts():  # a signal between making it and arranging its removal would leave it
            if _FOLDER.get("held") is not None:  # the lock of a folder made before, removed since
                os.close(_FOLDER.pop("held"))
            folder, _FOLDER["held"] = locked_temp_folder(COPIES_PREFIX)  # locked while this process runs
            atexit.register(_remove_folder, folder, os.getpid())
            _FOLDER["path"] = folder
    return folder


def copies_folder_in_use() -> str | None:
    """The folder this process's copies are in, ``None`` before the first (what a build gives its
    workers: a worker can only meet a database the build's index has copied already)."""
    folder = _FOLDER["path"]
    return folder if folder is not None and os.path.isdir(folder) else None


def use_copies_folder(folder: str) -> None:
    """Make this process's copies in ``folder``, another process's :func:`copies_folder` (a worker is
    given its build's); ignored when ``folder`` is not there (a Ray worker on another machine), the
    copies then go to a folder of this process's own."""
    if os.path.isdir(folder):
        _FOLDER["path"] = folder


def _remove_folder(folder: str, owner: int) -> None:
    if os.getpid() == owner:
        shutil.rmtree(folder, ignore_errors=True)


def _signature(path: Path) -> tuple[Any, ...]:
    files = [path, *(Path(f"{path}{suffix}") for suffix in SIDECAR_SUFFIXES)]
    return tuple((f.stat().st_size, f.stat().st_mtime_ns) if f.is_file() else None for f in files)


def private_copy(path: Path, prefix: str = "ng-traj-sqlite-") -> Path:
    """A read-only-usable copy of the database and its sidecars, in a folder ``<prefix>*`` of
    :func:`copies_folder` (cached while the files and the copy are unchanged).

    Raises:
        SqliteCopyError: The files could not be read or copied.
    """
    key = str(path.resolve())
    try:
        signature = _signature(path)
        cached = _COPIES.get(key)
        if cached is not None and cached[0] == signature and cached[1].is_file():
            return cached[1]
        folder = tempfile.mkdtemp(prefix=prefix, dir=copies_folder())
        copy = Path(folder) / path.name
        shutil.copyfile(path, copy)
        for sidecar in sidecars(path):
            shutil.copyfile(sidecar, Path(folder) / sidecar.name)
    except OSError as exc:
        raise SqliteCopyError(f"cannot copy the database ({exc.strerror or type(exc).__name__})") from exc
    _COPIES[key] = (signature, copy)
    return copy


def connect(copy: Path) -> sqlite3.Connection:
    """A read-only connection to a private copy, rows as :class:`sqlite3.Row`."""
    connection = sqlite3.connect(f"{copy.as_uri()}?mode=ro", uri=True)
    connection.row_factory = sqlite3.Row
    return connection


def table_columns(connection: sqlite3.Connection, table: str) -> set[str]:
    """The column names of ``table`` (empty when there is no such table)."""
    return {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}
