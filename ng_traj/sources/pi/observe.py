"""Observations of one pi-family session: invocation, native calls, tool and compaction records, gaps.

Rules follow NeMo Gym's OpenClaw observations on the session's active path:
tool observations are paired with the model-visible function calls by exact call id (a repeated id
gives ``tool_call_identity_ambiguous`` and no record; a result naming no unique visible call gives
``tool_result_unowned``; calls without a result get ``tool_timing_unavailable``); status from
``isError`` / ``details.status`` with the reference table; timing only where the
file proves it: ``details.durationMs`` with the result's time gives start, completion and duration;
otherwise the completion time alone and ``tool_timing_unavailable`` (never a start
taken from neighbouring entries). Compaction entries become observations with the reference gaps.

Model calls: every assistant message on any branch that reached a provider (not OpenClaw's
``gateway-injected`` messages, not empty ``error``/``aborted`` turns) is a native call keyed by its
``responseId`` and tool-call ids; its ``usage`` is kept as a transcript call with token counts
normalised to the inclusive convention: ``prompt = input + cacheRead +
cacheWrite``, except where pi's ``input`` already includes cached tokens (Google providers, and
OpenAI APIs before 2025-12-03); ``completion = output``; ``reasoning = usage.reasoning``;
``total = totalTokens``, else prompt + completion; ``cached = cacheRead``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from math import isfinite
from typing import Any

from ng_traj.contract import (
    AgentInvocation,
    ContextCompactionObservation,
    ObservationGap,
    ToolCallObservation,
    TrajectoryModelCall,
)
from ng_traj.sources.native import (
    NativeCall,
    agent_invocation,
    scalar_text,
    timestamp_seconds,
    tool_observation,
)
from ng_traj.sources.pi.conversation import conversation, tool_call_id
from ng_traj.sources.pi.copies import id_list
from ng_traj.sources.pi.session import Entry, Session

DIALECTS = {
    "anthropic-messages": "messages",
    "openai-completions": "chat",
    "openai-responses": "responses",
    "openai-codex-responses": "responses",
}
"""pi ``api`` -> capture dialect; other APIs (Bedrock, Google, Ollama) have no Gym dialect."""

OPENAI_EXCLUSIVE_SINCE = 1764720000.0
"""2025-12-03T00:00Z: from then on pi reports OpenAI ``input`` without cached tokens."""

STOP_STATUS = {"stop": "completed", "error": "failed", "aborted": "incomplete", "length": "incomplete"}


@dataclass
class SessionObservation:
    """What one session contributes to a bundle."""

    invocation: AgentInvocation
    records: list[Any] = field(default_factory=list)
    gaps: list[ObservationGap] = field(default_factory=list)
    calls: list[NativeCall] = field(default_factory=list)


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


_UNREAD: Any = object()


def _input_is_inclusive(message: dict[str, Any], when: float | None) -> bool:
    api, provider = scalar_text(message.get("api")), scalar_text(message.get("provider"))
    if api.startswith("google") or provider.startswith("google"):
        return True
    if api not in ("openai-completions", "openai-responses"):
        return False
    when = timestamp_seconds(message.get("timestamp")) if when is _UNREAD else when
    return when is not None and when < OPENAI_EXCLUSIVE_SINCE


def token_stats(message: dict[str, Any], when: float | None = _UNREAD) -> dict[str, int | None]:
    """Inclusive token counts of one assistant message's pi ``usage`` (module docstring); ``when``: the
    message's ``timestamp`` in seconds (``timestamp_seconds``), when the caller has read it already."""
    usage = message.get("usage") if isinstance(message.get("usage"), dict) else {}
    raw_input, output = _count(usage.get("input")), _count(usage.get("output"))
    cache_read, cache_write = _count(usage.get("cacheRead")), _count(usage.get("cacheWrite"))
    prompt = raw_input
    if raw_input is not None and not _input_is_inclusive(message, when):
        prompt = raw_input + (cache_read or 0) + (cache_write or 0)
    total = _count(usage.get("totalTokens"))
    if total is None and prompt is not None and output is not None:
        total = prompt + output
    return {
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "reasoning_tokens": _count(usage.get("reasoning")),
        "total_tokens": total,
        "cached_tokens": cache_read,
    }


def is_model_call(message: dict[str, Any]) -> bool:
    """True for an assistant message that reached a provider (not injected, not an empty failed turn)."""
    if message.get("role") != "assistant":
        return False
    if message.get("provider") == "openclaw" and message.get("model") == "gateway-injected":
        return False
    content = message.get("content")
    empty = not content if isinstance(content, list | str) else True
    return not (empty and message.get("stopReason") in ("error", "aborted"))


