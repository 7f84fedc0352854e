"""Reading judge records and merging them with known calls: the rules of ``assemble/judge.py``."""

from __future__ import annotations

import pytest

from ng_traj.assemble.judge import merge_judge_calls
from ng_traj.assemble.rollout import record_mapping
from ng_traj.contract.base import ModelServerRef
from ng_traj.roles import judge_server, may_be_judge, parse_roles, role_of
from ng_traj.sources.capture.record import derive_record
from ng_traj.sources.judge.records import is_response, read_judge_calls

JUDGE_REF = {"type": "responses_api_models", "name": "judge_model"}


def _response(rid, usage=None, **extra):
    return {
        "id": rid,
        "object": "response",
        "model": "judge-1",
        "status": "completed",
        "output": [],
        "usage": usage,
        **extra,
    }


def _captured(call_id, rid, server, **extra):
    exchange = {
        "model_call_id": call_id,
        "dialect": "responses",
        "model_ref": {"type": "responses_api_models", "name": server},
        "status_code": 200,
        "request": {"model": "judge-1"},
        "response": _response(rid),
        **extra,
    }
    return record_mapping(derive_record(exchange, call_index=0))


def _row(*responses):
    return {"judge_evaluations": [{"responses_create_params": {"input": "grade"}, "response": r} for r in responses]}


def test_tokens_and_metadata_follow_the_capture_rules():
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_input_tokens": 4},  # alias honoured, as in capture
        "output_tokens": 5,
        "reasoning_output_tokens": 3,  # top-level alias
    }
    response = _response("resp_1", usage, incomplete_details={"reason": "max_output_tokens"}, status="incomplete")
    calls, skipped = read_judge_calls({"judge_response": response})
    record = calls[0].record
    assert skipped == [] and calls[0].location == "judge_response" and calls[0].label == "judge_response:resp_1"
    assert (record.tokens_in, record.tokens_out, record.tokens_reasoning, record.tokens_total) == (10, 5, 3, 15)
    assert (record.cached_tokens, record.cache_hit) == (4, True)
    assert (record.dialect, record.response_status, record.finish_reason) == (
        "responses",
        "incomplete",
        "max_output_tokens",
    )
    assert (record.model_ref, record.model_call_id, record.status_code, record.request) == (None, None, None, None)


def test_reported_zero_stays_zero_and_missing_usage_stays_null():
    calls, _ = read_judge_calls(_row(_response("a", {"input_tokens": 0, "output_tokens": 0}), _response("b")))
    assert (calls[0].record.tokens_in, calls[0].record.tokens_total) == (0, 0)
    assert (calls[1].record.tokens_in, calls[1].record.tokens_total) == (None, None)


def test_shapes_that_are_not_judge_calls_are_skipped_and_said_so():
    row = {
        "judge_evaluations": [None, {"responses_create_params": {}, "response": None}, {"response": "text"}],
        "judge_response": "[[A=B]]",
    }
    calls, skipped = read_judge_calls(row)
    assert calls == []
    assert [(s.location, s.malformed) for s in skipped] == [
        ("judge_evaluations.0", True),
        ("judge_evaluations.1", True),
        ("judge_evaluations.2", True),
        ("judge_response", False),
    ]
    assert read_judge_calls({"judge_evaluations": {"x": 1}})[1][0].reason == "not a list"
    assert read_judge_calls({"judge_evaluations": None, "judge_response": None}) == ([], [])
    assert is_response({"output": []}) and is_response({"object": "response"})
    assert not is_response({"criteria_scores": [], "overall_score": 0.5}) and not is_response(None)


def test_the_judge_server_becomes_the_model_ref_and_an_entry_may_name_its_capture_id():
    row = {
        "judge_evaluations": [{"responses_create_params": {}, "response": _response("r"), "model_call_id": "c" * 32}]
    }
    calls, _ = read_judge_calls(row, ModelServerRef(**JUDGE_REF))
    assert calls[0].record.model_ref.name == "judge_model" and calls[0].record.model_call_id == "c" * 32


def test_merge_fills_only_what_capture_left_null():
    stream = 'event: response.completed\ndata: {"type": "response.completed", "response": {"id": "resp_j"}}\n\n'
    raw = _captured("c1", "resp_j", "judge_model", response=None, response_raw=stream)  # streamed, no usage
    stripped = {key: value for key, value in _captured("c2", "resp_k", "judge_model").items() if key != "request"}
    calls, _ = read_judge_calls(_row(_response("resp_j", {"input_tokens": 7, "output_tokens": 1}), _response("resp_k")))
    merged = merge_judge_calls(calls, [raw, stripped], None, {})
    first, second = merged.capture_calls
    assert merged.own_calls == []
    # the second call's request came from the row: said by a gap; the first kept its own body
    assert [(g.code, g.detail) for g in merged.gaps] == [
        ("model_call_payload_from_judge_record", "judge_evaluations.1:resp_k")
    ]
    assert first["response"] is None and first["response_raw"].startswith("event:")  # capture kept a body: untouched
    assert (first["tokens_in"], first["model_call_id"]) == (7, "c1")  # null counts filled from the row
    assert second["request"] == {"input": "grade"}  # no request in capture at all: the row's


