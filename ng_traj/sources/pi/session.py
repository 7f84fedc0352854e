"""Pi session files (also OpenClaw transcripts): every format version, migrated in memory.

Format (badlogic/pi-mono ``packages/coding-agent``): JSONL, first
line a ``type: "session"`` header, then one entry per line.

* v1 (no ``version``; Nov–Dec 2025): linear entries without ``id``/``parentId``; a ``compaction``
  names its first kept entry by ``firstKeptEntryIndex``, an index into the file's entries counting
  the header as 0.
* v2 (``version: 2``): every entry has an 8-hex ``id`` and a ``parentId``: the file is a tree.
* v3 (``version: 3``): as v2, message role ``hookMessage`` renamed ``custom``.
* A ``kind: "header"`` first line is a newer layout ("v4") that is recognised, not read.
* ``pi --mode json`` stdout (since v0.45 its first line is the session header too) is an event log:
  its ``message_end`` events become a linear session (``_entries_from_events``).

Migration mirrors pi's, in memory only (the file is never rewritten) and deterministically: v1 entries get the id ``v1-<line>`` (their 1-based line in the file) and the
previous entry as parent; ``firstKeptEntryIndex`` becomes the id of the entry on that line of the
file when it exists; ``hookMessage`` becomes ``custom``. Duplicate header lines (pi < 0.55.2) are
tolerated. The active conversation is the path from the *leaf* (pi's rule: the last entry in file
order) to its root; entries off that path are abandoned branches (or other roots). ``parentId`` links
that form a cycle are reported (``parent_cycle``); the walk from the leaf stops where it would come
back to an entry it has passed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ng_traj.diagnostics import Diagnostic, DiagnosticSink, quoted
from ng_traj.io.files import os_reason
from ng_traj.sources.lineage import cycle_text, parent_cycles
from ng_traj.sources.native import joined_ids, json_objects
from ng_traj.sources.pi.copies import CopyIndex, EntryKeys, content_key, entry_keys, report_copies


@dataclass(slots=True)
class Entry:
    """One entry in v3 shape: ``type``, ``id``, ``parent_id`` and the raw object; ``line`` in the file."""

    type: str
    id: str
    parent_id: str | None
    raw: dict[str, Any]
    line: int
    copy_of: str | None = None
    """The id of the earlier entry this one copies (``sources/pi/copies.py``), else ``None``."""
    keys: EntryKeys | None = None
    """The entry's copy-detection keys (``copies.entry_keys``), kept by the read that made them so that
    comparing the entry with other sessions' (``copies.mark_copies``) does not derive them again."""
    message: dict[str, Any] = field(init=False, repr=False, compare=False)
    """The entry's ``message`` object (``{}`` when absent or not an object), read once when the entry
    is made (the readers ask it of an entry many times; ``raw["message"]`` is never replaced)."""

    def __post_init__(self) -> None:
        message = self.raw.get("message")
        self.message = message if isinstance(message, dict) else {}


