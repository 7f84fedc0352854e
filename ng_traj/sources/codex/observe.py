"""Observations of one Codex thread: conversation, tool calls, native calls, compactions, outcome.

Only the thread's own records are observed (a fork's copied parent prefix is the parent's).

Conversation. ``response_item`` payloads are Responses items already: user, developer and system
messages become easy messages with their input parts; an assistant message an output message
(``id`` as written, else ``msg_<thread>_<line>``; ``phase`` kept); ``reasoning`` keeps its summary
and encrypted content (``id`` as written, else ``rs_<thread>_<line>``); function calls and outputs
are kept (an ``output`` object's ``content`` text is the output); custom, local-shell and web-search
items are carried through. Paginated history (0.145 and later) writes the visible turns only as
``event_msg/item_completed`` items: when a thread has no assistant ``response_item``, its
conversation is its ``UserMessage`` and ``AgentMessage`` items (text of ``text``/``Text`` blocks;
``phase`` kept), with the ``response_item`` user messages only if it has no ``UserMessage`` item.
A ``compacted`` record adds its summary as a user message, where Codex puts it in the new history.

Tool calls are paired with their outputs by exact call id. Timing and outcome come only from what
the output proves: its record time is the completion, and the header Codex's exec tools write
(``Wall time: <s> seconds``, ``Process exited with code <n>``), or a pre-envelope output's
``metadata`` (``exit_code``, ``duration_seconds``), gives the duration (start = completion - wall
time, when the output has a time) and the status (0 completed, else failed); an
``exec_command_end`` event with the same call id gives the exit code. No start is ever taken from
the calling record.

Model calls. Codex writes no response ids. After each model response it writes ``event_msg/
token_count`` with the thread's cumulative ``total_token_usage``; it also re-emits unchanged totals
(rate-limit refreshes), and a fork replays its parent's rows. A native call is a ``token_count``
whose total exceeds the highest total seen before it (the copied prefix included): its usage is the
difference of the totals (its ``last_token_usage`` when a count other than the total went down),
with Codex's inclusive convention kept: ``prompt = input_tokens`` (cached included), ``cached =
cached_input_tokens``, ``completion = output_tokens``, ``reasoning = reasoning_output_tokens``. Its
tool-call ids are the function calls issued since the previous call.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from math import isfinite
from typing import Any

from ng_traj.contract import (
    AgentInvocation,
    ContextCompactionObservation,
    ObservationGap,
    ToolCallObservation,
    TrajectoryModelCall,
)
from ng_traj.sources.codex.rollout import Record, Rollout
from ng_traj.sources.native import NativeCall, scalar_text

CALL_TYPES = ("function_call", "custom_tool_call")
OUTPUT_TYPES = ("function_call_output", "custom_tool_call_output")
PASS_THROUGH = ("custom_tool_call", "custom_tool_call_output", "local_shell_call", "web_search_call")
USAGE_KEYS = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens", "total_tokens")
ENDINGS = {"task_complete": "completed", "turn_aborted": "incomplete", "token_budget_abort": "incomplete"}
WALL_TIME = re.compile(r"^Wall time: ([0-9]+(?:\.[0-9]+)?) seconds$", re.MULTILINE)
EXIT_CODE = re.compile(r"^Process exited with code (-?[0-9]+)$", re.MULTILINE)


@dataclass
class ThreadObservation:
    """What one thread contributes to a bundle."""

    invocation: AgentInvocation
    records: list[Any] = field(default_factory=list)
    gaps: list[ObservationGap] = field(default_factory=list)
    calls: list[NativeCall] = field(default_factory=list)
    spawn_calls: dict[str, str] = field(default_factory=dict)
    """``spawn_agent`` call id -> the text of its output (lineage is resolved by the reader)."""


def _text(block: Any) -> str:
    if not isinstance(block, dict):
        return ""
    value = block.get("text", block.get("Text"))
    return value if isinstance(value, str) else ""


def _message(payload: dict[str, Any], fallback: str) -> dict[str, Any] | None:
    role, content = payload.get("role"), payload.get("content")
    if role != "assistant":
        return {"type": "message", "role": role, "content": content}
    texts = [_text(block) for block in content] if isinstance(content, list) else [content]
    text = "\n".join(t for t in texts if isinstance(t, str) and t)
    if not text:
        return None
    item = {
        "type": "message",
        "id": scalar_text(payload.get("id")) or fallback,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    if payload.get("phase") in ("commentary", "final_answer"):
        item["phase"] = payload["phase"]
    return item


def _output(value: Any) -> Any:
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return value


def _response_item(record: Record, thread: str) -> dict[str, Any] | None:
    payload, kind = record.payload, record.payload.get("type")
    if kind == "message":
        return _message(payload, f"msg_{thread}_{record.line}")
    if kind == "reasoning":
        item = {
            "type": "reasoning",
            "id": scalar_text(payload.get("id")) or f"rs_{thread}_{record.line}",
            "summary": payload.get("summary") if isinstance(payload.get("summary"), list) else [],
        }
        item.update({key: payload[key] for key in ("encrypted_content", "content") if payload.get(key) is not None})
        return item
    if kind == "function_call":
        keys = ("call_id", "name", "arguments", "id", "namespace")
        return {"type": "function_call", **{key: payload[key] for key in keys if payload.get(key) is not None}}
    if kind == "function_call_output":
        return {"type": kind, "call_id": payload.get("call_id"), "output": _output(payload.get("output"))}
    return dict(payload) if kind in PASS_THROUGH else None


def _paginated_item(record: Record, thread: str) -> dict[str, Any] | None:
    item = record.payload.get("item")
    if not isinstance(item, dict) or item.get("type") not in ("UserMessage", "AgentMessage"):
        return None
    content = item.get("content")
    blocks = content if isinstance(content, list) else [{"text": content}]
    text = "\n".join(t for t in (_text(block) for block in blocks) if t)
    if not text:
        return None
    if item["type"] == "UserMessage":
        return {"type": "message", "role": "user", "content": text}
    payload = {"role": "assistant", "content": [{"text": text}], "id": item.get("id"), "phase": item.get("phase")}
    return _message(payload, f"msg_{thread}_{record.line}")


def _compacted_item(record: Record) -> dict[str, Any] | None:
    summary = record.payload.get("message")
    return {"type": "message", "role": "user", "content": summary} if isinstance(summary, str) and summary else None


def _is_paginated(records: list[Record]) -> bool:
    assistant = any(
        r.type == "response_item" and (r.payload.get("role") == "assistant" or r.payload.get("type") in CALL_TYPES)
        for r in records
    )
    return not assistant and any(r.type == "event_msg" and r.payload.get("type") == "item_completed" for r in records)


def conversation(records: list[Record], thread: str) -> list[dict[str, Any]]:
    """The thread's model-visible items (module docstring), unvalidated."""
    paginated = _is_paginated(records)
    user_items = paginated and any(
        isinstance(r.payload.get("item"), dict) and r.payload["item"].get("type") == "UserMessage" for r in records
    )
    items = []
    for record in records:
        item = None
        if record.type == "compacted":
            item = _compacted_item(record)
        elif record.type == "event_msg" and paginated and record.payload.get("type") == "item_completed":
            item = _paginated_item(record, thread)
        elif record.type == "response_item" and not (user_items and record.payload.get("role") == "user"):
            item = _response_item(record, thread)
        if item is not None:
            items.append(item)
    return items


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _usage(info: Any, key: str) -> dict[str, int] | None:
    usage = info.get(key) if isinstance(info, dict) else None
    if not isinstance(usage, dict):
        return None
    counts = {name: _count(usage.get(name)) for name in USAGE_KEYS}
    return {name: value for name, value in counts.items() if value is not None}


