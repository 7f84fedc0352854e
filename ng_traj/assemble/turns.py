"""Turns made from owned captured calls, for a rollout whose agent sent no trajectory of its own.

Source: ``_turns_from_model_calls`` and ``_turn_content`` in ``nemo_gym/rollout_collection.py`` of
nemo-gym 0.7.0. One turn per model call of the trajectory (in the trajectory's call order, which is
capture order when no producer trajectory exists) that

* has a response (the projected ``response``, which falls back to ``response_raw``: a failed call
  with a raw error body is a turn, a call with neither is not; with payloads left out no call is),
* and is owned: some invocation's ``model_calls`` refs name its ``model_call_id``, else its
  ``response_id`` (the last invocation naming it wins). Unowned calls (judge, user simulator,
  auxiliary calls) are no turns.

Per turn: ``turn_no`` counts the invocation's turns from 1; ``timestamp`` is ``started_at``, else
``completed_at``, else 0.0; ``step_count`` is the number of tool calls the invocation's *earlier*
turns requested; ``model_calls`` is the one ref of its call. Only the last turn of all carries
``resolved``, when the row's ``resolved`` is a boolean. Turns are not re-sorted.

ng-traj's addition, :func:`turns_from_transcript`: where those rules leave a record without a
producer trajectory with no turns (no capture, no owned call, no payloads), the turns are read from
the invocations' own conversations, one per assistant model call, and the record carries the gap
``turns_from_transcript``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, get_args

from ng_traj.contract import AgentInvocation, ModelCallRef, ModelServerRef, TrajectoryModelCall, TrajectoryTurn
from ng_traj.contract.base import built_model

REASONING_KEYS = ("reasoning_content", "reasoning")
"""Chat message keys holding reasoning text (vLLM writes ``reasoning_content``, newer servers ``reasoning``)."""


def _question(request: Any) -> Any:
    """The request's ``input`` (items with a ``role`` and no ``type`` typed ``message``), else ``messages``.

    Anthropic's ``system`` is not part of it; a request that is not an object (raw text, null) is
    the question as it is.
    """
    if not isinstance(request, dict):
        return request
    if "input" not in request:
        return request.get("messages")
    items = request["input"]
    if not isinstance(items, list):
        return items
    return [
        {"type": "message", **item} if isinstance(item, dict) and "role" in item and "type" not in item else item
        for item in items
    ]


def turn_content(request: Any, response: Any) -> tuple[Any, Any, Any, int]:
    """One call's ``(question, answer, reasoning, tool-call count)`` by the response's shape.

    * Responses (an ``output`` list): answer = its object items other than ``reasoning`` ones;
      reasoning = the ``reasoning`` items, or null; tools = its ``function_call`` items.
    * Chat (a non-empty ``choices`` list whose first entry is an object): answer = ``message``
      without its reasoning keys; reasoning = ``reasoning_content``, else ``reasoning``; tools =
      the length of ``message.tool_calls``.
    * Anything else (Anthropic ``content`` blocks, raw text): no answer, no reasoning, no tools.
    """
    question = _question(request)
    if isinstance(response, dict) and isinstance(response.get("output"), list):
        output = [item for item in response["output"] if isinstance(item, dict)]
        answer = [item for item in output if item.get("type") != "reasoning"]
        reasoning = [item for item in output if item.get("type") == "reasoning"] or None
        return question, answer, reasoning, sum(item.get("type") == "function_call" for item in answer)
    choices = response.get("choices") if isinstance(response, dict) else None
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message") or {}
        if not isinstance(message, dict):
            message = {}
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        answer = {key: value for key, value in message.items() if key not in REASONING_KEYS}
        tool_calls = message.get("tool_calls")
        return question, answer, reasoning, len(tool_calls) if isinstance(tool_calls, list) else 0
    return question, None, None, 0


def _owners(invocations: Sequence[AgentInvocation]) -> tuple[dict[str, str], dict[str, str]]:
    """``model_call_id → invocation id`` and ``response_id → invocation id`` over every ref, in order."""
    by_call: dict[str, str] = {}
    by_response: dict[str, str] = {}
    for invocation in invocations:
        for ref in invocation.model_calls:
            if ref.model_call_id:
                by_call[ref.model_call_id] = invocation.invocation_id
            if ref.response_id:
                by_response[ref.response_id] = invocation.invocation_id
    return by_call, by_response


def turns_from_calls(
    task_id: str,
    rollout_id: str,
    invocations: Sequence[AgentInvocation],
    model_calls: Sequence[TrajectoryModelCall],
    resolved: Any,
) -> list[TrajectoryTurn]:
    """The turns of the owned calls that have a response (module docstring gives the rules)."""
    by_call, by_response = _owners(invocations)
    turns: list[TrajectoryTurn] = []
    numbers: Counter[str] = Counter()
    steps: Counter[str] = Counter()
    for call in model_calls:
        if call.response is None:
            continue
        metadata = call.response_metadata
        owner = by_call.get(call.model_call_id or "") or by_response.get(metadata.response_id or "")
        if owner is None:
            continue
        question, answer, reasoning, tools = turn_content(call.request, call.response)
        numbers[owner] += 1
        ref = _call_ref(call.model_call_id, metadata.model_ref, metadata.response_id)
        values = {
            "invocation_id": owner,
            "task_id": task_id,
            "rollout_id": rollout_id,
            "turn_no": numbers[owner],
            "timestamp": call.started_at or call.completed_at or 0.0,
            "question": question,
            "answer": answer,
            "reasoning_content": reasoning,
            "resolved": None,
            "step_count": steps[owner],
            "model_calls": [ref],
        }
        turns.append(_turn(values))
        steps[owner] += tools
    if turns and isinstance(resolved, bool):
        turns[-1] = turns[-1].model_copy(update={"resolved": resolved})
    return turns


def _call_ref(model_call_id: str | None, model_ref: ModelServerRef | None, response_id: str | None) -> ModelCallRef:
    """The ref of one model call of the trajectory (whose values have their types already); validated,
    and so rejected, only when it has no join key."""
    if model_call_id or (model_ref is not None and response_id):
        values = {"model_call_id": model_call_id, "model_ref": model_ref, "response_id": response_id}
        return built_model(ModelCallRef, values)
    return ModelCallRef(model_call_id=model_call_id, model_ref=model_ref, response_id=response_id)


def _turn(values: dict[str, Any]) -> TrajectoryTurn:
    """A turn of ``values`` (every field, in order), validated only when an identity, the timestamp or
    a ref is not exactly of its type already (the counts are positive and the contents any JSON value
    by construction); otherwise built as pydantic would build it (``tests/test_turns_built.py``).
    """
    if (
        all(type(values[name]) is str for name in ("invocation_id", "task_id", "rollout_id"))
        and type(values["timestamp"]) is float
        and all(type(ref) is ModelCallRef for ref in values["model_calls"])
    ):
        return built_model(TrajectoryTurn, values, fields_set=set(_TURN_FIELDS_SET))
    return TrajectoryTurn(**{key: value for key, value in values.items() if key != "resolved"})


_TURN_FIELDS_SET = frozenset(TrajectoryTurn.model_fields) - {"resolved"}
"""The fields a synthesised turn is given (``resolved`` is left to its default)."""


TRANSCRIPT_GAP = "turns_from_transcript"
"""ng-traj's gap on a record whose turns were read from the agent's own transcript."""


@dataclass(frozen=True, slots=True)
class TranscriptCall:
    """One assistant model call a native session records, as transcript turns need it.

    Attributes:
        invocation_id: Invocation whose conversation holds the call's output items.
        tool_call_ids: Provider tool-call ids the call issued (ties split output items to it).
        timestamp: The call's start, else its completion, UTC Unix seconds; ``None`` when unknown.
        ref: The ref of the captured call it matched by exact id, else ``None``.
    """

    invocation_id: str
    tool_call_ids: frozenset[str] = frozenset()
    timestamp: float | None = None
    ref: ModelCallRef | None = None


@cache
def _item_members() -> frozenset[type]:
    """The classes of the conversation union's members (``ConversationItem``'s tagged choices)."""
    from ng_traj.contract.conversation import ConversationItem  # the openai SDK's models: imported when needed

    union = get_args(ConversationItem)[0]
    return frozenset(get_args(member)[0] for member in get_args(union))


def _dumped_items(items: Sequence[Any]) -> list[Any]:
    """``items`` as JSON values, as the conversation's adapter dumps them (``mode="json"``).

    An item of exactly one of the union's member classes (every item a validated or built conversation
    holds) is dumped by its own class's serializer, the one the union's tag picks for it, without
    building the union's adapter or calling its tag per item; a list holding anything else is dumped
    by the adapter (``tests/test_turns_built.py`` compares both for every member).
    """
    members = _item_members()
    if all(type(item) in members for item in items):
        return [type(item).__pydantic_serializer__.to_python(item, mode="json") for item in items]
    from ng_traj.contract.conversation import items_adapter  # the openai SDK's models: imported when needed

    return items_adapter().dump_python(list(items), mode="json")


_REASONING, _MESSAGE, _CALL = 0, 1, 2


def _output_rank(item: Any) -> int | None:
    """Where an item sits in one model call's output (reasoning, message, tool calls), ``None`` for input.

    Output items are assistant messages, ``reasoning`` items and tool calls (``function_call`` and the
    other ``*_call`` items); everything else (user, system and developer messages, tool outputs,
    compaction items) is input the model read.
    """
    kind = getattr(item, "type", None)
    if kind == "message":
        return _MESSAGE if getattr(item, "role", None) == "assistant" else None
    if kind == "reasoning":
        return _REASONING
    return _CALL if isinstance(kind, str) and kind.endswith("_call") else None


def _segments(items: Sequence[Any]) -> list[list[int]]:
    """Positions of the output items of each model call, in conversation order.

    A call's output is a run of output items in the order a model writes them (reasoning, then its
    message, then its tool calls); an input item ends the run, and so does an item that goes back in
    that order (a message or reasoning after a tool call, reasoning after a message, a second message).
    """
    segments: list[list[int]] = []
    previous: int | None = None
    for position, item in enumerate(items):
        rank = _output_rank(item)
        if rank is not None and (previous is None or rank < previous or rank == previous == _MESSAGE):
            segments.append([])
        if rank is not None:
            segments[-1].append(position)
        previous = rank
    return segments


def _call_ids(items: Sequence[Any], positions: Sequence[int]) -> list[str]:
    return [item.call_id for item in (items[p] for p in positions) if getattr(item, "type", None) == "function_call"]


def _merged(items: Sequence[Any], segments: list[list[int]], calls: Sequence[TranscriptCall]) -> list[list[int]]:
    """Segments with a run of only tool calls joined to the one before when one native call issued both.

    Claude Code writes each content block of a response as its own line and a tool's result right
    after its ``tool_use``, so one call's parallel tool calls arrive with results between them.
    """
    owner = {tool: index for index, call in enumerate(calls) for tool in call.tool_call_ids}
    merged: list[list[int]] = []
    for segment in segments:
        ids = _call_ids(items, segment)
        only_calls = all(_output_rank(items[p]) == _CALL for p in segment)
        before = {owner.get(tool) for tool in _call_ids(items, merged[-1])} if merged else set()
        if merged and only_calls and ids and len(before) == 1 and {owner.get(t) for t in ids} <= before - {None}:
            merged[-1].extend(segment)
        else:
            merged.append(list(segment))
    return merged


def _paired(
    items: Sequence[Any], segments: list[list[int]], calls: Sequence[TranscriptCall]
) -> list[TranscriptCall | None]:
    """The native call of each segment: by position when the counts agree (both list the
    invocation's calls in file order), else by a tool-call id the call issued, else none."""
    if len(segments) == len(calls):
        return list(calls)
    owner = {tool: call for call in calls for tool in call.tool_call_ids}
    return [next((owner[t] for t in _call_ids(items, segment) if t in owner), None) for segment in segments]


def _invocation_turns(
    task_id: str, rollout_id: str, invocation: AgentInvocation, calls: Sequence[TranscriptCall], times: _Times
) -> list[TrajectoryTurn]:
    items = invocation.conversation
    segments = _merged(items, _segments(items), calls)
    if not segments:
        return []
    dumped = _dumped_items(items)
    turns: list[TrajectoryTurn] = []
    steps = 0
    for number, (segment, call) in enumerate(zip(segments, _paired(items, segments, calls), strict=True), 1):
        output = [dumped[p] for p in segment]
        reasoning = [item for item in output if item.get("type") == "reasoning"]
        answer = [item for item in output if item.get("type") != "reasoning"]
        values = {
            "invocation_id": invocation.invocation_id,
            "task_id": task_id,
            "rollout_id": rollout_id,
            "turn_no": number,
            "timestamp": times.of(call),
            "question": dumped[: segment[0]],
            "answer": answer,
            "reasoning_content": reasoning or None,
            "resolved": None,
            "step_count": steps,
            "model_calls": [call.ref] if call is not None and call.ref is not None else [],
        }
        turns.append(_turn(values))
        steps += sum(item.get("type") == "function_call" for item in answer)
    return turns


class _Times:
    """A turn's time: that of the record's model call its ref names (the captured start, else
    completion), else the session's own time of the call, else 0.0."""

    def __init__(self, model_calls: Sequence[TrajectoryModelCall]) -> None:
        self.by_call = {call.model_call_id: call for call in model_calls if call.model_call_id}
        self.by_response = {c.response_metadata.response_id: c for c in model_calls if c.response_metadata.response_id}

    def of(self, call: TranscriptCall | None) -> float:
        if call is None:
            return 0.0
        ref = call.ref
        named = (
            (self.by_call.get(ref.model_call_id or "") or self.by_response.get(ref.response_id or "")) if ref else None
        )
        timestamp = (named.started_at or named.completed_at) if named is not None else None
        return timestamp or call.timestamp or 0.0


def _ref_calls(invocation: AgentInvocation) -> list[TranscriptCall]:
    """The invocation's own refs as its calls (a row bundle names no native call)."""
    return [TranscriptCall(invocation.invocation_id, frozenset(), None, ref) for ref in invocation.model_calls]


def turns_from_transcript(
    task_id: str,
    rollout_id: str,
    invocations: Sequence[AgentInvocation],
    calls: Sequence[TranscriptCall],
    model_calls: Sequence[TrajectoryModelCall],
    resolved: Any,
) -> list[TrajectoryTurn]:
    """One turn per assistant model call of each invocation's conversation, for a record upstream's
    synthesis left without turns.

    Per turn: ``question`` is the conversation items before the call's first output item (what the
    model was given, in the conversation's own item shape); ``answer`` the call's output items other
    than ``reasoning`` ones (its message and tool calls); ``reasoning_content`` its ``reasoning``
    items, or null; ``step_count`` the ``function_call`` items of the invocation's earlier turns, as
    :func:`turns_from_calls` counts them. The one ref is that of the call's native record when it
    matched a captured call, else the invocation's own ref when it has one per call (a row's bundle);
    ``timestamp`` is the start (else completion) of the model call that ref names, else the session's
    own time of the call, else 0.0. Every invocation gets its own turns, sub-agents
    too, as upstream's synthesis gives a sub-agent the calls it owns. Turns are sorted by
    ``(timestamp, invocation_id, turn_no)``; the last carries ``resolved`` when it is a boolean.
    """
    times = _Times(model_calls)
    by_invocation: dict[str, list[TranscriptCall]] = {}
    for call in calls:
        by_invocation.setdefault(call.invocation_id, []).append(call)
    turns = [
        turn
        for invocation in invocations
        for turn in _invocation_turns(
            task_id,
            rollout_id,
            invocation,
            by_invocation.get(invocation.invocation_id) or _ref_calls(invocation),
            times,
        )
    ]
    turns.sort(key=lambda turn: (turn.timestamp, turn.invocation_id, turn.turn_no))
    if turns and isinstance(resolved, bool):
        turns[-1] = turns[-1].model_copy(update={"resolved": resolved})
    return turns