@dataclass
class Session:
    """A parsed session file.

    Attributes:
        path: The file as named.
        session_id: The header's ``id`` (else the file stem).
        version: Format version after sniffing (1, 2 or 3); 0 when the layout is unsupported.
        header: The header object, or ``None`` when the file had none.
        entries: Entries in file order, migrated to v3 shape.
        unparseable: Lines that were not JSON objects (already reported as diagnostics).
        unsupported: Why the file could not be read at all (an unsupported layout, an I/O error).
        event_log: The file was ``pi --mode json`` stdout, turned into a linear session.

    Entries that copy earlier ones (``Entry.copy_of``) stay in the tree, so the path through them is
    walked, but they are never the leaf and never counted. An entry that repeats an earlier id with the
    same content is kept under the id ``<id>@<line>``; an entry naming that id as its parent is the
    child of the latest entry written under it before the child.
    """

    path: str
    session_id: str
    version: int = 3
    header: dict[str, Any] | None = None
    entries: list[Entry] = field(default_factory=list)
    unparseable: int = 0
    unsupported: str | None = None
    event_log: bool = False

    @property
    def has_messages(self) -> bool:
        """True when the file holds at least one ``message`` entry."""
        return any(entry.type == "message" for entry in self.entries)

    def by_id(self) -> dict[str, Entry]:
        """Entries by id; for a repeated id the later entry wins (pi appends, the last write is live)."""
        return {entry.id: entry for entry in self.entries}

    def copied(self) -> list[str]:
        """Ids of the entries that entries of this session copy, in file order."""
        return [entry.copy_of for entry in self.entries if entry.copy_of is not None]

    def leaf(self) -> Entry:
        """The last entry that is not a copy (the last entry when every entry is one)."""
        return next((e for e in reversed(self.entries) if e.copy_of is None), self.entries[-1])

    def active_path(self) -> tuple[list[Entry], list[str]]:
        """Entries from the root to the leaf (the last entry that is not a copy), and the parent ids that
        were never written.

        A parent id that names no entry does not end the walk (a lost line): it continues with the
        entry just before, in file order, and the missing id is returned for a gap.
        """
        if not self.entries:
            return [], []
        index = self.by_id()
        position: dict[int, int] = {}  # each entry's place in the file, made when a parent is missing
        path: list[Entry] = []
        missing: list[str] = []
        seen: set[str] = set()
        current: Entry | None = self.leaf()
        while current is not None and current.id not in seen:
            seen.add(current.id)
            path.append(current)
            parent = current.parent_id
            if parent is not None and parent not in index:
                missing.append(parent)
                position = position or {id(entry): i for i, entry in enumerate(self.entries)}
                before = position[id(current)] - 1
                current = self.entries[before] if before >= 0 else None
            else:
                current = index.get(parent) if parent is not None else None
        path.reverse()
        return path, missing

    def branch_points(self) -> list[str]:
        """Ids of entries with more than one child, in file order (where the tree forks)."""
        children: dict[str, int] = {}
        for entry in self.entries:
            if entry.parent_id is not None:
                children[entry.parent_id] = children.get(entry.parent_id, 0) + 1
        return [entry.id for entry in self.entries if children.get(entry.id, 0) > 1]


def _header_version(header: dict[str, Any], path: str, line: int, sink: DiagnosticSink) -> int:
    """The header's format version; one pi does not know yet is read as the newest (3), reported."""
    version = header.get("version")
    if version is None or (type(version) is int and version in (1, 2, 3)):
        return version or 1
    newer = type(version) in (int, float) and version > 3  # a huge integer parses as a float
    read_as = 3 if newer else 1
    message = f"session format version {quoted(version)} is not one ng-traj knows (1, 2, 3); read as v{read_as}"
    sink.add(Diagnostic("warning", "pi_session_version_unknown", message, path=path, line=line))
    return read_as


def _entry(raw: dict[str, Any], line: int, version: int, previous: str | None) -> Entry:
    kind = raw.get("type") if isinstance(raw.get("type"), str) else "unknown"
    raw = _migrated(raw, version)
    if version == 1:
        return Entry(kind, f"v1-{line}", previous, raw, line)
    entry_id = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("id") else f"line-{line}"
    parent = raw.get("parentId") if isinstance(raw.get("parentId"), str) and raw.get("parentId") else None
    return Entry(kind, entry_id, parent, raw, line)


def _migrate_v1_compactions(entries: list[Entry]) -> None:
    ids_by_line = {entry.line: entry.id for entry in entries}
    for entry in entries:
        index = entry.raw.get("firstKeptEntryIndex")
        if entry.type == "compaction" and isinstance(index, int) and "firstKeptEntryId" not in entry.raw:
            kept = ids_by_line.get(index + 1)
            entry.raw = {**entry.raw, "firstKeptEntryId": kept}


_ID_EFFECTS = (("id", "the entry is named after its line"), ("parentId", "the entry has no parent"))
"""The envelope fields a v2+ entry needs as text, and what happens when one is not."""


