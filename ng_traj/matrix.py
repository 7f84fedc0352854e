"""C1–C7 computed from records: per-record verdicts, per-group cells, the documented reference row.

The reference decides V/O/X by hand; ng-traj evaluates each trajectory with
the rules below, which start from NeMo Gym's own capability page and are written out, with
examples, in ``docs/matrix.md``. A verdict is ``V`` (complete), ``O`` (partial), ``X``
(unavailable) or ``NA`` (the criterion does not apply: C5 and C6 for a rollout without tool calls,
C2 when every call failed). Every verdict that is not ``V`` carries the reason that decided it:
``gap:<code>`` (a gap of the record) or ``missing:<field>`` (a field that is null or absent).

Terms used by the rules:

* *agent-side invocations*: the record's invocations without ng-traj's fallback invocation
  ``rollout_record`` (present with the gap ``conversation_from_rollout_record``),
  which never counts as agent-side evidence.
* *considered calls*: the record's model calls without the judge calls known only from a rollout
  row's judge record (gap ``model_call_from_judge_record``): they are not the agent's calls and
  did not travel the captured model-server path C1 and C2 describe.
* *tool calls*: the ``(invocation_id, call_id)`` of every ``function_call`` item in any conversation
  (the fallback's included: it shows the model called a tool), together with every tool record.

Pure functions over one ``TrajectoryRecord`` and what its row says (:class:`RecordContext`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Literal

from ng_traj.contract import AgentInvocation, TrajectoryModelCall, TrajectoryRecord

CRITERIA = ("C1", "C2", "C3", "C4", "C5", "C6", "C7")
Value = Literal["V", "O", "X", "NA"]
FALLBACK_GAP = "conversation_from_rollout_record"
FALLBACK_INVOCATION = "rollout_record"
JUDGE_RECORD_GAP = "model_call_from_judge_record"
PROJECTION_FAILED = "trajectory_projection_failed"
CAPTURE_LOSS = (
    "model_call_capture_incomplete",
    "model_call_capture_unreadable",
    "model_call_capture_records_unreadable",
    "model_call_capture_no_records",
)
HISTORY_DAMAGE = (
    "multimodal_history_redacted",
    "agent_conversation_branching_unavailable",
    "agent_transcript_unavailable",
)
METADATA = ("model_ref", "dialect", "status_code")
COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")
TOOL_FIELDS = ("output", "status", "started_at", "completed_at", "duration_ms")
TIMING_FIELDS = ("started_at", "completed_at", "duration_ms", "timing_source")
NO_PRODUCER = "(none)"
UNKNOWN = "(unknown)"


@dataclass(frozen=True, slots=True)
class RecordContext:
    """What the rollout row adds to its trajectory.

    Attributes:
        agent: ``agent_ref.name`` of the row, ``None`` for plain trajectory records.
        producer: Source of the agent-side evidence: the row bundle's ``source``, ``ng_trajectory``
            for a producer trajectory, :data:`NO_PRODUCER`, or :data:`UNKNOWN` (plain trajectories).
        rollout_usage: The row's ``response.usage`` reports at least one token count.
    """

    agent: str | None = None
    producer: str = UNKNOWN
    rollout_usage: bool = False


@dataclass(frozen=True, slots=True)
class Verdict:
    """One criterion for one record: the value and, unless ``V``, the reason."""

    value: Value
    reason: str | None = None


V = Verdict("V")
NA = Verdict("NA")


def _gap(record: TrajectoryRecord, *codes: str) -> str | None:
    present = {gap.code for gap in record.gaps}
    return next((f"gap:{code}" for code in codes if code in present), None)


def agent_invocations(record: TrajectoryRecord) -> list[AgentInvocation]:
    """Invocations without the fallback ``rollout_record``."""
    fallback = any(gap.code == FALLBACK_GAP for gap in record.gaps)
    return [i for i in record.invocations if not (fallback and i.invocation_id == FALLBACK_INVOCATION)]


def considered_calls(record: TrajectoryRecord) -> list[TrajectoryModelCall]:
    """Model calls without the judge calls known only from a row's judge record."""
    judged = {
        gap.detail.split(":", 1)[1] for gap in record.gaps if gap.code == JUDGE_RECORD_GAP and ":" in (gap.detail or "")
    }
    return [
        c for c in record.model_calls if c.model_call_id is not None or c.response_metadata.response_id not in judged
    ]


def _most_common(reasons: Iterable[str]) -> str:
    """The most frequent reason; ties go to the alphabetically first."""
    counts = Counter(reasons)
    return min(counts, key=lambda reason: (-counts[reason], reason))


def _no_calls(record: TrajectoryRecord) -> str:
    return _gap(record, *CAPTURE_LOSS, "model_calls_unavailable", JUDGE_RECORD_GAP) or "missing:model_calls"


