"""Capture line -> ModelCallRecord, checked against NeMo Gym's derivation rules."""

from __future__ import annotations

import orjson
import pytest
from pydantic import ValidationError

from ng_traj.contract import ModelCallRecord, ModelServerRef
from ng_traj.sources.capture.record import (
    CAPTURE_LINE_KEYS,
    LINE_VALUES,
    TOKEN_STATS,
    cache_signal,
    derive_record,
    parse_arguments,
    token_counts,
    token_stats,
)
from ng_traj.sources.capture.sse import iter_events, parse_events, reassemble

POLICY = {"type": "responses_api_models", "name": "policy_model"}


def test_responses_record_derivation_example():
    exchange = {
        "model_call_id": "a" * 32,
        "dialect": "responses",
        "model_ref": POLICY,
        "started_at": 100.0,
        "completed_at": 101.5,
        "latency_ms": 1500.25,
        "latency_ttft_ms": 200.0,
        "status_code": 200,
        "error_category": None,
        "request": {"model": "req-model", "input": []},
        "response": {
            "id": "resp_1",
            "model": "resp-model",
            "status": "completed",
            "output": [
                {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "think"}, {"text": ""}]},
                {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": '{"x": 1}'},
            ],
            "usage": {
                "input_tokens": 10,
                "input_tokens_details": {"cached_tokens": 4},
                "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 3},
                "total_tokens": 15,
            },
        },
    }
    record = derive_record(exchange, call_index=7)
    assert (record.model_call_id, record.response_id, record.call_index) == ("a" * 32, "resp_1", 7)
    assert (record.model, record.dialect, record.model_ref.name) == ("resp-model", "responses", "policy_model")
    assert (record.started_at, record.completed_at, record.latency_total_ms, record.latency_ttft_ms) == (
        100.0,
        101.5,
        1500.25,
        200.0,
    )
    assert (record.tokens_in, record.tokens_out, record.tokens_total, record.tokens_reasoning) == (10, 5, 15, 3)
    assert (record.cached_tokens, record.cache_hit, record.cache_creation_tokens) == (4, True, None)
    assert record.reasoning_content == "think"
    assert record.tool_calls == [{"call_id": "call_1", "name": "f", "arguments": {"x": 1}}]
    assert (record.response_status, record.finish_reason) == ("completed", None)


def test_non_string_response_id_and_empty_payloads():
    assert derive_record({"response": {"id": 12}}, call_index=0).response_id is None
    record = derive_record({"request": {}, "response": {}}, call_index=0)
    assert record.request == {} and record.response == {}


def test_model_falls_back_to_request_and_must_be_a_string():
    assert derive_record({"request": {"model": "m"}, "response": {"model": ""}}, call_index=0).model == "m"
    assert derive_record({"request": {"model": 5}, "response": {}}, call_index=0).model is None


def test_alias_usage_keys():
    stats = token_stats({"input_tokens": 9, "output_tokens": 2, "reasoning_output_tokens": 1})
    assert stats["tokens_reasoning"] == 1
    assert cache_signal({"cached_input_tokens": 6}) == (True, 6)
    assert cache_signal({"input_tokens_details": {"cached_input_tokens": 0}}) == (False, 0)


@pytest.mark.parametrize(
    ("response", "finish", "status"),
    [
        ({"choices": [{"finish_reason": "tool_calls"}, {"finish_reason": "stop"}]}, "tool_calls", None),
        ({"stop_reason": "end_turn", "content": []}, "end_turn", None),
        (
            {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}},
            "max_output_tokens",
            "incomplete",
        ),
        ({"status": "completed"}, None, "completed"),
        ({"choices": "x", "incomplete_details": "y", "status": 3}, None, None),
        ({"choices": [5]}, None, None),
    ],
)
def test_termination_normalisation(response, finish, status):
    record = derive_record({"response": response}, call_index=0)
    assert (record.finish_reason, record.response_status) == (finish, status)


