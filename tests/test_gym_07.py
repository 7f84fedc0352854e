"""The contract as nemo-gym 0.7.0 writes it: capture fields, synthesised turns, the session pre-step,
``ng_perf``, the capture rule for rows without a result, and the earlier revision.

Every expected value here is worked out by hand from the release's rules (field order, turn content
per dialect, step counting, ownership), not taken from a run of ng-traj.
"""

from __future__ import annotations

import json

import jsonschema
import orjson
import pytest
from pydantic import ValidationError

from conftest import FIXTURES, ROOT, run_cli
from ng_traj.assemble.join import join_model_call_observations
from ng_traj.assemble.perf import ng_perf
from ng_traj.assemble.project import ProjectionInputs, project
from ng_traj.assemble.turns import turn_content, turns_from_calls
from ng_traj.contract import AgentInvocation, AgentObservationBundle, TrajectoryModelCall, TrajectoryRecord
from ng_traj.contract.revisions import earlier_loss, keys_0_7, lost_in_earlier
from ng_traj.sources.capture.record import derive_record
from ng_traj.sources.capture.sse import reassemble
from ng_traj.writers.jsonl import record_json

POLICY = {"type": "responses_api_models", "name": "policy"}


def _line(**kw) -> dict:
    return {"model_call_id": "c1", "dialect": "responses", "model_ref": POLICY, "status_code": 200, **kw}


# capture line fields (change table rows 1, 2, 4, 7)


def test_client_session_id_is_kept_only_when_text():
    assert derive_record(_line(client_session_id="sess-1"), call_index=0).client_session_id == "sess-1"
    assert derive_record(_line(client_session_id=7), call_index=0).client_session_id is None


def test_execution_fields_are_copied_with_lax_coercion():
    record = derive_record(
        _line(
            upstream_attempted="true",
            response_source="local",
            upstream_status_code=400,
            local_response_reason="context_length_exceeded",
            error_category="context_length_exceeded",
        ),
        call_index=0,
    )
    assert (record.upstream_attempted, record.response_source, record.upstream_status_code) == (True, "local", 400)
    assert (record.local_response_reason, record.error_category) == ("context_length_exceeded",) * 2


def test_response_source_out_of_its_set_fails_the_line():
    with pytest.raises(ValidationError):
        derive_record(_line(response_source="cache"), call_index=0)


