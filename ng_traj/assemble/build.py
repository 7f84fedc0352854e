"""Running a build: assemble each planned slot and hand the result to the writer.

Each slot is assembled from its own artifacts only (its row, re-read by byte offset; its capture
files; its bundles), so slots are independent and memory is bounded by the largest rollout.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ng_traj.assemble.join import join_bundles
from ng_traj.assemble.judge import JudgeMerge, judge_calls_of_row
from ng_traj.assemble.native import resolve_native
from ng_traj.assemble.plan import Slot
from ng_traj.assemble.project import ProjectionInputs, failed_projection, project_call
from ng_traj.assemble.rollout import (
    CaptureState,
    build_trajectory,
    capture_from_evidence,
    capture_from_row,
    fallback_invocation,
    has_redaction_gap,
    validated_bundle,
    without_payloads,
)
from ng_traj.contract import AgentObservationBundle, ObservationGap, TrajectoryRecord
from ng_traj.contract.capture import PAYLOAD_KEYS
from ng_traj.contract.observations import dedupe_gaps
from ng_traj.diagnostics import Diagnostic, DiagnosticSink
from ng_traj.redact import Redactor
from ng_traj.roles import RoleTally
from ng_traj.sources.capture import collect_capture
from ng_traj.sources.native import READERS
from ng_traj.sources.rollouts import load_row
from ng_traj.writers.jsonl import SERIALISE_ERRORS, record_json, row_json, trajectory_json


@dataclass(frozen=True)
class BuildOptions:
    """What the user asked for.

    Attributes:
        capture_enabled: Capture stores were given (recompute capture and join; PRODUCT.md §10.7).
        payloads: Keep request/response payloads (``--no-payloads`` clears it).
        attach: Write rollout rows with the trajectory attached (``--attach``).
        redactor: Mask secrets in the output copy (``--redact``).
        roles: ``--role`` map, ``{model server name: role}`` (``roles.py``).
    """

    capture_enabled: bool = False
    payloads: bool = True
    attach: bool = False
    redactor: Redactor | None = None
    roles: dict[str, str] = field(default_factory=dict)


@dataclass
class Built:
    """One assembled slot: the trajectory, the bytes to write, and what the summary needs."""

    record: TrajectoryRecord
    line: bytes
    failed: Exception | None = None
    session_totals: Counter[str] = field(default_factory=Counter)


@dataclass
class BuildTally:
    """Totals over written trajectories."""

    trajectories: int = 0
    by_origin: Counter[str] = field(default_factory=Counter)
    gaps_by_code: Counter[str] = field(default_factory=Counter)
    model_calls: int = 0
    tool_calls: int = 0
    invocations: int = 0
    projection_failures: int = 0
    by_named: Counter[str] = field(default_factory=Counter)
    session_totals: Counter[str] = field(default_factory=Counter)
    by_role: RoleTally = field(default_factory=RoleTally)

    def add(self, slot: Slot, built: Built) -> None:
        record = built.record
        self.trajectories += 1
        self.by_origin[_origin(slot)] += 1
        self.gaps_by_code.update(gap.code for gap in record.gaps)
        self.model_calls += len(record.model_calls)
        self.tool_calls += len(record.tool_calls)
        self.invocations += len(record.invocations)
        self.projection_failures += built.failed is not None
        self.by_named.update(slot.named)
        self.session_totals.update(built.session_totals)
        self.by_role.add(record.model_calls)


def _origin(slot: Slot) -> str:
    if slot.path is None:
        return "capture_without_row" if slot.capture else "session_without_row"
    return "rollout_row" if slot.identity.derived else "rollout_row_without_identity"


def _identity_gap(slot: Slot) -> list[ObservationGap]:
    if slot.path is None or slot.identity.derived:
        return []
    problem = slot.identity.problem or ""
    detail = "no_identity_keys" if problem.startswith("no ") else "invalid_identity_keys"
    return [ObservationGap(code="rollout_identity_unavailable", detail=detail)]


def _capture(slot: Slot, row: dict[str, Any] | None, options: BuildOptions, sink: DiagnosticSink) -> CaptureState:
    if options.capture_enabled and (row is None or slot.identity.derived):
        try:
            evidence = collect_capture(slot.capture, sink) if slot.capture else None
        except OSError:
            return capture_from_evidence(None, error=True)
        return capture_from_evidence(evidence)
    return capture_from_row(row) if row is not None else CaptureState()


@dataclass
class _Bundles:
    """The observation bundles of one slot, in precedence order, and what the native readers added."""

    values: list[Any] = field(default_factory=list)
    joined: AgentObservationBundle | None = None
    transcript_calls: list[Any] = field(default_factory=list)
    session_totals: Counter[str] = field(default_factory=Counter)


def _natives(
    slot: Slot,
    row_source: str | None,
    capture: CaptureState,
    options: BuildOptions,
    sink: DiagnosticSink,
    totals: Counter[str],
):
    """Load, and make refs for, the slot's native units; a unit of the row bundle's producer is skipped.

    The units' producer session totals (a summary cross-check only) are added to ``totals``.
    """
    loaded = []
    for unit in slot.native:
        reader = READERS[unit.reader]
        if row_source == reader.source:
            message = f"the row carries {reader.source} observations; session {unit.key} not read (decision 6)"
            sink.add(Diagnostic("info", "native_superseded", message, path=unit.anchor or unit.paths[0]))
            continue
        observations = reader.load(unit, sink)
        totals.update(observations.session_totals)
        loaded.append(resolve_native(observations, capture.records if options.capture_enabled else None))
    return loaded


def _bundles(
    slot: Slot, row: dict[str, Any] | None, capture: CaptureState, options: BuildOptions, sink: DiagnosticSink
) -> _Bundles:
    """Row bundle and native bundles, joined to the captured calls as one when capture stores were given."""
    value = row.get("ng_agent_observations") if row is not None else None
    row_bundle = validated_bundle(value) if value is not None else None
    totals: Counter[str] = Counter()
    natives = _natives(slot, row_bundle.source if row_bundle else None, capture, options, sink, totals)
    result = _Bundles(transcript_calls=[call for n in natives for call in n.transcript_calls], session_totals=totals)
    to_join = ([row_bundle] if row_bundle is not None else []) + [n.bundle for n in natives]
    if capture.recomputed and value is not None and row_bundle is None:
        capture.gaps.append({"code": "agent_observation_join_failed"})
    if capture.recomputed and to_join:
        to_join = join_bundles(to_join, capture.records)
    if row_bundle is not None:
        result.values.append(to_join.pop(0))
    elif value is not None:
        result.values.append(value)
    for native, bundle in zip(natives, to_join, strict=True):
        result.values.append(bundle.model_copy(update={"gaps": dedupe_gaps([*bundle.gaps, *native.gaps])}))
    if capture.recomputed or natives:
        result.joined = attach_bundle([v for v in result.values if isinstance(v, AgentObservationBundle)])
    return result


def attach_bundle(bundles: list[AgentObservationBundle]) -> AgentObservationBundle | None:
    """The one ``ng_agent_observations`` ``--attach`` writes: the first bundle's producer, with the
    records and gaps of every bundle of that producer (several sessions of one rollout), so that no
    compaction is lost (PRODUCT.md §10.18)."""
    if not bundles:
        return None
    source = bundles[0].source
    same = [bundle for bundle in bundles if bundle.source == source]
    records = [record for bundle in same for record in bundle.records]
    gaps = dedupe_gaps([gap for bundle in same for gap in bundle.gaps])
    try:
        return AgentObservationBundle(source=source, records=records, gaps=gaps)
    except ValidationError:
        return bundles[0]


def _judge(
    slot: Slot, row: dict[str, Any] | None, capture: CaptureState, options: BuildOptions, sink: DiagnosticSink
) -> JudgeMerge:
    """The row's judge calls merged with the captured calls (``assemble/judge.py``); skips reported."""
    if row is None:
        return JudgeMerge(capture_calls=list(capture.calls))
    merged, skipped = judge_calls_of_row(row, capture.calls, options.roles)
    for item in skipped:
        message = f"rollout {slot.identity.rollout_id}: {item.location}: {item.reason}; not read as a model call"
        severity = "warning" if item.malformed else "info"
        sink.add(Diagnostic(severity, "judge_record_skipped", message, path=slot.path, line=slot.line or None))
    return merged