@pytest.mark.parametrize(
    "response",
    [
        {"usage": "lots"},
        {"usage": {"input_tokens": -1, "output_tokens": 2.5, "total_tokens": True, "prompt_tokens": "7"}},
        {"choices": [None, {"message": "x"}, {"message": {"tool_calls": [5, {"function": "f"}]}}]},
        {"output": [3, {"type": "reasoning", "summary": "s"}, {"type": "reasoning", "summary": [7]}]},
        {"content": [1, {"type": "thinking", "thinking": 5}]},
    ],
)
def test_malformed_nested_shapes_never_raise(response):
    record = derive_record({"response": response}, call_index=0)
    assert record.tokens_in is None and record.tokens_out is None and record.tokens_total is None


def test_chat_tool_calls_reasoning_alias_and_precedence():
    response = {
        "choices": [
            {
                "message": {
                    "reasoning": "alias",
                    "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "x"}}],
                }
            },
            {"message": {"reasoning_content": "primary", "reasoning": "ignored"}},
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 2}},
    }
    record = derive_record({"dialect": "chat", "response": response}, call_index=0)
    assert record.tool_calls == [{"call_id": "c1", "name": "f", "arguments": {"_raw": "x"}}]
    assert record.reasoning_content == "alias\nprimary"
    assert (record.tokens_in, record.tokens_out, record.tokens_total, record.cached_tokens) == (11, 4, 15, 2)


def test_anthropic_tool_use_and_thinking():
    response = {
        "content": [
            {"type": "thinking", "thinking": "a"},
            {"type": "redacted_thinking", "thinking": "b"},
            {"type": "tool_use", "id": "tu", "name": "g", "input": None},
            {"type": "text", "text": "t"},
        ]
    }
    record = derive_record({"response": response}, call_index=0)
    assert record.tool_calls == [{"call_id": "tu", "name": "g", "arguments": {}}]
    assert record.reasoning_content == "a\nb"


def test_argument_parsing():
    assert parse_arguments({"a": 1}) == {"a": 1}
    assert parse_arguments("[1, 2]") == [1, 2]
    assert parse_arguments("nope") == {"_raw": "nope"}
    assert parse_arguments(None) == {}


def test_cache_precedence_prompt_details_before_input_details():
    usage = {"prompt_tokens_details": {"cached_tokens": 1}, "input_tokens_details": {"cached_tokens": 2}}
    assert cache_signal(usage) == (True, 1)
    assert cache_signal({"input_tokens": 5, "cache_read_input_tokens": 3}) == (True, 3)
    assert cache_signal({"input_tokens": 5}) == (None, None)


@pytest.mark.parametrize(
    ("usage", "tokens_in", "total"),
    [
        (
            {
                "input_tokens": 100,
                "cache_read_input_tokens": 200,
                "cache_creation_input_tokens": 30,
                "output_tokens": 50,
            },
            330,
            380,
        ),
        ({"cache_read_input_tokens": 500}, 500, None),
        ({"cache_read_input_tokens": 0, "cache_creation_input_tokens": 0, "output_tokens": 3}, None, None),
        ({"input_tokens": 1000, "input_tokens_details": {"cached_tokens": 800}, "output_tokens": 100}, 1000, 1100),
    ],
)
def test_anthropic_fold_cases(usage, tokens_in, total):
    stats = token_stats(usage)
    assert (stats["tokens_in"], stats["tokens_total"]) == (tokens_in, total)


def test_reasoning_is_a_subset_of_completion_for_both_openai_shapes():
    responses = token_stats(
        {
            "input_tokens": 1000,
            "output_tokens": 100,
            "output_tokens_details": {"reasoning_tokens": 40},
            "total_tokens": 1100,
        }
    )
    chat = token_stats(
        {
            "prompt_tokens": 1000,
            "completion_tokens": 100,
            "completion_tokens_details": {"reasoning_tokens": 40},
            "total_tokens": 1100,
        }
    )
    for stats in (responses, chat):
        assert (stats["tokens_out"], stats["tokens_reasoning"], stats["tokens_total"]) == (100, 40, 1100)


