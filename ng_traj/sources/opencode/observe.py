"""Observations of OpenCode sessions, mapped as NeMo Gym's OpenCode producer maps its database.

Source: ``_parse_opencode_session`` in ``responses_api_agents/opencode_agent/app.py`` and
``append_opencode_turns`` in ``observability.py`` of nemo-gym 0.7.0. Per session (one invocation,
id = session id):

* Conversation: a user ``text`` part (not ``ignored``) → ``{"role": "user", "content": text}``; an
  assistant ``text`` part → an assistant output message (id = part id); a ``reasoning`` part → a
  reasoning item with the text as its summary; a ``tool`` part → a ``function_call`` (arguments =
  ``state.input`` as JSON text, status ``completed`` only for a completed tool) and, when it has an
  ``output`` (else ``error``), its ``function_call_output``; the output of a tool whose
  ``state.time.compacted`` is set is ``[Old tool result content cleared]``, the text OpenCode puts in
  later model inputs. Blank texts are dropped.
* Tool observations: one per tool part with a ``callID``; times from ``state.time.start``/``end``
  (ms; an interval only when both are numbers and end ≥ start), status completed / failed (``error``)
  / incomplete (``running``, ``pending``) / unknown. A tool part without ``callID`` gets the gap
  ``tool_call_identity_unavailable`` (detail: part id) and its conversation items the call id
  ``part:<part id>`` (upstream draws a random id: see the deviations page).
* Sub-agents: a session's ``parent_id``; the spawning call is the parent's tool part whose
  ``state.metadata.sessionId`` names the child (``subagent_spawn_ambiguous`` for several,
  ``subagent_spawn_tool_unavailable`` for none, ``subagent_parent_unavailable`` for a parent not
  among the inputs).
* Compaction parts: one observation each; summary from the one assistant message with ``summary:
  true`` whose ``parentID`` is the compaction's message; trigger ``overflow`` / ``automatic`` /
  ``manual``; ``first_kept_item_id`` from ``tail_start_id``; the reference's gaps.
* Status: ``failed`` when an assistant message has an ``error`` object, else ``completed`` when one
  has ``time.completed``, else the status of the tool that spawned it, else ``unknown``.

Native calls (ng-traj's own; upstream makes none): one per ``step-finish`` part of an assistant
message, each a provider step. OpenCode keeps no provider response id, so a call is labelled
``<message id>#<step>`` (``<message id>@<position>#<step>`` where an export repeats an id) and joins
captured calls through the tool-call ids of its step. Its usage
(``tokens``: ``input`` without cache, ``cache.read``/``cache.write``, ``reasoning`` beside ``output``)
is normalised to the inclusive convention: ``prompt = input + cache.read + cache.write``,
``completion = output + reasoning``, ``reasoning = reasoning``, ``total = tokens.total`` else prompt +
completion, ``cached = cache.read``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson

from ng_traj.contract import (
    AgentInvocation,
    ContextCompactionObservation,
    ObservationGap,
    ToolCallObservation,
    TrajectoryModelCall,
)
from ng_traj.sources.native import NativeCall, scalar_text
from ng_traj.sources.opencode.store import Message, Part, Session, seconds
from ng_traj.sources.opencode.turns import synthetic_parent, turn

CLEARED_OUTPUT = "[Old tool result content cleared]"
TOOL_STATUS = {"completed": "completed", "error": "failed", "running": "incomplete", "pending": "incomplete"}


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def token_stats(tokens: dict[str, Any]) -> dict[str, int | None]:
    """Inclusive token counts of an OpenCode ``tokens`` object (module docstring)."""
    cache = _dict(tokens.get("cache"))
    raw_input, output, reasoning = (
        _count(tokens.get("input")),
        _count(tokens.get("output")),
        _count(tokens.get("reasoning")),
    )
    read, write = _count(cache.get("read")), _count(cache.get("write"))
    prompt = raw_input + (read or 0) + (write or 0) if raw_input is not None else None
    completion = output + (reasoning or 0) if output is not None else None
    total = _count(tokens.get("total"))
    if total is None and prompt is not None and completion is not None:
        total = prompt + completion
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "reasoning_tokens": reasoning,
        "total_tokens": total,
        "cached_tokens": read,
    }


@dataclass
class SessionObservation:
    """What one session contributes: its invocation and records, gaps, native calls and turns.

    ``turns`` are upstream's producer turns without task and rollout ids (the build adds them):
    dicts with ``invocation_id``, ``turn_no``, ``timestamp``, ``answer``, ``reasoning_content``,
    ``step_count``. ``unavailable`` holds the message ids upstream's turn derivation marks.
    """

    invocation: AgentInvocation
    records: list[Any] = field(default_factory=list)
    gaps: list[ObservationGap] = field(default_factory=list)
    calls: list[NativeCall] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    unavailable: set[str] = field(default_factory=set)
    spawns: dict[str, set[str]] = field(default_factory=dict)
    """Child session id → call ids of this session's tool parts naming it in ``state.metadata.sessionId``."""
    spawn_status: dict[str, str] = field(default_factory=dict)