def _difference(total: dict[str, int], previous: dict[str, int] | None, last: dict[str, int] | None) -> dict[str, int]:
    if previous is None:
        return total
    if all(total.get(key, 0) >= previous.get(key, 0) for key in USAGE_KEYS):
        return {key: value - previous.get(key, 0) for key, value in total.items()}
    return last or {}


def _stats(usage: dict[str, int]) -> dict[str, int | None]:
    prompt, completion = usage.get("input_tokens"), usage.get("output_tokens")
    total = usage.get("total_tokens")
    if total is None and prompt is not None and completion is not None:
        total = prompt + completion
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "reasoning_tokens": usage.get("reasoning_output_tokens"),
        "total_tokens": total,
        "cached_tokens": usage.get("cached_input_tokens"),
    }


def native_calls(rollout: Rollout, thread: str) -> list[NativeCall]:
    """One native call per ``token_count`` that raises the thread's total (module docstring)."""
    calls, previous, model, pending = [], None, None, []
    copied = rollout.copied or (0, -1)
    for record in rollout.records:
        kind = record.payload.get("type")
        if record.type == "turn_context" and isinstance(record.payload.get("model"), str):
            model = record.payload["model"]
        if record.type == "response_item" and kind in CALL_TYPES and scalar_text(record.payload.get("call_id")):
            pending.append(scalar_text(record.payload.get("call_id")))
        if record.type != "event_msg" or kind != "token_count":
            continue
        total = _usage(record.payload.get("info"), "total_token_usage")
        if not total or (previous is not None and total.get("total_tokens", 0) <= previous.get("total_tokens", 0)):
            continue
        usage = _difference(total, previous, _usage(record.payload.get("info"), "last_token_usage"))
        previous = total
        if copied[0] <= record.line <= copied[1]:
            pending = []
            continue
        metadata = {"model": model, "dialect": "responses"}
        transcript = TrajectoryModelCall(response_metadata=metadata, token_stats=_stats(usage))
        calls.append(NativeCall(thread, None, frozenset(pending), transcript, f"line:{record.line}"))
        pending = []
    return calls