def c1(record: TrajectoryRecord, calls: list[TrajectoryModelCall]) -> Verdict:
    """Per-call metadata: every considered call has ``model_ref``, ``dialect``, ``status_code``; no capture loss."""
    if not calls:
        return Verdict("X", _no_calls(record))
    lacking = [name for call in calls for name in METADATA if getattr(call.response_metadata, name) is None]
    loss = _gap(record, *CAPTURE_LOSS)
    if not lacking and loss is None:
        return V
    transcript = _gap(record, "model_call_usage_from_transcript")
    return Verdict("O", loss or transcript or f"missing:model_calls[].response_metadata.{_most_common(lacking)}")


def _failed(call: TrajectoryModelCall) -> bool:
    status = call.response_metadata.status_code
    return call.response_metadata.error_category is not None or (status is not None and status >= 400)


def c2(record: TrajectoryRecord, calls: list[TrajectoryModelCall], context: RecordContext) -> Verdict:
    """Token counts: every successful considered call has prompt, completion and total tokens."""
    answered = [call for call in calls if not _failed(call)]
    if calls and not answered:
        return NA
    lacking = [name for call in answered for name in COUNTS if getattr(call.token_stats, name) is None]
    if answered and not lacking:
        return V
    reported = any(getattr(call.token_stats, name) is not None for call in answered for name in COUNTS)
    reason = f"missing:model_calls[].token_stats.{_most_common(lacking)}" if answered else _no_calls(record)
    return Verdict("O" if reported or context.rollout_usage else "X", reason)


def c3(record: TrajectoryRecord) -> Verdict:
    """Turns: identity, number, time, question, answer and step count per turn; resolution on the last."""
    if not record.turns:
        return Verdict("X", _gap(record, "turns_unavailable") or "missing:turns")
    lacking = [name for turn in record.turns for name in ("question", "answer") if getattr(turn, name) is None]
    if record.turns[-1].resolved is None:
        lacking.append("resolved")
    resolution = _gap(record, "resolution_unavailable")
    if not lacking and resolution is None:
        return V
    return Verdict("O", resolution or f"missing:turns[].{_most_common(lacking)}")


def c4(record: TrajectoryRecord, calls: list[TrajectoryModelCall]) -> Verdict:
    """History: every agent-side conversation non-empty, or every considered call with both payloads."""
    invocations = agent_invocations(record)
    conversations = bool(invocations) and all(i.conversation for i in invocations)
    payloads = bool(calls) and all(c.request is not None and c.response is not None for c in calls)
    some = any(i.conversation for i in invocations) or any(
        c.request is not None or c.response is not None for c in calls
    )
    if not some:
        return Verdict("X", _gap(record, FALLBACK_GAP, "conversation_unavailable") or "missing:model_calls[].request")
    damage = _gap(record, *HISTORY_DAMAGE)
    if (conversations or payloads) and damage is None:
        return V
    if damage is not None:
        return Verdict("O", damage)
    empty = any(not i.conversation for i in invocations)
    return Verdict("O", "missing:invocations[].conversation" if empty else "missing:model_calls[].request")


def tool_keys(record: TrajectoryRecord) -> list[tuple[str, str]]:
    """Every tool call: ``function_call`` items of all conversations, then tool records, without repeats."""
    keys = [
        (invocation.invocation_id, item.call_id)
        for invocation in record.invocations
        for item in invocation.conversation
        if getattr(item, "type", None) == "function_call"
    ]
    keys.extend((tool.invocation_id, tool.tool_call_id) for tool in record.tool_calls)
    return list(dict.fromkeys(keys))


def _tool_reason(by_detail: Mapping[str, str], fallback: bool, key: tuple[str, str], lacking: str | None) -> str:
    """Why one tool call is incomplete: a gap naming its call id, the fallback, or the missing part."""
    if key[1] in by_detail:
        return f"gap:{by_detail[key[1]]}"
    if fallback and key[0] == FALLBACK_INVOCATION:
        return f"gap:{FALLBACK_GAP}"
    return f"missing:tool_calls[].{lacking}" if lacking else "missing:tool_calls"


def _first_lacking(tool: Any, names: tuple[str, ...]) -> str | None:
    for name in names:
        value = getattr(tool, name)
        if value is None or (name == "status" and value == "unknown"):
            return name
    return None


def _tool_verdict(record: TrajectoryRecord, names: tuple[str, ...]) -> tuple[Verdict, list[tuple[str, str]]]:
    """V/O/X over every tool call for the fields ``names``, and the keys that have them all."""
    keys = tool_keys(record)
    if not keys:
        return NA, []
    tools = {(tool.invocation_id, tool.tool_call_id): tool for tool in record.tool_calls}
    by_detail = {gap.detail: gap.code for gap in reversed(record.gaps) if gap.detail}
    fallback = _gap(record, FALLBACK_GAP) is not None
    reasons, complete = [], []
    for key in keys:
        tool = tools.get(key)
        lacking = _first_lacking(tool, names) if tool is not None else None
        if tool is not None and lacking is None:
            complete.append(key)
        else:
            reasons.append(_tool_reason(by_detail, fallback, key, lacking))
    if not reasons:
        return V, complete
    return Verdict("O" if complete else "X", _most_common(reasons)), complete