def _tool_ids(entry: Entry) -> frozenset[str]:
    content = entry.message.get("content")
    blocks = (
        [b for b in content if isinstance(b, dict) and b.get("type") == "toolCall"] if isinstance(content, list) else []
    )
    return frozenset(tool_call_id(block, entry, position) for position, block in enumerate(blocks))


def native_call(entry: Entry, invocation_id: str) -> NativeCall:
    """The native call of an assistant entry, with its transcript usage made when first asked
    (``NativeCall.transcript``: most calls match a captured call, whose usage is kept instead).

    Its time is read now (``NativeCall.started_at``, for the turns' order); the call made later holds
    only values checked here or made by ``token_stats`` (text or ``None``, counts that are integers
    not below zero), so making it cannot fail after loading.
    """
    message = entry.message
    response_id = (
        message.get("responseId") if isinstance(message.get("responseId"), str) and message["responseId"] else None
    )
    started = timestamp_seconds(message.get("timestamp"))
    label = response_id or f"entry:{entry.id}"
    made = partial(_transcript_call, message, response_id, started)
    return NativeCall(invocation_id, response_id, _tool_ids(entry), None, label, made, started)


def _transcript_call(message: dict[str, Any], response_id: str | None, started: float | None) -> TrajectoryModelCall:
    """The transcript call of an assistant message (``native_call``): its start, response metadata and
    token counts (``token_stats``)."""
    metadata = {
        "response_id": response_id,
        "model": message.get("model") if isinstance(message.get("model"), str) else None,
        "dialect": DIALECTS.get(scalar_text(message.get("api"))),
    }
    return TrajectoryModelCall(
        started_at=started, response_metadata=metadata, token_stats=token_stats(message, started)
    )


def response_ids(session: Session) -> frozenset[str]:
    """Provider response ids of the session's assistant messages (copies included: they name the same calls)."""
    return frozenset(
        entry.message["responseId"]
        for entry in session.entries
        if entry.type == "message" and isinstance(entry.message.get("responseId"), str) and entry.message["responseId"]
    )


def _tool_status(message: dict[str, Any], details: dict[str, Any]) -> str:
    status = details.get("status")
    if message.get("isError") is True or status in ("error", "failed"):
        return "failed"
    if status in ("completed", "success", "ok"):
        return "completed"
    if status == "timeout":
        return "timeout"
    return "completed" if message.get("isError") is False else "unknown"


def _tool(entry: Entry, invocation_id: str, call_id: str, name: str | None) -> ToolCallObservation:
    message = entry.message
    details = message.get("details") if isinstance(message.get("details"), dict) else {}
    completed = timestamp_seconds(message.get("timestamp"))
    if completed is None:
        completed = timestamp_seconds(entry.raw.get("timestamp"))
    duration = details.get("durationMs")
    timing: dict[str, Any] = {}
    if completed is not None:
        timing = {"completed_at": completed, "timing_source": "artifact"}
        valid = (
            isinstance(duration, int | float)
            and not isinstance(duration, bool)
            and isfinite(duration)
            and duration >= 0
        )
        if valid:
            timing.update(started_at=completed - float(duration) / 1000, duration_ms=float(duration))
    return tool_observation(invocation_id, call_id, name, _tool_status(message, details), timing)


def _tools(path: list[Entry], items: list[dict[str, Any]], invocation_id: str, gaps: list[ObservationGap]) -> list[Any]:
    visible = [(item["call_id"], item.get("name")) for item in items if item.get("type") == "function_call"]
    counts = Counter(call_id for call_id, _ in visible)
    names = {call_id: name for call_id, name in visible if counts[call_id] == 1}
    gaps.extend(
        ObservationGap(code="tool_call_identity_ambiguous", invocation_id=invocation_id, detail=call_id)
        for call_id, count in counts.items()
        if count > 1
    )
    tools: dict[str, ToolCallObservation] = {}
    for entry in path:
        if entry.type != "message" or entry.message.get("role") != "toolResult":
            continue
        call_id = entry.message.get("toolCallId") or entry.message.get("tool_call_id")
        if not isinstance(call_id, str) or call_id not in names or call_id in tools:
            detail = call_id if isinstance(call_id, str) else None
            gaps.append(ObservationGap(code="tool_result_unowned", invocation_id=invocation_id, detail=detail))
            continue
        tools[call_id] = _tool(entry, invocation_id, call_id, names[call_id])
    for call_id in names:
        tool = tools.get(call_id)
        if tool is None or tool.started_at is None:
            gaps.append(ObservationGap(code="tool_timing_unavailable", invocation_id=invocation_id, detail=call_id))
        if tool is not None and tool.status == "unknown":
            gaps.append(ObservationGap(code="tool_outcome_unavailable", invocation_id=invocation_id, detail=call_id))
    return list(tools.values())