def _role(message: Message) -> Any:
    return message.data.get("role")


def _text(part: Part) -> str | None:
    text = part.data.get("text")
    return text if isinstance(text, str) and text.strip() else None


def _tool_items(part: Part, call_id: str, state: dict[str, Any]) -> list[dict[str, Any]]:
    native_status = state.get("status")
    status = "completed" if native_status == "completed" else "incomplete"
    tool_input = state.get("input") or {}
    arguments = orjson.dumps(tool_input).decode() if isinstance(tool_input, dict | list) else str(tool_input)
    name = part.data.get("tool") if isinstance(part.data.get("tool"), str) else ""
    items = [
        {
            "type": "function_call",
            "id": call_id,
            "call_id": call_id,
            "name": name,
            "arguments": arguments,
            "status": status,
        }
    ]
    time = _dict(state.get("time"))
    if native_status == "completed" and time.get("compacted") is not None:
        output: Any = CLEARED_OUTPUT
    else:
        output = state.get("output") if state.get("output") is not None else state.get("error")
    if output is not None:
        text = output if isinstance(output, str) else orjson.dumps(output).decode()
        items.append({"type": "function_call_output", "call_id": call_id, "output": text, "status": status})
    return items


def _tool(
    part: Part, session_id: str, call_id: str, state: dict[str, Any], gaps: list[ObservationGap]
) -> ToolCallObservation:
    time = _dict(state.get("time"))
    start, end = time.get("start"), time.get("end")
    started, completed = seconds(start), seconds(end)
    valid = started is not None and completed is not None and end >= start
    native_status = state.get("status")
    status = TOOL_STATUS.get(native_status if isinstance(native_status, str) else "", "unknown")
    if not valid or (native_status in ("completed", "error") and completed is None):
        gaps.append(ObservationGap(code="tool_timing_unavailable", invocation_id=session_id, detail=call_id))
    return ToolCallObservation(
        invocation_id=session_id,
        tool_call_id=call_id,
        tool_name=part.data.get("tool") if isinstance(part.data.get("tool"), str) else None,
        started_at=started if valid else None,
        completed_at=completed if valid else None,
        duration_ms=float(end - start) if valid else None,
        timing_source="artifact" if valid else None,
        status=status,
        error_type="tool_error" if native_status == "error" else None,
    )


def _calls(message: Message, session_id: str, name: str) -> list[NativeCall]:
    """One native call per ``step-finish`` part (labelled ``<name>#<step>``); tool calls of a step are
    those since the last finish."""
    calls: list[NativeCall] = []
    tools: set[str] = set()
    time = _dict(message.data.get("time"))
    model = message.data.get("modelID") if isinstance(message.data.get("modelID"), str) else None
    steps = sum(1 for part in message.parts if part.data.get("type") == "step-finish")
    for part in message.parts:
        kind = part.data.get("type")
        if kind == "tool" and isinstance(part.data.get("callID"), str) and part.data["callID"]:
            tools.add(part.data["callID"])
        if kind != "step-finish":
            continue
        step = len(calls) + 1
        label = f"{name}#{step}"
        call = TrajectoryModelCall(
            started_at=seconds(time.get("created")) if step == 1 else None,
            completed_at=seconds(time.get("completed")) if step == steps else None,
            response_metadata={"model": model},
            token_stats=token_stats(_dict(part.data.get("tokens"))),
        )
        calls.append(NativeCall(session_id, None, frozenset(tools), call, label))
        tools = set()
    return calls


def observe(session: Session, messages: list[Message]) -> SessionObservation:
    """Observe one session's messages (in store order) as invocation ``session.id``."""
    sid = session.id
    obs = SessionObservation(AgentInvocation(invocation_id=sid))
    values: list[dict[str, Any]] = []
    status = "unknown"
    summaries: dict[str, list[Message]] = {}
    first_items: dict[str, str] = {}
    compactions: list[tuple[Message, Part]] = []
    by_id = {message.id: message for message in messages}
    numbers: Counter[str] = Counter()
    repeated = {key for key, n in Counter(message.id for message in messages).items() if n > 1}
    for position, message in enumerate(messages, 1):
        role = _role(message)
        if not message.data:
            obs.unavailable.add(message.id)
            continue
        if role == "assistant":
            if isinstance(message.data.get("error"), dict):
                status = "failed"
            elif status != "failed" and seconds(_dict(message.data.get("time")).get("completed")) is not None:
                status = "completed"
        if message.broken_parts:
            detail = f"{message.id}:parts={message.broken_parts}"
            obs.gaps.append(ObservationGap(code="agent_artifact_record_unparseable", invocation_id=sid, detail=detail))
        if message.data.get("summary") is True:
            summaries.setdefault(scalar_text(message.data.get("parentID")), []).append(message)
        _conversation(message, sid, obs, values, first_items, compactions)
        if role == "assistant":
            name = f"{message.id}@{position}" if message.id in repeated else message.id
            obs.calls.extend(_calls(message, sid, name))
            if message.data.get("summary") is not True:
                types = {part.data.get("type") for part in message.parts if isinstance(part.data.get("type"), str)}
                if not types & {"step-start", "step-finish"} and not synthetic_parent(message, by_id):
                    obs.unavailable.add(message.id)
                found = turn(message, sid, numbers, obs.unavailable)
                if found is not None:
                    obs.turns.append(found)
        elif role != "user":
            obs.unavailable.add(message.id)
    from ng_traj.contract.conversation import validate_items  # the openai SDK's models: imported when needed

    items, dropped = validate_items(values)
    if dropped:
        obs.gaps.append(
            ObservationGap(code="agent_artifact_record_unparseable", invocation_id=sid, detail=f"items={dropped}")
        )
    obs.invocation = AgentInvocation(invocation_id=sid, status=status, conversation=items)
    obs.records.extend(
        _compaction(sid, message, part, summaries, first_items, obs.gaps) for message, part in compactions
    )
    return obs


