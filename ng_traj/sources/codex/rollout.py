"""One Codex rollout file read into records: its thread, its lineage and the copied parent prefix.

Format (openai/codex ``codex-rs/protocol`` rollout items, as ``RolloutRecorder`` writes them): every
line is an envelope ``{timestamp: ISO-8601 UTC, type, payload}`` with ``type`` one of
``session_meta``, ``turn_context``, ``response_item``, ``event_msg`` and ``compacted``. The first
record is the thread's ``session_meta`` (``id``, ``timestamp``, ``cli_version``, ``source``; a
sub-agent's ``source`` is ``{subagent: {thread_spawn: {parent_thread_id, depth, ...}}}``, and forks
may carry ``forked_from_id``). A forked child writes a *second* ``session_meta`` (its parent's) and
then its parent's history, ``token_count`` rows included, before its own turns.

The end of that copied prefix is dated by ids: thread and turn ids are UUID v7, whose first 48 bits
are the creation time in milliseconds. The prefix runs up to the first ``turn_context`` or
``task_started`` whose ``turn_id`` was created at or after the child thread itself; a turn id that
is not a UUID v7 cannot be dated and is taken as the child's own.

Rollouts written before the envelope (mid-2025) start with a bare ``{id, timestamp, instructions}``
line, followed by Responses items and ``{"record_type": "state"}`` lines; they are read as
``legacy``. Damaged lines are reported by the line reader and skipped.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ng_traj.diagnostics import Diagnostic, DiagnosticSink, plural
from ng_traj.io.files import os_reason
from ng_traj.io.lines import iter_json_lines, not_an_object
from ng_traj.sources.native import scalar_text

ENVELOPE_TYPES = frozenset({"session_meta", "turn_context", "response_item", "event_msg", "compacted"})
"""Envelope record types of every Codex release read (0.2x to 0.151)."""

HEAD_LINES = 8
"""Lines ``read_head`` looks at for the first record (damaged lines before it are skipped)."""

RESPONSE_ITEM_TYPES = frozenset(
    {
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "local_shell_call",
        "web_search_call",
        "ghost_snapshot",
        "compaction",
    }
)
"""``response_item`` payload types the reader knows (``ghost_snapshot`` and ``compaction`` are never
shown to the model as items and are left out of the conversation)."""

ITEM_TYPES = frozenset({"UserMessage", "AgentMessage"})
"""``item_completed`` item types of paginated history (0.145 and later) that hold a turn."""

ROLLOUT_NAME = re.compile(r"^rollout-.*?([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?:_.*)?\.jsonl$")
"""``rollout-<local time>-<thread uuid>.jsonl``, a reverted thread with a ``_<suffix>`` before ``.jsonl``."""


@dataclass(frozen=True, slots=True)
class Record:
    """One envelope record: its 1-based ``line``, envelope ``time`` (UTC seconds), ``type`` and ``payload``."""

    line: int
    time: float | None
    type: str
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ThreadMeta:
    """What a rollout says about its thread (from its first ``session_meta``)."""

    thread_id: str
    parent_id: str | None = None
    cli_version: str | None = None
    from_meta: bool = True


@dataclass
class Rollout:
    """A parsed rollout file.

    Attributes:
        path: The file as named.
        meta: Its thread.
        records: Envelope records after the first ``session_meta``, in file order (legacy items are
            wrapped as ``response_item`` records).
        copied: First and last line of the parent history a forked child repeats, else ``None``.
        legacy: True for a pre-envelope rollout.
        unknown: Record types the reader does not know, with their counts.
        unparseable: Lines that were not JSON objects.
    """

    path: str
    meta: ThreadMeta
    records: list[Record] = field(default_factory=list)
    copied: tuple[int, int] | None = None
    legacy: bool = False
    unknown: Counter[str] = field(default_factory=Counter)
    unparseable: int = 0

    def own(self) -> list[Record]:
        """The records of the thread itself (the copied prefix left out)."""
        if self.copied is None:
            return self.records
        first, last = self.copied
        return [record for record in self.records if not first <= record.line <= last]


def iso_seconds(value: Any) -> float | None:
    """An ISO-8601 time as UTC Unix seconds (naive read as UTC); ``None`` when not one."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.replace(tzinfo=parsed.tzinfo or UTC).timestamp()


def uuid7_millis(value: Any) -> int | None:
    """The creation time (Unix ms) of a UUID v7, else ``None``."""
    try:
        parsed = uuid.UUID(scalar_text(value))
    except ValueError:
        return None
    return parsed.int >> 80 if parsed.version == 7 else None


def is_legacy_head(value: Any) -> bool:
    """True for the bare first line of a pre-envelope rollout (``id``, ``timestamp``, ``instructions``)."""
    return isinstance(value, dict) and "type" not in value and {"id", "timestamp", "instructions"} <= value.keys()


def is_envelope(value: Any) -> bool:
    """True for an envelope record of a known type with an object payload."""
    return isinstance(value, dict) and value.get("type") in ENVELOPE_TYPES and isinstance(value.get("payload"), dict)


