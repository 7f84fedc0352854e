"""The ``ng_trajectory`` projection, with the reference precedence and merge rules.

Source: ``_build_trajectory_record`` in ``nemo_gym/rollout_collection.py`` of nemo-gym 0.7.0. Precedence: producer ``ng_trajectory`` > the row's
``ng_agent_observations`` > bundles built from native files > capture.

* Step A, producer trajectory: validated (else ``producer_trajectory_invalid``); a task or rollout id
  differing from the canonical one gives ``producer_trajectory_identity_mismatch`` and rewrites turns.
* Step B, each observation bundle in precedence order: validated (else ``agent_observations_invalid``);
  gaps appended; invocations appended unless their id is taken; tool observations merged by
  ``(invocation_id, tool_call_id)``, observed non-null fields overriding, except that an observed
  ``unknown`` status keeps a known one; ``output`` taken from the conversation's
  ``function_call_output``.
* Step C, turns sorted by ``(timestamp, invocation_id, turn_no)``.
* Step D, captured calls in capture order: metadata (thirteen keys, the four execution keys of
  nemo-gym 0.7.0 among them) and token stats projected; merged into a producer call with the same
  ``model_call_id`` (capture's non-null values win), else appended.
* Step D2, when the row has no producer trajectory object: one turn per owned call with a response
  (``assemble/turns.py``), in call order. Where that makes none, ng-traj reads the turns from the
  invocations' own conversations (``turns_from_transcript``, with the gap of that name).
* Step E, ``model_calls_unavailable``; ``turns_unavailable`` when there are no turns and no valid
  producer trajectory (a producer that validly reports no turns has said so), where turns read from
  the transcript put ``turns_from_transcript`` instead; ``conversation_unavailable``.
* Step F, gaps de-duplicated by ``(code, invocation_id, detail)``; the record validated.

ng-traj additions (marked by their own gaps, documented in ``docs/deviations.md``): the fallback root invocation placed before Step E, and collector-level gaps of the build placed before the
availability gaps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticCustomError

from ng_traj.assemble.turns import TRANSCRIPT_GAP, TranscriptCall, turns_from_calls, turns_from_transcript
from ng_traj.contract import (
    AgentInvocation,
    AgentObservationBundle,
    ObservationGap,
    ToolCallObservation,
    TrajectoryModelCall,
    TrajectoryRecord,
    TrajectoryResponseMetadata,
    TrajectoryTokenStats,
    TrajectoryToolCall,
    TrajectoryTurn,
)
from ng_traj.contract.base import ModelServerRef, built_model
from ng_traj.contract.observations import dedupe_gaps
from ng_traj.contract.trajectory import SCHEMA_VERSION

METADATA_KEYS = (
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
)
FALLBACK_INVOCATION_ID = "rollout_record"


@dataclass
class Fallback:
    """The fallback root invocation of a rollout with no conversation evidence."""

    invocation: AgentInvocation
    gap: ObservationGap


@dataclass
class ProjectionInputs:
    """Everything projected into one rollout's trajectory.

    Attributes:
        task_id: Canonical task id.
        rollout_id: Canonical rollout id.
        producer_trajectory: The row's ``ng_trajectory`` value (used when it is an object).
        bundles: Observation bundle values in precedence order (row bundle, then native bundles).
        capture_calls: Captured calls as ``ModelCallRecord``-shaped mappings, in capture order.
        capture_payloads: False when the captured calls' payloads are left out of the trajectory
            (``project_call``'s ``payloads``).
        capture_gaps: The capture attachment's gap values.
        extra_calls: Model calls no capture holds (native transcript usage, row judge records), appended
            after the captured calls; each carries its own gap.
        fallback: Used only when no invocation would have a conversation; may be a function making it
            (called only then, since validating a long row history costs time).
        build_gaps: ng-traj gaps about the rollout's artifacts (identity, attribution).
        resolved: The row's ``resolved`` value; carried by the last synthesised turn when a boolean.
        native_calls: The native sessions' model calls in file order, for turns read from the
            transcript when no captured call makes one.
    """

    task_id: str
    rollout_id: str
    producer_trajectory: Any = None
    bundles: Sequence[Any] = ()
    capture_calls: Sequence[Mapping[str, Any]] = ()
    capture_payloads: bool = True
    capture_gaps: Sequence[Any] = ()
    extra_calls: Sequence[TrajectoryModelCall] = ()
    fallback: Fallback | Callable[[], Fallback | None] | None = None
    build_gaps: Sequence[ObservationGap] = ()
    resolved: Any = None
    native_calls: Sequence[TranscriptCall] = ()


@dataclass
class _State:
    gaps: list[ObservationGap] = field(default_factory=list)
    invocations: list[AgentInvocation] = field(default_factory=list)
    turns: list[TrajectoryTurn] = field(default_factory=list)
    tools: list[TrajectoryToolCall] = field(default_factory=list)
    model_calls: list[TrajectoryModelCall] = field(default_factory=list)
    producer_valid: bool = False


def _producer(state: _State, value: Any, task_id: str, rollout_id: str) -> None:
    if not isinstance(value, dict):
        return
    try:
        trajectory = TrajectoryRecord.model_validate(value)
    except ValidationError as exc:
        state.gaps.append(ObservationGap(code="producer_trajectory_invalid", detail=type(exc).__name__))
        return
    state.producer_valid = True
    mismatches = [
        name
        for name, producer, canonical in (
            ("task_id", trajectory.task_id, task_id),
            ("rollout_id", trajectory.rollout_id, rollout_id),
        )
        if producer != canonical
    ]
    turns = trajectory.turns
    if mismatches:
        state.gaps.append(ObservationGap(code="producer_trajectory_identity_mismatch", detail=",".join(mismatches)))
        turns = [turn.model_copy(update={"task_id": task_id, "rollout_id": rollout_id}) for turn in turns]
    state.gaps.extend(trajectory.gaps)
    state.invocations = list(trajectory.invocations)
    state.turns = list(turns)
    state.tools = list(trajectory.tool_calls)
    state.model_calls = list(trajectory.model_calls)


def _observations(state: _State, value: Any) -> None:
    if value is None:
        return
    try:
        bundle = value if isinstance(value, AgentObservationBundle) else AgentObservationBundle.model_validate(value)
        state.gaps.extend(bundle.gaps)
        taken = {invocation.invocation_id for invocation in state.invocations}
        state.invocations.extend(
            record
            for record in bundle.records
            if isinstance(record, AgentInvocation) and record.invocation_id not in taken
        )
        observed = [record for record in bundle.records if isinstance(record, ToolCallObservation)]
        if observed:
            _merge_tools(state, observed)
    except (ValidationError, ValueError) as exc:
        state.gaps.append(ObservationGap(code="agent_observations_invalid", detail=type(exc).__name__))


def _merge_tools(state: _State, observed: list[ToolCallObservation]) -> None:
    outputs = {
        (invocation.invocation_id, item.call_id): item.output
        for invocation in state.invocations
        for item in invocation.conversation
        if getattr(item, "type", None) == "function_call_output"
    }
    positions = {(tool.invocation_id, tool.tool_call_id): index for index, tool in enumerate(state.tools)}
    for tool in observed:
        key = (tool.invocation_id, tool.tool_call_id)
        position = positions.get(key)
        existing = state.tools[position] if position is not None else None
        if existing is None and type(tool) is ToolCallObservation:
            # A first observation of the call: its values are valid already, and the output any value.
            projected = built_model(TrajectoryToolCall, {**tool.__dict__, "output": outputs.get(key)})
            positions[key] = len(state.tools)
            state.tools.append(projected)
            continue
        merged = existing.model_dump(mode="json") if existing is not None else {}
        update = tool.model_dump(mode="json", exclude_none=True)
        if existing is not None and tool.status == "unknown" and existing.status != "unknown":
            update.pop("status", None)
        merged.update(update)
        if key in outputs:
            merged["output"] = outputs[key]
        projected = TrajectoryToolCall.model_validate(merged)
        if position is None:
            positions[key] = len(state.tools)
            state.tools.append(projected)
        else:
            state.tools[position] = projected


def _nonnegative_int(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def project_call(raw: Mapping[str, Any], *, payloads: bool = True) -> TrajectoryModelCall:
    """Project one captured call (a ``ModelCallRecord``-shaped mapping) into a trajectory model call.

    A call whose values already have the contract's types and bounds (every call derived from a
    capture line, and most recorded ones) is made without validating them again; any other is
    validated (and coerced) by pydantic. Both give the same call.

    ``payloads`` false projects the call as if ``raw`` had none of its payload keys (``request``,
    ``response`` and their raw texts: ``--no-payloads``, a redacted history), without a copy of
    ``raw`` that leaves them out.

    Raises:
        pydantic.ValidationError: A value the contract rejects (for example a negative latency).
    """
    get = raw.get
    metadata: dict[str, Any] = {}
    typed = True  # every metadata value of the type validation keeps unchanged (``_METADATA_TYPES``)
    for key, kind in _METADATA_ITEMS:
        value = get(key)
        if value is not None:
            metadata[key] = value
            typed = typed and type(value) is kind
    response = get("response") if payloads else None
    if "response_status" not in metadata and isinstance(response, dict):
        status = response.get("status")
        if isinstance(status, str):
            metadata["response_status"] = status
            typed = typed and type(status) is str
    request = get("request") if payloads else None
    values = {
        "model_call_id": get("model_call_id"),
        "started_at": get("started_at"),
        "completed_at": get("completed_at"),
        "duration_ms": get("latency_total_ms"),
        "request": request if request is not None or not payloads else get("request_raw"),
        "response": response if response is not None or not payloads else get("response_raw"),
        "response_metadata": metadata,
        "token_stats": {
            "prompt_tokens": _nonnegative_int(get("tokens_in")),
            "completion_tokens": _nonnegative_int(get("tokens_out")),
            "reasoning_tokens": _nonnegative_int(get("tokens_reasoning")),
            "total_tokens": _nonnegative_int(get("tokens_total")),
            "cached_tokens": _nonnegative_int(get("cached_tokens")),
        },
    }
    if not (typed and _call_as_given(values) and _metadata_bounds_hold(metadata)):
        return TrajectoryModelCall(**values)
    values["response_metadata"] = built_model(
        TrajectoryResponseMetadata, {**_NO_METADATA, **metadata}, fields_set=set(metadata)
    )
    values["token_stats"] = built_model(TrajectoryTokenStats, values["token_stats"])
    return built_model(TrajectoryModelCall, values)


_NO_METADATA = dict.fromkeys(TrajectoryResponseMetadata.model_fields)
"""Every response metadata field, null, in declaration order."""

_METADATA_TYPES: dict[str, type] = {
    "response_id": str,
    "model_ref": ModelServerRef,
    "model": str,
    "dialect": str,
    "status_code": int,
    "response_status": str,
    "finish_reason": str,
    "upstream_attempted": bool,
    "response_source": str,
    "upstream_status_code": int,
    "local_response_reason": str,
    "error_category": str,
    "latency_ttft_ms": float,
}
"""Per metadata field, the type pydantic keeps a value of unchanged (``model_ref`` an instance)."""
_METADATA_ITEMS = tuple((key, _METADATA_TYPES[key]) for key in METADATA_KEYS)


def _nonnegative_float(value: Any) -> bool:
    return value is None or (type(value) is float and value >= 0)


def _call_as_given(values: dict[str, Any]) -> bool:
    """Whether validating the call would keep its identity, times and duration as they are."""
    call_id, started, completed = values["model_call_id"], values["started_at"], values["completed_at"]
    return (
        (call_id is None or type(call_id) is str)
        and (started is None or type(started) is float)
        and (completed is None or type(completed) is float)
        and _nonnegative_float(values["duration_ms"])
    )


def _metadata_bounds_hold(metadata: dict[str, Any]) -> bool:
    """Whether ``metadata``'s values of their types meet the contract's bounds: a known
    ``response_source``, a non-negative ``latency_ttft_ms``."""
    return metadata.get("response_source", "local") in ("upstream", "local") and _nonnegative_float(
        metadata.get("latency_ttft_ms")
    )


def _capture(state: _State, calls: Sequence[Mapping[str, Any]], gaps: Sequence[Any], payloads: bool = True) -> None:
    positions = {call.model_call_id: i for i, call in enumerate(state.model_calls) if call.model_call_id is not None}
    for raw in calls:
        if not isinstance(raw, (dict, Mapping)):  # a dict is checked without the ABC's lookup
            continue
        projected = project_call(raw, payloads=payloads)
        call_id = raw.get("model_call_id")
        position = positions.pop(call_id, None) if call_id is not None else None
        if position is None:
            state.model_calls.append(projected)
            continue
        merged = state.model_calls[position].model_dump(mode="json")
        update = projected.model_dump(mode="json", exclude_none=True)
        for key in ("response_metadata", "token_stats"):
            merged[key].update(update.pop(key))
        merged.update(update)
        state.model_calls[position] = TrajectoryModelCall.model_validate(merged)
    for raw_gap in gaps:
        if isinstance(raw_gap, dict):
            try:
                state.gaps.append(ObservationGap.model_validate(raw_gap))
            except ValidationError:
                state.gaps.append(ObservationGap(code="model_call_capture_gap_invalid"))


def project(inputs: ProjectionInputs) -> TrajectoryRecord:
    """Build one rollout's trajectory (module docstring gives the steps).

    Raises:
        pydantic.ValidationError: The projected record breaks the contract (duplicate ids, negative
            durations); the caller records ``trajectory_projection_failed``.
    """
    state = _State()
    transcript = False
    _producer(state, inputs.producer_trajectory, inputs.task_id, inputs.rollout_id)
    for bundle in inputs.bundles:
        _observations(state, bundle)
    state.turns.sort(key=lambda turn: (turn.timestamp, turn.invocation_id, turn.turn_no))
    _capture(state, inputs.capture_calls, inputs.capture_gaps, inputs.capture_payloads)
    if not isinstance(inputs.producer_trajectory, dict):
        state.turns = turns_from_calls(
            inputs.task_id, inputs.rollout_id, state.invocations, state.model_calls, inputs.resolved
        )
        if not state.turns:
            state.turns = turns_from_transcript(
                inputs.task_id,
                inputs.rollout_id,
                state.invocations,
                inputs.native_calls,
                state.model_calls,
                inputs.resolved,
            )
            transcript = bool(state.turns)
    state.model_calls.extend(inputs.extra_calls)
    state.gaps.extend(inputs.build_gaps)
    if inputs.fallback is not None and not any(invocation.conversation for invocation in state.invocations):
        fallback = inputs.fallback() if callable(inputs.fallback) else inputs.fallback
        if fallback is not None:
            state.invocations.append(fallback.invocation)
            state.gaps.append(fallback.gap)
    if not state.model_calls:
        state.gaps.append(ObservationGap(code="model_calls_unavailable"))
    if transcript:
        state.gaps.append(ObservationGap(code=TRANSCRIPT_GAP))
    if not state.turns and not state.producer_valid:
        state.gaps.append(ObservationGap(code="turns_unavailable"))
    if not any(invocation.conversation for invocation in state.invocations):
        state.gaps.append(ObservationGap(code="conversation_unavailable"))
    return trajectory_record(
        inputs.task_id,
        inputs.rollout_id,
        invocations=state.invocations,
        turns=state.turns,
        model_calls=state.model_calls,
        tool_calls=state.tools,
        gaps=dedupe_gaps(state.gaps),
    )


_RECORD_PARTS = (
    ("invocations", AgentInvocation),
    ("turns", TrajectoryTurn),
    ("model_calls", TrajectoryModelCall),
    ("tool_calls", TrajectoryToolCall),
    ("gaps", ObservationGap),
)
"""The list fields of a ``TrajectoryRecord`` in declaration order, each with its items' model."""
_RECORD_FIELDS_SET = frozenset({"task_id", "rollout_id", *(name for name, _ in _RECORD_PARTS)})