def _compaction(entry: Entry, invocation_id: str, gaps: list[ObservationGap]) -> ContextCompactionObservation:
    raw = entry.raw
    summary = raw.get("summary") if isinstance(raw.get("summary"), str) else None
    record = ContextCompactionObservation(
        invocation_id=invocation_id,
        observed_at=timestamp_seconds(raw.get("timestamp")),
        trigger=raw.get("reason") if isinstance(raw.get("reason"), str) else None,
        tokens_before=_count(raw.get("tokensBefore")),
        tokens_after=_count(raw.get("tokensAfter")),
        outcome="completed",
        summary=summary,
        first_kept_item_id=raw.get("firstKeptEntryId") if isinstance(raw.get("firstKeptEntryId"), str) else None,
    )
    gaps.append(ObservationGap(code="compaction_model_call_boundary_unavailable", invocation_id=invocation_id))
    if record.first_kept_item_id is None:
        gaps.append(ObservationGap(code="compaction_boundary_unavailable", invocation_id=invocation_id))
    if record.summary is None:
        gaps.append(ObservationGap(code="compaction_summary_unavailable", invocation_id=invocation_id))
    if record.tokens_after is None:
        gaps.append(ObservationGap(code="compaction_tokens_after_unavailable", invocation_id=invocation_id))
    return record


def _branch_gaps(session: Session, path: list[Entry], missing: list[str], invocation_id: str) -> list[ObservationGap]:
    gaps = [
        ObservationGap(code="agent_conversation_parent_unavailable", invocation_id=invocation_id, detail=m)
        for m in missing
    ]
    on_path = {id(entry) for entry in path}
    if any(id(entry) not in on_path and entry.copy_of is None for entry in session.entries):
        points = session.branch_points() or ["root"]
        gaps.extend(
            ObservationGap(code="agent_conversation_branch_abandoned", invocation_id=invocation_id, detail=p)
            for p in points
        )
    return gaps


def _status(path: list[Entry], invocation_id: str, gaps: list[ObservationGap]) -> str:
    last = next((e for e in reversed(path) if e.type == "message" and e.message.get("role") == "assistant"), None)
    status = STOP_STATUS.get(scalar_text(last.message.get("stopReason"))) if last is not None else None
    if status is None:
        gaps.append(ObservationGap(code="invocation_outcome_unavailable", invocation_id=invocation_id))
    return status or "unknown"


def observe(
    session: Session,
    invocation_id: str,
    *,
    parent_id: str | None = None,
    derive_status: bool = True,
    positional_ids: bool = False,
) -> SessionObservation:
    """Observe one parsed session as invocation ``invocation_id`` (child of ``parent_id``); assistant
    items named by position with ``positional_ids`` (``conversation.conversation``)."""
    gaps: list[ObservationGap] = []
    if session.unsupported is not None or not session.has_messages:
        detail = f"layout={session.unsupported}" if session.unsupported else None
        gaps.append(ObservationGap(code="agent_transcript_unavailable", invocation_id=invocation_id, detail=detail))
        invocation = AgentInvocation(invocation_id=invocation_id, parent_invocation_id=parent_id)
        return SessionObservation(invocation, gaps=gaps)
    walked, missing = session.active_path()
    path = [entry for entry in walked if entry.copy_of is None]
    values = conversation(path, invocation_id, gaps, positional_ids=positional_ids)
    from ng_traj.sources.pi.items import conversation_items  # the openai SDK's models: imported when needed

    items, dropped = conversation_items(values)
    if dropped:
        gaps.append(
            ObservationGap(
                code="agent_artifact_record_unparseable", invocation_id=invocation_id, detail=f"items={dropped}"
            )
        )
    status = _status(path, invocation_id, gaps) if derive_status else "unknown"
    invocation = agent_invocation(invocation_id, parent_id, status, items)
    records: list[Any] = _tools(path, values, invocation_id, gaps)
    records.extend(_compaction(entry, invocation_id, gaps) for entry in path if entry.type == "compaction")
    gaps.extend(_branch_gaps(session, path, missing, invocation_id))
    if session.unparseable:
        gaps.append(ObservationGap(code="agent_artifact_record_unparseable"))
    if session.copied():
        detail = f"entries={id_list(session.copied())}"
        gaps.append(ObservationGap(code="copied_context", invocation_id=invocation_id, detail=detail))
    calls = [
        native_call(entry, invocation_id)
        for entry in session.entries
        if entry.type == "message" and entry.copy_of is None and is_model_call(entry.message)
    ]
    return SessionObservation(invocation, records, gaps, calls)