def _metadata(record: Record) -> dict[str, Any]:
    output = record.payload.get("output")
    metadata = output.get("metadata") if isinstance(output, dict) else None
    return metadata if isinstance(metadata, dict) else {}


def _exit_code(record: Record, ends: dict[str, int]) -> int | None:
    output = record.payload.get("output")
    text = output if isinstance(output, str) else _output(output)
    match = EXIT_CODE.search(text) if isinstance(text, str) else None
    if match:
        return int(match.group(1))
    code = _metadata(record).get("exit_code")
    return code if type(code) is int else ends.get(scalar_text(record.payload.get("call_id")))


def _wall_seconds(record: Record) -> float | None:
    output = record.payload.get("output")
    match = WALL_TIME.search(output) if isinstance(output, str) else None
    if match:
        return float(match.group(1))
    seconds = _metadata(record).get("duration_seconds")
    valid = isinstance(seconds, int | float) and not isinstance(seconds, bool) and isfinite(seconds) and seconds >= 0
    return float(seconds) if valid else None


def _tool(record: Record, thread: str, name: str | None, ends: dict[str, int]) -> ToolCallObservation:
    call_id = scalar_text(record.payload.get("call_id"))
    code = _exit_code(record, ends)
    status = "unknown" if code is None else ("completed" if code == 0 else "failed")
    timing: dict[str, Any] = {}
    seconds = _wall_seconds(record)
    if record.time is not None:
        timing = {"completed_at": record.time, "timing_source": "artifact"}
        if seconds is not None:
            timing.update(started_at=record.time - seconds, duration_ms=seconds * 1000)
    elif seconds is not None:
        timing = {"duration_ms": seconds * 1000, "timing_source": "artifact"}
    return ToolCallObservation(invocation_id=thread, tool_call_id=call_id, tool_name=name, status=status, **timing)


def _exec_ends(records: list[Record]) -> dict[str, int]:
    ends = {}
    for record in records:
        code = record.payload.get("exit_code")
        if record.payload.get("type") == "exec_command_end" and type(code) is int:
            ends[scalar_text(record.payload.get("call_id"))] = code
    return ends


def tools(records: list[Record], thread: str, gaps: list[ObservationGap]) -> list[ToolCallObservation]:
    """Tool observations paired by exact call id, with the reference's gaps (module docstring)."""
    visible = [
        (scalar_text(r.payload.get("call_id")), scalar_text(r.payload.get("name")) or None)
        for r in records
        if r.type == "response_item" and r.payload.get("type") in CALL_TYPES
    ]
    counts = Counter(call_id for call_id, _ in visible)
    names = {call_id: name for call_id, name in visible if counts[call_id] == 1 and call_id}
    gaps.extend(
        ObservationGap(code="tool_call_identity_ambiguous", invocation_id=thread, detail=call_id)
        for call_id, count in counts.items()
        if count > 1 and call_id
    )
    gaps.extend(
        ObservationGap(code="tool_call_id_missing", invocation_id=thread) for call_id, _ in visible if not call_id
    )
    ends, found = _exec_ends(records), {}
    for record in records:
        if record.type != "response_item" or record.payload.get("type") not in OUTPUT_TYPES:
            continue
        call_id = scalar_text(record.payload.get("call_id"))
        if call_id not in names or call_id in found:
            gaps.append(ObservationGap(code="tool_result_unowned", invocation_id=thread, detail=call_id or None))
            continue
        found[call_id] = _tool(record, thread, names[call_id], ends)
    for call_id in names:
        tool = found.get(call_id)
        if tool is None or tool.started_at is None:
            gaps.append(ObservationGap(code="tool_timing_unavailable", invocation_id=thread, detail=call_id))
        if tool is not None and tool.status == "unknown":
            gaps.append(ObservationGap(code="tool_outcome_unavailable", invocation_id=thread, detail=call_id))
    return list(found.values())