def trajectory_record(task_id: Any, rollout_id: Any, **parts: Sequence[Any]) -> TrajectoryRecord:
    """``TrajectoryRecord(task_id=task_id, rollout_id=rollout_id, **parts)``, checked without validating
    again what the projection validated or built already.

    ``parts`` are the record's five lists (``invocations``, ``turns``, ``model_calls``, ``tool_calls``,
    ``gaps``), every one given. When both ids are strings and every list holds instances of exactly
    its model (what the projection makes), pydantic would keep every value as it is and only run the
    record's own check (``TrajectoryRecord._identity``: unique invocation and model-call ids, turns
    of the record's task and rollout, unique per invocation); that check runs on the record made
    from them. Anything else, and a record the check rejects, is validated by pydantic, so the
    record, or the error, is the one it makes (``tests/test_assembly_hot_path.py``).

    Raises:
        pydantic.ValidationError: The record breaks the contract (duplicate ids, a turn of another
            rollout, a value of the wrong type).
    """
    if type(task_id) is str and type(rollout_id) is str:
        values: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "task_id": task_id, "rollout_id": rollout_id}
        for name, model in _RECORD_PARTS:
            items = list(parts[name])
            if not all(type(item) is model for item in items):
                break
            values[name] = items
        else:
            record = built_model(TrajectoryRecord, values, fields_set=set(_RECORD_FIELDS_SET))
            try:
                return record._identity()
            except PydanticCustomError:
                pass  # pydantic raises it as the ValidationError it always was
    return TrajectoryRecord(task_id=task_id, rollout_id=rollout_id, **parts)


def failed_projection(task_id: str, rollout_id: str, exc: Exception) -> TrajectoryRecord:
    """The minimal trajectory written when the projection fails."""
    gap = ObservationGap(code="trajectory_projection_failed", detail=type(exc).__name__)
    return TrajectoryRecord(task_id=task_id, rollout_id=rollout_id, gaps=[gap])