def _entry_problem(raw: dict[str, Any], version: int) -> str | None:
    """What makes an entry unusable in part: (v2+) an ``id``/``parentId`` that is not text, a
    ``type`` that is not text, or a ``message`` entry without a message object, a text role or
    readable content; ``None`` when nothing is wrong."""
    if version > 1:
        for key, effect in _ID_EFFECTS:
            value = raw.get(key)
            if value is not None and not isinstance(value, str):
                return f"{key} is not text ({quoted(value)}); {effect}"
    kind = raw.get("type")
    if kind != "message":
        return None if isinstance(kind, str) else f"type is not text ({quoted(kind)}); passed over"
    message = raw.get("message")
    if not isinstance(message, dict):
        return "a message entry without a message object; passed over"
    if not isinstance(message.get("role"), str):
        return f"message role is not text ({quoted(message.get('role'))}); passed over"
    if message.get("content") is not None and not isinstance(message["content"], str | list):
        return f"message content is neither text nor a list of blocks ({type(message['content']).__name__}); not read"
    return _block_problem(message.get("content"))


_BLOCK_TEXT = {"text": "text", "thinking": "thinking"}
"""Content block types whose text is read, and the key that holds it (a ``text`` block's is required)."""


def _block_problem(content: Any) -> str | None:
    """Why a block of a message's content list is passed over: it is not an object, its ``type`` is not
    text, a ``text`` block's text is not text (``null`` included), or a ``thinking`` block's thinking
    is there but not text; ``None`` when every block is read."""
    for position, block in enumerate(content if isinstance(content, list) else []):
        if not isinstance(block, dict):
            return f"content block {position} is not an object ({type(block).__name__}); passed over"
        kind = block.get("type")
        if not isinstance(kind, str):
            return f"content block {position} has a type that is not text ({quoted(kind)}); passed over"
        key = _BLOCK_TEXT.get(kind)
        if key is not None and not isinstance(block.get(key), str) and (kind == "text" or block.get(key) is not None):
            return f"content block {position}: {key} is not text ({quoted(block.get(key))}); passed over"
    return None


def read_session(path: str | Path, sink: DiagnosticSink) -> Session:
    """Parse one pi-family session file; unreadable lines are reported to ``sink`` and counted.

    Indexing reads less (:func:`scan_session`): the header and the response ids, without entries.
    """
    name = os.fspath(path)
    session = Session(name, os.path.basename(name).split(".jsonl")[0])  # a file's name: no trailing separator
    previous: str | None = None
    copies: dict[object, int] = {}
    latest: dict[str, str] = {}
    index = CopyIndex()
    written: set[str] = set()  # the ids of the entries appended so far
    ordered = True  # every entry's parent written before it, no id twice: the links can form no cycle
    for line, value in _objects(path, session, sink):
        if session.header is None and not session.entries:
            first = _first_object(session, value, line, sink)
            if first == "unsupported":
                session.version, session.unsupported = 0, "kind_header"
                return session
            if first == "header":
                continue
        if value.get("type") == "session":
            if session.header is None:
                message = "session header after the first entry; ignored (the file was read without a header)"
                sink.add(Diagnostic("warning", "pi_header_misplaced", message, path=session.path, line=line))
            continue
        problem = _entry_problem(value, session.version)
        if problem is not None:
            sink.add(Diagnostic("warning", "pi_entry_invalid", problem, path=session.path, line=line))
        if not isinstance(value.get("type"), str):
            continue  # passed over: an object that is not an entry never becomes the leaf
        entry = _entry(value, line, session.version, previous)
        if entry.parent_id is not None:
            entry.parent_id = latest.get(entry.parent_id, entry.parent_id)
        if _repeated(session, entry, copies, sink):
            ordered = False  # the entry replaced an earlier one where it stood, with its own parent
            continue
        if entry.copy_of is None:
            entry.keys = entry_keys(entry.type, entry.raw, entry.message)
            entry.copy_of = index.copy_or_add(entry.id, entry.type, entry.raw, entry.keys)
        latest[entry.raw.get("id") if session.version > 1 and isinstance(entry.raw.get("id"), str) else entry.id] = (
            entry.id
        )
        if ordered and ((entry.parent_id is not None and entry.parent_id not in written) or entry.id in written):
            ordered = False
        written.add(entry.id)
        session.entries.append(entry)
        previous = entry.id
    if session.version == 1:
        _migrate_v1_compactions(session.entries)
    if any(entry.type in EVENT_TYPES for entry in session.entries):
        session.entries = _entries_from_events(session.entries, session.path, sink)
        session.event_log = True
        ordered = True  # one linear chain, each entry the child of the one before
    if not ordered:
        _report_cycles(session, sink)
    first = next((entry.line for entry in session.entries if entry.copy_of is not None), None)
    report_copies(session.copied(), "earlier entries of the session", session.path, first, sink)
    return session