def _conversation(
    message: Message,
    sid: str,
    obs: SessionObservation,
    values: list[dict[str, Any]],
    first_items: dict[str, str],
    compactions: list[tuple[Message, Part]],
) -> None:
    role = _role(message)
    visible: list[str] = []
    for part in message.parts:
        kind = part.data.get("type")
        text = _text(part)
        if kind == "text" and text is not None:
            if role == "user" and part.data.get("ignored") is not True:
                values.append({"type": "message", "role": "user", "content": text})
            elif role == "assistant":
                values.append(
                    {
                        "id": part.id,
                        "type": "message",
                        "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}],
                    }
                )
                first_items.setdefault(message.id, part.id)
        elif kind == "reasoning" and role == "assistant" and text is not None:
            values.append({"id": part.id, "type": "reasoning", "summary": [{"type": "summary_text", "text": text}]})
            first_items.setdefault(message.id, part.id)
        elif kind == "tool" and role == "assistant":
            state = _dict(part.data.get("state"))
            native = part.data.get("callID")
            call_id = native if isinstance(native, str) and native else f"part:{part.id}"
            values.extend(_tool_items(part, call_id, state))
            first_items.setdefault(message.id, call_id)
            if call_id == native:
                visible.append(call_id)
                obs.records.append(_tool(part, sid, call_id, state, obs.gaps))
                child = _dict(state.get("metadata") or part.data.get("metadata")).get("sessionId")
                if isinstance(child, str) and child:
                    obs.spawns.setdefault(child, set()).add(call_id)
                    obs.spawn_status[child] = obs.records[-1].status
            else:
                obs.gaps.append(
                    ObservationGap(code="tool_call_identity_unavailable", invocation_id=sid, detail=part.id)
                )
        elif kind == "compaction":
            compactions.append((message, part))
    repeated = [call_id for call_id, n in Counter(visible).items() if n > 1]
    obs.gaps.extend(ObservationGap(code="tool_call_identity_ambiguous", invocation_id=sid, detail=c) for c in repeated)


def _compaction(
    sid: str,
    message: Message,
    part: Part,
    summaries: dict[str, list[Message]],
    first_items: dict[str, str],
    gaps: list[ObservationGap],
) -> ContextCompactionObservation:
    found = summaries.get(message.id, [])
    summary = None
    if len(found) == 1:
        texts = [p.data["text"] for p in found[0].parts if p.data.get("type") == "text" and _text(p) is not None]
        summary = "\n".join(texts) or None
    elif len(found) > 1:
        gaps.append(ObservationGap(code="compaction_summary_ambiguous", invocation_id=sid))
    data = part.data
    trigger = "overflow" if data.get("overflow") is True else "automatic" if data.get("auto") is True else "manual"
    tail = data.get("tail_start_id") if isinstance(data.get("tail_start_id"), str) else None
    first_kept = first_items.get(tail) if tail is not None else None
    if tail is not None and first_kept is None:
        gaps.append(ObservationGap(code="compaction_first_kept_item_unavailable", invocation_id=sid, detail=tail))
    if not summary:
        gaps.append(ObservationGap(code="compaction_summary_unavailable", invocation_id=sid))
    gaps.append(ObservationGap(code="compaction_token_counts_unavailable", invocation_id=sid))
    gaps.append(ObservationGap(code="compaction_model_call_boundary_unavailable", invocation_id=sid))
    observed = seconds(part.time_created)
    if observed is None:
        observed = seconds(_dict(message.data.get("time")).get("created"))
    return ContextCompactionObservation(
        invocation_id=sid,
        observed_at=observed,
        trigger=trigger,
        outcome="completed" if summary else "unknown",
        summary=summary,
        first_kept_item_id=first_kept,
    )
