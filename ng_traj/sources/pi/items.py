"""Conversation items of a pi-family session, validated by their member of the conversation union.

``sources/pi/conversation.py`` writes each item in one of a few fixed shapes (its keys in a fixed
order): a user, system or developer message, an assistant reasoning item, an assistant output
message, a function call, and a function call output. For those shapes the member of the
conversation union an item validates as is known from its keys and a value or two (the rules of
``contract/conversation._item_tag``, restricted to these shapes: ``easy_message``, ``reasoning``,
``output_message``, ``function_call``, ``function_call_output``), and the union's token-metadata
check has nothing to check (none of the shapes has token keys). :func:`conversation_items` validates
each such item with that member's own validator, the one the union would call, without the union's
routing in Python; any other item, or an item its member rejects, sends the whole conversation
through ``contract/conversation.validate_items``, so what is kept, coerced or dropped is exactly as
before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from ng_traj.contract.conversation import (
    EasyInputMessage,
    FunctionCall,
    FunctionCallOutput,
    OutputMessage,
    ReasoningItem,
    validate_items,
)

_USER_ROLES = frozenset({"user", "system", "developer"})


def _validator(member: type[BaseModel]) -> Callable[[Any], Any]:
    return member.__pydantic_validator__.validate_python


def _easy_message(value: dict[str, Any]) -> Callable[[Any], Any] | None:
    """A message with a user, system or developer role and no status is an ``easy_message``."""
    role = value["role"]
    return _EASY if type(role) is str and role in _USER_ROLES else None


def _output_message(value: dict[str, Any]) -> Callable[[Any], Any] | None:
    """An assistant message whose first content part is ``output_text`` is an ``output_message``."""
    content = value["content"]
    if value["role"] != "assistant" or type(content) is not list or not content or type(content[0]) is not dict:
        return None
    return _OUTPUT if content[0].get("type") == "output_text" else None


_EASY = _validator(EasyInputMessage)
_OUTPUT = _validator(OutputMessage)

_SHAPES: dict[tuple[str, ...], tuple[str, Callable[[dict[str, Any]], Callable[[Any], Any] | None]]] = {
    ("type", "role", "content"): ("message", _easy_message),
    ("type", "id", "role", "status", "content"): ("message", _output_message),
    ("type", "id", "summary"): ("reasoning", lambda _: _REASONING),
    ("type", "call_id", "name", "arguments", "id", "status"): ("function_call", lambda _: _CALL),
    ("type", "call_id", "output", "status"): ("function_call_output", lambda _: _CALL_OUTPUT),
}
"""The keys of each shape ``sources/pi/conversation.py`` writes, in its order: the ``type`` it has, and
what picks its member's validator (``None``: not an item of this shape; validated through the union)."""

_REASONING = _validator(ReasoningItem)
_CALL = _validator(FunctionCall)
_CALL_OUTPUT = _validator(FunctionCallOutput)


def member_items(values: Sequence[Any]) -> list[Any] | None:
    """Every value validated by its member (module docstring), or ``None`` when one is not of a known
    shape or is rejected."""
    items = []
    for value in values:
        shape = _SHAPES.get(tuple(value)) if type(value) is dict else None
        if shape is None or type(value["type"]) is not str or value["type"] != shape[0]:
            return None
        validate = shape[1](value)
        if validate is None:
            return None
        try:
            items.append(validate(value))
        except ValidationError:
            return None
    return items


def conversation_items(values: Sequence[Any]) -> tuple[list[Any], int]:
    """``contract/conversation.validate_items(values)``: the valid items and how many were dropped;
    made by :func:`member_items` when it can (none are dropped then)."""
    items = member_items(values)
    return (items, 0) if items is not None else validate_items(values)
