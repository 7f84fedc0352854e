"""Conversation items of a pi-family session as contract models, built without validating them again.

``sources/pi/conversation.py`` writes each item in one of a few fixed shapes (its keys in a fixed
order, every value text): a user, system or developer message with text content, an assistant
reasoning item with one summary part, an assistant output message with one ``output_text`` part,
a function call, and a function call output. For those shapes the member of the conversation union
an item validates as is known (``contract/conversation._item_tag``: ``easy_message``, ``reasoning``,
``output_message``, ``function_call``, ``function_call_output``), and so is the model pydantic makes
of it: the item's values, the member's defaults, and the fields given as ``model_fields_set``.
:func:`conversation_items` makes those models directly when every item of a conversation has one of
the shapes with text values; any other item (an image part, a value that is not exactly ``str``, a
key more or less) sends the whole conversation through ``contract/conversation.validate_items``, so
what pydantic would coerce, or drop, is treated exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ng_traj.contract.base import built_model
from ng_traj.contract.conversation import (
    EasyInputMessage,
    FunctionCall,
    FunctionCallOutput,
    OutputMessage,
    OutputText,
    ReasoningItem,
    ReasoningSummary,
    validate_items,
)

_STATUSES = frozenset({"in_progress", "completed", "incomplete"})
_USER_ROLES = frozenset({"user", "system", "developer"})


def _texts(*values: Any) -> bool:
    """Every value is exactly ``str`` (pydantic makes a subclass's value a ``str``: validated, not built)."""
    return all(type(value) is str for value in values)


def _easy_message(value: dict[str, Any]) -> Any:
    content, role = value["content"], value["role"]
    if not _texts(value["type"], role, content) or value["type"] != "message" or role not in _USER_ROLES:
        return None
    values = {"content": content, "role": role, "type": "message", "phase": None}
    return built_model(EasyInputMessage, values, {"type", "role", "content"})


def _reasoning(value: dict[str, Any]) -> Any:
    item_id, summary = value["id"], value["summary"]
    if not _texts(value["type"], item_id) or value["type"] != "reasoning" or type(summary) is not list:
        return None
    part = summary[0] if len(summary) == 1 else None
    if type(part) is not dict or tuple(part) != ("type", "text") or not _texts(part["type"], part["text"]):
        return None
    text = part["text"]
    if part["type"] != "summary_text":
        return None
    built = built_model(ReasoningSummary, {"text": text, "type": "summary_text"}, {"type", "text"})
    object.__setattr__(built, "__pydantic_extra__", {})  # the SDK's models keep extra keys: none here
    values = {"id": item_id, "summary": [built], "type": "reasoning", "encrypted_content": None, "content": None}
    return built_model(ReasoningItem, values, {"type", "id", "summary"})


def _output_message(value: dict[str, Any]) -> Any:
    item_id, content = value["id"], value["content"]
    if not _texts(value["type"], item_id, value["role"], value["status"]) or value["type"] != "message":
        return None
    if value["role"] != "assistant" or value["status"] not in _STATUSES or type(content) is not list:
        return None
    part = content[0] if len(content) == 1 else None
    if type(part) is not dict or tuple(part) != ("type", "text", "annotations"):
        return None
    text, annotations = part["text"], part["annotations"]
    if not _texts(part["type"], text) or part["type"] != "output_text" or type(annotations) is not list or annotations:
        return None
    output = {"annotations": [], "text": text, "type": "output_text", "logprobs": None}
    values = {
        "id": item_id,
        "content": [built_model(OutputText, output, {"type", "text", "annotations"})],
        "role": "assistant",
        "status": value["status"],
        "type": "message",
        "phase": None,
    }
    return built_model(OutputMessage, values, {"type", "id", "role", "status", "content"})


def _function_call(value: dict[str, Any]) -> Any:
    texts = (value["type"], value["call_id"], value["name"], value["arguments"], value["id"], value["status"])
    if not _texts(*texts) or value["type"] != "function_call" or value["status"] not in _STATUSES:
        return None
    values = {
        "arguments": value["arguments"],
        "call_id": value["call_id"],
        "name": value["name"],
        "type": "function_call",
        "id": value["id"],
        "status": value["status"],
        "namespace": None,
    }
    return built_model(FunctionCall, values, {"type", "call_id", "name", "arguments", "id", "status"})


def _function_call_output(value: dict[str, Any]) -> Any:
    texts = (value["type"], value["call_id"], value["output"], value["status"])
    if not _texts(*texts) or value["type"] != "function_call_output" or value["status"] not in _STATUSES:
        return None
    values = {
        "call_id": value["call_id"],
        "output": value["output"],
        "type": "function_call_output",
        "id": None,
        "status": value["status"],
    }
    return built_model(FunctionCallOutput, values, {"type", "call_id", "output", "status"})


_SHAPES: dict[tuple[str, ...], Callable[[dict[str, Any]], Any]] = {
    ("type", "role", "content"): _easy_message,
    ("type", "id", "summary"): _reasoning,
    ("type", "id", "role", "status", "content"): _output_message,
    ("type", "call_id", "name", "arguments", "id", "status"): _function_call,
    ("type", "call_id", "output", "status"): _function_call_output,
}
"""The keys of each shape ``sources/pi/conversation.py`` writes, in its order, and the item's builder."""


def built_items(values: Sequence[Any]) -> list[Any] | None:
    """The models of ``values`` when every one has a known shape with text values, else ``None``."""
    items = []
    for value in values:
        build = _SHAPES.get(tuple(value)) if type(value) is dict else None
        item = build(value) if build is not None else None
        if item is None:
            return None
        items.append(item)
    return items


def conversation_items(values: Sequence[Any]) -> tuple[list[Any], int]:
    """``contract/conversation.validate_items(values)``: the valid items and how many were dropped;
    made by :func:`built_items` when it can (none are dropped then)."""
    items = built_items(values)
    return (items, 0) if items is not None else validate_items(values)
