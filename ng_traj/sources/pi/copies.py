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
    """What :func:`mark_copies` needs of a parsed session (``sources/pi/session.Session``)."""

    path: str
    entries: list[Any]


COPYABLE = frozenset({"message", "compaction", "branch_summary", "custom_message"})
"""Entry types recognised as copies by content (the other types carry no conversation or call)."""

ENVELOPE = ("id", "parentId", "timestamp")
"""Entry fields a re-append rewrites; left out when entries are compared."""

DETAIL_IDS = 8
"""Copied entry ids a gap detail or diagnostic names; the rest are counted."""


def _copyable(kind: str, raw: dict[str, Any]) -> bool:
    if kind == "message":
        message = raw.get("message")
        return isinstance(message, dict) and isinstance(message.get("role"), str)
    return kind in COPYABLE


def content_key(raw: dict[str, Any]) -> bytes | None:
    """A 128-bit BLAKE2b digest of the entry without its envelope as sorted JSON (the digest, not the
    text, is kept, so an index of a long session stays small); ``None`` for one too deep to serialise."""
    try:
        text = orjson.dumps({k: v for k, v in raw.items() if k not in ENVELOPE}, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None
    return hashlib.blake2b(text, digest_size=16).digest()


_ATOMS = (str, int, float, bool, type(None))


def probe(kind: str, raw: dict[str, Any]) -> tuple[object, ...]:
    """A cheap stand-in for :func:`content_key` of a copyable entry: its type and a few of its fields
    outside the envelope (a list or object by its type's name), so two entries with equal keys always
    have equal probes; entries whose probes differ are never compared, and only those that share one
    are serialised and digested."""
    if kind == "message":
        message = raw["message"]
        first, second, third = message.get("role"), message.get("timestamp"), message.get("responseId")
    else:
        first, second, third = raw.get("summary"), raw.get("customType"), None
    return (
        kind,
        first if type(first) in _ATOMS else type(first).__name__,
        second if type(second) in _ATOMS else type(second).__name__,
        third if type(third) in _ATOMS else type(third).__name__,
    )


def response_key(raw: dict[str, Any]) -> str | None:
    """The ``responseId`` of an assistant message entry, else ``None``."""
    message = raw.get("message")
    if raw.get("type") != "message" or not isinstance(message, dict) or message.get("role") != "assistant":
        return None
    response = message.get("responseId")
    return response if isinstance(response, str) and response else None


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
    """What earlier entries a later one could copy: ids, copyable entries by :func:`probe`, response ids.

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

    def add(self, entry_id: str, kind: str, raw: dict[str, Any]) -> None:
        """Record an original entry (the first of each key wins)."""
        self._add(Original(entry_id, raw), kind, raw, response_key(raw))

    def _add(
        self, original: Original, kind: str, raw: dict[str, Any], response: str | None, probed: tuple | None = None
    ) -> None:
        if self.sealing:
            self.pending.append(original)
        self.ids.setdefault(original.entry_id, original)
        if _copyable(kind, raw):
            self.contents.setdefault(probed or probe(kind, raw), []).append(original)
        if response is not None:
            self.responses.setdefault(response, original.entry_id)

    def original(self, entry_id: str, kind: str, raw: dict[str, Any]) -> str | None:
        """The id of the earlier entry this one copies, else ``None`` (module docstring gives the rules)."""
        return self._original(Original(entry_id, raw), kind, raw, response_key(raw))

    def _original(
        self, mine: Original, kind: str, raw: dict[str, Any], response: str | None, probed: tuple | None = None
    ) -> str | None:
        same_id = self.ids.get(mine.entry_id)
        if same_id is not None and mine.key() is not None and same_id.key() == mine.key():
            return mine.entry_id
        if response is not None and response in self.responses:
            return self.responses[response]
        if self.contents and _copyable(kind, raw):
            for earlier in self.contents.get(probed or probe(kind, raw), ()):
                if mine.key() is not None and earlier.key() == mine.key():
                    return earlier.entry_id
        return None

    def copy_or_add(self, entry_id: str, kind: str, raw: dict[str, Any]) -> str | None:
        """:meth:`original` of the entry; when it copies none, the entry is recorded (:meth:`add`)."""
        mine, response = Original(entry_id, raw), response_key(raw)
        probed = probe(kind, raw) if _copyable(kind, raw) else None  # made once for both steps
        found = self._original(mine, kind, raw, response, probed)
        if found is None:
            self._add(mine, kind, raw, response, probed)
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
            entry.copy_of = earlier.original(entry.id, entry.type, entry.raw)
            if entry.copy_of is not None:
                marked.append(entry)
    for entry in session.entries if keep else ():
        if entry.copy_of is None:
            earlier.add(entry.id, entry.type, entry.raw)
    if earlier.sealing:
        earlier.seal()
    line = marked[0].line if marked else None
    report_copies([entry.copy_of or "" for entry in marked], where, session.path, line, sink)
    return earlier
