"""The agent observation contract: invocations, tool and compaction observations, gaps, bundles.

Source: ``nemo_gym/rollout_observability.py`` at Gym commit ``07d6b0d07``.
Field names, types, defaults, order and validators mirror upstream; times are UTC Unix **seconds**
(float) and durations **milliseconds** (float) throughout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import ConfigDict, Field, GetCoreSchemaHandler, model_validator
from pydantic_core import CoreSchema

from ng_traj.contract.base import ContractModel, ModelServerRef, contract_error

if TYPE_CHECKING:
    from ng_traj.contract.conversation import ConversationItem
else:

    class _ConversationItemSchema:
        """Stands for ``contract/conversation.ConversationItem`` until a schema that holds it is built.

        The item union is made of the ``openai`` SDK's Responses models, and importing the SDK and
        building the union's schema costs about 0.2 s of CPU, which a build of capture logs
        and rollout rows without conversations never needs. The models holding conversations build
        their schema on first use (``defer_build``), and this marker imports the union then: the
        schema is the one ``list[ConversationItem]`` makes, member for member.
        """

        def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
            from ng_traj.contract.conversation import ConversationItem

            return handler.generate_schema(ConversationItem)

    ConversationItem = Annotated[Any, _ConversationItemSchema()]


class ModelCallRef(ContractModel):
    """Identifiers naming one model call: a ``model_call_id``, or both ``model_ref`` and ``response_id``."""

    model_call_id: str | None = None
    """Capture identity of the call (32 lowercase hex in Gym captures)."""
    model_ref: ModelServerRef | None = None
    """Model server that served the call."""
    response_id: str | None = None
    """Provider response id (``resp_…``, ``chatcmpl-…``, ``msg_…``)."""

    @model_validator(mode="after")
    def _join_key(self) -> ModelCallRef:
        if not self.model_call_id and not (self.model_ref is not None and self.response_id):
            raise contract_error("missing_join_key", "needs model_call_id, or both model_ref and response_id")
        return self


InvocationStatus = Literal["completed", "failed", "incomplete", "unknown"]
ToolStatus = Literal["completed", "failed", "timeout", "cancelled", "incomplete", "unknown"]


class AgentInvocation(ContractModel):
    """One root agent or sub-agent conversation observed by a harness."""

    model_config = ConfigDict(defer_build=True)  # holds conversation items: schema built on first use

    kind: Literal["agent_invocation"] = "agent_invocation"
    """Record discriminator."""
    invocation_id: str
    """Unique within a bundle and within a trajectory."""
    parent_invocation_id: str | None = None
    """Parent invocation; may name an invocation absent from the record (partial trees)."""
    spawned_by_tool_call_id: str | None = None
    """The parent's tool call that spawned this sub-agent."""
    status: InvocationStatus = "unknown"
    """Harness-reported outcome; ``unknown`` when not explicit."""
    duration_ms: float | None = Field(default=None, ge=0)
    """Wall duration in milliseconds."""
    error_type: str | None = None
    """Harness error class or category, when failed."""
    model_calls: list[ModelCallRef] = Field(default_factory=list)
    """Calls this invocation made, in the order the producer observed them."""
    conversation: list[ConversationItem] = Field(default_factory=list)
    """Model-visible history of this invocation (Responses input items)."""


class ToolCallObservation(ContractModel):
    """Timing and outcome of one tool call at an agent-owned boundary."""

    kind: Literal["tool_call"] = "tool_call"
    """Record discriminator."""
    invocation_id: str
    """Invocation whose conversation holds the matching ``function_call``."""
    tool_call_id: str
    """Equals the ``call_id`` of the function call in that conversation."""
    sandbox_id: str | None = None
    """Enclosing sandbox instance, shared by concurrent calls."""
    tool_name: str | None = None
    """Tool name."""
    started_at: float | None = None
    """Start, UTC Unix seconds."""
    completed_at: float | None = None
    """Completion, UTC Unix seconds; never before ``started_at``."""
    duration_ms: float | None = Field(default=None, ge=0)
    """Duration in milliseconds."""
    timing_source: Literal["executor", "artifact", "harness"] | None = None
    """``executor``: measured around execution; ``harness``: harness events; ``artifact``: transcript times."""
    status: ToolStatus = "unknown"
    """Outcome of the call."""
    error_type: str | None = None
    """Error class or category, when failed."""

    @model_validator(mode="after")
    def _timing_order(self) -> ToolCallObservation:
        if self.started_at is not None and self.completed_at is not None and self.completed_at < self.started_at:
            raise contract_error("tool_timing_reversed", "completed_at precedes started_at", pointer="completed_at")
        return self


class SandboxObservation(ContractModel):
    """Outcome and lifetime resource usage of a sandbox (in nemo-gym 0.7.0, from the sandboxed OpenCode, vibench and pi agents)."""

    kind: Literal["sandbox"] = "sandbox"
    """Record discriminator."""
    role: Literal["agent", "verifier", "environment"]
    """What the sandbox was used for."""
    provider: str | None = None
    """Sandbox provider name."""
    sandbox_id: str | None = None
    """Sandbox instance id."""
    outcome: Literal["completed", "failed", "timeout", "oom", "sandbox_error", "cancelled", "unknown"] = "unknown"
    """Sandbox outcome."""
    exit_code: int | None = None
    """Process exit code."""
    wall_time_s: float | None = Field(default=None, ge=0)
    """Wall time in seconds."""
    cpu_time_s: float | None = Field(default=None, ge=0)
    """Cumulative measured CPU seconds."""
    peak_memory_mib: float | None = Field(default=None, ge=0)
    """Measured peak memory in MiB, never a configured limit."""
    resource_usage_source: str | None = None
    """Where the usage numbers came from."""
    error_type: str | None = None
    """Error class or category."""


