"""Request and response bodies of the three capture dialects, streamed (SSE) and not, for the corpus.

Shapes follow what NeMo Gym's capture middleware records: ``responses``
(``/v1/responses``: ``input`` items, ``output`` items, ``usage.input_tokens``), ``chat``
(``/v1/chat/completions``: ``messages``, ``choices``, ``usage.prompt_tokens``; streamed chunks end with
``data: [DONE]``) and ``messages`` (Anthropic ``/v1/messages``: ``system``, content blocks,
``usage.input_tokens`` exclusive of ``cache_read_input_tokens``). A conversation is kept once, as
neutral steps, and rendered into each dialect's request, so requests grow with the history exactly as
real captures do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

TOOLS = [
    {"name": "exec", "description": "Run a shell command in the workspace.", "parameters": {"type": "object"}},
    {"name": "read", "description": "Read a file of the workspace.", "parameters": {"type": "object"}},
    {"name": "write", "description": "Write a file of the workspace.", "parameters": {"type": "object"}},
]


@dataclass
class Step:
    """One model call's output: optional reasoning, then a tool call or the final text."""

    response_id: str
    reasoning: str | None
    text: str | None
    tool: tuple[str, str, dict[str, Any]] | None
    """``(call_id, name, arguments)``."""
    result: str | None = None
    """The tool's output, appended to the history after the call."""


@dataclass
class Usage:
    """Token counts of one call (prompt inclusive of cached)."""

    prompt: int
    completion: int
    cached: int
    reasoning: int


@dataclass
class Conversation:
    """System prompt, task and the steps so far."""

    model: str
    system: str
    task: str
    steps: list[Step] = field(default_factory=list)


def responses_request(conv: Conversation, stream: bool) -> dict[str, Any]:
    items: list[dict[str, Any]] = [
        {"role": "system", "content": conv.system, "type": "message"},
        {"role": "user", "content": conv.task, "type": "message"},
    ]
    for step in conv.steps:
        items.extend(responses_output(step))
        if step.tool is not None and step.result is not None:
            items.append({"type": "function_call_output", "call_id": step.tool[0], "output": step.result})
    tools = [{"type": "function", **tool} for tool in TOOLS]
    return {"model": conv.model, "input": items, "tools": tools, "stream": stream}


def responses_output(step: Step) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if step.reasoning:
        summary = [{"type": "summary_text", "text": step.reasoning}]
        out.append({"type": "reasoning", "id": f"rs_{step.response_id[5:]}", "summary": summary})
    if step.tool is not None:
        call_id, name, arguments = step.tool
        out.append(
            {
                "type": "function_call",
                "call_id": call_id,
                "name": name,
                "arguments": orjson.dumps(arguments).decode(),
                "id": f"fc_{call_id[5:]}",
                "status": "completed",
            }
        )
    else:
        content = [{"type": "output_text", "text": step.text, "annotations": []}]
        out.append(
            {
                "type": "message",
                "id": f"msg_{step.response_id[5:]}",
                "role": "assistant",
                "status": "completed",
                "content": content,
            }
        )
    return out


def responses_response(conv: Conversation, step: Step, usage: Usage, created: int) -> dict[str, Any]:
    return {
        "id": step.response_id,
        "object": "response",
        "created_at": created,
        "model": conv.model,
        "status": "completed",
        "output": responses_output(step),
        "usage": {
            "input_tokens": usage.prompt,
            "input_tokens_details": {"cached_tokens": usage.cached},
            "output_tokens": usage.completion,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning},
            "total_tokens": usage.prompt + usage.completion,
        },
    }


def responses_sse(response: dict[str, Any], pieces: list[str]) -> str:
    events = [
        (
            "response.created",
            {"type": "response.created", "response": {**response, "status": "in_progress", "output": []}},
        )
    ]
    events += [("response.output_text.delta", {"type": "response.output_text.delta", "delta": p}) for p in pieces]
    events.append(("response.completed", {"type": "response.completed", "response": response}))
    return "".join(f"event: {name}\ndata: {orjson.dumps(data).decode()}\n\n" for name, data in events)


