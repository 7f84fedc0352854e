"""The projection and the fallback invocation."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ng_traj.assemble.project import ProjectionInputs, project, project_call
from ng_traj.assemble.rollout import build_trajectory, fallback_invocation, without_payloads
from ng_traj.contract import AgentInvocation, ModelServerRef, TrajectoryModelCall, TrajectoryRecord, TrajectoryToolCall
from ng_traj.writers.jsonl import record_json

POLICY = {"type": "responses_api_models", "name": "policy"}


def _producer(**kw) -> dict:
    return {"task_id": "t", "rollout_id": "0-1", **kw}


def _gaps(record) -> list[tuple]:
    return [(g.code, g.invocation_id, g.detail) for g in record.gaps]


def test_producer_invocation_wins_and_observed_ones_are_appended():
    producer = _producer(
        invocations=[{"invocation_id": "root", "conversation": [{"role": "user", "content": "producer"}]}]
    )
    bundle = {
        "source": "pi",
        "records": [
            {"kind": "agent_invocation", "invocation_id": "root", "conversation": [{"role": "user", "content": "obs"}]},
            {"kind": "agent_invocation", "invocation_id": "child", "parent_invocation_id": "root"},
        ],
    }
    record = project(ProjectionInputs("t", "0-1", producer_trajectory=producer, bundles=[bundle]))
    assert [inv.invocation_id for inv in record.invocations] == ["root", "child"]
    assert record.invocations[0].conversation[0].content == "producer"
    # a valid producer trajectory reporting no turns has said so: no turns_unavailable (nemo-gym 0.7.0)
    assert _gaps(record) == [("model_calls_unavailable", None, None)]


def test_tool_merge_rules():
    conversation = [
        {"type": "function_call", "call_id": "merged", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "merged", "output": "from conversation"},
        {"type": "function_call", "call_id": "observed", "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "observed", "output": "observed output"},
    ]
    producer = _producer(
        invocations=[{"invocation_id": "root", "conversation": conversation}],
        tool_calls=[
            {"invocation_id": "root", "tool_call_id": "only_producer", "status": "failed", "output": "kept"},
            {
                "invocation_id": "root",
                "tool_call_id": "merged",
                "status": "completed",
                "started_at": 1.0,
                "completed_at": 2.0,
                "duration_ms": 1000.0,
                "output": "producer output",
            },
        ],
    )
    bundle = {
        "source": "pi",
        "records": [
            {
                "kind": "tool_call",
                "invocation_id": "root",
                "tool_call_id": "merged",
                "status": "unknown",
                "tool_name": "f",
            },
            {"kind": "tool_call", "invocation_id": "root", "tool_call_id": "observed", "status": "failed"},
        ],
    }
    tools = project(ProjectionInputs("t", "0-1", producer_trajectory=producer, bundles=[bundle])).tool_calls
    assert [(t.tool_call_id, t.status, t.output) for t in tools] == [
        ("only_producer", "failed", "kept"),
        ("merged", "completed", "from conversation"),
        ("observed", "failed", "observed output"),
    ]
    assert (tools[1].tool_name, tools[1].started_at, tools[1].duration_ms) == ("f", 1.0, 1000.0)


def test_identity_mismatch_rewrites_turns_and_model_calls_merge_by_id():
    producer = {
        "task_id": "wrong",
        "rollout_id": "0-1",
        "turns": [
            {
                "invocation_id": "root",
                "task_id": "wrong",
                "rollout_id": "0-1",
                "turn_no": 2,
                "timestamp": 5.0,
                "step_count": 1,
            },
            {
                "invocation_id": "root",
                "task_id": "wrong",
                "rollout_id": "0-1",
                "turn_no": 1,
                "timestamp": 3.0,
                "step_count": 0,
            },
        ],
        "model_calls": [
            {"model_call_id": "c1", "request": {"old": True}, "response_metadata": {"model": "producer-model"}},
            {"model_call_id": None, "response_metadata": {"response_id": "p-only"}},
        ],
        "gaps": [{"code": "resolution_unavailable", "invocation_id": "root"}],
    }
    capture = [
        {"model_call_id": "c2", "model": "x", "latency_total_ms": 5.0, "response": {"status": "failed"}},
        {
            "model_call_id": "c1",
            "model": None,
            "request": {"new": True},
            "response_status": "completed",
            "response": {"status": "incomplete"},
            "tokens_in": 10,
            "tokens_out": -1,
        },
    ]
    record = project(
        ProjectionInputs(
            "t", "0-1", producer_trajectory=producer, capture_calls=capture, capture_gaps=[{"code": "x", "bad": 1}]
        )
    )
    assert [(t.task_id, t.turn_no) for t in record.turns] == [("t", 1), ("t", 2)]
    calls = record.model_calls
    assert [c.model_call_id for c in calls] == ["c1", None, "c2"]
    assert calls[0].request == {"new": True}
    assert (calls[0].response_metadata.model, calls[0].response_metadata.response_status) == (
        "producer-model",
        "completed",
    )
    assert (calls[0].token_stats.prompt_tokens, calls[0].token_stats.completion_tokens) == (10, None)
    assert (calls[2].response_metadata.response_status, calls[2].duration_ms) == ("failed", 5.0)
    assert _gaps(record) == [
        ("producer_trajectory_identity_mismatch", None, "task_id"),
        ("resolution_unavailable", "root", None),
        ("model_call_capture_gap_invalid", None, None),
        ("conversation_unavailable", None, None),
    ]


def test_invalid_attachments_become_reference_gaps():
    record = project(ProjectionInputs("t", "r", producer_trajectory={"schema_version": "2.0"}, bundles=[{"source": 1}]))
    assert _gaps(record)[:2] == [
        ("producer_trajectory_invalid", None, "ValidationError"),
        ("agent_observations_invalid", None, "ValidationError"),
    ]


def test_negative_latency_fails_the_projection_into_a_minimal_record():
    record, failed = build_trajectory(ProjectionInputs("t", "r", capture_calls=[{"latency_total_ms": -1}]))
    assert failed is not None
    assert record.model_dump(mode="json") == {
        "schema_version": "1.0",
        "task_id": "t",
        "rollout_id": "r",
        "invocations": [],
        "turns": [],
        "model_calls": [],
        "tool_calls": [],
        "gaps": [{"code": "trajectory_projection_failed", "invocation_id": None, "detail": "ValidationError"}],
    }


def test_fallback_only_without_conversation_evidence():
    row = {
        "responses_create_params": {"input": "What is 2+2?"},
        "response": {
            "status": "completed",
            "output": [
                {
                    "type": "message",
                    "id": "m1",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "4", "annotations": []}],
                },
                {"type": "no_such_item"},
            ],
        },
    }
    fallback = fallback_invocation(row)
    assert fallback.invocation.status == "completed"
    assert [item.type for item in fallback.invocation.conversation] == ["message", "message"]
    assert (fallback.gap.code, fallback.gap.detail) == ("conversation_from_rollout_record", "dropped_items=1")
    record = project(ProjectionInputs("t", "r", fallback=fallback))
    assert [inv.invocation_id for inv in record.invocations] == ["rollout_record"]
    assert _gaps(record) == [
        ("conversation_from_rollout_record", None, "dropped_items=1"),
        ("model_calls_unavailable", None, None),
        ("turns_unavailable", None, None),
    ]
    with_evidence = project(
        ProjectionInputs(
            "t",
            "r",
            producer_trajectory=_producer(
                rollout_id="r",
                invocations=[{"invocation_id": "root", "conversation": [{"role": "user", "content": "x"}]}],
            ),
            fallback=fallback,
        )
    )
    assert [inv.invocation_id for inv in with_evidence.invocations] == ["root"]


def test_fallback_status_from_response_error():
    fallback = fallback_invocation(
        {"response": {"error": {"code": "server_error"}, "output": [{"role": "user", "content": "x"}]}}
    )
    assert (fallback.invocation.status, fallback.invocation.error_type) == ("failed", "server_error")
    assert fallback_invocation({"response": {"output": []}}) is None


@pytest.mark.parametrize(
    "row",
    [
        {"responses_create_params": {"input": "q"}, "response": {"status": "completed", "output": []}},
        {"responses_create_params": {"input": [{"role": "user", "content": "q"}, {"type": "no_such_item"}]}},
        {
            "response": {
                "error": {"type": "timeout"},
                "status": "cancelled",
                "output": [{"role": "user", "content": "x"}],
            }
        },
        {"response": {"error": {}, "output": [{"role": "user", "content": "x"}]}},
        {"response": {"status": 3, "output": [{"role": "user", "content": "x"}]}},
    ],
)
def test_the_fallback_invocation_is_the_one_pydantic_makes(row):
    invocation = fallback_invocation(row).invocation
    given = {name: getattr(invocation, name) for name in invocation.model_fields_set}
    expected = AgentInvocation(**given)
    assert invocation == expected and invocation.model_fields_set == expected.model_fields_set
    assert list(invocation.__dict__) == list(AgentInvocation.model_fields)  # the writers' field order
    assert invocation.model_dump_json() == expected.model_dump_json()
    assert [type(item) for item in invocation.conversation] == [type(item) for item in expected.conversation]


def test_raw_bodies_stand_in_for_unparsed_payloads():
    record = project(
        ProjectionInputs(
            "t",
            "r",
            capture_calls=[
                {
                    "model_call_id": "x",
                    "request": None,
                    "request_raw": "[1, 2]",
                    "response": None,
                    "response_raw": "oops",
                    "status_code": 422,
                    "error_category": "client_error",
                },
            ],
        )
    )
    call = record.model_calls[0]
    assert (call.request, call.response) == ("[1, 2]", "oops")
    assert (call.response_metadata.status_code, call.response_metadata.error_category) == (422, "client_error")


CAPTURED = {
    "model_call_id": "c1",
    "response_id": "resp_1",
    "model_ref": ModelServerRef(**POLICY),
    "model": "m",
    "dialect": "responses",
    "status_code": 200,
    "response_source": "upstream",
    "started_at": 1.0,
    "completed_at": 2.0,
    "latency_total_ms": 1000.0,
    "latency_ttft_ms": 5.0,
    "tokens_in": 3,
    "tokens_out": 2,
    "request": {"input": [{"role": "user", "content": "hi"}]},
    "response": {"id": "resp_1", "status": "completed", "output": [{"type": "message", "role": "assistant"}]},
}


def _validated_call(raw: dict) -> TrajectoryModelCall:
    """The call as pydantic validates it from the mapping's JSON (what ``project_call`` must equal)."""
    call = project_call(raw)
    return TrajectoryModelCall.model_validate(call.model_dump(mode="json"))


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"started_at": 1, "latency_total_ms": 1000, "latency_ttft_ms": 5},
        {"model_ref": dict(POLICY), "status_code": 200.0},
        {"model_ref": None, "response": None, "response_raw": "event: x", "request": None, "request_raw": "raw"},
        {"response": {"id": "resp_1", "status": 5, "output": []}},
        {"response_status": "incomplete"},
    ],
    ids=["as_derived", "int_times", "recorded_json", "raw_bodies", "status_not_text", "status_recorded"],
)
def test_projected_call_is_the_validated_one(changes):
    raw = {**CAPTURED, **changes}
    call = project_call(raw)
    validated = _validated_call(raw)
    assert call == validated
    assert record_json(call) == record_json(validated)
    for part in ("response_metadata", "token_stats", None):
        mine, theirs = (getattr(c, part) if part else c for c in (call, validated))
        assert [type(v) for v in mine.__dict__.values()] == [type(v) for v in theirs.__dict__.values()], part


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"response_status": "incomplete"},
        {"model_ref": dict(POLICY), "started_at": 1},
        {"response": None, "response_raw": "event: x", "request": None, "request_raw": "raw"},
    ],
)
def test_a_call_without_payloads_is_the_call_of_its_mapping_without_them(changes):
    raw = {**CAPTURED, **changes}
    stripped = without_payloads([raw])[0]
    call = project_call(raw, payloads=False)
    assert call == project_call(stripped)
    assert record_json(call) == record_json(project_call(stripped))
    assert (call.request, call.response) == (None, None)
    assert call.response_metadata.response_status == changes.get("response_status")  # not the response's
    calls = [raw, {**raw, "model_call_id": "c2"}]
    inputs = {"bundles": [_owning_bundle(model_call_id="c1")]}
    record = project(ProjectionInputs("t", "0-1", capture_calls=calls, capture_payloads=False, **inputs))
    expected = project(ProjectionInputs("t", "0-1", capture_calls=without_payloads(calls), **inputs))
    assert record_json(record) == record_json(expected)


