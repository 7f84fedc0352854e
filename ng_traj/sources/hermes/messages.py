"""Hermes message dicts into NeMo Gym observations: conversation items, tool outcomes, model calls.

Hermes keeps every conversation as OpenAI chat-completions message dicts, whatever the file: ``{role, content, tool_calls?, tool_call_id?, reasoning?, reasoning_content?,
reasoning_details?, codex_reasoning_items?, finish_reason?, timestamp?}``, ``tool_calls`` entries
``{id, call_id?, type: "function", function: {name, arguments: JSON text}}``. The readers of each
form (state.db rows, session snapshots, gateway JSONL, ShareGPT lines) turn their records into such
dicts; this module converts one session's list the way NeMo Gym's ``normalize_hermes_messages``
converts the live agent's result:

* ``system``/``user``/``developer``: an easy message (list content joined as text; image parts are
  kept as ``input_image`` parts instead of being dropped);
* ``assistant``: a reasoning item when the message carries reasoning, then an output message even
  when the text is empty (id ``<invocation>-message-<index>``), then one ``function_call`` per tool
  call (``arguments`` text as stored, else its JSON encoding; ``call_id`` = the tool call's ``id``);
* ``tool``: a ``function_call_output`` with ``call_id`` = ``tool_call_id``;
* the system prompt first, unless the conversation already starts with a system message.

Reasoning comes in several spellings; the first present wins: Responses ``codex_reasoning_items``
(kept as the reasoning items they are), else a ``reasoning`` or ``reasoning_content`` string, else
the texts of ``reasoning_details`` entries (``thinking``/``text``/``summary``). Any message with
``reasoning_details`` gets ``reasoning_details_unavailable`` (their signatures are not carried), as
in the reference.

Tool outcomes use the reference's failure heuristic on the result text (the file proves nothing
better): non-JSON text starting with ``Error`` or containing ``"error"``/``"failed"`` in its first
500 characters; a JSON object with ``status`` ``error``/``failed`` or a truthy ``error``; for
``terminal``, a non-zero ``exit_code``. Hermes persists no tool start or end, so every tool call gets
``tool_timing_unavailable``; a call with no result gets ``tool_result_missing`` (status ``unknown``),
a result Hermes pruned (``[Old tool output cleared to save context space]``) ``tool_outcome_unavailable``.

Invocation status follows the reference table over what the file keeps: an explicit ``completed``
flag (ShareGPT), else ``completed`` when the last message is an assistant answer without tool calls,
else ``incomplete`` when there are messages, else ``unknown``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ng_traj.contract import ObservationGap, ToolCallObservation
from ng_traj.diagnostics import quoted
from ng_traj.io.lines import json_text
from ng_traj.sources.native import NativeCall, scalar_text

PRUNED_OUTPUT = "[Old tool output cleared to save context space]"
"""The literal Hermes writes over a tool result it pruned to save context."""

COMPACTION_PREFIXES = ("[CONTEXT COMPACTION", "[CONTEXT SUMMARY]:")
"""Openings of the message Hermes' context compressor injects (current and legacy)."""

MERGED_SUMMARY_HEADER = "[PRIOR CONTEXT — for reference only; not a new message]"
MERGED_SUMMARY_DELIMITER = "[END OF PRIOR CONTEXT — COMPACTION SUMMARY BELOW]"
_USER_ROLES = ("system", "user", "developer")
_FAILED_STATUSES = ("error", "failed")


@dataclass
class Normalised:
    """One session's messages converted: conversation items (JSON dicts), tool observations, calls, gaps."""

    conversation: list[dict[str, Any]] = field(default_factory=list)
    tools: list[ToolCallObservation] = field(default_factory=list)
    calls: list[NativeCall] = field(default_factory=list)
    gaps: list[ObservationGap] = field(default_factory=list)
    status: str = "unknown"


def text_of(content: Any) -> str:
    """The text of a message ``content``: a string as is, a part list joined, one part as a list of it,
    a number as its text, ``None`` as ``""``.

    An object is never turned into text with ``str`` (Python's repr is no message text, and it recurses
    once per level of a value nested 1,000 deep).
    """
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict) and _is_text(part))
    return scalar_text(content)


def message_problems(message: Any) -> list[tuple[str, str]]:
    """``(pointer, why)`` for what of a Hermes message dict is passed over: the message itself when it
    is not an object (pointer ``""``), else each part of its ``content`` that is neither a text part nor
    an image (``content.<k>``), or a ``content`` that is a boolean (``content``). A number is read as
    its text, ``None`` as no text (an assistant message with only tool calls), so neither is reported."""
    if not isinstance(message, dict):
        return [("", f"a message that is not an object ({type(message).__name__}); passed over")]
    content = message.get("content")
    if isinstance(content, bool):
        return [("content", f"content is not text ({content}); read as no text")]
    if not isinstance(content, list | dict):
        return []
    problems = []
    for position, part in enumerate(content if isinstance(content, list) else [content]):
        if not isinstance(part, dict):
            problems.append(
                (f"content.{position}", f"a content part that is not an object ({quoted(part)}); passed over")
            )
        elif not _is_text(part) and _image_url(part) is None:
            why = f"a content part with neither text nor an image ({quoted(part.get('type'))}); passed over"
            problems.append((f"content.{position}", why))
    return problems


