"""Work the assembly of a slot leaves undone until a writer needs it, and the values it then makes."""

from __future__ import annotations

import pytest

import ng_traj.assemble.build as build
from conftest import FIXTURES
from ng_traj.assemble.build import BuildOptions, assemble_slot
from ng_traj.assemble.pipeline import prepare
from ng_traj.assemble.run import run_slots
from ng_traj.diagnostics import DiagnosticSink
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES
from ng_traj.writers.parquet_rows import extras_of

RETAINED = FIXTURES / "build" / "retained_run" / "input"


def _planned():
    inputs, slots, _ = prepare([RETAINED], DiagnosticSink(), max_line_bytes=DEFAULT_MAX_LINE_BYTES)
    return BuildOptions(capture_enabled=inputs.capture_enabled), slots


def test_a_jsonl_build_makes_no_parquet_extras(monkeypatch: pytest.MonkeyPatch):
    options, slots = _planned()
    made: list[object] = []
    monkeypatch.setattr(build, "extras_of", lambda *args, **kwargs: made.append(args))
    lines: list[bytes] = []
    run_slots(slots, options, DiagnosticSink(), lines.append)
    assert len(lines) == len(slots) > 0
    assert made == []


def test_the_extras_are_made_once_when_asked_for_and_as_before(monkeypatch: pytest.MonkeyPatch):
    options, slots = _planned()
    calls: list[object] = []

    def counted(*args, **kwargs):
        calls.append(args)
        return extras_of(*args, **kwargs)

    monkeypatch.setattr(build, "extras_of", counted)
    for slot in slots:
        calls.clear()
        built = assemble_slot(slot, options, DiagnosticSink())
        extras = built.extras
        assert built.extras is extras
        assert len(calls) == 1
        row, bundles = calls[0][:2]
        assert extras == extras_of(row, bundles, run=slot.run_label, source_file=slot.file_label)
    producers = {assemble_slot(slot, options, DiagnosticSink()).extras.producer for slot in slots}
    assert producers - {None}, "the fixture has bundles, so some slot has a producer"


def _parts(**changes):
    from ng_traj.contract import (
        AgentInvocation,
        ModelCallRef,
        ObservationGap,
        TrajectoryModelCall,
        TrajectoryToolCall,
        TrajectoryTurn,
    )

    ref = ModelCallRef(model_call_id="c1")
    turn = {"invocation_id": "root", "task_id": "t", "rollout_id": "r", "timestamp": 1.0, "step_count": 0}
    parts = {
        "invocations": [AgentInvocation(invocation_id="root", model_calls=[ref]), AgentInvocation(invocation_id="sub")],
        "turns": [TrajectoryTurn(turn_no=1, model_calls=[ref], **turn), TrajectoryTurn(turn_no=2, **turn)],
        "model_calls": [TrajectoryModelCall(model_call_id="c1", duration_ms=2.0), TrajectoryModelCall()],
        "tool_calls": [TrajectoryToolCall(invocation_id="root", tool_call_id="x", output={"a": [1]})],
        "gaps": [ObservationGap(code="model_calls_unavailable")],
    }
    parts.update(changes)
    return parts


def _made(task_id, rollout_id, parts):
    """What pydantic makes of the record, or the errors it raises."""
    from pydantic import ValidationError

    from ng_traj.contract import TrajectoryRecord

    try:
        return TrajectoryRecord(task_id=task_id, rollout_id=rollout_id, **parts)
    except ValidationError as exc:
        return exc.errors()


def _checked(task_id, rollout_id, parts):
    from pydantic import ValidationError

    from ng_traj.assemble.project import trajectory_record

    try:
        return trajectory_record(task_id, rollout_id, **parts)
    except ValidationError as exc:
        return exc.errors()


def test_a_valid_record_is_the_one_pydantic_makes():
    parts = _parts()
    checked, made = _checked("t", "r", parts), _made("t", "r", parts)
    assert checked == made
    assert list(checked.__dict__) == list(made.__dict__)
    assert checked.model_fields_set == made.model_fields_set
    assert all(a is b for name in parts for a, b in zip(getattr(checked, name), getattr(made, name), strict=True))
    assert all(getattr(checked, name) is not parts[name] for name in parts)  # lists of its own, as pydantic's
    assert checked.model_dump_json() == made.model_dump_json()


def _bugs():
    from ng_traj.contract import AgentInvocation, TrajectoryModelCall, TrajectoryTurn

    turn = {"invocation_id": "root", "task_id": "t", "rollout_id": "r", "timestamp": 1.0, "step_count": 0}
    yield "duplicate_invocation_id", _parts(invocations=[AgentInvocation(invocation_id="a")] * 2)
    yield "duplicate_model_call_id", _parts(model_calls=[TrajectoryModelCall(model_call_id="c")] * 2)
    yield "duplicate_turn", _parts(turns=[TrajectoryTurn(turn_no=1, **turn)] * 2)
    for field in ("task_id", "rollout_id"):
        yield "turn_identity_mismatch", _parts(turns=[TrajectoryTurn(turn_no=1, **{**turn, field: "other"})])


@pytest.mark.parametrize(("code", "parts"), list(_bugs()))
def test_each_broken_record_is_rejected_as_pydantic_rejects_it(code, parts):
    errors = _checked("t", "r", parts)
    assert isinstance(errors, list)
    assert errors[0]["type"] == code
    assert errors == _made("t", "r", parts)


def test_values_not_of_their_model_are_validated_by_pydantic():
    from ng_traj.contract import TrajectoryTurn

    turn = {"invocation_id": "root", "task_id": "t", "rollout_id": "r", "timestamp": 1, "step_count": 0, "turn_no": 1}
    cases = [
        ("t", "r", _parts(turns=[turn])),  # a dict: validated (and coerced) into a turn
        ("t", "r", _parts(turns=[{**turn, "turn_no": 0}])),  # a bound broken
        ("t", "r", _parts(model_calls=[{"duration_ms": -1.0}])),  # a negative duration
        ("t", "r", _parts(gaps=[{"code": 5}])),
        (7, "r", _parts()),  # an id that is not a string
        ("t", "r", _parts(turns=[TrajectoryTurn.model_construct(**{**turn, "task_id": 3})])),
    ]
    for task_id, rollout_id, parts in cases:
        assert _checked(task_id, rollout_id, parts) == _made(task_id, rollout_id, parts)
    assert isinstance(_checked(*cases[0]).turns[0], TrajectoryTurn)
    assert isinstance(_checked(*cases[2]), list)