def test_unreadable_response_source_counts_as_an_unreadable_capture_line(tmp_path):
    store = tmp_path / "capture"
    store.mkdir()
    good = _line(response={"id": "r1", "output": []})
    lines = [
        good,
        {**_line(model_call_id="c2", response_source="cache")},
        _line(model_call_id="c3", error_category="cancelled"),
    ]
    (store / "0-0.capture.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "out.jsonl"
    result = run_cli("build", store, "-o", out, "-q")
    assert result.exit_code == 0, result.stderr
    record = json.loads(out.read_text())
    assert [call["model_call_id"] for call in record["model_calls"]] == ["c1", "c3"]
    assert record["model_calls"][1]["response_metadata"]["error_category"] == "cancelled"
    assert {"code": "model_call_capture_records_unreadable", "invocation_id": None, "detail": "count=1"} in record[
        "gaps"
    ]


def test_execution_fields_reach_response_metadata_in_upstream_order(tmp_path):
    store = tmp_path / "capture"
    store.mkdir()
    line = _line(upstream_attempted=False, response_source="local", local_response_reason="empty_assistant")
    (store / "0-0.capture.jsonl").write_text(json.dumps(line) + "\n")
    out = tmp_path / "out.jsonl"
    assert run_cli("build", store, "-o", out, "-q").exit_code == 0
    metadata = json.loads(out.read_text())["model_calls"][0]["response_metadata"]
    assert list(metadata) == [
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
    assert (metadata["upstream_attempted"], metadata["response_source"]) == (False, "local")
    assert (metadata["upstream_status_code"], metadata["local_response_reason"]) == (None, "empty_assistant")


# turn content per dialect (row 10)


def test_responses_turn_content():
    request = {"input": [{"role": "user", "content": "q"}, {"type": "message", "role": "user", "content": "t"}, "x"]}
    response = {
        "output": [
            {"type": "reasoning", "id": "rs", "summary": []},
            {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "b", "name": "f", "arguments": "{}"},
            {"type": "message", "role": "assistant", "content": []},
            "not an object",
        ]
    }
    question, answer, reasoning, tools = turn_content(request, response)
    assert question == [
        {"type": "message", "role": "user", "content": "q"},
        {"type": "message", "role": "user", "content": "t"},
        "x",
    ]
    assert [item["type"] for item in answer] == ["function_call", "function_call", "message"]
    assert reasoning == [{"type": "reasoning", "id": "rs", "summary": []}]
    assert tools == 2


def test_chat_turn_content_drops_reasoning_keys_from_the_answer():
    request = {"model": "m", "messages": [{"role": "user", "content": "q"}]}
    message = {"role": "assistant", "content": "a", "reasoning_content": "why", "tool_calls": [{"id": "t"}]}
    question, answer, reasoning, tools = turn_content(request, {"choices": [{"message": message}]})
    assert question == [{"role": "user", "content": "q"}]
    assert answer == {"role": "assistant", "content": "a", "tool_calls": [{"id": "t"}]}
    assert (reasoning, tools) == ("why", 1)
    assert turn_content(request, {"choices": [{"message": {"role": "assistant", "reasoning": "r"}}]})[2] == "r"


def test_anthropic_and_raw_responses_have_no_answer():
    request = {"system": "s", "messages": [{"role": "user", "content": "q"}]}
    anthropic = {"type": "message", "content": [{"type": "text", "text": "a"}]}
    assert turn_content(request, anthropic) == ([{"role": "user", "content": "q"}], None, None, 0)
    assert turn_content("raw request", "data: {}\n\n") == ("raw request", None, None, 0)
    assert turn_content({"input": "text"}, {"output": []}) == ("text", [], None, 0)


# synthesised turns (rows 10, 11)


def _call(call_id, response_id=None, *, response=None, started=None, completed=None) -> TrajectoryModelCall:
    return TrajectoryModelCall(
        model_call_id=call_id,
        started_at=started,
        completed_at=completed,
        request={"input": [{"role": "user", "content": call_id}]},
        response=response,
        response_metadata={"response_id": response_id, "model_ref": POLICY},
    )


def _tool_response(n: int) -> dict:
    return {"output": [{"type": "function_call", "call_id": f"t{i}", "name": "f", "arguments": "{}"} for i in range(n)]}


def test_turns_follow_call_order_count_per_invocation_and_carry_resolved_on_the_last():
    invocations = [
        AgentInvocation(invocation_id="root", model_calls=[{"model_call_id": "a"}, {"model_call_id": "c"}]),
        AgentInvocation(invocation_id="child", model_calls=[{"model_ref": POLICY, "response_id": "resp-b"}]),
    ]
    calls = [
        _call("a", response=_tool_response(2), started=10.0),
        _call("b", "resp-b", response={"output": []}, completed=11.0),
        _call("judge", response={"output": []}, started=12.0),
        _call("c", response=_tool_response(1)),
        _call("no-response"),
    ]
    turns = turns_from_calls("t", "r", invocations, calls, resolved=True)
    assert [(t.invocation_id, t.turn_no, t.step_count, t.timestamp) for t in turns] == [
        ("root", 1, 0, 10.0),
        ("child", 1, 0, 11.0),
        ("root", 2, 2, 0.0),
    ]
    assert [t.resolved for t in turns] == [None, None, True]
    assert turns[1].model_calls[0].model_dump() == {"model_call_id": "b", "model_ref": POLICY, "response_id": "resp-b"}
    assert turns_from_calls("t", "r", invocations, calls, resolved="yes")[-1].resolved is None


def _bundle(*refs) -> dict:
    return {
        "source": "pi",
        "records": [{"kind": "agent_invocation", "invocation_id": "root", "model_calls": list(refs)}],
    }


def _raw(call_id: str, **kw) -> dict:
    return {"model_call_id": call_id, "model_ref": POLICY, "request": {"input": "q"}, **kw}


def test_projection_synthesises_turns_only_without_a_producer_trajectory():
    calls = [_raw("a", response={"output": []})]
    built = project(ProjectionInputs("t", "r", bundles=[_bundle({"model_call_id": "a"})], capture_calls=calls))
    assert [turn.model_calls[0].model_call_id for turn in built.turns] == ["a"]
    assert "turns_unavailable" not in [gap.code for gap in built.gaps]
    invalid = project(
        ProjectionInputs(
            "t", "r", producer_trajectory={"turns": 3}, bundles=[_bundle({"model_call_id": "a"})], capture_calls=calls
        )
    )
    assert [gap.code for gap in invalid.gaps][:1] == ["producer_trajectory_invalid"]
    assert invalid.turns == [] and "turns_unavailable" in [gap.code for gap in invalid.gaps]


def test_a_raw_error_body_is_a_turn_but_a_call_without_any_response_is_not():
    calls = [_raw("a", response_raw="upstream said 500"), _raw("b")]
    built = project(
        ProjectionInputs(
            "t", "r", bundles=[_bundle({"model_call_id": "a"}, {"model_call_id": "b"})], capture_calls=calls
        )
    )
    assert [(turn.model_calls[0].model_call_id, turn.answer) for turn in built.turns] == [("a", None)]


def test_no_payloads_build_has_no_synthesised_turns(tmp_path):
    store = tmp_path / "capture"
    store.mkdir()
    line = _line(client_session_id="root", response={"id": "r1", "output": []}, request={"input": "q"})
    (store / "0-0.capture.jsonl").write_text(json.dumps(line) + "\n")
    rows = tmp_path / "rollouts.jsonl"
    row = {"_ng_rollout_id": "0-0", "response": {"output": []}, "ng_agent_observations": _bundle()}
    rows.write_text(json.dumps(row) + "\n")
    for flags, expected in (((), 1), (("--no-payloads",), 0)):
        out = tmp_path / "out.jsonl"
        assert run_cli("build", rows, store, "-o", out, "-q", *flags).exit_code == 0
        record = json.loads(out.read_text())
        assert len(record["turns"]) == expected
        assert ("turns_unavailable" in [g["code"] for g in record["gaps"]]) == (expected == 0)


# the client_session_id pre-step (row 9)


def _record(call_id, session=None, response_id=None):
    return derive_record(
        _line(model_call_id=call_id, client_session_id=session, response={"id": response_id} if response_id else None),
        call_index=0,
    )


def _refs(bundle: AgentObservationBundle) -> dict[str, list[str]]:
    return {r.invocation_id: [ref.model_call_id for ref in r.model_calls] for r in bundle.records}


def test_session_id_gives_the_invocation_a_ref_unless_an_equivalent_one_is_there():
    bundle = AgentObservationBundle.model_validate(
        {
            "source": "x",
            "records": [
                {
                    "kind": "agent_invocation",
                    "invocation_id": "s1",
                    "model_calls": [{"model_ref": POLICY, "response_id": "r2"}],
                },
                {"kind": "agent_invocation", "invocation_id": "s2"},
            ],
        }
    )
    calls = [_record("c1", "s1"), _record("c2", "s1", "r2"), _record("c3", "nobody"), _record("c4", "s2")]
    joined = join_model_call_observations(bundle, calls)
    assert _refs(joined) == {"s1": ["c2", "c1"], "s2": ["c4"]}
    assert [(g.code, g.detail) for g in joined.gaps] == [
        ("model_call_ownership_unavailable", "capture:c3:call_index=0")
    ]
    assert _refs(bundle) == {"s1": [None], "s2": []}  # the input bundle is not modified
    assert _refs(join_model_call_observations(joined, calls)) == _refs(joined)  # joining twice = once


@pytest.mark.parametrize(("order", "loser"), [(("s1", "other"), "other"), (("other", "s1"), "s1")])
def test_session_ref_conflicts_fall_on_whichever_invocation_comes_second(order, loser):
    records = {
        "s1": {"kind": "agent_invocation", "invocation_id": "s1"},
        "other": {"kind": "agent_invocation", "invocation_id": "other", "model_calls": [{"model_call_id": "c1"}]},
    }
    bundle = AgentObservationBundle.model_validate({"source": "x", "records": [records[name] for name in order]})
    joined = join_model_call_observations(bundle, [_record("c1", "s1")])
    conflicts = [(g.invocation_id, g.detail) for g in joined.gaps if g.code == "model_call_reference_conflict"]
    assert conflicts == [(loser, "c1")]


# ng_perf (row 13)


def test_ng_perf_counts_owned_calls_once_and_sums_reported_tokens():
    record = TrajectoryRecord(
        task_id="t",
        rollout_id="r",
        invocations=[
            {
                "invocation_id": "root",
                "model_calls": [{"model_call_id": "a"}, {"model_call_id": "a"}, {"model_call_id": "zz"}],
            },
            {"invocation_id": "child", "model_calls": [{"model_ref": POLICY, "response_id": "rb"}]},
            {"invocation_id": "idle"},
        ],
        turns=[
            {
                "invocation_id": "root",
                "task_id": "t",
                "rollout_id": "r",
                "turn_no": n,
                "timestamp": 0.0,
                "step_count": 0,
            }
            for n in (1, 2, 3)
        ],
        model_calls=[
            {"model_call_id": "a", "token_stats": {"prompt_tokens": 10, "cached_tokens": 4}},
            {
                "model_call_id": "b",
                "response_metadata": {"response_id": "rb", "model_ref": POLICY},
                "token_stats": {"prompt_tokens": 5, "completion_tokens": 2},
            },
        ],
        tool_calls=[{"invocation_id": "child", "tool_call_id": "t1"}, {"invocation_id": "ghost", "tool_call_id": "t2"}],
    )
    # root: 3 turns; child: no turns, 1 owned call; idle: nothing -> 1. Owned calls a and b.
    assert ng_perf(record, {"total_latency_ms": 1234.5}) == {
        "num_turns": 5,
        "num_tool_calls": 1,
        "token_observability_coverage": 0.4,
        "prompt_tokens": 15,
        "cached_prompt_tokens": 4,
        "completion_tokens": 2,
        "total_latency_ms": 1234.5,
    }
    assert ng_perf(TrajectoryRecord(task_id="t", rollout_id="r")) is None


# rows without an agent result (row 14)


def test_capture_of_a_failed_run_row_is_reported_not_merged(tmp_path):
    store = tmp_path / "capture"
    store.mkdir()
    (store / "0-0.capture.jsonl").write_text(json.dumps(_line(response={"id": "r", "output": []})) + "\n")
    rows = tmp_path / "rollouts_failures.jsonl"
    rows.write_text(json.dumps({"_ng_rollout_id": "0-0", "_ng_failure_class": "agent_run_error", "reward": 0}) + "\n")
    out = tmp_path / "out.jsonl"
    result = run_cli("build", rows, store, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert "warning[capture_not_merged]" in result.stderr and "1 captured call not merged" in result.stderr
    assert json.loads(out.read_text())["model_calls"] == []


# the earlier revision


def test_earlier_revision_leaves_the_0_7_keys_out_and_reports_lost_values(tmp_path):
    record = TrajectoryRecord(
        task_id="t",
        rollout_id="r",
        invocations=[
            {
                "invocation_id": "root",
                "conversation": [
                    {"role": "assistant", "content": "a", "phase": "final_answer"},
                    {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                ],
            }
        ],
        model_calls=[{"response_metadata": {"response_source": "upstream"}}],
    )
    full = orjson.loads(record_json(record))
    earlier = orjson.loads(record_json(record, "pre-0.7"))
    assert keys_0_7(full) == [
        "local_response_reason",
        "namespace",
        "phase",
        "response_source",
        "upstream_attempted",
        "upstream_status_code",
    ]
    assert keys_0_7(earlier) == []
    assert lost_in_earlier(record) == ["phase", "response_source"]
    full_items = full["invocations"][0]["conversation"]
    for item in full_items:
        item.pop("phase", None), item.pop("namespace", None)
    for key in ("upstream_attempted", "response_source", "upstream_status_code", "local_response_reason"):
        full["model_calls"][0]["response_metadata"].pop(key)
    assert earlier == full


def test_build_writes_the_earlier_revision_on_request(tmp_path):
    store = tmp_path / "capture"
    store.mkdir()
    (store / "0-0.capture.jsonl").write_text(json.dumps(_line(response_source="upstream")) + "\n")
    out = tmp_path / "out.jsonl"
    result = run_cli("build", store, "-o", out, "--gym-release", "pre-0.7")
    assert result.exit_code == 0, result.stderr
    assert "upstream_attempted" not in out.read_text()
    assert "warning[earlier_release_dropped]" in result.stderr and "response_source" in result.stderr
    refused = run_cli("build", store, "-o", tmp_path / "out.parquet", "--gym-release", "pre-0.7")
    assert refused.exit_code == 2 and "converting it to JSONL" in refused.stderr
    assert run_cli("build", store, "-o", out, "--gym-release", "0.6").exit_code == 2


def test_validate_says_which_revision_a_file_needs(tmp_path):
    current = FIXTURES / "build" / "retained_run" / "expected.jsonl"
    earlier = tmp_path / "earlier.jsonl"
    assert (
        run_cli(
            "build", FIXTURES / "build" / "retained_run" / "input", "-o", earlier, "--gym-release", "pre-0.7"
        ).exit_code
        == 0
    )
    for path, revision in ((current, "0.7 fields present"), (earlier, "fits both revisions")):
        text = run_cli("validate", path)
        assert text.exit_code == 0 and revision in text.stderr
        summary = json.loads(run_cli("validate", path, "--json").stdout.splitlines()[-1])
        assert summary["revision"].startswith(revision)


def test_chat_stream_keep_alives_are_skipped_and_refusals_joined():
    chunks = [
        {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "refusal": "I can"}}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {"refusal": "not."}, "finish_reason": "stop"}]},
    ]
    raw = (
        ": keep-alive\n\n: keep-alive\n\n" + "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    )
    record = derive_record(_line(dialect="chat_completions", response=None, response_raw=raw), call_index=0)
    assert (record.response_id, record.finish_reason) == ("c1", "stop")
    message = reassemble(raw, "chat_completions")["choices"][0]["message"]
    assert message == {"role": "assistant", "content": None, "refusal": "I cannot."}


def test_a_redacted_history_drops_payloads_read_from_stores_and_keeps_those_the_row_recorded(tmp_path):
    store = tmp_path / "capture"
    store.mkdir()
    image = {"input": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}
    line = _line(request=image, response={"id": "r1", "status": "completed", "output": []})
    (store / "0-0.capture.jsonl").write_text(json.dumps(line) + "\n")
    redacted = {"source": "pi", "records": [], "gaps": [{"code": "multimodal_history_redacted"}]}
    row = {"_ng_rollout_id": "0-0", "response": {"output": []}, "ng_agent_observations": redacted}
    rows = tmp_path / "rollouts.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    out = tmp_path / "out.jsonl"
    assert run_cli("build", rows, store, "-o", out, "-q").exit_code == 0
    (call,) = json.loads(out.read_text())["model_calls"]
    assert (call["request"], call["response"]) == (None, None)
    assert call["response_metadata"]["response_status"] == "completed"  # derived before the payload went
    attached = {
        **row,
        "ng_model_call_capture": {
            "rollout_id": "0-0",
            "calls": [{**derive_record(line, call_index=0).model_dump(), "response_status": None}],
        },
    }
    rows.write_text(json.dumps(attached) + "\n")
    assert run_cli("build", rows, "-o", out, "-q").exit_code == 0
    (call,) = json.loads(out.read_text())["model_calls"]
    assert call["request"] == image and call["response_metadata"]["response_status"] == "completed"


def test_matrix_says_which_revision_its_records_need(tmp_path):
    earlier = tmp_path / "earlier.jsonl"
    assert (
        run_cli(
            "build", FIXTURES / "build" / "retained_run" / "input", "-o", earlier, "--gym-release", "pre-0.7"
        ).exit_code
        == 0
    )
    for path, revision in (
        (FIXTURES / "build" / "retained_run" / "expected.jsonl", "0.7 fields present"),
        (earlier, "fits both"),
    ):
        result = run_cli("matrix", path, "--format", "json", "--output-format", "json")
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stderr.splitlines()[-1])["revision"].startswith(revision)


