"""The ``ng_trajectory`` record, schema version 1.0.

Source: ``TrajectoryRecord`` and its parts in ``nemo_gym/rollout_observability.py`` at Gym commit
``07d6b0d07``. Times are UTC Unix **seconds**, durations **milliseconds**.
Token counts follow the inclusive convention: ``prompt_tokens`` includes cached tokens and
``completion_tokens`` includes reasoning tokens; ``null`` means not reported, ``0`` reported zero.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from ng_traj.contract.base import ContractModel, ModelServerRef, contract_error
from ng_traj.contract.observations import (
    AgentInvocation,
    ModelCallRef,
    ObservationGap,
    ToolCallObservation,
    duplicate_invocation,
)

SCHEMA_VERSION = "1.0"
CONTRACT_REVISION = "nemo-gym-0.7.0"
"""The NeMo Gym commit whose ``ng_trajectory`` these models mirror (written into dataset manifests)."""


class TrajectoryTokenStats(ContractModel):
    """Token counts of one model call, as the provider reported them (inclusive convention)."""

    prompt_tokens: int | None = Field(default=None, ge=0)
    """Prompt tokens, cached ones included (Anthropic cache reads and writes folded in)."""
    completion_tokens: int | None = Field(default=None, ge=0)
    """Completion tokens, reasoning tokens included."""
    reasoning_tokens: int | None = Field(default=None, ge=0)
    """Reasoning tokens (a subset of completion tokens); null for Anthropic, which does not report them."""
    total_tokens: int | None = Field(default=None, ge=0)
    """Provider total, else prompt + completion."""
    cached_tokens: int | None = Field(default=None, ge=0)
    """Prompt tokens served from cache (a subset of prompt tokens)."""


class TrajectoryResponseMetadata(ContractModel):
    """Response metadata of one model call, derived from its capture record."""

    response_id: str | None = None
    """Provider response id."""
    model_ref: ModelServerRef | None = None
    """Model server that served the call."""
    model: str | None = None
    """Model name from the response, else from the request."""
    dialect: str | None = None
    """``responses``, ``chat`` or ``messages``."""
    status_code: int | None = None
    """HTTP status of the call."""
    response_status: str | None = None
    """Responses-API lifecycle status (``completed``, ``incomplete``, ``failed``)."""
    finish_reason: str | None = None
    """Anthropic ``stop_reason``, Chat ``finish_reason`` or Responses ``incomplete_details.reason``."""
    upstream_attempted: bool | None = None
    """Whether the model server contacted its backend (nemo-gym 0.7.0 and later)."""
    response_source: Literal["upstream", "local"] | None = None
    """``upstream`` (backend body) or ``local`` (made up by the model server); nemo-gym 0.7.0 and later."""
    upstream_status_code: int | None = None
    """The backend's HTTP status when the server answered locally or re-raised (nemo-gym 0.7.0 and later)."""
    local_response_reason: str | None = None
    """Why the server answered locally, e.g. ``context_length_exceeded`` (nemo-gym 0.7.0 and later)."""
    error_category: str | None = None
    """Capture error category, null on clean success."""
    latency_ttft_ms: float | None = Field(default=None, ge=0)
    """Milliseconds to the first response byte."""


class TrajectoryModelCall(ContractModel):
    """One model call with its payloads, metadata and token counts."""

    model_call_id: str | None = None
    """Capture identity; unique within a trajectory when set."""
    started_at: float | None = None
    """Start, UTC Unix seconds."""
    completed_at: float | None = None
    """Completion, UTC Unix seconds."""
    duration_ms: float | None = Field(default=None, ge=0)
    """Latency in milliseconds (monotonic clock at capture)."""
    request: Any | None = None
    """Request body (JSON value), or its raw text when it was not a JSON object."""
    response: Any | None = None
    """Response body (JSON value), or its raw text (SSE stream, non-JSON body)."""
    response_metadata: TrajectoryResponseMetadata = Field(default_factory=TrajectoryResponseMetadata)
    """Response metadata."""
    token_stats: TrajectoryTokenStats = Field(default_factory=TrajectoryTokenStats)
    """Token counts."""


