"""Reading a Hermes ``state.db`` (SQLite, WAL) through a private read-only copy.

Hermes' canonical store: ``sessions`` (one row per session: ``source``,
``parent_session_id``, ``started_at``/``ended_at`` in Unix seconds, ``end_reason``, system prompt,
token totals) and ``messages`` (one row per message dict, global ``id`` order, ``tool_calls`` and
``reasoning_details`` as JSON text, structured ``content`` as JSON text behind a ``\\x00json:`` or
``\\x01json:`` prefix). ``schema_version(version)`` counts the migrations: v1 (2026-02-19) had
``messages(id, session_id, role, content, tool_call_id, tool_calls, tool_name, timestamp,
token_count)``; v2 added ``finish_reason``; v6 ``reasoning``, ``reasoning_details``,
``codex_reasoning_items``; v7 ``reasoning_content``; v9 ``codex_message_items``; v12
``platform_message_id``; v13 ``observed``; v15 ``active``; v17 ``compacted``; v20
``effect_disposition``; v23 ``api_content``. Sessions gained cache, reasoning and cost columns by
v5–v6 (token counts exclude cache reads and writes since v5, ``CanonicalUsage``). Columns are
selected from ``PRAGMA table_info`` so every version reads; a version above 23 (or none recorded)
reads as far as the known columns go and is reported.

The database and its ``-wal``/``-shm`` files are read through the private read-only copy of
``sources/sqlite_copy.py`` (the original and its folder are never touched; one copy per build).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ng_traj.sources import sqlite_copy

KNOWN_SCHEMA_VERSION = 23
"""The newest ``schema_version`` whose columns are known (Hermes' migrations up to 23)."""

SESSION_COLUMNS = (
    "id",
    "source",
    "parent_session_id",
    "started_at",
    "ended_at",
    "end_reason",
    "system_prompt",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "api_call_count",
)
MESSAGE_COLUMNS = (
    "id",
    "session_id",
    "role",
    "content",
    "tool_call_id",
    "tool_calls",
    "tool_name",
    "timestamp",
    "finish_reason",
    "reasoning",
    "reasoning_content",
    "reasoning_details",
    "codex_reasoning_items",
    "active",
    "compacted",
    "api_content",
    "_compressed_summary",
)
LINEAGE_COLUMNS = ("id", "source", "parent_session_id", "end_reason")
_REQUIRED = {"sessions": ("id",), "messages": ("session_id", "role", "content")}
_CONTENT_PREFIXES = ("\x00json:", "\x01json:")


class HermesDbError(Exception):
    """The database copy could not be made, opened or queried (message: the reason, no payload)."""


@dataclass
class Catalogue:
    """What the index needs of one database: its version, usable columns and each session's lineage."""

    version: int | None
    session_columns: tuple[str, ...]
    message_columns: tuple[str, ...]
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    recorded: Any = None
    """``MAX(version)`` as stored (``None`` when no version is recorded; may be text in a damaged file)."""

    @property
    def version_known(self) -> bool:
        """True when the recorded ``schema_version`` is one whose columns are known."""
        return self.version is not None and 1 <= self.version <= KNOWN_SCHEMA_VERSION


def sidecars(path: Path) -> list[Path]:
    """The ``-wal`` and ``-shm`` files beside ``path`` that exist."""
    return sqlite_copy.sidecars(path)


def private_copy(path: Path) -> Path:
    """A read-only-usable copy of the database and its sidecars (``sources/sqlite_copy.py``; cached).

    Raises:
        HermesDbError: The files could not be read or copied.
    """
    try:
        return sqlite_copy.private_copy(path, prefix="ng-traj-hermes-")
    except sqlite_copy.SqliteCopyError as exc:
        raise HermesDbError(str(exc)) from exc


DB_ERRORS = sqlite_copy.DB_ERRORS


class Undecodable(str):
    """A TEXT value whose bytes are not UTF-8, read with U+FFFD in place of each bad sequence.

    SQLite stores whatever bytes a writer gives it; Python's default text factory raises
    ``OperationalError: Could not decode to UTF-8`` on such a value, which failed the whole query
    (every session's transcript in it). The value is kept, marked, so that the message holding it
    is built and reported (:func:`message_dict`)."""

    __slots__ = ()


def _text(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return Undecodable(value.decode("utf-8", errors="replace"))


def _connect(copy: Path) -> sqlite3.Connection:
    """A read-only connection to a private copy (``sqlite_copy.connect``) whose TEXT values that are
    not UTF-8 read as :class:`Undecodable` instead of failing the query."""
    connection = sqlite_copy.connect(copy)
    connection.text_factory = _text
    return connection


def _columns(connection: sqlite3.Connection, table: str, wanted: Iterable[str]) -> tuple[str, ...]:
    """The ``wanted`` columns ``table`` has; ``()`` for a missing ``messages`` table (sessions are
    still built, each without its transcript).

    Raises:
        HermesDbError: ``sessions`` is missing, or a table lacks a required column.
    """
    present = {row["name"] for row in connection.execute(f"PRAGMA table_info({table})")}
    if not present and table == "messages":
        return ()
    if not present:
        raise HermesDbError(f"not a Hermes state.db: no table {table}")
    missing = [name for name in _REQUIRED[table] if name not in present]
    if missing:
        raise HermesDbError(f"not a Hermes state.db: table {table} lacks {', '.join(missing) or 'columns'}")
    return tuple(name for name in wanted if name in present)


def _version(connection: sqlite3.Connection) -> Any:
    """``MAX(version)`` of ``schema_version`` as stored, or ``None`` when there is no such table or row."""
    try:
        row = connection.execute("SELECT MAX(version) AS v FROM schema_version").fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" not in str(exc):
            raise  # a damaged page is the database's problem, not a missing version
        return None
    return row["v"] if row is not None else None


def _select(columns: tuple[str, ...]) -> str:
    return ", ".join(f'"{name}"' for name in columns)


_CATALOGUES: dict[Path, Catalogue] = {}


def read_catalogue(path: Path) -> Catalogue:
    """The schema version, usable columns and every session's lineage columns (``LINEAGE_COLUMNS``).

    Read once per copy of the database (the index and every load of a build share it).

    Raises:
        HermesDbError: The copy cannot be made or opened, or it is not a Hermes ``state.db``.
    """
    copy = private_copy(path)
    if copy not in _CATALOGUES:
        _CATALOGUES[copy] = _read_catalogue(copy)
    return _CATALOGUES[copy]


def _read_catalogue(copy: Path) -> Catalogue:
    try:
        with closing(_connect(copy)) as connection:
            recorded = _version(connection)
            catalogue = Catalogue(
                recorded if type(recorded) is int else None,
                _columns(connection, "sessions", SESSION_COLUMNS),
                _columns(connection, "messages", MESSAGE_COLUMNS),
                recorded=recorded,
            )
            lineage = tuple(name for name in LINEAGE_COLUMNS if name in catalogue.session_columns)
            for row in connection.execute(f"SELECT {_select(lineage)} FROM sessions ORDER BY id"):
                if isinstance(row["id"], str) and row["id"]:
                    catalogue.sessions[row["id"]] = dict(row)
    except DB_ERRORS as exc:
        raise HermesDbError(sqlite_copy.db_problem(exc)) from exc
    return catalogue


def _query(path: Path, query: str, ids: list[str]) -> list[dict[str, Any]]:
    try:
        with closing(_connect(private_copy(path))) as connection:
            return [dict(row) for row in connection.execute(query, ids)]
    except DB_ERRORS as exc:
        raise HermesDbError(sqlite_copy.db_problem(exc)) from exc


def read_sessions(path: Path, catalogue: Catalogue, session_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Full rows (``SESSION_COLUMNS`` present in this version) of ``session_ids``.

    Raises:
        HermesDbError: The copy cannot be made, opened or queried.
    """
    ids = sorted(set(session_ids))
    query = f"SELECT {_select(catalogue.session_columns)} FROM sessions WHERE id IN ({', '.join('?' * len(ids))})"
    return {row["id"]: _text_parent(row) for row in _query(path, query, ids)} if ids else {}


def _text_parent(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with a ``parent_session_id`` that is not text read as none: SQLite keeps any type in
    any column, so a damaged file can hold a number there (reported when the file is indexed)."""
    parent = row.get("parent_session_id")
    return row if parent is None or isinstance(parent, str) else {**row, "parent_session_id": None}


def read_messages(path: Path, catalogue: Catalogue, session_ids: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    """Message rows of ``session_ids`` in global ``id`` order (``session_meta`` rows included).

    Raises:
        HermesDbError: The copy cannot be made, opened or queried.
    """
    ids = sorted(set(session_ids))
    rows: dict[str, list[dict[str, Any]]] = {session: [] for session in ids}
    if not ids:
        return rows
    if not catalogue.message_columns:
        raise HermesDbError("OperationalError: no table messages")
    order = "id" if "id" in catalogue.message_columns else "rowid"
    query = (
        f"SELECT {_select(catalogue.message_columns)} FROM messages "
        f"WHERE session_id IN ({', '.join('?' * len(ids))}) ORDER BY {order}"
    )
    for row in _query(path, query, ids):
        rows[row["session_id"]].append(row)
    return rows


def decode_content(value: Any) -> Any:
    """A ``messages.content`` value: structured content behind the JSON prefix decoded, else as stored."""
    if isinstance(value, str) and value.startswith(_CONTENT_PREFIXES):
        try:
            return orjson.loads(value[len(_CONTENT_PREFIXES[0]) :])
        except orjson.JSONDecodeError:
            return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


_JSON_COLUMNS = ("tool_calls", "reasoning_details", "codex_reasoning_items")
_ROW_ONLY = frozenset({"id", "session_id", "active", "compacted", "api_content"})


def _json_column(value: Any) -> tuple[Any, bool]:
    """A JSON-text column decoded (``(value, True)``), or ``(None, False)`` when it is not JSON."""
    if not isinstance(value, str):
        return value, True
    try:
        return orjson.loads(value), True
    except orjson.JSONDecodeError:
        return None, False


def undecodable_columns(row: dict[str, Any]) -> list[str]:
    """The columns of ``row`` whose text was not UTF-8 (:class:`Undecodable`), in column order."""
    return [key for key, value in row.items() if isinstance(value, Undecodable)]


def plain_text(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its :class:`Undecodable` values as the plain text read (``row`` itself when none is)."""
    if not any(isinstance(value, Undecodable) for value in row.values()):
        return row
    return {key: str(value) if isinstance(value, Undecodable) else value for key, value in row.items()}


def message_dict(row: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """One ``messages`` row as a Hermes message dict, and the JSON columns that did not decode.

    ``api_content`` (v23: the exact text sent to the model when it differs from ``content``) is the
    model-visible content where present. A text that was not UTF-8 (:class:`Undecodable`) is kept as
    the plain text read, U+FFFD in place of its bad bytes (:func:`undecodable_columns` names them).
    """
    row = plain_text(row)
    message = {key: value for key, value in row.items() if value is not None and key not in _ROW_ONLY}
    wire = row.get("api_content")
    message["content"] = wire if isinstance(wire, str) else decode_content(row.get("content"))
    broken = []
    for key in _JSON_COLUMNS:
        if key in message:
            message[key], ok = _json_column(message[key])
            if not ok:
                broken.append(key)
    return message, broken


def is_live(row: dict[str, Any]) -> bool:
    """False for a row outside the live history: ``active = 0`` (archived by compaction, rewind or undo)."""
    return row.get("active") != 0 and row.get("role") != "session_meta"
