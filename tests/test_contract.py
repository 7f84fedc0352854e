"""The contract models against NeMo Gym's rules."""

from __future__ import annotations

import orjson
import pytest
from pydantic import ValidationError

from conftest import FIXTURES
from ng_traj.contract import (
    AgentInvocation,
    AgentObservationBundle,
    ContextCompactionObservation,
    ModelCallRef,
    SandboxObservation,
    ToolCallObservation,
    TrajectoryModelCall,
    TrajectoryRecord,
)
from ng_traj.writers.jsonl import record_json

POLICY = {"type": "responses_api_models", "name": "policy"}


def _codes(exc: pytest.ExceptionInfo[ValidationError]) -> list[str]:
    return [error["type"] for error in exc.value.errors()]


def test_ref_needs_call_id_or_model_ref_and_response_id():
    assert ModelCallRef(model_call_id="abc").model_call_id == "abc"
    assert ModelCallRef(model_ref=POLICY, response_id="r").response_id == "r"
    for bad in ({}, {"response_id": "r"}, {"model_ref": POLICY}, {"model_call_id": "", "model_ref": POLICY}):
        with pytest.raises(ValidationError) as exc:
            ModelCallRef.model_validate(bad)
        assert _codes(exc) == ["missing_join_key"]


def _bundle(*records: dict) -> dict:
    return {"source": "pi", "records": list(records)}


@pytest.mark.parametrize(
    ("records", "code"),
    [
        ([{"kind": "agent_invocation", "invocation_id": "a"}] * 2, "duplicate_invocation_id"),
        ([{"kind": "agent_invocation", "invocation_id": "a", "parent_invocation_id": "a"}], "parent_cycle"),
        (
            [
                {"kind": "agent_invocation", "invocation_id": "a", "parent_invocation_id": "c"},
                {"kind": "agent_invocation", "invocation_id": "b", "parent_invocation_id": "a"},
                {"kind": "agent_invocation", "invocation_id": "c", "parent_invocation_id": "b"},
            ],
            "parent_cycle",
        ),
    ],
)
def test_bundle_rejects_duplicate_ids_and_cycles(records, code):
    with pytest.raises(ValidationError) as exc:
        AgentObservationBundle.model_validate(_bundle(*records))
    assert _codes(exc) == [code]


def test_bundle_allows_missing_parents():
    bundle = AgentObservationBundle.model_validate(
        _bundle({"kind": "agent_invocation", "invocation_id": "child", "parent_invocation_id": "absent"})
    )
    assert bundle.records[0].parent_invocation_id == "absent"


def test_unknown_fields_and_legacy_turn_records_are_rejected():
    with pytest.raises(ValidationError) as exc:
        ToolCallObservation.model_validate({"invocation_id": "a", "tool_call_id": "c", "output": "x"})
    assert _codes(exc) == ["extra_forbidden"]
    with pytest.raises(ValidationError) as exc:
        AgentObservationBundle.model_validate(_bundle({"kind": "turn", "invocation_id": "a"}))
    assert _codes(exc) == ["union_tag_invalid"]


def test_trajectory_rejects_duplicate_model_call_ids_but_not_null_ones():
    calls = [{"model_call_id": None}, {"model_call_id": None}, {"model_call_id": "x"}]
    assert len(TrajectoryRecord(task_id="t", rollout_id="r", model_calls=calls).model_calls) == 3
    with pytest.raises(ValidationError) as exc:
        TrajectoryRecord(task_id="t", rollout_id="r", model_calls=[*calls, {"model_call_id": "x"}])
    assert _codes(exc) == ["duplicate_model_call_id"]