def assemble_slot(slot: Slot, options: BuildOptions, sink: DiagnosticSink) -> Built:
    """Assemble one slot into its trajectory and output line (see ``assemble/rollout.py``)."""
    row = load_row(slot.path, slot.line, slot.offset, slot.size) if slot.path is not None else None
    capture = _capture(slot, row, options, sink)
    bundles = _bundles(slot, row, capture, options, sink)
    judge = _judge(slot, row, capture, options, sink)
    keep_payloads = options.payloads and not (row is not None and has_redaction_gap(row))
    keep = (lambda calls: calls) if keep_payloads else without_payloads
    inputs = ProjectionInputs(
        task_id=slot.identity.task_id,
        rollout_id=slot.identity.rollout_id,
        producer_trajectory=row.get("ng_trajectory") if row is not None else None,
        bundles=bundles.values,
        capture_calls=keep(judge.capture_calls),
        capture_gaps=capture.gaps,
        extra_calls=[*bundles.transcript_calls, *(project_call(call) for call in keep(judge.own_calls))],
        fallback=fallback_invocation(row) if row is not None else None,
        build_gaps=[*_identity_gap(slot), *slot.build_gaps, *judge.gaps],
    )
    record, failed = build_trajectory(inputs)
    if failed is not None:
        sink.add(
            Diagnostic(
                "warning",
                "projection_failed",
                f"rollout {slot.identity.rollout_id}: projection failed ({_first_error(failed)}); minimal record written",
                path=slot.path,
                line=slot.line or None,
            )
        )
    if options.redactor is not None:
        record = TrajectoryRecord.model_validate(options.redactor.value(record.model_dump(mode="json")))
    record, line = _serialised(record, slot, sink)
    if not options.attach:
        return Built(record, line + b"\n", failed, bundles.session_totals)
    attached, attachments = _attached_row(row, record, bundles.joined, capture, options)
    return Built(
        record, row_json(attached, {**attachments, "ng_trajectory": line}) + b"\n", failed, bundles.session_totals
    )