def _is_text(part: dict[str, Any]) -> bool:
    return isinstance(part.get("text"), str)


def _image_url(part: dict[str, Any]) -> str | None:
    if part.get("type") not in ("image_url", "input_image"):
        return None
    url = part.get("image_url")
    url = url.get("url") if isinstance(url, dict) else url
    return url if isinstance(url, str) and url else None


def _input_content(content: Any) -> str | list[dict[str, Any]]:
    """Easy-message content: text, or input parts when the list holds images (kept, not dropped)."""
    if not isinstance(content, list) or not any(isinstance(p, dict) and _image_url(p) for p in content):
        return text_of(content)
    parts: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if (url := _image_url(part)) is not None:
            parts.append({"type": "input_image", "image_url": url, "detail": "auto"})
        elif _is_text(part):
            parts.append({"type": "input_text", "text": part["text"]})
    return parts


def is_compaction_summary(message: dict[str, Any]) -> bool:
    """True for the summary message Hermes' context compressor injects (its own marker, not a guess)."""
    if message.get("_compressed_summary"):
        return True
    text = text_of(message.get("content")).lstrip()
    if text.startswith(COMPACTION_PREFIXES):
        return True
    return text.startswith(MERGED_SUMMARY_HEADER) and MERGED_SUMMARY_DELIMITER in text


def tool_calls_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The message's tool calls that name a function (malformed entries are left out, as upstream)."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    return [call for call in calls if isinstance(call, dict) and isinstance(call.get("function"), dict)]


def call_id_of(call: dict[str, Any]) -> str:
    """The provider tool-call id (``id``, else the Responses ``call_id``), or ``""``."""
    return scalar_text(call.get("id") or call.get("call_id"))


def _arguments(function: dict[str, Any]) -> str:
    arguments = function.get("arguments", "")
    if isinstance(arguments, str):
        return arguments
    return json_text(arguments)


def failed_result(tool_name: str | None, result: Any) -> bool:
    """The reference failure heuristic on a tool result text."""
    if not isinstance(result, str):
        return False
    value = result.lstrip()
    try:
        payload = orjson.loads(value)
    except orjson.JSONDecodeError:
        lower = value[:500].lower()
        return value.startswith("Error") or '"error"' in lower or '"failed"' in lower
    if not isinstance(payload, dict):
        return False
    if tool_name == "terminal" and payload.get("exit_code") not in (None, 0):
        return True
    return payload.get("status") in _FAILED_STATUSES or bool(payload.get("error"))


