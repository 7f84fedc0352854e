"""Reassembly of streamed (SSE) model responses into one final response object.

Source: NeMo Gym's capture middleware (``nemo_gym/base_responses_api_model.py`` at ``07d6b0d07``),
as NeMo Gym's capture code does it. Gym reassembles at capture time and stores the result as
``response``; ng-traj reassembles offline only when a line has ``response: null`` and the SSE text in
``response_raw`` (an exception mid-stream, or a capture whose reassembly failed), to derive the
record's fields. Truncated streams keep the partial reconstruction.

Parsing follows the server-sent events section of the WHATWG HTML standard: lines end at CRLF, a
lone CR or a lone LF and nowhere else (a U+2028, U+0085 or form feed inside a streamed delta is text,
not a line break); a leading U+FEFF is dropped; a line starting with ``:`` is a comment (keep-alive);
a field's value loses one leading space after the colon, and a line without a colon is a field with an
empty value; ``data`` values of one event are joined by ``\\n``; ``event`` sets its type; ``id`` and
``retry`` are ignored (nothing reconnects offline); an event is dispatched at a blank line when it has
data. Unlike the standard, a last event not followed by a blank line is still dispatched, as NeMo
Gym's own offline reassembly does: a stream cut mid-way keeps its last complete event, and an event
cut inside its JSON fails to parse and is skipped. ``[DONE]`` is skipped; only payloads that parse to
JSON objects are kept, raw control characters inside their strings (a form feed in a delta) taken as
the text they are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
"""The only line breaks of an event stream."""


def _index_order(index: Any) -> tuple[bool, Any]:
    """Sort key for stream indices: integers in order, any malformed index after them."""
    return (not isinstance(index, int), index if isinstance(index, int) else str(index))


def iter_events(raw: str) -> Iterator[tuple[str, str]]:
    """Yield ``(event type, data)`` for every event of an SSE text; the type is ``message`` when unset."""
    kind, data = "", []
    for line in _LINE_BREAK.split(raw.removeprefix("\ufeff")):
        if not line:
            if data:
                yield kind or "message", "\n".join(data)
            kind, data = "", []
            continue
        if line.startswith(":"):
            continue
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
        elif field == "event":
            kind = value
    if data:
        yield kind or "message", "\n".join(data)


def parse_events(raw: str) -> list[dict[str, Any]]:
    """Return the JSON-object payloads of the events of an SSE text, in order (``[DONE]`` skipped)."""
    events: list[dict[str, Any]] = []
    for _, payload in iter_events(raw):
        if payload == "[DONE]":
            continue
        try:
            parsed = json.loads(payload, strict=False)
        except ValueError:
            continue
        if isinstance(parsed, dict):
            events.append(parsed)
    return events


def reassemble(raw: str, dialect: str | None) -> dict[str, Any] | None:
    """Rebuild the final response object of a streamed call, or ``None`` when nothing is reconstructable.

    Args:
        raw: The full (or partial) SSE text, as stored in ``response_raw``.
        dialect: ``messages`` (Anthropic), ``responses``; anything else is read as Chat Completions.
    """
    events = parse_events(raw)
    if not events:
        return None
    if dialect == "messages":
        return _messages(events)
    if dialect == "responses":
        return _responses(events)
    return _chat(events)


def _responses(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    terminal = ("response.completed", "response.incomplete", "response.failed")
    for event in reversed(events):
        if event.get("type") in terminal and isinstance(event.get("response"), dict):
            return event["response"]
    for event in reversed(events):
        if isinstance(event.get("response"), dict):
            return event["response"]
    return None


class _ChatState:
    """Accumulates Chat Completions chunks; every choice folds into one message at index 0."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.refusal: list[str] = []
        self.tools: dict[Any, dict[str, Any]] = {}
        self.usage: Any = None
        self.model: Any = None
        self.response_id: str | None = None
        self.role: Any = "assistant"
        self.finish_reason: Any = None
        self.saw_choice = False

    def add_chunk(self, chunk: dict[str, Any]) -> None:
        self.model = chunk.get("model") or self.model
        if isinstance(chunk.get("id"), str):
            self.response_id = chunk["id"]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict):
                self.add_choice(choice)

    def add_choice(self, choice: dict[str, Any]) -> None:
        self.saw_choice = True
        delta = choice.get("delta") or {}
        self.role = delta.get("role") or self.role
        if delta.get("content"):
            self.content.append(delta["content"])
        if delta.get("refusal"):
            self.refusal.append(delta["refusal"])
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            self.reasoning.append(reasoning)
        for call in delta.get("tool_calls") or []:
            slot = self.tools.setdefault(
                call.get("index", 0), {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
            )
            if call.get("id"):
                slot["id"] = call["id"]
            function = call.get("function") or {}
            if function.get("name"):
                slot["function"]["name"] = function["name"]
            if function.get("arguments"):
                slot["function"]["arguments"] += function["arguments"]
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]

    def result(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": self.role, "content": "".join(self.content) or None}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.refusal:
            message["refusal"] = "".join(self.refusal)  # nemo-gym 0.7.0 joins refusal deltas
        if self.tools:
            message["tool_calls"] = [self.tools[index] for index in sorted(self.tools, key=_index_order)]
        result: dict[str, Any] = {
            "object": "chat.completion",
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
        }
        if self.response_id is not None:
            result["id"] = self.response_id
        if self.usage:
            result["usage"] = self.usage
        return result


def _chat(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    state = _ChatState()
    for chunk in events:
        state.add_chunk(chunk)
    return state.result() if state.saw_choice else None


class _MessagesState:
    """Accumulates Anthropic Messages stream events."""

    def __init__(self) -> None:
        self.message: dict[str, Any] | None = None
        self.blocks: dict[Any, dict[str, Any]] = {}
        self.usage: dict[str, Any] = {}
        self.tool_json: dict[Any, str] = {}

    def add(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "message_start":
            start = event.get("message") or {}
            keys = ("id", "type", "role", "model", "stop_reason")
            self.message = {key: start.get(key) for key in keys if start.get(key) is not None}
            self.usage.update(start.get("usage") or {})
        elif kind == "content_block_start":
            self.blocks[event.get("index", len(self.blocks))] = dict(event.get("content_block") or {})
        elif kind == "content_block_delta":
            self.add_delta(event.get("index", 0), event.get("delta") or {})
        elif kind == "message_delta":
            self.usage.update(event.get("usage") or {})
            stop = (event.get("delta") or {}).get("stop_reason")
            if self.message is not None and stop:
                self.message["stop_reason"] = stop

    def add_delta(self, index: Any, delta: dict[str, Any]) -> None:
        block = self.blocks.setdefault(index, {})
        kind = delta.get("type")
        if kind == "text_delta":
            block["type"] = block.get("type") or "text"
            block["text"] = (block.get("text") or "") + (delta.get("text") or "")
        elif kind == "thinking_delta":
            block["type"] = block.get("type") or "thinking"
            block["thinking"] = (block.get("thinking") or "") + (delta.get("thinking") or "")
        elif kind == "input_json_delta":
            self.tool_json[index] = self.tool_json.get(index, "") + (delta.get("partial_json") or "")

    def result(self) -> dict[str, Any] | None:
        if self.message is None and not self.blocks:
            return None
        content = []
        for index in sorted(self.blocks, key=_index_order):
            block = self.blocks[index]
            if block.get("type") == "tool_use" and index in self.tool_json and not block.get("input"):
                text = self.tool_json[index]
                try:
                    block["input"] = json.loads(text) if text else {}
                except ValueError:
                    block["input"] = {"_raw": text}
            content.append(block)
        result: dict[str, Any] = {**(self.message or {}), "type": "message", "content": content}
        if self.usage:
            result["usage"] = self.usage
        return result


def _messages(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    state = _MessagesState()
    for event in events:
        state.add(event)
    return state.result()