def test_negative_durations_and_counts_and_reversed_timing_are_rejected():
    with pytest.raises(ValidationError):
        TrajectoryModelCall(duration_ms=-1)
    with pytest.raises(ValidationError):
        TrajectoryModelCall.model_validate({"token_stats": {"completion_tokens": -1}})
    with pytest.raises(ValidationError) as exc:
        ToolCallObservation(invocation_id="a", tool_call_id="c", started_at=2.0, completed_at=1.0)
    assert _codes(exc) == ["tool_timing_reversed"]
    with pytest.raises(ValidationError):
        SandboxObservation(role="agent", peak_memory_mib=-1)


def test_compaction_token_counts_may_disagree():
    compaction = ContextCompactionObservation(invocation_id="a", tokens_before=10, tokens_after=50)
    assert (compaction.tokens_before, compaction.tokens_after) == (10, 50)


def test_trajectory_cycle_is_accepted_by_the_model():
    record = TrajectoryRecord(
        task_id="t",
        rollout_id="r",
        invocations=[
            AgentInvocation(invocation_id="a", parent_invocation_id="b"),
            AgentInvocation(invocation_id="b", parent_invocation_id="a"),
        ],
    )
    assert len(record.invocations) == 2


def test_assignment_is_validated():
    invocation = AgentInvocation(invocation_id="a")
    with pytest.raises(ValidationError):
        invocation.status = "done"  # type: ignore[assignment]