def c5(record: TrajectoryRecord) -> Verdict:
    """Tool calls: each has a record with output, a known status, start, completion and duration."""
    return _tool_verdict(record, TOOL_FIELDS)[0]


def _overlap(record: TrajectoryRecord, keys: list[tuple[str, str]]) -> bool:
    tools = {(tool.invocation_id, tool.tool_call_id): tool for tool in record.tool_calls}
    spans: dict[str, list[tuple[float, float]]] = {}
    for key in keys:
        spans.setdefault(key[0], []).append((tools[key].started_at, tools[key].completed_at))
    for intervals in spans.values():
        intervals.sort()
        for (_, end), (start, _) in pairwise(intervals):
            if start < end:
                return True
    return False


def c6(record: TrajectoryRecord, context: RecordContext, concurrent: frozenset[str]) -> Verdict:
    """Parallel tool timing: per-call intervals with a timing source, from a producer that runs tools concurrently."""
    verdict, timed = _tool_verdict(record, TIMING_FIELDS)
    if verdict.value in ("NA", "X"):
        return verdict
    if context.producer not in concurrent and not _overlap(record, timed):
        return Verdict("X", "missing:parallel_tool_calls")
    return verdict


def c7(record: TrajectoryRecord) -> Verdict:
    """Agent-side evidence: at least one invocation that is not the fallback."""
    if agent_invocations(record):
        return V
    found = _gap(record, FALLBACK_GAP, "producer_trajectory_invalid", "agent_observations_invalid")
    return Verdict("X", found or "missing:invocations")


def evaluate(record: TrajectoryRecord, context: RecordContext, concurrent: frozenset[str]) -> dict[str, Verdict]:
    """Verdicts of C1–C7 for one record (the module docstring and README give the rules)."""
    failed = _gap(record, PROJECTION_FAILED)
    if failed is not None:
        return dict.fromkeys(CRITERIA, Verdict("X", failed))
    calls = considered_calls(record)
    verdicts = (
        c1(record, calls),
        c2(record, calls, context),
        c3(record),
        c4(record, calls),
        c5(record),
        c6(record, context, concurrent),
        c7(record),
    )
    return dict(zip(CRITERIA, verdicts, strict=True))


@dataclass
class Cell:
    """One criterion over a group of records: the count of each value and of each reason."""

    counts: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)

    def add(self, verdict: Verdict) -> None:
        """Count one record's verdict."""
        self.counts[verdict.value] += 1
        if verdict.reason is not None:
            self.reasons[verdict.reason] += 1

    @property
    def applicable(self) -> int:
        """Records the criterion applies to (``V`` + ``O`` + ``X``)."""
        return self.counts["V"] + self.counts["O"] + self.counts["X"]

    @property
    def value(self) -> Value:
        """``V`` when every applicable record is V, ``X`` when every one is X, else ``O``; ``NA`` for none."""
        if not self.applicable:
            return "NA"
        for value in ("V", "X"):
            if self.counts[value] == self.applicable:
                return value  # type: ignore[return-value]
        return "O"

    @property
    def reason(self) -> tuple[str, int] | None:
        """The most frequent reason among the records that are not V (ties: alphabetical), with its count."""
        if not self.reasons:
            return None
        top = min(self.reasons, key=lambda reason: (-self.reasons[reason], reason))
        return top, self.reasons[top]


@dataclass
class Group:
    """The cells of one agent (or producer)."""

    name: str
    records: int = 0
    cells: dict[str, Cell] = field(default_factory=lambda: {c: Cell() for c in CRITERIA})

    def add(self, verdicts: Mapping[str, Verdict]) -> None:
        """Count one record's verdicts."""
        self.records += 1
        for criterion, verdict in verdicts.items():
            self.cells[criterion].add(verdict)


def group_name(context: RecordContext, by: str) -> str:
    """The group of a record: its agent (``--by agent``) or its producer (``--by producer``)."""
    if by == "producer":
        return context.producer
    return context.agent if context.agent else UNKNOWN


def tabulate(
    items: Iterable[tuple[TrajectoryRecord, RecordContext]], by: str, concurrent: frozenset[str]
) -> list[Group]:
    """Evaluate every record and count its verdicts into its group; groups sorted by name."""
    groups: dict[str, Group] = {}
    for record, context in items:
        name = group_name(context, by)
        if name not in groups:
            groups[name] = Group(name)
        groups[name].add(evaluate(record, context, concurrent))
    return sorted(groups.values(), key=lambda group: group.name)