def _first_error(exc: Exception) -> str:
    """The first problem of a failed projection, as ``field: message`` when pydantic says which."""
    if isinstance(exc, ValidationError) and exc.errors():
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        return f"{where}: {error['msg']}" if where else error["msg"]
    return f"{type(exc).__name__}: {exc}"


def _serialised(record: TrajectoryRecord, slot: Slot, sink: DiagnosticSink) -> tuple[TrajectoryRecord, bytes]:
    """The record's JSON; too-deep open values as JSON text, else the minimal record (both reported)."""
    where = {"path": slot.path, "line": slot.line or None}
    try:
        record, line, fallback = trajectory_json(record)
    except SERIALISE_ERRORS as exc:
        record = failed_projection(record.task_id, record.rollout_id, exc)
        message = f"rollout {slot.identity.rollout_id}: nested too deep to serialise; minimal record written"
        sink.add(Diagnostic("warning", "projection_failed", message, **where))
        return record, record_json(record)
    if fallback:
        message = f"rollout {slot.identity.rollout_id}: payloads nested too deep for JSON writers, written as JSON text"
        sink.add(Diagnostic("warning", "payload_as_text", message, **where))
    return record, line


def _attached_row(
    row: dict[str, Any] | None,
    record: TrajectoryRecord,
    bundle: Any,
    capture: CaptureState,
    options: BuildOptions,
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The row to write with ``--attach`` and its pre-serialised attachments (the bundle)."""
    out = dict(row) if row is not None else {}
    if options.redactor is not None:
        out = options.redactor.value(out)
    out.pop("ng_trajectory", None)
    attachments = {}
    if isinstance(bundle, AgentObservationBundle):
        out.pop("ng_agent_observations", None)
        attachments["ng_agent_observations"] = record_json(bundle)
    if capture.recomputed:
        out["ng_model_call_capture"] = capture_attachment(record.rollout_id, capture)
    elif isinstance(out.get("ng_model_call_capture"), dict):
        out["ng_model_call_capture"] = strip_capture_payloads(out["ng_model_call_capture"])
    return out, attachments


def capture_attachment(rollout_id: str, capture: CaptureState) -> dict[str, Any]:
    """``ng_model_call_capture`` as the collector attaches it after projection (payloads stripped)."""
    attachment: dict[str, Any] = {
        "rollout_id": rollout_id,
        "metrics": aggregate(capture),
        "calls": [record.model_dump(mode="json", exclude=set(PAYLOAD_KEYS)) for record in capture.records],
    }
    if capture.gaps:
        attachment["gaps"] = capture.gaps
    return attachment


def aggregate(capture: CaptureState) -> dict[str, Any]:
    """Aggregate metrics of the captured calls (gym-reference §2.9): sums of known values, and the count."""

    def total(name: str) -> Any:
        values = [getattr(record, name) for record in capture.records if getattr(record, name) is not None]
        return sum(values) if values else None

    names = ("tokens_in", "tokens_out", "tokens_reasoning", "tokens_total", "cached_tokens", "latency_total_ms")
    return {**{name: total(name) for name in names}, "num_calls": len(capture.records)}


def strip_capture_payloads(attachment: dict[str, Any]) -> dict[str, Any]:
    """A copy of a capture attachment without call payloads (gym-reference §5.4)."""
    calls = attachment.get("calls")
    if not isinstance(calls, list):
        return attachment
    stripped = [without_payloads([c])[0] if isinstance(c, dict) else c for c in calls]
    return {**attachment, "calls": stripped}


def run_slots(
    slots: list[Slot],
    options: BuildOptions,
    sink: DiagnosticSink,
    write: Callable[[bytes], Any],
    on_slot: Callable[[Slot], None] | None = None,
) -> BuildTally:
    """Assemble every slot in order, writing each line as soon as it is built."""
    tally = BuildTally(by_role=RoleTally(options.roles))
    for slot in slots:
        built = assemble_slot(slot, options, sink)
        write(built.line)
        tally.add(slot, built)
        if on_slot is not None:
            on_slot(slot)
    return tally
