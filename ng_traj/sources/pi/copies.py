"""Copied context in pi-family sessions: entries that repeat earlier ones, counted once.

pi and OpenClaw copy context in several ways: a compaction that re-appends the entries it keeps
(with their old ids or fresh ones, before or after the live continuation), OpenClaw compaction
checkpoints (a copy of the transcript before compaction, named in the store's
``compactionCheckpoints``), and forks (pi ``/fork`` writes a new file holding the parent's path; an
OpenClaw thread fork starts with the parent's entries). A model call or tool call is counted once
per rollout, in the invocation that made it, so a copy is recognised and left out of model calls,
tool calls, token totals and the conversation; the session gets the gap ``copied_context`` (detail:
the copied entries' ids) and the diagnostic ``context_copied``.

A copy is recognised by id where there is one, else by content:

* the same entry id with the same content (the entry without ``id``, ``parentId`` and ``timestamp``,
  which a re-append rewrites);
* an assistant message with the ``responseId`` of an earlier one (the provider's id of the call);
* a ``message`` (with a message object and a text role), ``compaction``, ``branch_summary`` or
  ``custom_message`` entry equal to an earlier one
  without ``id``, ``parentId`` and ``timestamp``. A message keeps its own millisecond ``timestamp``
  when copied, so two messages equal in every field, their time included, are one message.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from ng_traj.diagnostics import Diagnostic, DiagnosticSink


class SessionEntries(Protocol):
    """What :func:`mark_copies` needs of a parsed session (``sources/pi/session.Session``: its entries
    are ``session.Entry`` objects, with ``type``, ``id``, ``raw``, ``message``, ``keys`` and ``copy_of``)."""

    path: str
    entries: list[Any]


COPYABLE = frozenset({"message", "compaction", "branch_summary", "custom_message"})
"""Entry types recognised as copies by content (the other types carry no conversation or call)."""

ENVELOPE = ("id", "parentId", "timestamp")
"""Entry fields a re-append rewrites; left out when entries are compared."""

DETAIL_IDS = 8
"""Copied entry ids a gap detail or diagnostic names; the rest are counted."""


def content_key(raw: dict[str, Any]) -> bytes | None:
    """A 128-bit BLAKE2b digest of the entry without its envelope as sorted JSON (the digest, not the
    text, is kept, so an index of a long session stays small); ``None`` for one too deep to serialise."""
    try:
        text = orjson.dumps({k: v for k, v in raw.items() if k not in ENVELOPE}, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None
    return hashlib.blake2b(text, digest_size=16).digest()


_ATOMS = (str, int, float, bool, type(None))


EntryKeys = tuple[tuple[object, ...] | None, str | None]
"""What an entry is compared by besides its id (:func:`entry_keys`): its probe (``None`` when it is not
copyable by content) and the ``responseId`` of an assistant message (else ``None``)."""


def entry_keys(kind: str, raw: dict[str, Any], message: dict[str, Any] | None = None) -> EntryKeys:
    """The probe and response key of an entry of type ``kind`` (:data:`EntryKeys`), derived once: a
    reader keeps them with the entry, and every comparison and addition of it (:class:`CopyIndex`)
    takes them as they are.

    The probe is a cheap stand-in for :func:`content_key` of an entry copyable by content (a
    ``message`` with a message object and a text role, or a type in :data:`COPYABLE`): its type and a
    few of its fields outside the envelope (a message's role, ``timestamp`` and ``responseId``, else
    the ``summary`` and ``customType``; a list or object by its type's name), so two entries with
    equal content keys always have equal probes; entries whose probes differ are never compared, and
    only those that share one are serialised and digested. The response key is the ``responseId`` of
    an entry whose ``type`` is ``message`` and whose message's role is ``assistant`` (non-empty text).

    ``message``: the entry's ``message`` object (``{}`` when absent or not an object), when the caller
    has read it already (``session.Entry.message``).
    """
    if message is None:
        found = raw.get("message")
        message = found if isinstance(found, dict) else {}
    role = message.get("role")
    response = None
    if raw.get("type") == "message" and role == "assistant":
        found = message.get("responseId")
        response = found if isinstance(found, str) and found else None
    if kind == "message":
        if not isinstance(role, str):
            return None, response
        second, third = message.get("timestamp"), message.get("responseId")
        return (
            kind,
            role,
            second if type(second) in _ATOMS else type(second).__name__,
            third if type(third) in _ATOMS else type(third).__name__,
        ), response
    if kind not in COPYABLE:
        return None, response
    first, second = raw.get("summary"), raw.get("customType")
    return (
        kind,
        first if type(first) in _ATOMS else type(first).__name__,
        second if type(second) in _ATOMS else type(second).__name__,
        None,
    ), response


class Original:
    """An entry a later one may copy: its id, and its :func:`content_key`, computed the first time a
    later entry is compared with it (most entries never are), or when it is sealed."""

    __slots__ = ("_key", "entry_id", "raw")

    def __init__(self, entry_id: str, raw: dict[str, Any]) -> None:
        self.entry_id = entry_id
        self.raw: dict[str, Any] | None = raw
        self._key: bytes | bool | None = False

    def key(self) -> bytes | None:
        """:func:`content_key` of the entry (``None`` for one too deep to serialise)."""
        if self._key is False:
            self._key = content_key(self.raw or {})
        return self._key  # type: ignore[return-value]

    def seal(self) -> None:
        """Keep the entry's key, not the entry."""
        self.key()
        self.raw = None


@dataclass
class CopyIndex:
    """What earlier entries a later one could copy: ids, copyable entries by probe (:func:`entry_keys`),
    response ids.

    ``ids`` holds the first entry of each id, ``contents`` every copyable original (in order) under its
    probe, ``responses`` the id of the first entry of each response id. Content keys are computed only
    for entries that share an id or a probe with a later one, so an index holds the entries' parsed
    objects (the session already holds them) and a digest only of those compared.

    ``sealing``: for a caller that does not hold the earlier sessions (an OpenClaw tree read node by
    node), :func:`mark_copies` digests a session's originals once it has added them and lets go of the
    entries, so the index holds 16 bytes per entry, not the sessions.
    """

    ids: dict[str, Original] = field(default_factory=dict)
    contents: dict[tuple[object, ...], list[Original]] = field(default_factory=dict)
    responses: dict[str, str] = field(default_factory=dict)
    sealing: bool = False
    pending: list[Original] = field(default_factory=list)
    """Originals added since the index was last sealed (only while ``sealing``)."""

    def seal(self) -> None:
        """Digest the originals added since the last seal and drop their entries (:meth:`Original.seal`)."""
        for original in self.pending:
            original.seal()
        self.pending.clear()

    def add(self, entry_id: str, kind: str, raw: dict[str, Any], keys: EntryKeys | None = None) -> None:
        """Record an original entry (the first of each key wins); ``keys``: its :func:`entry_keys`, when
        the caller has them."""
        self._add(Original(entry_id, raw), keys or entry_keys(kind, raw))

    def _add(self, original: Original, keys: EntryKeys) -> None:
        if self.sealing:
            self.pending.append(original)
        self.ids.setdefault(original.entry_id, original)
        probed, response = keys
        if probed is not None:
            self.contents.setdefault(probed, []).append(original)
        if response is not None:
            self.responses.setdefault(response, original.entry_id)

    def original(self, entry_id: str, kind: str, raw: dict[str, Any], keys: EntryKeys | None = None) -> str | None:
        """The id of the earlier entry this one copies, else ``None`` (module docstring gives the rules);
        ``keys``: its :func:`entry_keys`, when the caller has them."""
        return self._original(Original(entry_id, raw), keys or entry_keys(kind, raw))

    def _original(self, mine: Original, keys: EntryKeys) -> str | None:
        same_id = self.ids.get(mine.entry_id)
        if same_id is not None and mine.key() is not None and same_id.key() == mine.key():
            return mine.entry_id
        probed, response = keys
        if response is not None and response in self.responses:
            return self.responses[response]
        if probed is not None and self.contents:
            for earlier in self.contents.get(probed, ()):
                if mine.key() is not None and earlier.key() == mine.key():
                    return earlier.entry_id
        return None

    def copy_or_add(self, entry_id: str, kind: str, raw: dict[str, Any], keys: EntryKeys | None = None) -> str | None:
        """:meth:`original` of the entry; when it copies none, the entry is recorded (:meth:`add`), its
        :func:`entry_keys` (``keys``, when the caller has them) derived once for both steps."""
        mine = Original(entry_id, raw)
        keys = keys or entry_keys(kind, raw)
        found = self._original(mine, keys)
        if found is None:
            self._add(mine, keys)
        return found


def id_list(ids: Iterable[str]) -> str:
    """Distinct ids in order, at most ``DETAIL_IDS`` of them, then ``+<n> more``."""
    distinct = list(dict.fromkeys(ids))
    shown = ",".join(distinct[:DETAIL_IDS])
    return shown if len(distinct) <= DETAIL_IDS else f"{shown},+{len(distinct) - DETAIL_IDS} more"


def report_copies(copied: list[str], where: str, path: str, line: int | None, sink: DiagnosticSink) -> None:
    """Warn (``context_copied``) that entries copying ``copied`` (original ids) were counted once."""
    if not copied:
        return
    count = len(copied)
    noun = "entry copies" if count == 1 else "entries copy"
    message = f"{count} {noun} {where} ({id_list(copied)}); left out of calls, tools and conversation, counted once"
    sink.add(Diagnostic("warning", "context_copied", message, path=path, line=line))


def _keys(entry: Any) -> EntryKeys:
    """The entry's :func:`entry_keys`: those its read kept (``session.Entry.keys``), else derived now
    and kept (an entry the read made later: a replaced entry, an event log's)."""
    if entry.keys is None:
        entry.keys = entry_keys(entry.type, entry.raw, entry.message)
    return entry.keys


def mark_copies(
    session: SessionEntries, earlier: CopyIndex, where: str, sink: DiagnosticSink, *, keep: bool = True
) -> CopyIndex:
    """Mark the entries of ``session`` that copy entries of earlier sessions (a fork's parent, the live
    transcript of a checkpoint), report them, and return ``earlier`` with this session's originals added
    (unless ``keep`` is false: no session comes after this one).
    """
    marked = []
    for entry in session.entries if earlier.ids else ():
        if entry.copy_of is None:
            entry.copy_of = earlier.original(entry.id, entry.type, entry.raw, _keys(entry))
            if entry.copy_of is not None:
                marked.append(entry)
    for entry in session.entries if keep else ():
        if entry.copy_of is None:
            earlier.add(entry.id, entry.type, entry.raw, _keys(entry))
    if earlier.sealing:
        earlier.seal()
    line = marked[0].line if marked else None
    report_copies([entry.copy_of or "" for entry in marked], where, session.path, line, sink)
    return earlier
