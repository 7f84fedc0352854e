"""Producer turns of OpenCode sessions, as NeMo Gym's OpenCode agent derives them from its database.

Source: ``append_opencode_turns`` in ``responses_api_agents/opencode_agent/observability.py`` of
nemo-gym 0.7.0. Per session, in message order: user messages are skipped; ``summary`` assistant
messages are skipped; an assistant message is a turn only with a ``step-start`` or ``step-finish``
part (only OpenCode's model processor writes them); without them it is a subtask or synthetic
follow-up (no turn) or its evidence is missing (unavailable). ``turn_no`` counts the session's
turns (an untimed message uses a number); ``step_count`` counts ``step-finish`` parts so far;
``timestamp`` is ``time.created`` (ms), else the row's ``time_created``; ``question`` stays unset
(a saved user message is not the provider request). ``answer``: the message's texts as one
``message`` item (id = message id, parts as ``output_text`` with their ids), then one
``function_call`` per tool part with ``arguments`` = ``state.input`` as an object (these shapes are
upstream's, not Responses items); ``reasoning_content``: the reasoning parts, or null. Text and
reasoning parts marked ``synthetic`` or ``ignored`` are dropped. A part type outside
:data:`TURN_PART_TYPES`, a non-text text, a tool part without object state or text name, and a
message without ``step-finish`` mark the message unavailable (the last still yields a turn when it
has content).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ng_traj.sources.native import scalar_text
from ng_traj.sources.opencode.store import Message, seconds

TURN_PART_TYPES = frozenset({"step-start", "step-finish", "snapshot", "patch", "retry", "text", "reasoning", "tool"})
"""Part types upstream's turn derivation accepts without marking the message unavailable."""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def turn(message: Message, session_id: str, numbers: Counter[str], unavailable: set[str]) -> dict[str, Any] | None:
    """Upstream's producer turn of one assistant message, or ``None`` when it makes none.

    ``numbers`` carries the session's ``turn`` and ``steps`` counters; message ids upstream marks
    unavailable are added to ``unavailable``.
    """
    types = {part.data.get("type") for part in message.parts if isinstance(part.data.get("type"), str)}
    if message.broken_parts:
        unavailable.add(message.id)
    if not types & {"step-start", "step-finish"}:
        return None  # the caller decided whether the message is a synthetic follow-up or unavailable
    numbers["turn"] += 1
    numbers["steps"] += sum(1 for part in message.parts if part.data.get("type") == "step-finish")
    timestamp = seconds(_dict(message.data.get("time")).get("created"))
    if timestamp is None:
        timestamp = seconds(message.time_created)
    if timestamp is None:
        unavailable.add(message.id)
        return None
    answer: list[Any] = []
    reasoning: list[dict[str, Any]] = []
    texts: list[dict[str, Any]] = []
    for part in message.parts:
        kind = part.data.get("type")
        if not isinstance(kind, str):
            unavailable.add(message.id)
        elif (
            kind in ("text", "reasoning")
            and part.data.get("synthetic") is not True
            and part.data.get("ignored") is not True
        ):
            if not isinstance(part.data.get("text"), str):
                unavailable.add(message.id)
            elif kind == "text":
                texts.append({"id": part.id, "type": "output_text", "text": part.data["text"]})
            else:
                reasoning.append({"id": part.id, "type": "reasoning", "text": part.data["text"]})
        elif kind == "tool":
            state = part.data.get("state")
            if not isinstance(state, dict) or not isinstance(part.data.get("tool"), str):
                unavailable.add(message.id)
                continue
            answer.append(
                {
                    "id": part.id,
                    "type": "function_call",
                    "call_id": part.data.get("callID"),
                    "name": part.data["tool"],
                    "arguments": state.get("input"),
                }
            )
        elif kind not in TURN_PART_TYPES:
            unavailable.add(message.id)
    if "step-finish" not in types:
        unavailable.add(message.id)
        if not answer and not reasoning and not texts:
            return None
    if texts:
        answer.insert(0, {"id": message.id, "type": "message", "role": "assistant", "content": texts})
    return {
        "invocation_id": session_id,
        "turn_no": numbers["turn"],
        "timestamp": timestamp,
        "answer": answer,
        "reasoning_content": reasoning or None,
        "step_count": numbers["steps"],
    }


def synthetic_parent(message: Message, by_id: dict[str, Message]) -> bool:
    """Whether an assistant message without provider steps answers a subtask or synthetic user message
    (OpenCode's own bookkeeping: no turn, and not unavailable)."""
    parent = by_id.get(scalar_text(message.data.get("parentID")))
    if parent is None or parent.session_id != message.session_id:
        return False
    kinds = [part.data for part in parent.parts]
    return any(part.get("type") == "subtask" for part in kinds) or (
        bool(kinds) and all(part.get("synthetic") is True for part in kinds)
    )