def chat_request(conv: Conversation, stream: bool) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": conv.system},
        {"role": "user", "content": conv.task},
    ]
    for step in conv.steps:
        messages.append(chat_message(step))
        if step.tool is not None and step.result is not None:
            messages.append({"role": "tool", "tool_call_id": step.tool[0], "content": step.result})
    tools = [{"type": "function", "function": tool} for tool in TOOLS]
    body: dict[str, Any] = {"model": conv.model, "messages": messages, "tools": tools, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def chat_message(step: Step) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": step.text}
    if step.reasoning:
        message["reasoning_content"] = step.reasoning
    if step.tool is not None:
        call_id, name, arguments = step.tool
        function = {"name": name, "arguments": orjson.dumps(arguments).decode()}
        message["tool_calls"] = [{"id": call_id, "type": "function", "function": function}]
    return message


def chat_response(conv: Conversation, step: Step, usage: Usage, created: int) -> dict[str, Any]:
    return {
        "id": step.response_id,
        "object": "chat.completion",
        "created": created,
        "model": conv.model,
        "choices": [
            {"index": 0, "message": chat_message(step), "finish_reason": "tool_calls" if step.tool else "stop"}
        ],
        "usage": {
            "prompt_tokens": usage.prompt,
            "completion_tokens": usage.completion,
            "total_tokens": usage.prompt + usage.completion,
            "prompt_tokens_details": {"cached_tokens": usage.cached},
            "completion_tokens_details": {"reasoning_tokens": usage.reasoning},
        },
    }


def chat_sse(response: dict[str, Any], pieces: list[str], with_usage: bool = True) -> str:
    head = {key: response[key] for key in ("id", "created", "model")}
    message = response["choices"][0]["message"]
    chunks = [{**head, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
    for piece in pieces:
        chunks.append(
            {**head, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": piece}}]}
        )
    if message.get("tool_calls"):
        call = message["tool_calls"][0]
        delta = {"tool_calls": [{"index": 0, "id": call["id"], "type": "function", "function": call["function"]}]}
        chunks.append({**head, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]})
    finish = response["choices"][0]["finish_reason"]
    chunks.append(
        {**head, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
    )
    if with_usage:
        chunks.append({**head, "object": "chat.completion.chunk", "choices": [], "usage": response["usage"]})
    return "".join(f"data: {orjson.dumps(chunk).decode()}\n\n" for chunk in chunks) + "data: [DONE]\n\n"


def messages_request(conv: Conversation, stream: bool) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": conv.task}]}]
    for step in conv.steps:
        messages.append({"role": "assistant", "content": messages_content(step)})
        if step.tool is not None and step.result is not None:
            result = {"type": "tool_result", "tool_use_id": step.tool[0], "content": step.result}
            messages.append({"role": "user", "content": [result]})
    tools = [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]} for t in TOOLS]
    return {
        "model": conv.model,
        "system": conv.system,
        "messages": messages,
        "tools": tools,
        "max_tokens": 8192,
        "stream": stream,
    }


def messages_content(step: Step) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if step.reasoning:
        blocks.append({"type": "thinking", "thinking": step.reasoning, "signature": "sig" + step.response_id[4:20]})
    if step.tool is not None:
        call_id, name, arguments = step.tool
        blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": arguments})
    else:
        blocks.append({"type": "text", "text": step.text})
    return blocks


def messages_response(conv: Conversation, step: Step, usage: Usage, created: int) -> dict[str, Any]:
    del created
    return {
        "id": step.response_id,
        "type": "message",
        "role": "assistant",
        "model": conv.model,
        "content": messages_content(step),
        "stop_reason": "tool_use" if step.tool else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage.prompt - usage.cached,
            "cache_read_input_tokens": usage.cached,
            "cache_creation_input_tokens": 0,
            "output_tokens": usage.completion,
        },
    }


def _block_events(index: int, block: dict[str, Any], pieces: list[str]) -> list[tuple[str, dict[str, Any]]]:
    if block["type"] == "text":
        start, deltas = {"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in pieces]
    elif block["type"] == "thinking":
        start = {"type": "thinking", "thinking": ""}
        deltas = [
            {"type": "thinking_delta", "thinking": block["thinking"]},
            {"type": "signature_delta", "signature": block["signature"]},
        ]
    else:
        start = {**block, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": orjson.dumps(block["input"]).decode()}]
    events = [("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})]
    events += [("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas]
    events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events


def messages_sse(response: dict[str, Any], pieces: list[str]) -> str:
    start = {**response, "content": [], "stop_reason": None, "usage": {**response["usage"], "output_tokens": 1}}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(response["content"]):
        events += _block_events(index, block, pieces)
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": response["stop_reason"]},
        "usage": {"output_tokens": response["usage"]["output_tokens"]},
    }
    events += [("message_delta", delta), ("message_stop", {"type": "message_stop"})]
    return "".join(f"event: {name}\ndata: {orjson.dumps(data).decode()}\n\n" for name, data in events)


DIALECTS = {
    "responses": (responses_request, responses_response, responses_sse),
    "chat": (chat_request, chat_response, chat_sse),
    "messages": (messages_request, messages_response, messages_sse),
}
"""Per dialect: request builder, response builder, SSE renderer."""