def test_earlier_revision_leaves_out_item_types_0_7_added_and_reports_them():
    record = TrajectoryRecord(
        task_id="t",
        rollout_id="r",
        invocations=[
            {
                "invocation_id": "root",
                "conversation": [
                    {"role": "user", "content": "q"},
                    {"type": "compaction", "id": "k", "encrypted_content": "e"},
                    {"type": "web_search_call", "id": "w", "status": "completed", "action": {"type": "search"}},
                    {"type": "compaction_trigger"},
                ],
            }
        ],
    )
    full, earlier = orjson.loads(record_json(record)), orjson.loads(record_json(record, "pre-0.7"))
    assert [item["type"] for item in full["invocations"][0]["conversation"]] == [
        "message",
        "compaction",
        "web_search_call",
        "compaction_trigger",
    ]
    # web_search_call was in the earlier union; the two compaction items were not.
    assert [item["type"] for item in earlier["invocations"][0]["conversation"]] == ["message", "web_search_call"]
    assert lost_in_earlier(record) == ["compaction items", "compaction_trigger items"]  # phase is null
    assert earlier_loss(["phase", "compaction items"]) == (
        "values of phase and compaction items left out (nemo-gym before 0.7.0 has no place for them)"
    )
    assert keys_0_7(full) == ["compaction item", "compaction_trigger item", "phase"]
    assert keys_0_7(earlier) == []
    schemas = ROOT / "schemas"
    current = json.loads((schemas / "ng_trajectory.schema.json").read_text())
    before = json.loads((schemas / "ng_trajectory_pre_0_7.schema.json").read_text())
    jsonschema.validate(full, current)
    jsonschema.validate(earlier, before)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(full, before)


def test_a_dataset_needs_the_revision_its_records_need(tmp_path):
    dataset = tmp_path / "out.parquet"
    assert run_cli("build", FIXTURES / "build" / "retained_run" / "input", "-o", dataset).exit_code == 0
    assert "0.7 fields present" in run_cli("validate", dataset).stderr