@pytest.mark.parametrize(
    "changes",
    [{"latency_ttft_ms": -1.0}, {"latency_total_ms": -0.5}, {"response_source": "remote"}, {"started_at": "soon"}],
)
def test_values_the_contract_rejects_still_fail_the_call(changes):
    with pytest.raises(ValidationError):
        project_call({**CAPTURED, **changes})


def _owning_bundle(**ref) -> dict:
    return {
        "source": "pi",
        "records": [
            {
                "kind": "agent_invocation",
                "invocation_id": "root",
                "conversation": [{"role": "user", "content": "hi"}],
                "model_calls": [ref],
            },
            {"kind": "tool_call", "invocation_id": "root", "tool_call_id": "t1", "status": "completed"},
        ],
    }


def test_synthesised_turns_and_tools_are_the_validated_ones():
    inputs = ProjectionInputs("t", "0-1", bundles=[_owning_bundle(model_call_id="c1")], capture_calls=[CAPTURED])
    record = project(inputs)
    again = TrajectoryRecord.model_validate_json(record_json(record))
    assert record == again
    assert record_json(record) == record_json(again)
    assert [type(v) for v in record.turns[0].__dict__.values()] == [type(v) for v in again.turns[0].__dict__.values()]
    assert (record.turns[0].turn_no, record.turns[0].model_calls[0].model_call_id) == (1, "c1")
    assert record.tool_calls[0] == TrajectoryToolCall(invocation_id="root", tool_call_id="t1", status="completed")


def test_a_turn_whose_call_has_no_join_key_fails_the_projection():
    call = {**CAPTURED, "model_call_id": None, "model_ref": None}
    record, failed = build_trajectory(
        ProjectionInputs(
            "t", "0-1", bundles=[_owning_bundle(response_id="resp_1", model_ref=POLICY)], capture_calls=[call]
        )
    )
    assert isinstance(failed, ValidationError)
    assert failed.errors()[0]["type"] == "missing_join_key"
    assert _gaps(record) == [("trajectory_projection_failed", None, "ValidationError")]