class TrajectoryTurn(ContractModel):
    """One turn of an invocation: the question put to the model and its answer."""

    invocation_id: str
    """Invocation the turn belongs to."""
    task_id: str
    """Must equal the record's ``task_id``."""
    rollout_id: str
    """Must equal the record's ``rollout_id``."""
    turn_no: int = Field(ge=1)
    """Turn number within this invocation, from 1."""
    timestamp: float
    """When the turn's model call was made, UTC Unix seconds."""
    question: Any | None = None
    """Exact model input of the turn."""
    answer: Any | None = None
    """Model output items of the turn, reasoning excluded."""
    reasoning_content: Any | None = None
    """Reasoning items of the turn."""
    resolved: bool | None = None
    """Verifier resolution, on the final turn."""
    step_count: int = Field(ge=0)
    """Producer-reported cumulative step count within this invocation."""
    model_calls: list[ModelCallRef] = Field(default_factory=list)
    """Model calls made in this turn."""


class TrajectoryToolCall(ToolCallObservation):
    """A tool observation with the model-visible output of the call."""

    output: Any | None = None
    """Model-visible tool output (the conversation's ``function_call_output.output``)."""


class TrajectoryRecord(ContractModel):
    """One rollout's trajectory: the ``ng_trajectory`` attachment, schema 1.0."""

    model_config = ConfigDict(defer_build=True)  # holds conversation items (contract/observations.py)

    schema_version: Literal["1.0"] = SCHEMA_VERSION
    """Always ``1.0``."""
    task_id: str
    """Task identity."""
    rollout_id: str
    """Rollout identity."""
    invocations: list[AgentInvocation] = Field(default_factory=list)
    """Agent invocations (root and sub-agents)."""
    turns: list[TrajectoryTurn] = Field(default_factory=list)
    """Turns, sorted by (timestamp, invocation_id, turn_no)."""
    model_calls: list[TrajectoryModelCall] = Field(default_factory=list)
    """Model calls: producer order, then capture-only calls in capture order."""
    tool_calls: list[TrajectoryToolCall] = Field(default_factory=list)
    """Tool calls with their outputs."""
    gaps: list[ObservationGap] = Field(default_factory=list)
    """What could not be observed or joined, de-duplicated by (code, invocation_id, detail)."""

    @model_validator(mode="after")
    def _identity(self) -> TrajectoryRecord:
        duplicate = duplicate_invocation(self.invocations)
        if duplicate is not None:
            raise contract_error(
                "duplicate_invocation_id",
                "invocation_id '{id}' is not unique in the trajectory",
                pointer=f"invocations.{duplicate}.invocation_id",
                id=self.invocations[duplicate].invocation_id,
            )
        seen_calls: set[str] = set()
        for index, call in enumerate(self.model_calls):
            if call.model_call_id and call.model_call_id in seen_calls:
                raise contract_error(
                    "duplicate_model_call_id",
                    "model_call_id '{id}' is not unique in the trajectory",
                    pointer=f"model_calls.{index}.model_call_id",
                    id=call.model_call_id,
                )
            if call.model_call_id:
                seen_calls.add(call.model_call_id)
        self._check_turns()
        return self

    def _check_turns(self) -> None:
        keys: set[tuple[str, int]] = set()
        for index, turn in enumerate(self.turns):
            for field in ("task_id", "rollout_id"):
                if getattr(turn, field) != getattr(self, field):
                    raise contract_error(
                        "turn_identity_mismatch",
                        "turn {field} '{turn}' differs from the record's '{record}'",
                        pointer=f"turns.{index}.{field}",
                        field=field,
                        turn=getattr(turn, field),
                        record=getattr(self, field),
                    )
            key = (turn.invocation_id, turn.turn_no)
            if key in keys:
                raise contract_error(
                    "duplicate_turn",
                    "turn_no {no} appears twice for invocation '{id}'",
                    pointer=f"turns.{index}.turn_no",
                    no=turn.turn_no,
                    id=turn.invocation_id,
                )
            keys.add(key)