def _reasoning_text(message: dict[str, Any]) -> str | None:
    for key in ("reasoning", "reasoning_content"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    details = message.get("reasoning_details")
    if not isinstance(details, list):
        return None
    texts = [
        entry[key]
        for entry in details
        if isinstance(entry, dict)
        for key in ("thinking", "text", "summary")
        if isinstance(entry.get(key), str) and entry[key]
    ]
    return "\n".join(texts) or None


def _codex_items(message: dict[str, Any]) -> list[dict[str, Any]]:
    items = message.get("codex_reasoning_items")
    if not isinstance(items, list):
        return []
    kept = []
    for item in items:
        if not (isinstance(item, dict) and item.get("type") == "reasoning" and isinstance(item.get("id"), str)):
            return []
        summary = item.get("summary") if isinstance(item.get("summary"), list) else []
        entry = {"type": "reasoning", "id": item["id"], "summary": summary}
        if isinstance(item.get("encrypted_content"), str):
            entry["encrypted_content"] = item["encrypted_content"]
        kept.append(entry)
    return kept


def reasoning_items(message: dict[str, Any], item_id: str) -> list[dict[str, Any]]:
    """Reasoning items of an assistant message (module docstring gives the precedence)."""
    codex = _codex_items(message)
    if codex:
        return codex
    text = _reasoning_text(message)
    return [{"type": "reasoning", "id": item_id, "summary": [{"type": "summary_text", "text": text}]}] if text else []


def _assistant_items(message: dict[str, Any], invocation: str, index: int) -> list[dict[str, Any]]:
    items = reasoning_items(message, f"{invocation}-reasoning-{index}")
    text = text_of(message.get("content"))
    content = [{"type": "output_text", "text": text, "annotations": []}]
    items.append({"type": "message", "id": f"{invocation}-message-{index}", "role": "assistant", "content": content})
    for call in tool_calls_of(message):
        call_id, function = call_id_of(call), call["function"]
        items.append(
            {
                "type": "function_call",
                "call_id": call_id,
                "id": call_id or None,
                "name": scalar_text(function.get("name")),
                "arguments": _arguments(function),
                "status": "completed",
            }
        )
    return items


def _tool_output(message: dict[str, Any]) -> dict[str, Any]:
    call_id = scalar_text(message.get("tool_call_id"))
    return {
        "type": "function_call_output",
        "call_id": call_id,
        "output": text_of(message.get("content")),
        "status": "completed",
    }


def conversation_items(messages: Sequence[dict[str, Any]], invocation: str, system_prompt: str | None) -> list[dict]:
    """Conversation items of one invocation, in message order (module docstring gives the mapping)."""
    items: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role in _USER_ROLES:
            items.append({"type": "message", "role": role, "content": _input_content(message.get("content"))})
        elif role == "assistant":
            items.extend(_assistant_items(message, invocation, index))
        elif role == "tool":
            items.append(_tool_output(message))
    if system_prompt and not (items and items[0].get("role") == "system"):
        items.insert(0, {"type": "message", "role": "system", "content": system_prompt})
    return items


def invocation_status(messages: Sequence[dict[str, Any]], completed: bool | None = None) -> str:
    """The reference status table over the kept messages (module docstring)."""
    if completed is not None:
        return "completed" if completed else "incomplete"
    if not messages:
        return "unknown"
    last = messages[-1]
    if last.get("role") == "assistant" and not tool_calls_of(last) and text_of(last.get("content")):
        return "completed"
    return "incomplete"


@dataclass
class _Call:
    invocation: str
    call_id: str
    name: str | None
    results: list[Any] = field(default_factory=list)


def _collect_tool_calls(messages: Sequence[dict[str, Any]], invocation: str, out: Normalised) -> dict[str, _Call]:
    calls: dict[str, _Call] = {}
    duplicates: set[str] = set()
    for message in messages:
        if message.get("role") == "assistant":
            for call in tool_calls_of(message):
                call_id = call_id_of(call)
                if not call_id:
                    out.gaps.append(ObservationGap(code="tool_call_id_missing", invocation_id=invocation))
                elif call_id in calls:
                    duplicates.add(call_id)
                else:
                    calls[call_id] = _Call(invocation, call_id, scalar_text(call["function"].get("name")) or None)
        elif message.get("role") == "tool":
            result_id = scalar_text(message.get("tool_call_id"))
            if result_id in calls:
                calls[result_id].results.append(message.get("content"))
            else:
                out.gaps.append(ObservationGap(code="tool_result_unowned", invocation_id=invocation, detail=result_id))
    for call_id in sorted(duplicates):
        out.gaps.append(ObservationGap(code="duplicate_tool_call", invocation_id=invocation, detail=call_id))
        del calls[call_id]
    return calls


def _observation(call: _Call, out: Normalised) -> ToolCallObservation:
    gap = None
    if not call.results:
        status, gap = "unknown", "tool_result_missing"
    elif len(call.results) > 1:
        status, gap = "unknown", "ambiguous_tool_artifact"
    elif text_of(call.results[0]).strip() == PRUNED_OUTPUT:
        status, gap = "unknown", "tool_outcome_unavailable"
    else:
        status = "failed" if failed_result(call.name, text_of(call.results[0])) else "completed"
    if gap is not None:
        out.gaps.append(ObservationGap(code=gap, invocation_id=call.invocation, detail=call.call_id))
    out.gaps.append(ObservationGap(code="tool_timing_unavailable", invocation_id=call.invocation, detail=call.call_id))
    return ToolCallObservation(
        invocation_id=call.invocation,
        tool_call_id=call.call_id,
        tool_name=call.name,
        status=status,  # type: ignore[arg-type]
    )


def _native_calls(messages: Sequence[dict[str, Any]], invocation: str) -> list[NativeCall]:
    """One native call per assistant message that a model produced (the compressor's summary is not one)."""
    return [
        NativeCall(invocation, tool_call_ids=frozenset(filter(None, map(call_id_of, tool_calls_of(message)))))
        for message in messages
        if message.get("role") == "assistant" and not is_compaction_summary(message)
    ]


def normalise(
    messages: Sequence[dict[str, Any]],
    invocation: str,
    *,
    system_prompt: str | None = None,
    completed: bool | None = None,
) -> Normalised:
    """Convert one session's message dicts into the observations of invocation ``invocation``.

    Args:
        messages: Hermes message dicts in conversation order (``session_meta`` records excluded).
        invocation: The invocation id (the Hermes session id).
        system_prompt: The session's system prompt, inserted first when the messages have none.
        completed: An explicit completion flag (ShareGPT ``completed``), else ``None``.
    """
    out = Normalised(conversation=conversation_items(messages, invocation, system_prompt))
    if any(message.get("reasoning_details") for message in messages):
        out.gaps.append(ObservationGap(code="reasoning_details_unavailable", invocation_id=invocation))
    calls = _collect_tool_calls(messages, invocation, out)
    out.tools = [_observation(call, out) for call in calls.values()]
    out.calls = _native_calls(messages, invocation)
    out.status = invocation_status(messages, completed)
    return out