def _valid_lines():
    for path in sorted((FIXTURES / "validate" / "valid").glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            yield orjson.loads(line)


def test_valid_fixtures_round_trip_model_json_model():
    for value in _valid_lines():
        trajectory = value.get("ng_trajectory", value)
        record = TrajectoryRecord.model_validate(trajectory)
        dumped = orjson.dumps(record.model_dump(mode="json"))
        again = TrajectoryRecord.model_validate_json(dumped)
        assert again == record
        assert orjson.dumps(again.model_dump(mode="json")) == dumped
        if "ng_agent_observations" in value:
            bundle = AgentObservationBundle.model_validate(value["ng_agent_observations"])
            assert AgentObservationBundle.model_validate_json(bundle.model_dump_json()) == bundle


def test_serialisation_emits_every_field_with_nulls_in_upstream_order():
    record = TrajectoryRecord(task_id="t", rollout_id="r", model_calls=[{}], gaps=[{"code": "turns_unavailable"}])
    dumped = record.model_dump(mode="json")
    assert list(dumped) == [
        "schema_version",
        "task_id",
        "rollout_id",
        "invocations",
        "turns",
        "model_calls",
        "tool_calls",
        "gaps",
    ]
    assert dumped["gaps"] == [{"code": "turns_unavailable", "invocation_id": None, "detail": None}]
    call = dumped["model_calls"][0]
    assert list(call) == [
        "model_call_id",
        "started_at",
        "completed_at",
        "duration_ms",
        "request",
        "response",
        "response_metadata",
        "token_stats",
    ]
    assert list(call["response_metadata"]) == [
        "response_id",
        "model_ref",
        "model",
        "dialect",
        "status_code",
        "response_status",
        "finish_reason",
        "upstream_attempted",
        "response_source",
        "upstream_status_code",
        "local_response_reason",
        "error_category",
        "latency_ttft_ms",
    ]
    earlier = orjson.loads(record_json(record, "pre-0.7"))["model_calls"][0]["response_metadata"]
    assert list(earlier) == [
        "response_id",
        "model_ref",
        "model",
        "dialect",
        "status_code",
        "response_status",
        "finish_reason",
        "error_category",
        "latency_ttft_ms",
    ]
    assert call["token_stats"] == dict.fromkeys(
        ["prompt_tokens", "completion_tokens", "reasoning_tokens", "total_tokens", "cached_tokens"]
    )


@pytest.mark.parametrize(
    ("item", "member", "dumped"),
    [
        (
            {"type": "message", "role": "user", "content": "hi"},
            "EasyInputMessage",
            {"content": "hi", "role": "user", "type": "message", "phase": None},
        ),
        (
            {"role": "user", "content": [{"type": "input_text", "text": "x"}], "status": "completed"},
            "InputMessage",
            {
                "content": [{"text": "x", "type": "input_text"}],
                "role": "user",
                "status": "completed",
                "type": "message",
            },
        ),
        (
            {"type": "function_call_output", "call_id": "c", "output": "o", "extra": 1},
            "FunctionCallOutput",
            {"call_id": "c", "output": "o", "type": "function_call_output", "id": None, "status": None},
        ),
        (
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            "FunctionCall",
            {
                "arguments": "{}",
                "call_id": "c",
                "name": "f",
                "type": "function_call",
                "id": None,
                "status": None,
                "namespace": None,
            },
        ),
        (
            {"type": "reasoning", "id": "r", "summary": [{"type": "summary_text", "text": "t"}]},
            "ReasoningItem",
            {
                "id": "r",
                "summary": [{"text": "t", "type": "summary_text"}],
                "type": "reasoning",
                "encrypted_content": None,
                "content": None,
            },
        ),
    ],
)
def test_conversation_items_resolve_like_upstream(item, member, dumped):
    invocation = AgentInvocation(invocation_id="a", conversation=[item])
    assert type(invocation.conversation[0]).__name__ == member
    assert invocation.model_dump(mode="json")["conversation"][0] == dumped


def test_training_variant_wins_when_token_fields_are_present():
    item = {
        "type": "message",
        "role": "assistant",
        "content": "x",
        "prompt_token_ids": [1],
        "generation_token_ids": [2],
        "generation_log_probs": [-0.1],
    }
    invocation = AgentInvocation(invocation_id="a", conversation=[item])
    assert type(invocation.conversation[0]).__name__ == "EasyInputMessageForTraining"
    assert list(invocation.model_dump(mode="json")["conversation"][0])[:4] == [
        "prompt_token_ids",
        "generation_token_ids",
        "generation_log_probs",
        "routed_experts",
    ]


def test_every_ng_traj_gap_and_diagnostic_code_is_documented_in_the_docs():
    from conftest import ROOT
    from ng_traj.contract.gaps import NG_TRAJ_GAPS
    from ng_traj.diagnostics import CODES

    gaps = (ROOT / "docs" / "gaps.md").read_text(encoding="utf-8")
    diagnostics = (ROOT / "docs" / "diagnostics.md").read_text(encoding="utf-8")
    missing = [code for code in NG_TRAJ_GAPS if f"`{code}`" not in gaps]
    missing += [code for code in CODES if f"`{code}`" not in diagnostics]
    assert missing == []


def test_a_built_model_is_the_model_validation_makes_and_behaves_as_one():
    import pickle

    from ng_traj.contract import TrajectoryTokenStats
    from ng_traj.contract.base import built_model

    values = {
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "reasoning_tokens": None,
        "total_tokens": 10,
        "cached_tokens": 0,
    }
    built = built_model(TrajectoryTokenStats, values, fields_set={"prompt_tokens", "total_tokens"})
    validated = TrajectoryTokenStats(prompt_tokens=7, completion_tokens=3, total_tokens=10, cached_tokens=0)
    assert built == validated
    assert built.__dict__ is values  # held as given, not copied
    assert built.model_fields_set == {"prompt_tokens", "total_tokens"}
    assert built.__pydantic_extra__ is None and built.__pydantic_private__ is None
    assert built_model(TrajectoryTokenStats, dict(values)).model_fields_set == set(values)
    assert (
        record_json(built)
        == b'{"prompt_tokens":7,"completion_tokens":3,"reasoning_tokens":null,"total_tokens":10,"cached_tokens":0}'
    )
    assert pickle.loads(pickle.dumps(built)) == validated
    assert built.model_copy(update={"cached_tokens": 2}).cached_tokens == 2
    with pytest.raises(ValidationError):
        built.prompt_tokens = -1  # assignment is still validated (ge=0)
    built.completion_tokens = 4
    assert built.completion_tokens == 4 and "completion_tokens" in built.model_fields_set
