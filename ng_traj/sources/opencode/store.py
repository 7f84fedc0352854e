"""OpenCode's stores read into one shape: sessions, their messages in order, each message's parts.

Three forms hold the same objects (OpenCode keeps the shapes of its old JSON files in every store):

* ``opencode export <id>`` JSON: ``{"info": <session>, "messages": [{"info": <message>, "parts":
  [<part>, ...]}, ...]}``, one session per file (sub-agents are exported separately). Message and
  part ids need not be unique in an export (NeMo Gym's own test export anonymises them all to
  ``msg_123``/``prt_123``), so an export's messages are kept in file order and never keyed by id.
* The 1.x SQLite store ``opencode.db`` (1.2.0 and later): tables ``session(id, parent_id, version,
  time_created, ...)``, ``message(id, session_id, time_created, data)`` and ``part(id, message_id,
  session_id, time_created, data)``, ``data`` being the JSON object of the message or part.
* The 2.x SQLite store: ``session_v2`` (``parent_id``, ``fork_session_id``, ``fork_boundary``,
  ``version``, ``time_created``, per-session token columns) and ``session_message`` for messages
  (read with the columns of 1.x ``message``); parts come from a ``part`` table when the database has
  one, else from a ``parts`` list inside the message object.

Rows are ordered as NeMo Gym's OpenCode producer orders them: ``(time_created, id)``. Times are
Unix milliseconds (``Date.now()``).
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass, field
from math import isfinite
from pathlib import Path
from typing import Any

import orjson

from ng_traj.sources import sqlite_copy
from ng_traj.sources.native import scalar_text

READ_MAJORS = (1, 2)
"""OpenCode major versions whose stores and exports are read."""


class OpenCodeStoreError(Exception):
    """A store could not be read at all (message: the reason, no payload)."""


@dataclass
class Part:
    """One part of a message: its id (may repeat in an export), its JSON object and row time (ms)."""

    id: str
    data: dict[str, Any]
    time_created: Any = None


@dataclass
class Message:
    """One message: id, owning session, row time (ms), JSON object (``{}`` when it did not decode)."""

    id: str
    session_id: str
    data: dict[str, Any]
    time_created: Any = None
    parts: list[Part] = field(default_factory=list)
    broken_parts: int = 0


@dataclass
class Session:
    """One session and its lineage: ``parent_id`` (sub-agent), ``fork_of``/``fork_boundary`` (2.x fork)."""

    id: str
    parent_id: str | None = None
    fork_of: str | None = None
    fork_boundary: str | None = None
    version: str | None = None
    time_created: Any = None
    totals: dict[str, Any] = field(default_factory=dict)


@dataclass
class Store:
    """What one input holds: its form (``export``, ``sqlite-1``, ``sqlite-2``) and its sessions."""

    form: str
    sessions: dict[str, Session] = field(default_factory=dict)
    messages: list[Message] = field(default_factory=list)
    unowned: list[str] = field(default_factory=list)
    """Message or part ids whose session is not in the store."""
    broken: list[str] = field(default_factory=list)
    """Message ids whose JSON object did not decode."""


def _object(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, str | bytes):
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def major(version: Any) -> int | None:
    """The major number of an OpenCode version string (``"1.17.11"`` → 1), else ``None``."""
    head = scalar_text(version).split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _text_or_none(value: Any) -> str | None:
    text = scalar_text(value)
    return text or None


def seconds(value: Any) -> float | None:
    """OpenCode's epoch milliseconds as seconds; ``None`` for a non-number, negative or non-finite value."""
    if type(value) not in (int, float) or not isfinite(value) or value < 0:
        return None
    return float(value) / 1000


# -- export ------------------------------------------------------------------------------------------


