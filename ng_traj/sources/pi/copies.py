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


def response_key(raw: dict[str, Any]) -> str | None:
    """The ``responseId`` of an assistant message entry, else ``None``."""
    message = raw.get("message")
    if raw.get("type") != "message" or not isinstance(message, dict) or message.get("role") != "assistant":
        return None
    response = message.get("responseId")
    return response if isinstance(response, str) and response else None


@dataclass
class CopyIndex:
    """What earlier entries a later one could copy: ids with their content, contents, response ids.

    Each maps to the id of the first entry that had it (the original).
    """

    ids: dict[str, bytes | None] = field(default_factory=dict)
    contents: dict[bytes, str] = field(default_factory=dict)
    responses: dict[str, str] = field(default_factory=dict)

    def add(self, entry_id: str, kind: str, raw: dict[str, Any]) -> None:
        """Record an original entry (the first of each key wins)."""
        key = content_key(raw)
        self.ids.setdefault(entry_id, key)
        if key is not None and _copyable(kind, raw):
            self.contents.setdefault(key, entry_id)
        response = response_key(raw)
        if response is not None:
            self.responses.setdefault(response, entry_id)

    def original(self, entry_id: str, kind: str, raw: dict[str, Any]) -> str | None:
        """The id of the earlier entry this one copies, else ``None`` (module docstring gives the rules)."""
        key = content_key(raw)
        if key is not None and entry_id in self.ids and self.ids[entry_id] == key:
            return entry_id
        response = response_key(raw)
        if response is not None and response in self.responses:
            return self.responses[response]
        if key is not None and _copyable(kind, raw) and key in self.contents:
            return self.contents[key]
        return None


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


def mark_copies(session: SessionEntries, earlier: CopyIndex, where: str, sink: DiagnosticSink) -> CopyIndex:
    """Mark the entries of ``session`` that copy entries of earlier sessions (a fork's parent, the live
    transcript of a checkpoint), report them, and return ``earlier`` with this session's originals added.
    """
    marked = []
    for entry in session.entries:
        if entry.copy_of is None:
            entry.copy_of = earlier.original(entry.id, entry.type, entry.raw)
            if entry.copy_of is not None:
                marked.append(entry)
    for entry in session.entries:
        if entry.copy_of is None:
            earlier.add(entry.id, entry.type, entry.raw)
    line = marked[0].line if marked else None
    report_copies([entry.copy_of or "" for entry in marked], where, session.path, line, sink)
    return earlier
