"""Hermes' JSON forms of a session: snapshots, gateway transcripts, the gateway session store.

Formats:

* **Session snapshot** ``sessions/session_<id>.json`` (older ``logs/session_<id>.json``), rewritten
  whole after each persistence point: since 2026-02-25 ``{session_id, model, base_url, platform,
  session_start, last_updated, system_prompt, tools, message_count, messages}`` (message dicts
  without per-message times); 2026-02-01…24 ``{session_id, model, session_start, last_updated,
  message_count, conversations}`` with ShareGPT turns.
* **Gateway transcript** ``sessions/<session_id>.jsonl`` (2026-02 to 2026-05): one message dict per
  line with a ``timestamp``, the first line of a fresh file ``{role: "session_meta", tools, model,
  platform, timestamp}``. The session id is the file name.
* **Gateway session store** ``sessions/sessions.json``: ``{session_key: {session_key, session_id,
  created_at, updated_at, platform, input_tokens, output_tokens, cache_read_tokens,
  cache_write_tokens, total_tokens, ...}}``: no messages; its token totals serve as a cross-check.

Every time in these files is Python's ``datetime.now().isoformat()``: local time with no offset.
Such a time cannot become UTC without the host's zone, so it is never converted; the invocation gets
``local_timestamp_unconverted`` naming the field (a time with an explicit offset is converted).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ng_traj.contract import ObservationGap
from ng_traj.diagnostics import Diagnostic, DiagnosticSink
from ng_traj.io.files import os_reason
from ng_traj.io.lines import JsonLine, iter_json_lines, json_text, not_an_object
from ng_traj.sources.hermes.messages import message_problems

MESSAGE_KEYS = frozenset(
    {
        "role",
        "content",
        "tool_calls",
        "tool_call_id",
        "tool_name",
        "name",
        "reasoning",
        "reasoning_content",
        "reasoning_details",
        "codex_reasoning_items",
        "codex_message_items",
        "finish_reason",
        "timestamp",
        "message_id",
        "tools",
        "model",
        "platform",
    }
)
"""Keys a gateway transcript line may carry (message dict keys plus the ``session_meta`` ones)."""

MESSAGE_ROLES = frozenset({"session_meta", "system", "user", "assistant", "tool", "developer"})


@dataclass
class SessionForm:
    """One session as one file (or database) holds it.

    Attributes:
        session_id: The Hermes session id (the invocation id).
        form: ``state.db``, ``snapshot``, ``gateway`` or ``sharegpt``.
        path: The file it was read from, as named.
        messages: Message dicts in order (``session_meta`` records left out).
        system_prompt: The session's system prompt, when the form keeps it.
        completed: An explicit completion flag (ShareGPT), else ``None``.
        local_times: Names of fields that held local times without an offset (not converted).
        gaps: Problems reading this form (unparseable lines, undecodable columns).
    """

    session_id: str
    form: str
    path: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    system_prompt: str | None = None
    completed: bool | None = None
    local_times: tuple[str, ...] = ()
    gaps: list[ObservationGap] = field(default_factory=list)


def utc_seconds(value: Any) -> tuple[float | None, bool]:
    """An ISO time as UTC Unix seconds, and whether it was a local time without offset (not converted)."""
    if not isinstance(value, str):
        return None, False
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None, False
    if parsed.tzinfo is None:
        return None, True
    return parsed.timestamp(), False


def is_snapshot(value: Any) -> bool:
    """True for a session snapshot (either era)."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("session_id"), str)
        and (isinstance(value.get("messages"), list) or isinstance(value.get("conversations"), list))
    )


def snapshot_session(path: Path, value: Any) -> str | None:
    """The session a snapshot holds: its ``session_id``; for a ``session_<id>.json`` file whose
    ``session_id`` is not text (a damaged value) but which is otherwise a snapshot, the ``<id>`` of
    its name (Hermes names the file after the session); else ``None`` (not a snapshot)."""
    if is_snapshot(value):
        return value["session_id"]
    name = path.name
    if not (name.startswith("session_") and name.endswith(".json") and len(name) > len("session_.json")):
        return None
    if not isinstance(value, dict) or not is_snapshot({**value, "session_id": ""}):
        return None
    return name[len("session_") : -len(".json")]


def is_request_dump(value: Any) -> bool:
    """True for a ``request_dump_<session>_<time>.json`` (a failed API request Hermes dumped)."""
    return isinstance(value, dict) and "session_id" in value and isinstance(value.get("request"), dict)


def is_store(value: Any) -> bool:
    """True for a gateway ``sessions.json`` (session key -> entry with ``session_key`` and ``session_id``)."""
    return (
        isinstance(value, dict)
        and bool(value)
        and all(isinstance(e, dict) and "session_id" in e and "session_key" in e for e in value.values())
    )