def is_export(value: Any) -> bool:
    """Whether a JSON value is an ``opencode export`` document (session info with an id, messages list)."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("info"), dict)
        and isinstance(value.get("messages"), list)
        and isinstance(value["info"].get("id"), str)
    )


def _session_from_info(info: dict[str, Any]) -> Session:
    time = info.get("time") if isinstance(info.get("time"), dict) else {}
    tokens = info.get("tokens") if isinstance(info.get("tokens"), dict) else {}
    return Session(
        id=info["id"],
        parent_id=_text_or_none(info.get("parentID")),
        version=_text_or_none(info.get("version")),
        time_created=time.get("created"),
        totals=tokens,
    )


def export_store(value: dict[str, Any]) -> Store:
    """An export document as a store of one session; entries that are not message objects are
    skipped and listed in ``broken`` (``messages[<n>]``)."""
    session = _session_from_info(value["info"])
    store = Store("export", {session.id: session})
    for position, entry in enumerate(value["messages"]):
        info = entry.get("info") if isinstance(entry, dict) else None
        if not isinstance(info, dict):
            store.broken.append(f"messages[{position}]")
            continue
        message_id = scalar_text(info.get("id")) or f"messages[{position}]"
        owner = scalar_text(info.get("sessionID")) or session.id
        if owner != session.id:
            store.unowned.append(message_id)
            continue
        time = info.get("time") if isinstance(info.get("time"), dict) else {}
        record = Message(message_id, session.id, info, time.get("created"))
        raw_parts = entry.get("parts") if isinstance(entry.get("parts"), list) else []
        for index, part in enumerate(raw_parts):
            if not isinstance(part, dict):
                record.broken_parts += 1
                continue
            record.parts.append(Part(scalar_text(part.get("id")) or f"{message_id}:parts[{index}]", part))
        store.messages.append(record)
    return store


# -- SQLite ------------------------------------------------------------------------------------------

_V1_TABLES = ("session", "message", "part")
_V2_TABLES = ("session_v2", "session_message")
_SESSION_COLUMNS = ("id", "parent_id", "fork_session_id", "fork_boundary", "version", "time_created")
_TOKEN_COLUMNS = ("tokens_input", "tokens_output", "tokens_reasoning", "tokens_cache_read", "tokens_cache_write")


def database_form(head: bytes) -> str | None:
    """``sqlite-2`` or ``sqlite-1`` from the schema text at the head of a database, else ``None``."""
    if b"session_v2" in head and b"session_message" in head:
        return "sqlite-2"
    if all(
        f"CREATE TABLE `{table}`".encode() in head or f"CREATE TABLE {table} ".encode() in head for table in _V1_TABLES
    ):
        return "sqlite-1"
    return None


def _tables(connection: Any) -> dict[str, set[str]]:
    names = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {name: sqlite_copy.table_columns(connection, name) for name in names if isinstance(name, str)}


def _select(table: str, wanted: tuple[str, ...], present: set[str]) -> str:
    columns = ", ".join(f'"{name}"' for name in wanted if name in present)
    return f'SELECT {columns} FROM "{table}"'


def _order(present: set[str]) -> str:
    return ' ORDER BY "time_created", "id"' if "time_created" in present else ' ORDER BY "id"'


_STORES: dict[Path, Store] = {}


def read_database(path: Path) -> Store:
    """Every session of an ``opencode.db`` with its messages and parts (read once per private copy:
    the index and every load of a build share it).

    Raises:
        OpenCodeStoreError: The copy cannot be made or read, or the database has neither the 1.x nor
            the 2.x session tables.
    """
    try:
        copy = sqlite_copy.private_copy(path, prefix="ng-traj-opencode-")
        if copy not in _STORES:
            with closing(sqlite_copy.connect(copy)) as connection:
                _STORES[copy] = _read(connection)
        return _STORES[copy]
    except sqlite_copy.SqliteCopyError as exc:
        raise OpenCodeStoreError(str(exc)) from exc
    except sqlite_copy.DB_ERRORS as exc:
        raise OpenCodeStoreError(sqlite_copy.db_problem(exc)) from exc


def _read(connection: Any) -> Store:
    tables = _tables(connection)
    if all(name in tables for name in _V2_TABLES):
        form, session_table, message_table = "sqlite-2", "session_v2", "session_message"
    elif all(name in tables for name in _V1_TABLES):
        form, session_table, message_table = "sqlite-1", "session", "message"
    else:
        raise OpenCodeStoreError("no session tables of OpenCode 1.x (session, message, part) or 2.x (session_v2)")
    for table, column in ((session_table, "id"), (message_table, "session_id"), (message_table, "data")):
        if column not in tables[table]:
            raise OpenCodeStoreError(f"table {table} has no column {column}")
    store = Store(form)
    columns = tables[session_table]
    for row in connection.execute(
        _select(session_table, (*_SESSION_COLUMNS, *_TOKEN_COLUMNS), columns) + _order(columns)
    ):
        row = dict(row)
        session_id = row.get("id")
        if not isinstance(session_id, str) or not session_id:
            continue
        store.sessions[session_id] = Session(
            session_id,
            parent_id=_text_or_none(row.get("parent_id")),
            fork_of=_text_or_none(row.get("fork_session_id")),
            fork_boundary=_text_or_none(row.get("fork_boundary")),
            version=_text_or_none(row.get("version")),
            time_created=row.get("time_created"),
            totals={key: row[key] for key in _TOKEN_COLUMNS if key in row},
        )
    _read_messages(connection, tables, message_table, store)
    return store


def _read_messages(connection: Any, tables: dict[str, set[str]], message_table: str, store: Store) -> None:
    columns = tables[message_table]
    by_id: dict[str, Message] = {}
    for row in connection.execute(
        _select(message_table, ("id", "session_id", "data", "time_created"), columns) + _order(columns)
    ):
        row = dict(row)
        message_id, session_id = scalar_text(row.get("id")), row.get("session_id")
        if session_id not in store.sessions:
            store.unowned.append(message_id)
            continue
        data = _object(row.get("data"))
        if not data:
            store.broken.append(message_id)
        message = Message(message_id, session_id, data, row.get("time_created"))
        store.messages.append(message)
        by_id[message_id] = message
    if "part" in tables and {"message_id", "data"} <= tables["part"]:
        part_columns = tables["part"]
        query = _select("part", ("id", "message_id", "session_id", "data", "time_created"), part_columns)
        for row in connection.execute(query + _order(part_columns)):
            row = dict(row)
            message = by_id.get(scalar_text(row.get("message_id")))
            if message is None:
                continue
            data = _object(row.get("data"))
            if not data or row.get("session_id") not in (None, message.session_id):
                message.broken_parts += 1
                continue
            message.parts.append(Part(scalar_text(row.get("id")), data, row.get("time_created")))
        return
    for message in store.messages:  # 2.x without a part table: parts inside the message object
        raw = message.data.get("parts")
        for index, part in enumerate(raw if isinstance(raw, list) else []):
            if not isinstance(part, dict):
                message.broken_parts += 1
                continue
            message.parts.append(Part(scalar_text(part.get("id")) or f"{message.id}:parts[{index}]", part))