def test_invalid_model_ref_fails_the_record():
    with pytest.raises(ValidationError):
        derive_record({"model_ref": {"type": "agents", "name": "x"}}, call_index=0)
    with pytest.raises(ValidationError):
        derive_record({"dialect": 3}, call_index=0)


ANTHROPIC_SSE = (
    "event: message_start\n"
    'data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude",'
    '"usage":{"input_tokens":10,"cache_read_input_tokens":5,"cache_creation_input_tokens":2,"output_tokens":1}}}\n\n'
    "event: content_block_start\n"
    'data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}\n\n'
    "event: content_block_delta\n"
    'data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}\n\n'
    'data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig"}}\n\n'
    "event: content_block_start\n"
    'data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"tu_1","name":"bash","input":{}}}\n\n'
    'data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"cmd\\": "}}\n\n'
    'data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\\"ls\\"}"}}\n\n'
    "event: message_delta\n"
    'data: {"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":7}}\n\n'
    "event: message_stop\n"
    'data: {"type":"message_stop"}\n\n'
)


def test_anthropic_sse_reassembly_from_response_raw():
    exchange = {"dialect": "messages", "response": None, "response_raw": ANTHROPIC_SSE, "latency_ttft_ms": 12.5}
    record = derive_record(exchange, call_index=0)
    assert record.response_id == "msg_1"
    assert (record.tokens_in, record.tokens_out, record.cached_tokens, record.cache_creation_tokens) == (17, 7, 5, 2)
    assert record.reasoning_content == "hmm"
    assert record.tool_calls == [{"call_id": "tu_1", "name": "bash", "arguments": {"cmd": "ls"}}]
    assert record.finish_reason == "tool_use"
    assert record.response is None and record.response_raw == ANTHROPIC_SSE


CHAT_SSE = (
    'data: {"id":"chatcmpl-9","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}\r\n\r\n'
    'data: {"id":"chatcmpl-9","choices":[{"index":0,"delta":{"content":"lo","reasoning":"r1"}}]}\r\n\r\n'
    'data: {"id":"chatcmpl-9","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","function":{"name":"f","arguments":"{\\"a\\""}}]}}]}\r\n\r\n'
    'data: {"id":"chatcmpl-9","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":": 1}"}}]},"finish_reason":"tool_calls"}]}\r\n\r\n'
    'data: {"id":"chatcmpl-9","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":6,"total_tokens":26}}\r\n\r\n'
    "data: [DONE]\r\n\r\n"
)


def test_chat_sse_reassembly_with_crlf():
    response = reassemble(CHAT_SSE, "chat")
    message = response["choices"][0]["message"]
    assert response["id"] == "chatcmpl-9" and message["content"] == "Hello" and message["reasoning_content"] == "r1"
    assert message["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": 1}'}
    record = derive_record({"dialect": "chat", "response_raw": CHAT_SSE}, call_index=0)
    assert (record.tokens_in, record.tokens_out, record.tokens_total, record.finish_reason) == (20, 6, 26, "tool_calls")
    assert record.tool_calls == [{"call_id": "call_a", "name": "f", "arguments": {"a": 1}}]


def test_responses_sse_uses_terminal_envelope_else_interim():
    created = (
        'event: response.created\ndata: {"type":"response.created","response":{"id":"r","status":"in_progress"}}\n\n'
    )
    completed = (
        'event: response.completed\ndata: {"type":"response.completed","response":{"id":"r","status":"completed"}}\n\n'
    )
    assert reassemble(created + completed, "responses")["status"] == "completed"
    assert reassemble(created, "responses")["status"] == "in_progress"
    assert reassemble("event: ping\n\n", "responses") is None
    assert reassemble('data: {"type":"x"}\n\n', "responses") is None


