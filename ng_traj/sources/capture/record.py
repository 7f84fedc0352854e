"""Deriving a ``ModelCallRecord`` from one raw capture line, exactly as NeMo Gym does.

Source: ``build_model_call_record``, ``extract_token_stats``, ``_cache_signal`` and
``_tool_calls_and_reasoning`` in ``nemo_gym/base_responses_api_model.py`` at ``07d6b0d07``. Every raw key is optional (captures since 2026-07-15).

Token conventions: ``tokens_in`` is inclusive of cached tokens. OpenAI usage (``input_tokens`` /
``prompt_tokens``) already is; Anthropic's ``input_tokens`` excludes cache reads and writes, so the
top-level ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` are folded in (only when
the input count was reported or the cache total is positive). A count is accepted only when it is a
non-negative ``int``; anything else is "not reported" (``None``), never 0.

Offline extension: when ``response`` is null and ``response_raw`` holds SSE text,
the derived fields come from the reassembled stream while ``response`` itself stays null.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ng_traj.contract.base import ModelServerRef, built_model
from ng_traj.contract.capture import ModelCallRecord
from ng_traj.sources.capture.sse import reassemble

MAPPING = (dict, Mapping)
"""``isinstance`` classes of a mapping, the decoded JSON object first (checked without the ABC's lookup)."""


def token_count(value: Any) -> int | None:
    """``value`` when it is a non-negative ``int`` (booleans excluded), else ``None``."""
    return value if type(value) is int and value >= 0 else None


def _detail_count(usage: Mapping[str, Any], groups: tuple[str, ...], names: tuple[str, ...]) -> int | None:
    for group in groups:
        details = usage.get(group)
        if details is None or not isinstance(details, MAPPING):  # None, the usual miss, without the ABC's lookup
            continue
        for name in names:
            value = token_count(details.get(name))
            if value is not None:
                return value
    return None


TOKEN_STATS = ("tokens_in", "tokens_out", "tokens_reasoning", "tokens_total", "cache_creation_tokens")
"""The names of :func:`token_counts`' values, in its order."""

_NO_COUNTS = (None, None, None, None, None)


def token_stats(usage: Any) -> dict[str, int | None]:
    """Normalised token counts of one response ``usage`` (Responses, Chat or Anthropic shape).

    Returns:
        ``tokens_in`` (inclusive of cached), ``tokens_out``, ``tokens_reasoning``, ``tokens_total``,
        ``cache_creation_tokens``; each ``None`` when not reported.
    """
    return dict(zip(TOKEN_STATS, token_counts(usage), strict=True))


def token_counts(usage: Any) -> tuple[int | None, int | None, int | None, int | None, int | None]:
    """:func:`token_stats` as a tuple in :data:`TOKEN_STATS` order (no dict made per capture line)."""
    if not isinstance(usage, MAPPING):
        return _NO_COUNTS
    get = usage.get
    tokens_in = token_count(get("input_tokens"))
    if tokens_in is None:
        tokens_in = token_count(get("prompt_tokens"))
    tokens_out = token_count(get("output_tokens"))
    if tokens_out is None:
        tokens_out = token_count(get("completion_tokens"))
    cache_read = token_count(get("cache_read_input_tokens"))
    cache_creation = token_count(get("cache_creation_input_tokens"))
    if cache_read is not None or cache_creation is not None:
        cache_total = (cache_read or 0) + (cache_creation or 0)
        if tokens_in is not None or cache_total > 0:
            tokens_in = (tokens_in or 0) + cache_total
    tokens_total = token_count(get("total_tokens"))
    if tokens_total is None and tokens_in is not None and tokens_out is not None:
        tokens_total = tokens_in + tokens_out
    reasoning = _detail_count(usage, ("output_tokens_details", "completion_tokens_details"), ("reasoning_tokens",))
    if reasoning is None:
        reasoning = token_count(get("reasoning_output_tokens"))
    return tokens_in, tokens_out, reasoning, tokens_total, cache_creation


def cache_signal(usage: Any) -> tuple[bool | None, int | None]:
    """``(cache_hit, cached_tokens)``: prompt details before input details, then Anthropic's read count."""
    if not isinstance(usage, MAPPING):
        return None, None
    cached = _detail_count(
        usage, ("prompt_tokens_details", "input_tokens_details"), ("cached_tokens", "cached_input_tokens")
    )
    if cached is None:
        cached = token_count(usage.get("cache_read_input_tokens"))
    if cached is None:
        cached = token_count(usage.get("cached_input_tokens"))
    if cached is None:
        return None, None
    return cached > 0, cached


def parse_arguments(arguments: Any) -> Any:
    """Tool-call arguments: an object as is; a string parsed as JSON (any value) or ``{"_raw": text}``."""
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return {"_raw": arguments}
    return {}


def tool_calls_and_reasoning(response: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """Tool calls and reasoning text, by the response's *shape* (``output``, ``choices``, ``content``)."""
    output = response.get("output")
    if isinstance(output, list):
        return _responses_shape(output)
    choices = response.get("choices")
    if isinstance(choices, list):
        return _chat_shape(choices)
    content = response.get("content")
    if isinstance(content, list):
        return _messages_shape(content)
    return [], None


def _responses_shape(output: list[Any]) -> tuple[list[dict[str, Any]], str | None]:
    calls, reasoning = [], []
    for item in output:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call":
            calls.append(
                {
                    "call_id": item.get("call_id") or item.get("id"),
                    "name": item.get("name"),
                    "arguments": parse_arguments(item.get("arguments")),
                }
            )
        elif item.get("type") == "reasoning":
            for part in item.get("summary") or []:
                text = part.get("text") if isinstance(part, dict) else None
                if isinstance(text, str) and text:
                    reasoning.append(text)
    return calls, "\n".join(reasoning) or None


def _chat_shape(choices: list[Any]) -> tuple[list[dict[str, Any]], str | None]:
    calls, reasoning = [], []
    for choice in choices:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, MAPPING):
            continue
        for call in message.get("tool_calls") or []:
            if not isinstance(call, dict):
                continue
            function = call.get("function") or {}
            if not isinstance(function, MAPPING):
                function = {}
            calls.append(
                {
                    "call_id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": parse_arguments(function.get("arguments")),
                }
            )
        text = message.get("reasoning_content") or message.get("reasoning")
        if isinstance(text, str) and text:
            reasoning.append(text)
    return calls, "\n".join(reasoning) or None


def _messages_shape(content: list[Any]) -> tuple[list[dict[str, Any]], str | None]:
    calls, reasoning = [], []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_use":
            calls.append({"call_id": block.get("id"), "name": block.get("name"), "arguments": block.get("input") or {}})
        elif block.get("type") in ("thinking", "redacted_thinking") and isinstance(block.get("thinking"), str):
            reasoning.append(block["thinking"])
    return calls, "\n".join(reasoning) or None


def _finish_reason(response: Mapping[str, Any]) -> str | None:
    choices = response.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    incomplete = response.get("incomplete_details")
    incomplete = incomplete if isinstance(incomplete, dict) else {}
    for value in (response.get("stop_reason"), first.get("finish_reason"), incomplete.get("reason")):
        if isinstance(value, str):
            return value
    return None


EXECUTION_KEYS = ("upstream_attempted", "response_source", "upstream_status_code", "local_response_reason")
"""The execution block nemo-gym 0.7.0 writes when the model server recorded how it answered."""

CAPTURE_LINE_KEYS = frozenset(
    {
        "model_call_id",
        "dialect",
        "model_ref",
        "started_at",
        "completed_at",
        "latency_ms",
        "latency_ttft_ms",
        "status_code",
        "error_category",
        "request",
        "response",
        "request_raw",
        "response_raw",
        "client_session_id",
        *EXECUTION_KEYS,
    }
)
"""Keys of a raw capture line, every version since 2026-07-15 (nemo-gym 0.7.0 added the last five)."""


ROLLOUT_ROW_KEYS = frozenset(
    {
        "responses_create_params",
        "reward",
        "_ng_task_index",
        "_ng_rollout_index",
        "_ng_rollout_id",
        "ng_model_call_capture",
        "ng_agent_observations",
        "ng_trajectory",
    }
)
"""Keys of a NeMo Gym rollout row that no capture line has; ``response`` is the one key both share."""


def is_capture_line(exchange: Mapping[str, Any]) -> bool:
    """Whether ``exchange`` has at least one raw capture key, ``response`` alone not counting on a
    line that has a rollout row's keys (:data:`ROLLOUT_ROW_KEYS`).

    ng-traj's deviation from the reference, which builds an all-null record from any object: a line
    with none of the keys (``{"foo": 1}``, a trajectory in a file named ``*.capture.jsonl``), or a
    rollout row (whose ``response`` is the agent's, not a model call's), is no model call and counts
    as unreadable (:func:`not_capture_line_message` says why).
    """
    keys = CAPTURE_LINE_KEYS.intersection(exchange)
    return bool(keys) and (keys != {"response"} or ROLLOUT_ROW_KEYS.isdisjoint(exchange))


def not_capture_line_message(exchange: Mapping[str, Any]) -> str:
    """Why a line :func:`is_capture_line` rejects is no model call: a rollout row, or none of the keys."""
    if "response" in exchange and not ROLLOUT_ROW_KEYS.isdisjoint(exchange):
        row_keys = ", ".join(sorted(ROLLOUT_ROW_KEYS.intersection(exchange)))
        return (
            f"not a model-call record: a rollout row ({row_keys}; its response is the agent's), "
            "with no capture key (model_call_id, request, ...)"
        )
    return "not a model-call record: none of the capture keys (model_call_id, request, response, ...)"


def derived_response(exchange: Mapping[str, Any]) -> dict[str, Any]:
    """The response object the record's fields are derived from.

    The recorded ``response`` when it is an object; else the reassembled SSE stream of
    ``response_raw``; else ``{}``.
    """
    return _derived(exchange.get("response"), exchange.get("response_raw"), exchange.get("dialect"))


def _derived(response: Any, raw: Any, dialect: Any) -> dict[str, Any]:
    """:func:`derived_response` of a line's ``response``, ``response_raw`` and ``dialect`` values."""
    if isinstance(response, dict):
        return response
    if response is None and isinstance(raw, str):
        return reassemble(raw, dialect if isinstance(dialect, str) else None) or {}
    return {}


LINE_VALUES = (
    "model_call_id",
    "dialect",
    "model_ref",
    "status_code",
    "upstream_attempted",
    "response_source",
    "upstream_status_code",
    "local_response_reason",
    "started_at",
    "completed_at",
    "error_category",
    "latency_ms",
    "latency_ttft_ms",
    "request",
    "response",
    "request_raw",
    "response_raw",
    "client_session_id",
)
"""The capture line's keys :func:`derive_record` reads, each once (every one of
:data:`CAPTURE_LINE_KEYS`)."""


def derive_record(exchange: Mapping[str, Any], *, call_index: int) -> ModelCallRecord:
    """Build the ``ModelCallRecord`` of one raw capture line.

    Args:
        exchange: The decoded capture line (every key optional).
        call_index: Tolerant-reader index of the line in its capture file.

    Mirrors ``build_model_call_record`` of nemo-gym 0.7.0: ``client_session_id`` is kept only when a
    string; the four execution fields are copied as recorded (pydantic's lax coercion applies, so
    ``"true"`` reads as true) and a ``response_source`` other than ``upstream``/``local`` fails the line.

    Each key of the line is read once (:data:`LINE_VALUES`). The fields derived here have their
    record types by construction; when every field copied from the line has its type already (the
    usual case: ``started_at`` a float, ``status_code`` an int, ``model_ref`` ``{type, name}``), the
    record is made without validating them again, else pydantic validates (and coerces) the whole
    record as upstream does. Both give the same record.

    Raises:
        pydantic.ValidationError: A field has a shape the record rejects (for example a ``model_ref``
            that is not ``{type: "responses_api_models", name: str}``); the line counts as unreadable.
    """
    (
        model_call_id,
        dialect,
        line_model_ref,
        status_code,
        upstream_attempted,
        response_source,
        upstream_status_code,
        local_response_reason,
        started_at,
        completed_at,
        error_category,
        latency_ms,
        latency_ttft_ms,
        raw_request,
        raw_response,
        request_raw,
        response_raw,
        session,
    ) = map(exchange.get, LINE_VALUES)
    response = _derived(raw_response, response_raw, dialect)
    get = response.get
    usage = get("usage")
    cache_hit, cached_tokens = cache_signal(usage)
    tool_calls, reasoning = tool_calls_and_reasoning(response)
    request = raw_request if isinstance(raw_request, dict) else None
    model = get("model") or (request.get("model") if request is not None else None)
    response_id = get("id")
    status = get("status")
    tokens_in, tokens_out, tokens_reasoning, tokens_total, cache_creation = token_counts(usage)
    model_ref = _model_ref(line_model_ref)
    values = {
        "model_call_id": model_call_id,
        "response_id": response_id if isinstance(response_id, str) else None,
        "client_session_id": session if isinstance(session, str) else None,
        "call_index": call_index,
        "model_ref": line_model_ref if model_ref is _INVALID else model_ref,
        "model": model if isinstance(model, str) else None,
        "dialect": dialect,
        "status_code": status_code,
        "response_status": status if isinstance(status, str) else None,
        "finish_reason": _finish_reason(response),
        "upstream_attempted": upstream_attempted,
        "response_source": response_source,
        "upstream_status_code": upstream_status_code,
        "local_response_reason": local_response_reason,
        "started_at": started_at,
        "completed_at": completed_at,
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "tokens_reasoning": tokens_reasoning,
        "tokens_total": tokens_total,
        "request": request,
        "response": raw_response if isinstance(raw_response, dict) else None,
        "request_raw": request_raw if isinstance(request_raw, str) else None,
        "response_raw": response_raw if isinstance(response_raw, str) else None,
        "tool_calls": tool_calls,
        "reasoning_content": reasoning,
        "cache_hit": cache_hit,
        "cached_tokens": cached_tokens,
        "cache_creation_tokens": cache_creation,
        "error_category": error_category,
        "latency_total_ms": latency_ms,
        "latency_ttft_ms": latency_ttft_ms,
    }
    # Validation keeps each value copied from the line as it is when it is null or of exactly the
    # field's type (``str``, ``int``, ``bool``, ``float``; a ``response_source`` pydantic accepts).
    if (
        model_ref is _INVALID
        or type(call_index) is not int
        or not (model_call_id is None or type(model_call_id) is str)
        or not (dialect is None or type(dialect) is str)
        or not (status_code is None or type(status_code) is int)
        or not (upstream_attempted is None or type(upstream_attempted) is bool)
        or not (upstream_status_code is None or type(upstream_status_code) is int)
        or not (local_response_reason is None or type(local_response_reason) is str)
        or not (started_at is None or type(started_at) is float)
        or not (completed_at is None or type(completed_at) is float)
        or not (error_category is None or type(error_category) is str)
        or not (latency_ms is None or type(latency_ms) is float)
        or not (latency_ttft_ms is None or type(latency_ttft_ms) is float)
        or response_source not in _RESPONSE_SOURCES
    ):
        return ModelCallRecord(**values)
    return built_model(ModelCallRecord, values)


_RESPONSE_SOURCES = (None, "upstream", "local")
_INVALID = object()


def _model_ref(value: Any) -> Any:
    """``value`` as the ``ModelServerRef`` validation would make of it (extra keys ignored), ``None``
    for ``None``, else ``_INVALID`` (left to pydantic to coerce or reject)."""
    if value is None:
        return None
    if type(value) is dict and value.get("type") == "responses_api_models" and type(name := value.get("name")) is str:
        ref = _SERVER_REFS.get(name)
        if ref is None:
            ref = built_model(ModelServerRef, {"type": "responses_api_models", "name": name})
            if len(_SERVER_REFS) < 1024:
                _SERVER_REFS[name] = ref
        return ref
    return _INVALID


_SERVER_REFS: dict[str, ModelServerRef] = {}
"""One ``ModelServerRef`` per server name, shared by the records of its calls (a run has a few servers;
a ref is never changed after it is made)."""