def _meta(payload: dict[str, Any]) -> ThreadMeta | None:
    thread_id = scalar_text(payload.get("id"))
    if not thread_id:
        return None
    source = payload.get("source")
    spawn = source.get("subagent") if isinstance(source, dict) else None
    spawn = spawn.get("thread_spawn") if isinstance(spawn, dict) else None
    parent = scalar_text(spawn.get("parent_thread_id")) if isinstance(spawn, dict) else ""
    parent = parent or scalar_text(payload.get("forked_from_id")) or scalar_text(payload.get("parent_thread_id"))
    version = scalar_text(payload.get("cli_version")) or None
    return ThreadMeta(thread_id, parent or None, version)


def name_thread_id(path: str | Path) -> str:
    """The thread id in a rollout file name, else the file's stem."""
    name = Path(path).name
    match = ROLLOUT_NAME.match(name)
    return match.group(1) if match else name.split(".jsonl")[0]


def read_head(path: str | Path) -> ThreadMeta:
    """The thread of a rollout from its first lines (cheap: for indexing); never raises ``OSError``."""
    first = None
    try:
        lines = itertools.islice(iter_json_lines(path), HEAD_LINES)
        first = next((line.value for line in lines if line.ok and isinstance(line.value, dict)), None)
    except OSError:
        pass
    meta = _meta(first["payload"]) if is_envelope(first) and first["type"] == "session_meta" else None
    if meta is None and is_legacy_head(first) and scalar_text(first["id"]):
        meta = ThreadMeta(scalar_text(first["id"]))
    return meta or ThreadMeta(name_thread_id(path), from_meta=False)


def _values(path: str, sink: DiagnosticSink, rollout: Rollout) -> list[tuple[int, dict[str, Any]]]:
    values = []
    try:
        for line in iter_json_lines(path):
            if line.problem is not None:
                sink.add(line.problem)
            if not line.ok or not isinstance(line.value, dict):
                rollout.unparseable += 1
                if line.ok:
                    sink.add(not_an_object(line))
                continue
            values.append((line.line, line.value))
    except OSError as exc:
        sink.add(Diagnostic("error", "unreadable_file", os_reason(exc, path), path=path))
    return values


def _legacy_records(values: list[tuple[int, dict[str, Any]]], rollout: Rollout) -> None:
    rollout.legacy = True
    for number, value in values[1:]:
        if value.get("record_type") == "state":
            continue
        if isinstance(value.get("type"), str):
            record = Record(number, None, "response_item", value)
            rollout.records.append(record)
            _note_unknown_item(record, rollout)
        else:
            rollout.unknown["<untyped legacy line>"] += 1


def _envelope_records(values: list[tuple[int, dict[str, Any]]], rollout: Rollout) -> None:
    seen_meta = False
    for number, value in values:
        if not is_envelope(value):
            rollout.unknown[scalar_text(value.get("type")) or "<untyped>"] += 1
            continue
        if value["type"] == "session_meta" and not seen_meta and rollout.meta.from_meta:
            seen_meta = True
            continue
        record = Record(number, iso_seconds(value.get("timestamp")), value["type"], value["payload"])
        rollout.records.append(record)
        _note_unknown_item(record, rollout)


def _note_unknown_item(record: Record, rollout: Rollout) -> None:
    kind = scalar_text(record.payload.get("type"))
    if record.type == "response_item" and kind not in RESPONSE_ITEM_TYPES:
        rollout.unknown[f"response_item/{kind or '<untyped>'}"] += 1
    if record.type == "event_msg" and kind == "item_completed":
        item = record.payload.get("item")
        item_type = scalar_text(item.get("type")) if isinstance(item, dict) else ""
        if item_type not in ITEM_TYPES:
            rollout.unknown[f"item_completed/{item_type or '<untyped>'}"] += 1


def _copied_prefix(rollout: Rollout) -> tuple[int, int] | None:
    """Lines of the parent history a forked child repeats (module docstring), else ``None``."""
    metas = [record for record in rollout.records if record.type == "session_meta"]
    if not metas:
        return None
    born = uuid7_millis(rollout.meta.thread_id)
    start = metas[0].line
    after = [record for record in rollout.records if record.line >= start]
    last = after[-1].line
    for record in after[1:]:
        if record.type == "turn_context" or record.payload.get("type") == "task_started":
            turn = uuid7_millis(record.payload.get("turn_id"))
            if born is None or turn is None or turn >= born:
                return (start, record.line - 1)
    return (start, last)


def read_rollout(path: str | Path, sink: DiagnosticSink) -> Rollout:
    """Read one rollout file; damaged lines are reported to ``sink`` and skipped, nothing raised."""
    name = str(path)
    meta = read_head(path)
    rollout = Rollout(name, meta)
    values = _values(name, sink, rollout)
    if values and is_legacy_head(values[0][1]):
        _legacy_records(values, rollout)
    else:
        _envelope_records(values, rollout)
        rollout.copied = _copied_prefix(rollout)
    if not meta.from_meta and values:
        message = f"no readable session_meta record; thread id {meta.thread_id} taken from the file name"
        sink.add(Diagnostic("warning", "codex_session_meta_missing", message, path=name))
    version = meta.cli_version or ("legacy" if rollout.legacy else "unknown")
    for kind, count in sorted(rollout.unknown.items()):
        message = f"{plural(count, 'record')} of type {kind!r}, unknown to the reader (cli_version {version}); skipped"
        sink.add(Diagnostic("warning", "codex_record_unknown", message, path=name))
    return rollout