@pytest.mark.parametrize("dialect", ["messages", "chat", "responses"])
def test_truncated_streams_keep_the_partial_reconstruction(dialect):
    cut = {
        "messages": ANTHROPIC_SSE.split("event: message_delta")[0],
        "chat": CHAT_SSE.split('data: {"id":"chatcmpl-9","choices":[],"usage"')[0],
        "responses": 'data: {"type":"response.in_progress","response":{"id":"r9","status":"in_progress"}}\n\n',
    }[dialect]
    exchange = {"dialect": dialect, "response": None, "response_raw": cut, "error_category": "exception"}
    record = derive_record(exchange, call_index=0)
    assert record.response_id in ("msg_1", "chatcmpl-9", "r9")
    assert record.error_category == "exception" and record.response is None


def test_non_sse_raw_body_derives_nothing():
    record = derive_record({"response": None, "response_raw": '{"error": "denied"}', "status_code": 403}, call_index=0)
    assert record.response_id is None and record.tokens_in is None and record.response_raw == '{"error": "denied"}'


SEPARATORS = ["\u2028", "\u2029", "\u0085", "\x1c", "\x1d", "\x1e", "\x0b", "\x0c"]
"""Characters ``str.splitlines`` breaks at that an event stream does not."""


def _sse(*payloads: str) -> str:
    return "".join(f"data: {payload}\n\n" for payload in payloads)


@pytest.mark.parametrize("char", SEPARATORS, ids=[f"U+{ord(c):04X}" for c in SEPARATORS])
def test_chat_delta_holding_a_unicode_line_separator_is_kept(char):
    raw = _sse(
        '{"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"a' + char + 'b"}}]}',
        '{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t","function":{"name":"f","arguments":"{\\"x\\": \\"'
        + char
        + '\\"}"}}]}}]}',
        "[DONE]",
    )
    message = reassemble(raw, "chat")["choices"][0]["message"]
    assert message["reasoning_content"] == f"a{char}b"
    assert message["tool_calls"][0]["function"]["arguments"] == '{"x": "' + char + '"}'


@pytest.mark.parametrize("char", SEPARATORS, ids=[f"U+{ord(c):04X}" for c in SEPARATORS])
def test_messages_delta_holding_a_unicode_line_separator_is_kept(char):
    raw = (
        'event: message_start\ndata: {"type":"message_start","message":{"id":"m","role":"assistant"}}\n\n'
        'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"thinking"}}\n\n'
        'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"x'
        + char
        + 'y"}}\n\n'
    )
    assert reassemble(raw, "messages")["content"] == [{"type": "thinking", "thinking": f"x{char}y"}]


@pytest.mark.parametrize("char", SEPARATORS, ids=[f"U+{ord(c):04X}" for c in SEPARATORS])
def test_responses_event_holding_a_unicode_line_separator_is_kept(char):
    raw = (
        'event: response.completed\ndata: {"type":"response.completed","response":{"id":"r","status":"completed",'
        '"output":[{"type":"reasoning","summary":[{"type":"summary_text","text":"p' + char + 'q"}]}]}}\n\n'
    )
    assert reassemble(raw, "responses")["output"][0]["summary"][0]["text"] == f"p{char}q"


def test_sse_lines_end_at_crlf_cr_or_lf_only():
    payload = '{"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}]}'
    for eol in ("\n", "\r", "\r\n"):
        assert parse_events(f"data: {payload}{eol}{eol}data: {payload}{eol}{eol}") == [orjson.loads(payload)] * 2


def test_sse_fields_follow_the_specification():
    raw = (
        "\ufeff: keep-alive comment\n\n"
        ":another\n"
        'event: message\ndata:{"a":\ndata:  1}\nid: 7\nretry: 10\n\n'
        "data\n\n"
        'event: error\ndata: {"error": {"message": "boom"}}\n\n'
        'data: {"last": true}'
    )
    assert list(iter_events(raw)) == [
        ("message", '{"a":\n 1}'),
        ("message", ""),
        ("error", '{"error": {"message": "boom"}}'),
        ("message", '{"last": true}'),
    ]
    assert parse_events(raw) == [{"a": 1}, {"error": {"message": "boom"}}, {"last": True}]


def test_sse_comment_and_unknown_fields_dispatch_nothing():
    assert list(iter_events(": ping\n\nid: 3\n\nretry: 5\n\n")) == []
    assert list(iter_events("data: x\n:comment inside\ndata: y\n\n")) == [("message", "x\ny")]