def test_several_matches_are_ambiguous_and_a_second_claim_is_a_conflict():
    captured = [_captured("c1", "resp_j", "judge_a"), _captured("c2", "resp_j", "judge_b")]
    calls, _ = read_judge_calls(_row(_response("resp_j")))
    merged = merge_judge_calls(calls, captured, None, {"judge_a": "judge", "judge_b": "judge"})
    assert [(g.code, g.invocation_id, g.detail) for g in merged.gaps] == [
        ("model_call_reference_ambiguous", None, "judge_evaluations.0:resp_j")
    ]
    assert merged.own_calls == []
    calls, _ = read_judge_calls(_row(_response("resp_j"), _response("resp_j")))
    merged = merge_judge_calls(calls, captured[:1], None, {})
    assert [(g.code, g.detail) for g in merged.gaps] == [
        ("model_call_reference_conflict", "judge_evaluations.1:resp_j")
    ]
    merged = merge_judge_calls(calls, [], None, {})  # the row repeats a call no capture has: added once
    assert len(merged.own_calls) == 1
    assert [g.code for g in merged.gaps] == ["model_call_from_judge_record", "model_call_reference_conflict"]


def test_a_call_of_a_server_with_another_role_is_never_the_judge_call():
    captured = [_captured("c1", "resp_j", "policy_model")]
    calls, _ = read_judge_calls(_row(_response("resp_j")))
    merged = merge_judge_calls(calls, captured, None, {"policy_model": "policy"})
    assert len(merged.own_calls) == 1 and merged.gaps[0].code == "model_call_from_judge_record"
    merged = merge_judge_calls(calls, captured, None, {"other": "judge"})  # judge named: only its calls
    assert len(merged.own_calls) == 1
    assert merge_judge_calls(calls, captured, None, {}).own_calls == []  # no role says otherwise


def test_an_entry_with_a_capture_id_merges_by_that_id_only():
    captured = [_captured("c1", "resp_other", "judge_model")]
    row = {
        "judge_evaluations": [{"responses_create_params": {}, "response": _response("resp_j"), "model_call_id": "c1"}]
    }
    calls, _ = read_judge_calls(row)
    merged = merge_judge_calls(calls, captured, None, {})
    assert merged.own_calls == [] and merged.gaps == []


def test_a_call_already_in_the_producer_trajectory_is_not_added():
    producer = {
        "model_calls": [{"model_call_id": None, "response_metadata": {"response_id": "resp_j", "model_ref": None}}]
    }
    calls, _ = read_judge_calls(_row(_response("resp_j")))
    merged = merge_judge_calls(calls, [_captured("c1", "resp_j", "judge_model")], producer, {"judge_model": "judge"})
    assert merged.own_calls == [] and merged.gaps == []
    assert merged.capture_calls[0]["request"] == {"model": "judge-1"}  # the producer's call stands; capture untouched


def test_parse_roles_and_resolve():
    roles = parse_roles(["judge_model=judge", "policy_model=policy", "user=user_simulator", "odd=name=tool_model"])
    assert roles == {
        "judge_model": "judge",
        "policy_model": "policy",
        "user": "user_simulator",
        "odd=name": "tool_model",
    }
    assert role_of("judge_model", roles) == "judge" and role_of("other", roles) is None and role_of(None, roles) is None
    assert judge_server(roles) == "judge_model"
    assert judge_server({"a": "judge", "b": "judge"}) is None and judge_server({}) is None
    for bad in ("noequals", "=judge", "name=", "name=a b"):
        with pytest.raises(ValueError):
            parse_roles([bad])
    assert parse_roles(["a=b", "a=b"]) == {"a": "b"}


@pytest.mark.parametrize(
    ("name", "roles", "expected"),
    [
        ("judge_model", {}, True),
        ("judge_model", {"judge_model": "judge"}, True),
        ("other", {"judge_model": "judge"}, False),
        ("policy_model", {"policy_model": "policy"}, False),
        ("other", {"policy_model": "policy"}, True),
        (None, {"judge_model": "judge"}, True),
    ],
)
def test_may_be_judge(name, roles, expected):
    assert may_be_judge(name, roles) is expected
