"""Assembling one rollout: its row, its capture evidence and its bundles into one trajectory.

This mirrors what the NeMo Gym collector does per finished rollout:
the capture attachment is recomputed from the raw capture lines when capture stores are given (else
the row's own ``ng_model_call_capture`` is used as recorded), the row's observation bundle is joined
to the captured calls, and the result is projected (``assemble/project.py``).
ng-traj's rules for a join without capture, the fallback invocation and rows without identity are
applied here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ng_traj.assemble.project import (
    FALLBACK_INVOCATION_ID,
    Fallback,
    ProjectionInputs,
    failed_projection,
    project,
    project_call,
)
from ng_traj.contract import AgentInvocation, AgentObservationBundle, ModelCallRecord, ObservationGap, TrajectoryRecord
from ng_traj.contract.base import built_model
from ng_traj.contract.capture import PAYLOAD_KEYS
from ng_traj.io.lines import JSON_TYPES
from ng_traj.sources.capture.store import CaptureEvidence

REDACTION_GAP = "multimodal_history_redacted"


@dataclass
class CaptureState:
    """The capture attachment of one rollout, as the collector would attach it.

    Attributes:
        records: Calls recomputed from raw capture lines (empty when taken from the row).
        calls: Call mappings projected into the trajectory, in capture order.
        gaps: Capture gap values (``ng_model_call_capture.gaps``).
        recomputed: True when built from capture stores of this build.
    """

    records: list[ModelCallRecord] = field(default_factory=list)
    calls: list[Mapping[str, Any]] = field(default_factory=list)
    gaps: list[Any] = field(default_factory=list)
    recomputed: bool = False


def record_mapping(record: ModelCallRecord) -> dict[str, Any]:
    """A ``ModelCallRecord`` as a plain mapping, without copying its payloads."""
    return dict(record.__dict__)


def capture_from_evidence(evidence: CaptureEvidence | None, error: bool = False) -> CaptureState:
    """The capture attachment built from this build's stores (as the collector attaches it).

    Args:
        evidence: Calls, invalid count and marker state, or ``None`` when no store has the rollout.
        error: Reading a capture file failed.
    """
    gaps: list[Any] = []
    if error:
        return CaptureState(gaps=[{"code": "model_call_capture_unreadable"}], recomputed=True)
    if evidence is None:
        return CaptureState(gaps=[{"code": "model_call_capture_no_records"}], recomputed=True)
    if evidence.invalid:
        gaps.append({"code": "model_call_capture_records_unreadable", "detail": f"count={evidence.invalid}"})
    if evidence.incomplete:
        gaps.append({"code": "model_call_capture_incomplete"})
    elif not evidence.calls and not evidence.invalid:
        gaps.append({"code": "model_call_capture_no_records"})
    records = evidence.records
    return CaptureState(records, [record_mapping(r) for r in records], gaps, recomputed=True)


def capture_from_row(row: Mapping[str, Any], report: Callable[[str, str], None] | None = None) -> CaptureState:
    """The row's own ``ng_model_call_capture`` (any version since 2026-07-15), as recorded.

    A ``trajectory_projection_failed`` gap left by a failed collector projection is dropped: this
    build projects again and records its own outcome. A call that is not an object, or that the
    contract rejects (a negative latency, a count of the wrong type), is left out with the gap
    ``model_call_capture_call_invalid`` (detail ``calls.<n>``) and reported through
    ``report(pointer, message)``; the other calls are used.
    """
    attachment = row.get("ng_model_call_capture")
    if not isinstance(attachment, dict):
        return CaptureState()
    calls = attachment.get("calls")
    gaps = [
        gap
        for gap in (attachment.get("gaps") if isinstance(attachment.get("gaps"), list) else [])
        if not (isinstance(gap, dict) and gap.get("code") == "trajectory_projection_failed")
    ]
    usable = []
    for index, call in enumerate(calls if isinstance(calls, list) else []):
        problem = _call_problem(call)
        if problem is None:
            usable.append(call)
            continue
        gaps.append({"code": "model_call_capture_call_invalid", "detail": f"calls.{index}"})
        if report is not None:
            report(f"ng_model_call_capture.calls.{index}", f"{problem}; the call is left out")
    return CaptureState(calls=usable, gaps=gaps)


def _call_problem(call: Any) -> str | None:
    """Why a recorded capture call cannot be projected, or ``None``."""
    if not isinstance(call, Mapping):
        return f"not an object ({JSON_TYPES.get(type(call), type(call).__name__)})"
    try:
        project_call(call)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        return f"{where}: {error['msg']}" if where else error["msg"]
    return None


def has_redaction_gap(row: Mapping[str, Any]) -> bool:
    """True when the row's trajectory or bundle carries ``multimodal_history_redacted``."""
    for key in ("ng_trajectory", "ng_agent_observations"):
        container = row.get(key)
        gaps = container.get("gaps") if isinstance(container, dict) else None
        if isinstance(gaps, list) and any(isinstance(g, dict) and g.get("code") == REDACTION_GAP for g in gaps):
            return True
    return False


