"""Hermes ShareGPT trajectories: ``trajectory_samples.jsonl``, ``failed_trajectories.jsonl`` and the
``conversations`` list of early session snapshots.

Format (Hermes' ``_convert_to_trajectory_format``): one line per finished
conversation, ``{conversations: [{from: "system"|"human"|"gpt"|"tool", value}], timestamp (local ISO),
model, completed}``. The system turn is a fixed function-calling prompt. A ``gpt`` value is
``<think>\\n{reasoning}\\n</think>\\n`` (empty when there was none), the assistant text, then one
``<tool_call>\\n{"name", "arguments"}\\n</tool_call>`` block per tool call; all results of one
assistant turn are merged into the next ``tool`` turn as ``<tool_response>\\n{"tool_call_id", "name",
"content"}\\n</tool_response>`` blocks. Tool calls carry no id: the k-th call pairs with the k-th
response, which is the format's own pairing and the only one it allows; each call that takes its id
that way gets ``tool_call_paired_by_position``. A call with no response keeps a positional id
(``<invocation>-call-<turn>-<k>``) and ``tool_call_id_missing``; real files have ``gpt`` turns with
no ``tool`` turn after them. A line carries no Hermes session id: the invocation is named
``<file name>:<line>`` with ``hermes_session_id_unavailable``.

The turns become Hermes message dicts (``reasoning`` from the think block) and go through the same
normalisation as every other form (``messages``).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from ng_traj.contract import ObservationGap
from ng_traj.diagnostics import quoted
from ng_traj.io.lines import json_text
from ng_traj.sources.native import scalar_text

ROLES = {"system": "system", "human": "user", "gpt": "assistant"}
KINDS = frozenset({*ROLES, "tool"})
"""The ``from`` values of the format."""
_THINK = re.compile(r"\A<think>\n?(.*?)\n?</think>\n?", re.DOTALL)
_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_RESPONSE = re.compile(r"<tool_response>\n?(.*?)\n?</tool_response>", re.DOTALL)


def is_sharegpt(value: Any) -> bool:
    """True for a ShareGPT trajectory line: ``conversations`` is a list holding at least one turn that
    is read (:func:`turn_problem` gives ``None``). Turns that are not read (no ``from``, a ``from``
    that is not a role, a ``value`` that is not text) cost only themselves, not the line."""
    turns = value.get("conversations") if isinstance(value, dict) else None
    return isinstance(turns, list) and any(turn_problem(t) is None for t in turns)


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _split_calls(text: str) -> tuple[str, list[dict[str, Any]]]:
    """Text and the trailing ``<tool_call>`` blocks (blocks that are not a JSON call stay text)."""
    calls: list[dict[str, Any]] = []
    while (stripped := text.rstrip()).endswith(_CLOSE) and (start := stripped.rfind(_OPEN)) >= 0:
        call = _json_object(stripped[start + len(_OPEN) : -len(_CLOSE)].strip())
        if call is None or not isinstance(call.get("name"), str):
            break
        calls.insert(0, call)
        text = stripped[:start]
    return text.rstrip("\n"), calls


def _assistant(value: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    message: dict[str, Any] = {"role": "assistant"}
    think = _THINK.match(value)
    if think is not None:
        if think.group(1).strip():
            message["reasoning"] = think.group(1)
        value = value[think.end() :]
    message["content"], calls = _split_calls(value)
    return message, calls


def _responses(value: str) -> list[dict[str, Any]]:
    return [block for text in _RESPONSE.findall(value) if (block := _json_object(text.strip())) is not None]


def _output(block: dict[str, Any]) -> str:
    content = block.get("content")
    return content if isinstance(content, str) else json_text(content)


def _attach_calls(
    message: dict[str, Any], calls: list[dict[str, Any]], responses: list[dict[str, Any]], where: tuple[str, int]
) -> tuple[list[dict[str, Any]], list[ObservationGap]]:
    """Give each call the id of the response at its position; return the tool messages and the gaps."""
    invocation, turn = where
    tool_calls, gaps = [], []
    for k, call in enumerate(calls):
        response_id = responses[k].get("tool_call_id") if k < len(responses) else None
        if isinstance(response_id, str) and response_id:
            call_id = response_id
            gaps.append(ObservationGap(code="tool_call_paired_by_position", invocation_id=invocation, detail=call_id))
        else:
            call_id = f"{invocation}-call-{turn}-{k}"
            gaps.append(ObservationGap(code="tool_call_id_missing", invocation_id=invocation, detail=call_id))
        arguments = call.get("arguments", {})
        arguments = arguments if isinstance(arguments, str) else json_text(arguments)
        tool_calls.append(
            {"id": call_id, "type": "function", "function": {"name": call["name"], "arguments": arguments}}
        )
    if tool_calls:
        message["tool_calls"] = tool_calls
    results = [
        {"role": "tool", "tool_call_id": scalar_text(block.get("tool_call_id")), "content": _output(block)}
        for block in responses
    ]
    return results, gaps


def turn_problem(entry: Any) -> str | None:
    """Why a ShareGPT turn is passed over (not an object, no ``from``, a ``from`` that is not one of
    the format's roles, a ``value`` that is not text), or ``None`` for a turn that is read."""
    if not isinstance(entry, dict):
        return f"a turn that is not an object ({type(entry).__name__}); passed over"
    if "from" not in entry:
        return "a turn without from; the turn is passed over"
    kind = entry.get("from")
    if not isinstance(kind, str):
        return f"from is not text ({quoted(kind)}); the turn is passed over"
    if kind not in KINDS:
        return f"from {quoted(kind)} is not a ShareGPT role (system, human, gpt, tool); the turn is passed over"
    if not isinstance(entry.get("value"), str):
        return f"value is not text ({quoted(entry.get('value'))}); the turn is passed over"
    return None


def sharegpt_messages(
    turns: list[Any], invocation: str
) -> tuple[list[dict[str, Any]], list[ObservationGap], list[tuple[int, str]]]:
    """Hermes message dicts for ShareGPT ``turns``, the gaps of positional pairing, and the turns
    passed over as ``(index in turns, why)`` (:func:`turn_problem`), for the caller to report.

    Args:
        turns: The ``conversations`` list.
        invocation: The invocation id (used in positional fallback ids and gaps).
    """
    messages: list[dict[str, Any]] = []
    gaps: list[ObservationGap] = []
    problems = [turn_problem(entry) for entry in turns]
    kinds = [turns[n]["from"] if problem is None else None for n, problem in enumerate(problems)]
    for turn, kind in enumerate(kinds):
        value = turns[turn]["value"] if kind is not None else ""
        if kind == "gpt":
            message, calls = _assistant(value)
            following = kinds[turn + 1] if turn + 1 < len(kinds) else None
            responses = _responses(turns[turn + 1]["value"]) if following == "tool" else []
            results, pairing = _attach_calls(message, calls, responses, (invocation, turn))
            messages.extend([message, *results])
            gaps.extend(pairing)
        elif kind == "tool" and (turn == 0 or kinds[turn - 1] != "gpt"):
            messages.extend(_attach_calls({}, [], _responses(value), (invocation, turn))[0])
        elif kind in ROLES:
            messages.append({"role": ROLES[kind], "content": value})
    return messages, gaps, [(n, problem) for n, problem in enumerate(problems) if problem is not None]