def _first_object(session: Session, value: dict[str, Any], line: int, sink: DiagnosticSink) -> str | None:
    """Read the first object of a session file into ``session``: ``"unsupported"`` for a ``kind:
    "header"`` layout (left unread), ``"header"`` for a session header (its version and id taken),
    else ``None``, the version guessed from the entry (no readable header: ids say v2+, else v1)."""
    if value.get("kind") == "header":
        return "unsupported"
    if value.get("type") == "session":
        session.header = value
        session.version = _header_version(value, session.path, line, sink)
        if isinstance(value.get("id"), str) and value["id"]:
            session.session_id = value["id"]
        return "header"
    session.version = 3 if "parentId" in value else 1
    return None


def _migrated(raw: dict[str, Any], version: int) -> dict[str, Any]:
    """The entry with pi's v3 role name (``hookMessage`` became ``custom``); ``raw`` itself when unchanged."""
    if version < 3 and isinstance(raw.get("message"), dict) and raw["message"].get("role") == "hookMessage":
        return {**raw, "message": {**raw["message"], "role": "custom"}}
    return raw


def scan_header(path: str | Path) -> Session:
    """The session :func:`scan_session` gives (its path, id and header, no entries), read only as far
    as its header can be: to the first object that is the header, a ``kind: "header"`` layout or an
    entry (an object whose ``type`` is text other than ``"session"``); objects before it without a
    textual ``type`` are passed over, as a full read passes over them. Nothing is reported.

    Indexing reads every file's header first (forks are grouped by them) and a unit's response ids
    only when it makes the unit, so that no reader holds the ids of every file at once.
    """
    quiet = DiagnosticSink()
    name = os.fspath(path)
    session = Session(name, os.path.basename(name).split(".jsonl")[0])  # no Path (its parts interned) per file
    for line, value in _objects(path, session, quiet):
        first = _first_object(session, value, line, quiet)
        if first == "unsupported":
            return Session(session.path, session.session_id)
        kind = value.get("type")
        if first == "header" or (kind != "session" and isinstance(kind, str)):
            break  # the header, or the first entry: a later object is never read as the header
    return Session(session.path, session.session_id, header=session.header)


def scanned_ids(paths: Sequence[str | Path]) -> tuple[str, ...]:
    """The response ids :func:`scan_session` finds in any of ``paths`` (a unit's session files), each
    once, sorted (``native.joined_ids``)."""
    return joined_ids([tuple(sorted(scan_session(path)[1])) for path in paths])