RECORDED = {
    "model_call_id": "c1",
    "dialect": "responses",
    "model_ref": {**POLICY, "extra": "ignored"},
    "status_code": 200,
    "started_at": 10.5,
    "completed_at": 11.0,
    "latency_ms": 500.0,
    "latency_ttft_ms": 20.0,
    "upstream_attempted": True,
    "response_source": "upstream",
    "upstream_status_code": 200,
    "local_response_reason": None,
    "error_category": None,
    "client_session_id": "s1",
    "request": {"model": "m", "input": "hi"},
    "response": {
        "id": "resp_1",
        "status": "completed",
        "output": [{"type": "function_call", "call_id": "t1", "name": "ls", "arguments": "{}"}],
        "usage": {"input_tokens": 3, "output_tokens": 2},
    },
}


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"started_at": 10, "completed_at": 11, "latency_ms": 500, "latency_ttft_ms": 20},
        {"status_code": 200.0, "upstream_status_code": "502"},
        {"upstream_attempted": "true"},
        {"upstream_attempted": 1, "response_source": "local", "local_response_reason": "empty_assistant"},
        {"model_ref": None, "dialect": None},
    ],
    ids=["as_recorded", "int_times", "coerced_codes", "string_bool", "int_bool", "nulls"],
)
def test_record_made_without_validation_is_the_validated_one(changes):
    """A line whose values have their types is made without validating them again; one that needs
    pydantic's lax coercion is validated. Either way the record is the one validation gives."""
    record = derive_record({**RECORDED, **changes}, call_index=4)
    validated = ModelCallRecord.model_validate(
        {**record.__dict__, "model_ref": record.model_ref and record.model_ref.model_dump()}
    )
    assert record == validated
    assert [type(v) for v in record.__dict__.values()] == [type(v) for v in validated.__dict__.values()]
    assert record.model_dump_json() == validated.model_dump_json()
    assert list(record.__dict__) == list(ModelCallRecord.model_fields)
    assert isinstance(record.model_ref, ModelServerRef | None)


def test_line_types_are_coerced_as_upstream_does():
    record = derive_record(
        {**RECORDED, "started_at": 10, "upstream_attempted": "true", "status_code": 200.0}, call_index=0
    )
    assert (record.started_at, type(record.started_at)) == (10.0, float)
    assert record.upstream_attempted is True
    assert (record.status_code, type(record.status_code)) == (200, int)
    assert record.model_ref == ModelServerRef(**POLICY)


@pytest.mark.parametrize(
    "changes",
    [
        {"response_source": "remote"},
        {"model_ref": {"type": "responses_api_models"}},
        {"model_ref": {"type": "responses_api_models", "name": 3}},
        {"status_code": "two hundred"},
        {"latency_ms": "fast"},
        {"model_call_id": 7},
    ],
)
def test_values_the_record_rejects_still_fail_the_line(changes):
    with pytest.raises(ValidationError):
        derive_record({**RECORDED, **changes}, call_index=0)


def test_a_line_is_read_once_through_every_capture_key():
    """``derive_record`` reads the line's values in one pass over the capture keys: every key a
    capture line may have, none twice."""
    assert len(LINE_VALUES) == len(set(LINE_VALUES))
    assert set(LINE_VALUES) == CAPTURE_LINE_KEYS


@pytest.mark.parametrize(
    "usage",
    [
        None,
        {"input_tokens": 3, "output_tokens": 2, "output_tokens_details": {"reasoning_tokens": 1}},
        {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 9},
        {"input_tokens": 2, "output_tokens": 1, "cache_read_input_tokens": 4, "cache_creation_input_tokens": 8},
    ],
)
def test_token_counts_are_token_stats_in_order(usage):
    stats = token_stats(usage)
    assert token_counts(usage) == tuple(stats.values())
    assert tuple(stats) == TOKEN_STATS
    record = derive_record({"response": {"usage": usage}}, call_index=0)
    assert {name: getattr(record, name) for name in TOKEN_STATS} == stats
