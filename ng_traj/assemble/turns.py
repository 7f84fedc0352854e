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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from ng_traj.contract import AgentInvocation, ModelCallRef, TrajectoryModelCall, TrajectoryTurn

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
        ref = ModelCallRef(
            model_call_id=call.model_call_id, model_ref=metadata.model_ref, response_id=metadata.response_id
        )
        turns.append(
            TrajectoryTurn(
                invocation_id=owner,
                task_id=task_id,
                rollout_id=rollout_id,
                turn_no=numbers[owner],
                timestamp=call.started_at or call.completed_at or 0.0,
                question=question,
                answer=answer,
                reasoning_content=reasoning,
                step_count=steps[owner],
                model_calls=[ref],
            )
        )
        steps[owner] += tools
    if turns and isinstance(resolved, bool):
        turns[-1] = turns[-1].model_copy(update={"resolved": resolved})
    return turns