def scan_session(path: str | Path) -> tuple[Session, frozenset[str]]:
    """What indexing needs of a session file, without building its entries: the session with its header
    and no entries (``forks.header_only`` of :func:`read_session`), and the provider response ids
    ``observe.response_ids`` finds in a full read.

    The same rules as :func:`read_session`, kept only as far as they change those ids: a repeated
    entry id (v2+) with other content replaces the earlier entry, one with the same content is a copy
    (kept, so its response id counts, except in a ``pi --mode json`` event log, whose copies are passed
    over); entries are compared by content only when their id repeats. Nothing is reported (loading
    reports); an unreadable file gives the header-less session and no ids.
    """
    quiet = DiagnosticSink()
    name = os.fspath(path)
    session = Session(name, os.path.basename(name).split(".jsonl")[0])  # no Path (its parts interned) per file
    entries: list[tuple[str, dict[str, Any], bool]] = []  # (type, object, a copy) in the order of read_session
    places: dict[str, int] = {}
    for line, value in _objects(path, session, quiet):
        if session.header is None and not entries:
            first = _first_object(session, value, line, quiet)
            if first == "unsupported":
                return Session(session.path, session.session_id), frozenset()
            if first == "header":
                continue
        kind = value.get("type")
        if kind == "session" or not isinstance(kind, str):
            continue
        if session.version > 1:
            entry_id = value.get("id") if isinstance(value.get("id"), str) and value.get("id") else f"line-{line}"
            place = places.get(entry_id)
            if place is not None:
                earlier = entries[place][1]
                if content_key(_migrated(value, session.version)) == content_key(_migrated(earlier, session.version)):
                    entries.append((kind, value, True))
                else:
                    entries[place] = (kind, value, False)
                continue
            places[entry_id] = len(entries)
        entries.append((kind, value, False))
    events = any(kind in EVENT_TYPES for kind, _, _ in entries)
    wanted = "message_end" if events else "message"
    ids = set()
    for kind, value, copy in entries:
        message = value.get("message")
        if kind == wanted and not (events and copy) and isinstance(message, dict):
            response = message.get("responseId")
            if isinstance(response, str) and response:
                ids.add(response)
    return Session(session.path, session.session_id, header=session.header), frozenset(ids)


def _repeated(session: Session, entry: Entry, seen: dict[object, int], sink: DiagnosticSink) -> bool:
    """Whether ``entry`` rewrites an earlier one, and so is no entry of its own (reported ``pi_entry_repeated``).

    With ids (v2+), an id already read: with the same content (``parentId`` and ``timestamp`` aside) it
    is a copy, kept in the tree as ``<id>@<line>`` with ``copy_of`` set (never the leaf, never counted);
    with other content the later content replaces the earlier entry where it stands, as pi's last write
    wins, without moving the leaf. Without ids (v1), an entry equal to an earlier one as a whole (its
    time included) is a copy (``copy_of`` set), so a repeated assistant line is not a second model call.

    ``seen`` maps an id (v2+) or the entry's canonical JSON (v1) to its index in ``session.entries``.
    """
    if session.version == 1 and entry.type in _PASSING_EVENTS:
        return False  # an event of a log without a header (``turn_start``...): such lines repeat by nature
    key: object = entry.id if session.version > 1 else _content_key(entry.raw)
    if key is None or key not in seen:
        if key is not None:
            seen[key] = len(session.entries)
        return False
    earlier = session.entries[seen[key]]
    if session.version > 1 and content_key(entry.raw) == content_key(earlier.raw):
        message = f"a copy of entry {entry.id} (line {earlier.line}); read as one entry, where it first stood"
        entry.id, entry.copy_of = f"{entry.id}@{entry.line}", earlier.id
        repeated = False  # kept as a copy in the tree (Session docstring)
    elif session.version > 1:
        session.entries[seen[key]] = Entry(entry.type, earlier.id, entry.parent_id, entry.raw, entry.line)
        message = f"other content for entry {entry.id} (line {earlier.line}); read as one entry, where it first stood"
        repeated = True
    else:
        message = f"a copy of line {earlier.line}; read once"
        entry.copy_of, repeated = earlier.id, False
    sink.add(Diagnostic("warning", "pi_entry_repeated", message, path=session.path, line=entry.line))
    return repeated