def compactions(records: list[Record], thread: str, gaps: list[ObservationGap]) -> list[ContextCompactionObservation]:
    """One observation per ``compacted`` record (summary = its ``message``)."""
    found = []
    for record in records:
        if record.type != "compacted":
            continue
        summary = record.payload.get("message") if isinstance(record.payload.get("message"), str) else None
        found.append(
            ContextCompactionObservation(
                invocation_id=thread, observed_at=record.time, outcome="completed", summary=summary or None
            )
        )
        gaps.append(ObservationGap(code="compaction_model_call_boundary_unavailable", invocation_id=thread))
        gaps.append(ObservationGap(code="compaction_tokens_after_unavailable", invocation_id=thread))
        if not summary:
            gaps.append(ObservationGap(code="compaction_summary_unavailable", invocation_id=thread))
    return found


def status(records: list[Record], thread: str, gaps: list[ObservationGap]) -> str:
    """The outcome of the thread's last turn: ``task_complete`` completed, an abort incomplete."""
    endings = [ENDINGS[kind] for r in records if r.type == "event_msg" and (kind := r.payload.get("type")) in ENDINGS]
    if not endings:
        gaps.append(ObservationGap(code="invocation_outcome_unavailable", invocation_id=thread))
        return "unknown"
    return endings[-1]


def spawn_outputs(records: list[Record]) -> dict[str, str]:
    """``spawn_agent`` call id -> its output text (the child thread id appears in it)."""
    spawns = {
        scalar_text(r.payload.get("call_id"))
        for r in records
        if r.type == "response_item"
        and r.payload.get("type") == "function_call"
        and r.payload.get("name") == "spawn_agent"
    }
    outputs = {}
    for record in records:
        call_id = scalar_text(record.payload.get("call_id"))
        if record.type == "response_item" and record.payload.get("type") in OUTPUT_TYPES and call_id in spawns:
            output = _output(record.payload.get("output"))
            outputs[call_id] = output if isinstance(output, str) else ""
    return {call_id: outputs.get(call_id, "") for call_id in sorted(spawns)}


def observe(rollout: Rollout, parent_id: str | None) -> ThreadObservation:
    """Observe one rollout's own records as the invocation named by its thread id."""
    thread, own = rollout.meta.thread_id, rollout.own()
    gaps: list[ObservationGap] = []
    values = conversation(own, thread)
    from ng_traj.contract.conversation import validate_items  # the openai SDK's models: imported when needed

    items, dropped = validate_items(values)
    if dropped:
        gaps.append(
            ObservationGap(code="agent_artifact_record_unparseable", invocation_id=thread, detail=f"items={dropped}")
        )
    if not items:
        gaps.append(ObservationGap(code="agent_transcript_unavailable", invocation_id=thread))
    state = status(own, thread, gaps)
    invocation = AgentInvocation(invocation_id=thread, parent_invocation_id=parent_id, status=state, conversation=items)
    records: list[Any] = [*tools(own, thread, gaps), *compactions(own, thread, gaps)]
    if rollout.copied is not None:
        first, last = rollout.copied
        gaps.append(ObservationGap(code="copied_context", invocation_id=thread, detail=f"lines={first}-{last}"))
    if rollout.unparseable:
        gaps.append(ObservationGap(code="agent_artifact_record_unparseable", invocation_id=thread))
    return ThreadObservation(invocation, records, gaps, native_calls(rollout, thread), spawn_outputs(own))
