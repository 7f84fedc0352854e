"""The C1–C7 rules on hand-built records: exactly V, O, X (and n/a) for each criterion, and aggregation.

Each record is built from a complete one (every criterion V) by removing or adding one thing, so
each test names the one fact that decides the verdict and the reason it must give.
"""

from __future__ import annotations

import pytest

from ng_traj.contract import TrajectoryRecord
from ng_traj.matrix import (
    NO_PRODUCER,
    UNKNOWN,
    Cell,
    Group,
    RecordContext,
    Verdict,
    evaluate,
    group_name,
    tabulate,
)
from ng_traj.matrix_report import load_reference, reference_row, report

CONCURRENT = frozenset({"claude_code", "hermes", "openclaw", "opencode", "pi"})
PI = RecordContext(agent="pi_agent", producer="pi", rollout_usage=True)
REF = {"type": "responses_api_models", "name": "policy_model"}


def _call(call_id="c1", **metadata):
    return {
        "model_call_id": call_id,
        "request": {"input": "q"},
        "response": {"output": []},
        "response_metadata": {
            "response_id": f"r-{call_id}",
            "model_ref": REF,
            "dialect": "chat",
            "status_code": 200,
            **metadata,
        },
        "token_stats": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _tool(call_id, started=100.0, completed=101.0, **extra):
    base = {
        "invocation_id": "root",
        "tool_call_id": call_id,
        "tool_name": "bash",
        "started_at": started,
        "completed_at": completed,
        "duration_ms": (completed - started) * 1000 if started is not None and completed is not None else None,
        "timing_source": "harness",
        "status": "completed",
        "output": "ok",
    }
    return {**base, **extra}


def _conversation(*call_ids):
    items = [{"type": "message", "role": "user", "content": "q"}]
    for call_id in call_ids:
        items.append({"type": "function_call", "call_id": call_id, "name": "bash", "arguments": "{}"})
        items.append({"type": "function_call_output", "call_id": call_id, "output": "ok"})
    return items


def _complete(**changes):
    """A record that is V for every criterion (two parallel-capable tool calls, one resolved turn)."""
    value = {
        "task_id": "t",
        "rollout_id": "t-0",
        "invocations": [{"invocation_id": "root", "status": "completed", "conversation": _conversation("a", "b")}],
        "turns": [
            {
                "invocation_id": "root",
                "task_id": "t",
                "rollout_id": "t-0",
                "turn_no": 1,
                "timestamp": 100.0,
                "question": [],
                "answer": [],
                "resolved": True,
                "step_count": 2,
            }
        ],
        "model_calls": [_call("c1"), _call("c2")],
        "tool_calls": [_tool("a"), _tool("b", 102.0, 103.0)],
        "gaps": [],
    }
    value.update(changes)
    return value


def _verdicts(value, context=PI):
    return evaluate(TrajectoryRecord.model_validate(value), context, CONCURRENT)


def _one(criterion, value, context=PI):
    return _verdicts(value, context)[criterion]


def _gap(code, invocation=None, detail=None):
    return {"code": code, "invocation_id": invocation, "detail": detail}


def test_a_complete_record_is_v_everywhere():
    assert _verdicts(_complete()) == dict.fromkeys(("C1", "C2", "C3", "C4", "C5", "C6", "C7"), Verdict("V"))


# C1 — per-call metadata


def test_c1():
    lacking = _call("c2", status_code=None)
    assert _one("C1", _complete(model_calls=[_call(), lacking])) == Verdict(
        "O", "missing:model_calls[].response_metadata.status_code"
    )
    loss = _complete(gaps=[_gap("model_call_capture_incomplete")])
    assert _one("C1", loss) == Verdict("O", "gap:model_call_capture_incomplete")
    transcript = {**_call(None), "response_metadata": {"response_id": "r9"}}
    with_transcript = _complete(
        model_calls=[_call(), transcript], gaps=[_gap("model_call_usage_from_transcript", "root", "r9")]
    )
    assert _one("C1", with_transcript) == Verdict("O", "gap:model_call_usage_from_transcript")
    none = _complete(model_calls=[], gaps=[_gap("model_call_capture_no_records"), _gap("model_calls_unavailable")])
    assert _one("C1", none) == Verdict("X", "gap:model_call_capture_no_records")
    assert _one("C1", _complete(model_calls=[], gaps=[_gap("model_calls_unavailable")])) == Verdict(
        "X", "gap:model_calls_unavailable"
    )


def test_judge_record_calls_are_not_considered_for_c1_c2_c4():
    judge = {**_call(None), "response_metadata": {"response_id": "resp_j", "dialect": "responses"}, "request": None}
    gap = _gap("model_call_from_judge_record", detail="judge_evaluations.0:resp_j")
    mixed = _complete(model_calls=[_call(), judge], gaps=[gap])
    assert [_one(c, mixed).value for c in ("C1", "C2", "C4")] == ["V", "V", "V"]
    only = _complete(model_calls=[judge], gaps=[gap], invocations=[])
    assert _one("C1", only) == Verdict("X", "gap:model_call_from_judge_record")


# C2 — token counts


def test_c2():
    partial = {**_call("c2"), "token_stats": {"prompt_tokens": 10}}
    assert _one("C2", _complete(model_calls=[_call(), partial])) == Verdict(
        "O", "missing:model_calls[].token_stats.completion_tokens"
    )
    uncounted = [{**_call(i), "token_stats": {}} for i in ("c1", "c2")]
    no_usage = RecordContext(agent="a", producer="pi", rollout_usage=False)
    assert _one("C2", _complete(model_calls=uncounted), no_usage) == Verdict(
        "X", "missing:model_calls[].token_stats.completion_tokens"
    )
    assert _one("C2", _complete(model_calls=uncounted)).value == "O"  # the row's response.usage reports counts
    none = _complete(model_calls=[], gaps=[_gap("model_calls_unavailable")])
    assert _one("C2", none) == Verdict("O", "gap:model_calls_unavailable")
    assert _one("C2", none, no_usage) == Verdict("X", "gap:model_calls_unavailable")
    failed = [{**_call(), "token_stats": {}, "response_metadata": {**_call()["response_metadata"], "status_code": 500}}]
    assert _one("C2", _complete(model_calls=failed)) == Verdict("NA")
    errored = {**_call("c2"), "token_stats": {}, "response_metadata": {"error_category": "stream_truncated"}}
    assert _one("C2", _complete(model_calls=[_call(), errored])).value == "V"  # an error call need not report counts


# C3 — turns


def test_c3():
    turn = _complete()["turns"][0]
    unresolved = _complete(turns=[{**turn, "resolved": None}], gaps=[_gap("resolution_unavailable", "root")])
    assert _one("C3", unresolved) == Verdict("O", "gap:resolution_unavailable")
    assert _one("C3", _complete(turns=[{**turn, "resolved": None}])) == Verdict("O", "missing:turns[].resolved")
    second = {**turn, "turn_no": 2, "timestamp": 101.0, "answer": None}
    assert _one("C3", _complete(turns=[{**turn, "resolved": None}, second])) == Verdict("O", "missing:turns[].answer")
    assert _one("C3", _complete(turns=[], gaps=[_gap("turns_unavailable")])) == Verdict("X", "gap:turns_unavailable")


# C4 — model-visible history


def test_c4():
    bare_calls = [{**_call(i), "request": None, "response": None} for i in ("c1", "c2")]
    assert _one("C4", _complete(model_calls=bare_calls)).value == "V"  # conversations suffice
    assert _one("C4", _complete(invocations=[])).value == "V"  # payloads suffice (capture only)
    branched = _complete(gaps=[_gap("agent_conversation_branching_unavailable", "root")])
    assert _one("C4", branched) == Verdict("O", "gap:agent_conversation_branching_unavailable")
    child = {"invocation_id": "child", "conversation": []}
    half = _complete(invocations=[*_complete()["invocations"], child], model_calls=bare_calls)
    assert _one("C4", half) == Verdict("O", "missing:invocations[].conversation")
    fallback = {"invocation_id": "rollout_record", "conversation": _conversation()}
    only_fallback = _complete(
        invocations=[fallback],
        model_calls=[],
        gaps=[_gap("conversation_from_rollout_record"), _gap("model_calls_unavailable")],
    )
    assert _one("C4", only_fallback) == Verdict("X", "gap:conversation_from_rollout_record")
    nothing = _complete(invocations=[], model_calls=bare_calls, gaps=[_gap("conversation_unavailable")])
    assert _one("C4", nothing) == Verdict("X", "gap:conversation_unavailable")


# C5 — tool calls


def test_c5():
    no_duration = _complete(tool_calls=[_tool("a"), _tool("b", duration_ms=None)])
    assert _one("C5", no_duration) == Verdict("O", "missing:tool_calls[].duration_ms")
    gapped = _complete(tool_calls=[_tool("a")], gaps=[_gap("tool_timing_unavailable", "root", "b")])
    assert _one("C5", gapped) == Verdict("O", "gap:tool_timing_unavailable")
    unknown = _complete(tool_calls=[_tool("a", status="unknown"), _tool("b", output=None)])
    assert _one("C5", unknown) == Verdict("X", "missing:tool_calls[].output")  # tie broken alphabetically
    assert _one("C5", _complete(tool_calls=[])) == Verdict("X", "missing:tool_calls")
    fallback = {"invocation_id": "rollout_record", "conversation": _conversation("a")}
    legacy = _complete(invocations=[fallback], tool_calls=[], gaps=[_gap("conversation_from_rollout_record")])
    assert _one("C5", legacy) == Verdict("X", "gap:conversation_from_rollout_record")
    plain = _complete(invocations=[{"invocation_id": "root", "conversation": _conversation()}], tool_calls=[])
    assert _one("C5", plain) == Verdict("NA")


# C6 — independent timing of parallel tool calls


def test_c6():
    trajectory_producer = RecordContext(agent="simple_agent", producer="ng_trajectory")
    assert _one("C6", _complete(), trajectory_producer) == Verdict("X", "missing:parallel_tool_calls")
    overlapping = _complete(tool_calls=[_tool("a", 100.0, 102.0), _tool("b", 101.0, 103.0)])
    assert _one("C6", overlapping, RecordContext()).value == "V"  # producer unknown, parallelism shown by the data
    untimed = _complete(tool_calls=[_tool("a"), _tool("b", timing_source=None)])
    assert _one("C6", untimed) == Verdict("O", "missing:tool_calls[].timing_source")
    assert _one("C6", untimed, trajectory_producer) == Verdict("X", "missing:parallel_tool_calls")
    none = _complete(tool_calls=[_tool("a", started_at=None), _tool("b", started_at=None)])
    assert _one("C6", none) == Verdict("X", "missing:tool_calls[].started_at")
    plain = _complete(invocations=[{"invocation_id": "root", "conversation": _conversation()}], tool_calls=[])
    assert _one("C6", plain) == Verdict("NA")


# C7 — agent-side evidence


def test_c7():
    fallback = {"invocation_id": "rollout_record", "conversation": _conversation()}
    assert _one("C7", _complete(invocations=[fallback], gaps=[_gap("conversation_from_rollout_record")])) == Verdict(
        "X", "gap:conversation_from_rollout_record"
    )
    # a producer invocation that happens to be called rollout_record is agent-side evidence without the gap
    assert _one("C7", _complete(invocations=[fallback])).value == "V"
    invalid = _complete(invocations=[], gaps=[_gap("producer_trajectory_invalid", detail="ValidationError")])
    assert _one("C7", invalid) == Verdict("X", "gap:producer_trajectory_invalid")
    assert _one("C7", _complete(invocations=[])) == Verdict("X", "missing:invocations")


def test_a_failed_projection_is_x_everywhere():
    minimal = {
        "task_id": "t",
        "rollout_id": "t-0",
        "gaps": [_gap("trajectory_projection_failed", detail="ValidationError")],
    }
    assert set(_verdicts(minimal).values()) == {Verdict("X", "gap:trajectory_projection_failed")}


# aggregation


def test_cells_aggregate_values_counts_and_the_main_reason():
    cell = Cell()
    for verdict in (Verdict("V"), Verdict("V"), Verdict("X", "gap:b"), Verdict("O", "gap:a"), Verdict("NA")):
        cell.add(verdict)
    assert (cell.value, cell.applicable, cell.counts["V"], cell.counts["NA"]) == ("O", 4, 2, 1)
    assert cell.reason == ("gap:a", 1)  # a tie goes to the alphabetically first reason
    cell.add(Verdict("X", "gap:b"))
    assert cell.reason == ("gap:b", 2)
    only_na = Cell()
    only_na.add(Verdict("NA"))
    assert (only_na.value, only_na.reason) == ("NA", None)
    all_x = Cell()
    for _ in range(3):
        all_x.add(Verdict("X", "gap:c"))
    assert (all_x.value, all_x.reason) == ("X", ("gap:c", 3))


def test_tabulate_over_mixed_records():
    fallback = {"invocation_id": "rollout_record", "conversation": _conversation()}
    legacy = _complete(invocations=[fallback], gaps=[_gap("conversation_from_rollout_record")], tool_calls=[])
    records = [
        (TrajectoryRecord.model_validate(_complete()), PI),
        (TrajectoryRecord.model_validate(legacy), PI),
        (TrajectoryRecord.model_validate(_complete()), RecordContext(agent=None)),
    ]
    groups = {g.name: g for g in tabulate(records, "agent", CONCURRENT)}
    assert sorted(groups) == [UNKNOWN, "pi_agent"]
    pi = groups["pi_agent"]
    assert pi.records == 2
    # legacy: C4 V (its calls carry payloads), C5/C6 n/a (no tool calls), C7 X
    assert {c: (cell.value, cell.counts["V"], cell.applicable) for c, cell in pi.cells.items()} == {
        "C1": ("V", 2, 2),
        "C2": ("V", 2, 2),
        "C3": ("V", 2, 2),
        "C4": ("V", 2, 2),
        "C5": ("V", 1, 1),
        "C6": ("V", 1, 1),
        "C7": ("O", 1, 2),
    }
    assert pi.cells["C7"].reason == ("gap:conversation_from_rollout_record", 1)


def test_group_names():
    assert group_name(RecordContext(agent="a", producer="pi"), "agent") == "a"
    assert group_name(RecordContext(agent="a", producer="pi"), "producer") == "pi"
    assert group_name(RecordContext(), "agent") == UNKNOWN
    assert group_name(RecordContext(producer=NO_PRODUCER), "producer") == NO_PRODUCER


@pytest.mark.parametrize(
    ("name", "by", "row"),
    [
        ("openclaw_agent", "agent", "openclaw_agent"),
        ("math_with_judge_openclaw_agent", "agent", "openclaw_agent"),
        ("gdpval_stirrup_agent", "agent", "stirrup_agent"),
        ("non_executing_simple_agent", "agent", "non_executing_simple_agent"),
        ("anyswe_pi", "agent", "anyswe_agent"),
        ("tau2_benchmark_agent", "agent", "tau2"),
        ("mini_swe_agent_2", "agent", "mini_swe_agent_2"),
        ("my_custom_thing", "agent", None),
        (UNKNOWN, "agent", None),
        ("pi", "producer", "pi_agent"),
        ("ng_trajectory", "producer", "simple_agent"),
        (NO_PRODUCER, "producer", None),
    ],
)
def test_reference_rows(name, by, row):
    assert reference_row(name, by, load_reference()) == row


def test_the_documented_matrix_is_the_one_of_gym_reference_8_3():
    reference = load_reference()
    assert len(reference.rows) == 34 and reference.about["last_changed"] == "2026-08-17"
    assert reference.about["commit"].startswith("07d6b0d07")
    # spot checks against NeMo Gym's capability page, typed from it
    spot = {
        "openclaw_agent": "VVXOVVV",
        "labbench2_vlm_agent": "VVOOOXV",
        "simple_agent": "VVOVOXV",
        "finance_agent": "XOXXXXX",
        "anyswe_agent": "XXXXXXX",
        "hermes_agent": "VVXVVVV",
    }
    for agent, values in spot.items():
        assert "".join(reference.rows[agent][c] for c in ("C1", "C2", "C3", "C4", "C5", "C6", "C7")) == values
    assert reference.concurrent == CONCURRENT


def test_report_marks_disagreements_and_not_comparable_cells():
    group = Group("math_with_judge_pi_agent")
    fallback = {"invocation_id": "rollout_record", "conversation": _conversation()}
    legacy = _complete(invocations=[fallback], gaps=[_gap("conversation_from_rollout_record")], tool_calls=[])
    group.add(evaluate(TrajectoryRecord.model_validate(legacy), PI, CONCURRENT))
    data = report([group], "agent", load_reference())
    cells = data["groups"][0]["cells"]
    assert data["groups"][0]["reference_row"] == "pi_agent"
    assert (cells["C1"]["reference"], cells["C1"]["agrees"]) == ("V", True)
    assert (cells["C3"]["value"], cells["C3"]["reference"], cells["C3"]["agrees"]) == ("V", "X", False)
    assert (cells["C5"]["value"], cells["C5"]["agrees"]) == ("NA", None)
    assert (cells["C7"]["value"], cells["C7"]["reason"], cells["C7"]["agrees"]) == (
        "X",
        "gap:conversation_from_rollout_record",
        False,
    )
    assert report([group], "agent", None)["groups"][0]["cells"]["C1"]["reference"] is None