class ContextCompactionObservation(ContractModel):
    """An explicit context compaction reported by the harness."""

    kind: Literal["context_compaction"] = "context_compaction"
    """Record discriminator."""
    invocation_id: str
    """Invocation whose context was compacted."""
    observed_at: float | None = None
    """When the compaction was observed, UTC Unix seconds."""
    trigger: str | None = None
    """Producer's reason, e.g. ``overflow``, ``manual``, ``context_pressure``."""
    tokens_before: int | None = Field(default=None, ge=0)
    """Producer-reported context tokens before; may disagree with ``tokens_after``'s accounting."""
    tokens_after: int | None = Field(default=None, ge=0)
    """Producer-reported context tokens after."""
    outcome: Literal["completed", "failed", "aborted", "unknown"] = "unknown"
    """Compaction outcome."""
    summary: str | None = None
    """Summary text that replaced the compacted history."""
    first_kept_item_id: str | None = None
    """Producer id of the first entry kept after compaction."""
    before_model_call: ModelCallRef | None = None
    """Last invocation model call before the compaction."""
    model_calls: list[ModelCallRef] = Field(default_factory=list)
    """Calls that performed the compaction (exact ids only)."""
    after_model_call: ModelCallRef | None = None
    """First invocation model call after the compaction."""


class ObservationGap(ContractModel):
    """A fact the producer or ng-traj could not observe or join exactly."""

    code: str
    """Gap code: NeMo Gym's own codes and ng-traj's (``contract/gaps.py``)."""
    invocation_id: str | None = None
    """Invocation the gap concerns, when it concerns one."""
    detail: str | None = None
    """Short identifier-only detail; never payload text."""


AgentObservationRecord = Annotated[
    AgentInvocation | ToolCallObservation | ContextCompactionObservation | SandboxObservation,
    Field(discriminator="kind"),
]


def dedupe_gaps(gaps: Sequence[ObservationGap]) -> list[ObservationGap]:
    """Gaps de-duplicated by ``(code, invocation_id, detail)``, first occurrence kept, order preserved
    (as the reference join and projection do)."""
    seen: set[tuple[str, str | None, str | None]] = set()
    result = []
    for gap in gaps:
        key = (gap.code, gap.invocation_id, gap.detail)
        if key not in seen:
            seen.add(key)
            result.append(gap)
    return result


def duplicate_invocation(invocations: Sequence[AgentInvocation]) -> int | None:
    """Return the position of the first invocation whose id repeats an earlier one, else ``None``."""
    seen: set[str] = set()
    for index, invocation in enumerate(invocations):
        if invocation.invocation_id in seen:
            return index
        seen.add(invocation.invocation_id)
    return None


def parent_cycle(invocations: Sequence[AgentInvocation]) -> int | None:
    """Return the position of an invocation on a parent cycle, else ``None``.

    Parents absent from ``invocations`` end a chain (partial trees are valid).
    """
    parents = {inv.invocation_id: inv.parent_invocation_id for inv in invocations}
    acyclic: set[str] = set()
    for index, invocation in enumerate(invocations):
        chain: list[str] = []
        current: str | None = invocation.invocation_id
        while current is not None and current in parents and current not in acyclic:
            if current in chain:
                return index
            chain.append(current)
            current = parents[current]
        acyclic.update(chain)
    return None


class AgentObservationBundle(ContractModel):
    """Observations of one rollout from one producer: the ``ng_agent_observations`` attachment."""

    model_config = ConfigDict(defer_build=True)  # holds conversation items: schema built on first use

    source: str
    """Producer: ``claude_code``, ``openclaw``, ``hermes``, ``pi``, ``opencode``."""
    records: list[AgentObservationRecord] = Field(default_factory=list)
    """Typed records; list position carries no meaning."""
    gaps: list[ObservationGap] = Field(default_factory=list)
    """What could not be observed."""

    @model_validator(mode="after")
    def _identity(self) -> AgentObservationBundle:
        positions = [i for i, record in enumerate(self.records) if isinstance(record, AgentInvocation)]
        invocations: list[Any] = [self.records[i] for i in positions]
        duplicate = duplicate_invocation(invocations)
        if duplicate is not None:
            raise contract_error(
                "duplicate_invocation_id",
                "invocation_id '{id}' is not unique in the bundle",
                pointer=f"records.{positions[duplicate]}.invocation_id",
                id=invocations[duplicate].invocation_id,
            )
        cycle = parent_cycle(invocations)
        if cycle is not None:
            raise contract_error(
                "parent_cycle",
                "parent_invocation_id forms a cycle through '{id}'",
                pointer=f"records.{positions[cycle]}.parent_invocation_id",
                id=invocations[cycle].invocation_id,
            )
        return self