def is_gateway_line(value: Any) -> bool:
    """True for a gateway transcript line (a message dict with an ISO ``timestamp``)."""
    if not isinstance(value, dict) or not value.keys() <= MESSAGE_KEYS:
        return False
    role = value.get("role")
    if not isinstance(role, str) or role not in MESSAGE_ROLES:
        return False
    return role == "session_meta" or isinstance(value.get("timestamp"), str)


def snapshot_messages(value: dict[str, Any]) -> list[dict[str, Any]]:
    """The message dicts of a ``messages``-era snapshot (entries that are not objects left out)."""
    return [m for m in value.get("messages", []) if isinstance(m, dict) and m.get("role") != "session_meta"]


def report_message(message: Any, where: tuple[str, int | None, str], sink: DiagnosticSink) -> None:
    """Report what of a message is passed over (``hermes_message_invalid``, warning; see
    :func:`~ng_traj.sources.hermes.messages.message_problems`); ``where`` is the file, the line (or
    ``None``) and the pointer of the message in it (``""`` for a whole line)."""
    path, line, at = where
    for pointer, why in message_problems(message):
        full = ".".join(part for part in (at, pointer) if part) or None
        sink.add(Diagnostic("warning", "hermes_message_invalid", why, path=path, line=line, pointer=full))


def snapshot_local_times(value: dict[str, Any]) -> tuple[str, ...]:
    """Snapshot fields that hold local times without offset."""
    return tuple(key for key in ("session_start", "last_updated") if utc_seconds(value.get(key))[1])


def read_gateway(path: Path, sink: DiagnosticSink) -> SessionForm:
    """A gateway transcript: its messages, corrupt lines reported and recorded as gaps, never fatal."""
    session = path.name.split(".jsonl", 1)[0]
    form = SessionForm(session, "gateway", str(path))
    naive = False
    seen: dict[bytes, int] = {}
    try:
        for line in iter_json_lines(path):
            if line.problem is not None:
                sink.add(line.problem)
            if not line.ok or not isinstance(line.value, dict):
                if line.ok:
                    sink.add(not_an_object(line))
                detail = f"{path.name}:{line.line}"
                form.gaps.append(
                    ObservationGap(code="agent_artifact_record_unparseable", invocation_id=session, detail=detail)
                )
                continue
            naive = naive or utc_seconds(line.value.get("timestamp"))[1]
            if line.value.get("role") != "session_meta" and not _repeated(line, seen, sink):
                form.messages.append(line.value)
                report_message(line.value, (str(path), line.line, ""), sink)
    except OSError as exc:
        sink.add(Diagnostic("error", "unreadable_file", os_reason(exc, str(path)), path=str(path)))
        form.gaps.append(ObservationGap(code="agent_transcript_unavailable", invocation_id=session, detail=path.name))
    form.local_times = ("timestamp",) if naive else ()
    return form


def _repeated(line: JsonLine, seen: dict[bytes, int], sink: DiagnosticSink) -> bool:
    """Whether a gateway line repeats an earlier message as a whole (its ``timestamp`` included): a
    copy, read once (``hermes_message_repeated``), so that a message written twice is neither two
    messages nor two tool calls with one id. ``seen`` maps a message's canonical JSON to its line."""
    key = json_text(line.value, sort_keys=True).encode()
    if key not in seen:
        seen[key] = line.line
        return False
    message = f"a copy of the message on line {seen[key]}; read once"
    sink.add(Diagnostic("warning", "hermes_message_repeated", message, path=line.path, line=line.line))
    return True


TOTAL_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")


def session_totals(entry: dict[str, Any], *, exclusive: bool) -> dict[str, int]:
    """A session's token totals in ng-traj terms (prompt inclusive of cache), keys only where reported.

    Hermes' ``input_tokens`` excludes cache reads and writes since ``CanonicalUsage`` (schema v5,
    2026-03-17): ``prompt = input + cache_read + cache_write``. Before
    that (``exclusive`` False) the provider's raw prompt count was stored, which may or may not
    include the cache, so no prompt total is given.
    """
    values = {key: entry.get(key) for key in (*TOTAL_KEYS, "api_call_count")}
    known = {key: value for key, value in values.items() if isinstance(value, int) and not isinstance(value, bool)}
    totals: dict[str, int] = {}
    parts = ("input_tokens", "cache_read_tokens", "cache_write_tokens")
    if exclusive and all(key in known for key in parts):
        totals["prompt_tokens"] = sum(known[key] for key in parts)
    for key, name in (
        ("output_tokens", "completion_tokens"),
        ("cache_read_tokens", "cached_tokens"),
        ("reasoning_tokens", "reasoning_tokens"),
        ("api_call_count", "model_calls"),
    ):
        if key in known:
            totals[name] = known[key]
    return totals