def without_payloads(calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Copies of ``calls`` without request and response payloads."""
    return [{key: value for key, value in call.items() if key not in PAYLOAD_KEYS} for call in calls]


def validated_bundle(value: Any) -> AgentObservationBundle | None:
    """The row's ``ng_agent_observations`` as a bundle, or ``None`` when it is not a valid one."""
    try:
        return AgentObservationBundle.model_validate(value)
    except (ValidationError, ValueError):
        return None


_STATUS = {"completed": "completed", "incomplete": "incomplete", "failed": "failed", "cancelled": "failed"}


_FALLBACK_FIELDS_SET = frozenset({"invocation_id", "status", "error_type", "conversation"})
"""The fields a fallback invocation is given (the others keep their defaults)."""


def fallback_invocation(row: Mapping[str, Any]) -> Fallback | None:
    """The root invocation rebuilt from the row's request input and response output.

    ``None`` when the row has neither. Items that are not valid conversation items are dropped and
    counted in the gap detail (``dropped_items=<n>``). The invocation is built without validating it
    again: its id is text, its status one of the contract's and its error type text or null by
    construction, and its items validated conversation items, which pydantic keeps as they are
    (``tests/test_project.py`` compares it with the one pydantic makes).
    """
    params = row.get("responses_create_params")
    raw_input = params.get("input") if isinstance(params, dict) else None
    if isinstance(raw_input, str):
        raw_input = [{"type": "message", "role": "user", "content": raw_input}]
    response = row.get("response")
    response = response if isinstance(response, dict) else {}
    output = response.get("output")
    values = [*(raw_input if isinstance(raw_input, list) else []), *(output if isinstance(output, list) else [])]
    if not values:
        return None
    from ng_traj.contract.conversation import validate_items  # the openai SDK's models: imported when needed

    items, dropped = validate_items(values)
    error = response.get("error")
    status = "failed" if isinstance(error, dict) else _STATUS.get(str(response.get("status")), "unknown")
    error_type = str(error.get("code") or error.get("type") or "error") if isinstance(error, dict) else None
    invocation = built_model(
        AgentInvocation,
        {
            "kind": "agent_invocation",
            "invocation_id": FALLBACK_INVOCATION_ID,
            "parent_invocation_id": None,
            "spawned_by_tool_call_id": None,
            "status": status,
            "duration_ms": None,
            "error_type": error_type,
            "model_calls": [],
            "conversation": items,
        },
        set(_FALLBACK_FIELDS_SET),
    )
    detail = f"dropped_items={dropped}" if dropped else None
    return Fallback(invocation, ObservationGap(code="conversation_from_rollout_record", detail=detail))


def build_trajectory(inputs: ProjectionInputs) -> tuple[TrajectoryRecord, Exception | None]:
    """Project, falling back to the minimal failed-projection record."""
    try:
        return project(inputs), None
    except (ValidationError, ValueError) as exc:
        return failed_projection(inputs.task_id, inputs.rollout_id, exc), exc