def _content_key(raw: dict[str, Any]) -> bytes | None:
    """The entry's JSON with sorted keys; ``None`` for one too deep to serialise (never de-duplicated)."""
    try:
        return orjson.dumps(raw, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None


def _report_cycles(session: Session, sink: DiagnosticSink) -> None:
    """Report every cycle of entry ``parentId`` links (pi itself would loop on one).

    :func:`read_session` asks only when the links could form one: when every entry's parent was
    written before it and no id is written twice (a file in pi's own order), each parent stands
    earlier in the file than its child, so no walk along them comes back.

    The active path breaks a cycle it meets where the walk from the leaf comes back to an entry it
    has passed: the last entry reached starts the path and its ``parentId`` is ignored. A cycle off
    the active path stays out of the conversation like any abandoned branch.
    """
    index = session.by_id()
    cycles = parent_cycles({entry_id: entry.parent_id for entry_id, entry in index.items()})
    if not cycles:
        return
    path, _ = session.active_path()
    start = path[0] if path and path[0].parent_id in index else None
    for cycle in cycles:
        message = f"entry parentId links form a cycle ({cycle_text(cycle)})"
        if start is not None and start.id in cycle:
            where = start
            message += f"; the active path starts at {start.id}, whose parentId {start.parent_id} is ignored"
        else:
            where = index[cycle[0]]
            message += "; off the active path, kept out of the conversation"
        sink.add(Diagnostic("warning", "parent_cycle", message, path=session.path, line=where.line))


EVENT_TYPES = frozenset(
    {"agent_start", "turn_start", "message_start", "message_end", "tool_execution_start", "agent_end"}
)
"""Event types of ``pi --mode json`` stdout: such a file is an event log."""

_PASSING_EVENTS = frozenset(
    {
        "agent_start",
        "agent_end",
        "turn_start",
        "turn_end",
        "message_start",
        "message_update",
        "tool_execution_start",
        "tool_execution_update",
        "tool_execution_end",
        "compaction_start",
        "auto_compaction_start",
        "auto_retry_start",
        "auto_retry_end",
    }
)
"""Events of ``pi --mode json`` stdout that become no entry; equal lines of these are no copies."""

_ENTRY_EVENTS = frozenset({"message_end", "compaction_end", "auto_compaction_end"})
"""The events that become entries of the session (``_entries_from_events``)."""


def _entries_from_events(events: list[Entry], path: str, sink: DiagnosticSink) -> list[Entry]:
    """A linear session from a ``pi --mode json`` event log: one message entry per ``message_end``, one
    compaction entry per successful ``compaction_end`` / ``auto_compaction_end``. Events carry no
    times of their own, so the entries have none.

    An event equal as a whole to an earlier one (its message's millisecond ``timestamp`` included) is
    a copy of that line and read once, as a repeated line of a session file without ids is: a log
    written twice in part must not give a second model call whose tool call then shares an id with
    the first. Reported ``pi_entry_repeated`` (warning) on the copy, unless the line was already
    reported as one while the file was read (``Entry.copy_of``, a log without a header)."""
    entries: list[Entry] = []
    previous: str | None = None
    first_line: dict[bytes, int] = {}
    for event in events:
        raw = event.raw
        if event.type in _ENTRY_EVENTS and event.copy_of is None and (key := _content_key(raw)) is not None:
            if key in first_line:
                message = f"a copy of line {first_line[key]}; read once"
                sink.add(Diagnostic("warning", "pi_entry_repeated", message, path=path, line=event.line))
                continue
            first_line[key] = event.line
        if event.copy_of is not None:
            continue  # already reported as a copy of an earlier line
        if event.type == "message_end" and isinstance(raw.get("message"), dict):
            entry = Entry(
                "message", f"ev-{event.line}", previous, {"type": "message", "message": raw["message"]}, event.line
            )
        elif event.type in ("compaction_end", "auto_compaction_end") and isinstance(raw.get("result"), dict):
            result = raw["result"]
            compaction = {
                "type": "compaction",
                "summary": result.get("summary"),
                "firstKeptEntryId": result.get("firstKeptEntryId"),
                "tokensBefore": result.get("tokensBefore"),
                "tokensAfter": result.get("estimatedTokensAfter"),
                "reason": raw.get("reason"),
            }
            entry = Entry("compaction", f"ev-{event.line}", previous, compaction, event.line)
        else:
            continue
        entries.append(entry)
        previous = entry.id
    return entries


def _objects(path: str | Path, session: Session, sink: DiagnosticSink) -> Iterator[tuple[int, dict[str, Any]]]:
    def unparseable(_: int) -> None:
        session.unparseable += 1

    try:
        yield from json_objects(path, sink, unparseable)
    except OSError as exc:
        sink.add(Diagnostic("error", "unreadable_file", os_reason(exc, str(path)), path=str(path)))
        session.unsupported = "unreadable"
