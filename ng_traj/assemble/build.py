"""Assembling one rollout: a planned slot to its trajectory record and the payload the writer takes.

Each slot is assembled from its own artifacts only (its row, re-read by byte offset; its capture
files; its bundles), so slots are independent and memory is bounded by the largest rollout.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import ValidationError

from ng_traj.assemble.join import join_bundles
from ng_traj.assemble.judge import JudgeMerge, judge_calls_of_row
from ng_traj.assemble.native import resolve_native
from ng_traj.assemble.perf import ng_perf
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
from ng_traj.checks import recorded_bundle_problems
from ng_traj.contract import AgentObservationBundle, ObservationGap, TrajectoryRecord
from ng_traj.contract.capture import PAYLOAD_KEYS, ModelCallRecord
from ng_traj.contract.observations import dedupe_gaps
from ng_traj.contract.revisions import Release, earlier_loss, lost_in_earlier
from ng_traj.diagnostics import Diagnostic, DiagnosticSink, RunError, plural
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES
from ng_traj.redact import Redactor
from ng_traj.roles import ServerUsage, server_usage
from ng_traj.sources.capture.store import collect_capture
from ng_traj.sources.native import READERS, load_unit
from ng_traj.sources.rollouts.rows import EXPLICIT_ID, load_row
from ng_traj.writers.jsonl import SERIALISE_ERRORS, payloads_as_text, record_json, row_json
from ng_traj.writers.parquet_rows import Extras, extras_of


@dataclass(frozen=True)
class BuildOptions:
    """What the user asked for.

    Attributes:
        capture_enabled: Capture stores were given (recompute capture and join).
        payloads: Keep request/response payloads (``--no-payloads`` clears it).
        attach: Write rollout rows with the trajectory attached (``--attach``).
        redactor: Mask secrets in the output copy (``--redact``).
        roles: ``--role`` map, ``{model server name: role}`` (``roles.py``).
        max_line_bytes: ``--max-line-bytes``, for capture files (rows are checked when planned).
        release: ``--gym-release``: the contract revision JSON output follows (``contract/revisions.py``).
    """

    capture_enabled: bool = False
    payloads: bool = True
    attach: bool = False
    redactor: Redactor | None = None
    roles: dict[str, str] = field(default_factory=dict)
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    release: Release = "0.7"


@dataclass
class Built:
    """One assembled slot: the trajectory, and what the writers and the summary need of it.

    ``attached`` is the ``--attach`` output line; ``make_extras`` makes what only the Parquet
    dataset holds (agent, producer, compactions: :attr:`extras`), made only when a writer asks for it
    (a JSONL build never does); ``session_totals`` the producer's own token totals of the slot's
    native sessions (a summary cross-check). ``notes`` collects the diagnostics raised while
    serialising (:meth:`encoded`), which happens after assembly, possibly in a worker.
    """

    record: TrajectoryRecord
    slot: Slot
    attached: bytes | None = None
    failed: Exception | None = None
    make_extras: Callable[[], Extras] = Extras
    session_totals: dict[str, int] = field(default_factory=dict)
    notes: list[Diagnostic] = field(default_factory=list)
    release: Release = "0.7"
    _extras: Extras | None = None

    @property
    def extras(self) -> Extras:
        """The Parquet-only values of the trajectory (``writers/parquet_rows.extras_of``), made on first use."""
        if self._extras is None:
            self._extras = self.make_extras()
        return self._extras

    @property
    def line(self) -> bytes:
        """The JSONL output line: the attached row, else the record (serialised only when asked for,
        with its newline, so that the line is never copied to add one)."""
        return self.attached if self.attached is not None else self.encoded(self.record_line)

    def record_json(self, record: TrajectoryRecord) -> bytes:
        """The record's JSON in the build's contract revision."""
        return record_json(record, self.release)

    def record_line(self, record: TrajectoryRecord) -> bytes:
        """The record's JSON in the build's contract revision, and a newline."""
        return record_json(record, self.release, newline=True)

    def encoded(self, encode_record: Callable[[TrajectoryRecord], Any]) -> Any:
        """``encode_record(self.record)``; when a value is nested too deep for the JSON writers, the
        record with its open values as JSON text, else the minimal record (``self.record`` is
        replaced, and a ``payload_as_text`` or ``projection_failed`` note added).
        """
        try:
            return encode_record(self.record)
        except SERIALISE_ERRORS:
            pass
        try:
            self.record = payloads_as_text(self.record)
            value = encode_record(self.record)
        except SERIALISE_ERRORS as exc:
            self.record = failed_projection(self.record.task_id, self.record.rollout_id, exc)
            self.failed = exc
            self.note("projection_failed", "nested too deep to serialise; minimal record written")
            return encode_record(self.record)
        self.note("payload_as_text", "payloads nested too deep for JSON writers, written as JSON text")
        return value

    def note(self, code: str, problem: str) -> None:
        """Add a warning about this rollout raised while encoding it (reported after its assembly ones)."""
        message = f"rollout {self.slot.identity.rollout_id}: {problem}"
        self.notes.append(Diagnostic("warning", code, message, path=self.slot.path, line=self.slot.line or None))


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the writer and the summary need of one built slot; small and picklable (``--jobs``).

    Attributes:
        payload: What the output writes: the JSONL line, or the Parquet rows.
        gap_codes: Codes of the trajectory's gaps.
        counts: Invocations, model calls and tool calls of the trajectory.
        failed: The projection failed (a minimal record was written).
        usage: ``roles.server_usage`` of the model calls, one entry per server (the per-role summary).
        session_totals: The producer's session token totals (:attr:`Built.session_totals`).
        diagnostics: Diagnostics not yet given to the sink: raised while serialising, or while
            building in a worker.
    """

    payload: Any
    gap_codes: tuple[str, ...]
    counts: tuple[int, int, int]
    failed: bool
    usage: tuple[ServerUsage, ...] = ()
    session_totals: dict[str, int] = field(default_factory=dict)
    diagnostics: tuple[Diagnostic, ...] = ()


Encode = Callable[[int, Built], Any]
"""Turns the built slot at output position ``index`` into the payload its writer takes."""


def encode_line(index: int, built: Built) -> bytes:
    """The JSONL payload: the output line."""
    return built.line


def outcome(index: int, built: Built, encode: Encode) -> Outcome:
    """The :class:`Outcome` of one built slot (encoded first: serialising may replace the record)."""
    payload = encode(index, built)
    record = built.record
    return Outcome(
        payload,
        gap_codes=tuple(gap.code for gap in record.gaps),
        counts=(len(record.invocations), len(record.model_calls), len(record.tool_calls)),
        failed=built.failed is not None,
        usage=server_usage(record.model_calls),
        session_totals=built.session_totals,
        diagnostics=tuple(built.notes),
    )


def _identity_gap(slot: Slot) -> list[ObservationGap]:
    if slot.path is None or slot.identity.derived:
        return []
    detail = "invalid_identity_keys" if slot.identity.invalid else "no_identity_keys"
    return [ObservationGap(code="rollout_identity_unavailable", detail=detail)]


NO_RESULT_CLASSES = frozenset({"agent_request_failed", "agent_run_error", "environment_server_failed"})
"""Failure classes of rows without an agent result, whose capture the collector does not merge (nemo-gym 0.7.0)."""


def no_result_reason(row: dict[str, Any] | None) -> str | None:
    """Why the collector of nemo-gym 0.7.0 merges no capture into ``row``: its failure class, or
    ``dispatch drained`` for a row that was never dispatched; ``None`` for every other row."""
    if row is None:
        return None
    failure = row.get("_ng_failure_class")
    if isinstance(failure, str) and failure in NO_RESULT_CLASSES:
        return failure
    return "dispatch drained" if row.get("_ng_dispatch_drained") is True else None


def _capture(slot: Slot, row: dict[str, Any] | None, options: BuildOptions, sink: DiagnosticSink) -> CaptureState:
    if options.capture_enabled and (row is None or slot.identity.derived):
        try:
            evidence = (
                collect_capture(slot.identity.rollout_id, slot.capture, sink, options.max_line_bytes)
                if slot.capture
                else None
            )
        except OSError:
            return capture_from_evidence(None, error=True)
        reason = no_result_reason(row)
        if reason is not None and evidence is not None and evidence.calls:
            message = (
                f"rollout {slot.identity.rollout_id}: {plural(len(evidence.calls), 'captured call')} not merged: the row "
                f"has no agent result ({reason}), and the collector merges no capture into such rows"
            )
            sink.add(Diagnostic("warning", "capture_not_merged", message, path=slot.path, line=slot.line or None))
            return CaptureState()
        return capture_from_evidence(evidence)
    if row is None:
        return CaptureState()

    def report(pointer: str, message: str) -> None:
        where = {"path": slot.path, "line": slot.line, "offset": slot.offset, "pointer": pointer}
        sink.add(Diagnostic("warning", "capture_call_invalid", message, **where))

    return capture_from_row(row, report)


@dataclass
class _Bundles:
    """The observation bundles of one slot, in precedence order, and what the native readers added.

    ``joined`` is the bundle ``--attach`` writes (:func:`attach_bundle`), made only with ``--attach``.
    """

    values: list[Any] = field(default_factory=list)
    joined: AgentObservationBundle | None = None
    transcript_calls: list[Any] = field(default_factory=list)
    turn_calls: list[Any] = field(default_factory=list)
    session_totals: Counter[str] = field(default_factory=Counter)
    turns: list[dict[str, Any]] = field(default_factory=list)
    turn_gaps: list[Any] = field(default_factory=list)


def _natives(
    slot: Slot,
    row_source: str | None,
    capture: CaptureState,
    options: BuildOptions,
    sink: DiagnosticSink,
    totals: Counter[str],
    turns: _Bundles | None = None,
):
    """Load, and make refs for, the slot's native units; a unit of the row bundle's producer is skipped.

    The units' producer session totals (a summary cross-check only) are added to ``totals``, and the
    producer turns some readers derive (with their gaps) to ``turns``.
    """
    loaded = []
    for unit in slot.native:
        reader = READERS[unit.reader]
        if row_source == reader.source:
            message = f"the row carries {reader.source} observations, which are used; session {unit.key} not read"
            sink.add(Diagnostic("info", "native_superseded", message, path=unit.anchor or unit.paths[0]))
            continue
        observations = load_unit(unit, sink)
        if observations is None:
            continue
        totals.update(observations.session_totals)
        if turns is not None:
            turns.turns.extend(observations.turns)
            turns.turn_gaps.extend(observations.turn_gaps)
        loaded.append(resolve_native(observations, capture.records if options.capture_enabled else None))
    return loaded


def _bundles(
    slot: Slot, row: dict[str, Any] | None, capture: CaptureState, options: BuildOptions, sink: DiagnosticSink
) -> _Bundles:
    """Row bundle and native bundles, joined to the captured calls as one when capture stores were given."""
    value = row.get("ng_agent_observations") if row is not None else None
    row_bundle = validated_bundle(value) if value is not None else None
    totals: Counter[str] = Counter()
    result = _Bundles(session_totals=totals)
    natives = _natives(slot, row_bundle.source if row_bundle else None, capture, options, sink, totals, result)
    result.transcript_calls = [call for n in natives for call in n.transcript_calls]
    result.turn_calls = [call for n in natives for call in n.turn_calls]
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
    if options.attach and (capture.recomputed or natives):
        result.joined = attach_bundle([v for v in result.values if isinstance(v, AgentObservationBundle)])
    return result


def attach_bundle(bundles: list[AgentObservationBundle]) -> AgentObservationBundle | None:
    """The one ``ng_agent_observations`` ``--attach`` writes: the first bundle's producer, with the
    records and gaps of every bundle of that producer (several sessions of one rollout), so that no
    compaction is lost."""
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


def _producer_trajectory(slot: Slot, row: dict[str, Any] | None, bundles: _Bundles) -> Any:
    """The row's ``ng_trajectory``; for a row without one, the producer turns native readers derived
    (OpenCode: as NeMo Gym's OpenCode agent derives them from its database), as a producer record of
    only turns and gaps, in the slot's identity."""
    if row is not None and row.get("ng_trajectory") is not None:
        return row["ng_trajectory"]
    if not bundles.turns and not bundles.turn_gaps:
        return None
    task_id, rollout_id = slot.identity.task_id, slot.identity.rollout_id
    return {
        "task_id": task_id,
        "rollout_id": rollout_id,
        "turns": [{**turn, "task_id": task_id, "rollout_id": rollout_id} for turn in bundles.turns],
        "gaps": [gap.model_dump(mode="json", exclude_none=True) for gap in bundles.turn_gaps],
    }


def assemble_slot(slot: Slot, options: BuildOptions, sink: DiagnosticSink) -> Built:
    """Assemble one slot into its trajectory (see ``assemble/rollout.py``); with ``--attach``, its output row."""
    row = load_row(slot.path, slot.line, slot.offset, slot.size) if slot.path is not None else None
    capture = _capture(slot, row, options, sink)
    bundles = _bundles(slot, row, capture, options, sink)
    judge = _judge(slot, row, capture, options, sink)
    # The collector leaves payloads out of what it reads from capture stores for a row whose history
    # was redacted; payloads the row itself recorded are kept.
    redacted = capture.recomputed and row is not None and has_redaction_gap(row)
    inputs = ProjectionInputs(
        task_id=slot.identity.task_id,
        rollout_id=slot.identity.rollout_id,
        producer_trajectory=_producer_trajectory(slot, row, bundles),
        bundles=bundles.values,
        capture_calls=judge.capture_calls,
        capture_payloads=options.payloads and not redacted,
        capture_gaps=capture.gaps,
        extra_calls=[
            *bundles.transcript_calls,
            *(project_call(call, payloads=options.payloads) for call in judge.own_calls),
        ],
        fallback=(lambda: fallback_invocation(row)) if row is not None else None,
        build_gaps=[*_identity_gap(slot), *slot.build_gaps, *judge.gaps],
        resolved=row.get("resolved") if row is not None else None,
        native_calls=bundles.turn_calls,
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
    _report_dropped_items(slot, record, sink)
    if row is not None and any(gap.code == "agent_observations_invalid" for gap in record.gaps):
        for finding in recorded_bundle_problems(row.get("ng_agent_observations")):
            sink.add(finding.at(slot.path or "", slot.line or None))
    if options.redactor is not None:
        try:
            record = TrajectoryRecord.model_validate(options.redactor.value(record))
        except ValidationError as exc:  # a mask over an id, a role, a number...: the record is no longer one
            raise RunError(
                f"rollout {slot.identity.rollout_id}: --redact masked a value the trajectory contract "
                f"constrains ({_first_error(exc)}); give a narrower --redact-key or --redact-pattern"
            ) from None
    mask = options.redactor.value if options.redactor else None
    values = bundles.values

    def extras() -> Extras:
        return extras_of(row, values, mask, run=slot.run_label, source_file=slot.file_label)

    built = Built(record, slot, None, failed, extras, dict(bundles.session_totals), release=options.release)
    if options.release == "pre-0.7" and (lost := lost_in_earlier(record)):
        built.note(
            "earlier_release_dropped",
            earlier_loss(lost),
        )
    if options.attach:
        attached, attachments = _attached_row(row, record, bundles.joined, capture, options)
        line = built.encoded(built.record_json)
        attachments["ng_trajectory"] = line
        perf = ng_perf(built.record, attached.pop("ng_perf", None))
        if perf is not None:
            attachments["ng_perf"] = orjson.dumps(perf)
        built.attached = row_json(attached, attachments) + b"\n"
    return built


def _report_dropped_items(slot: Slot, record: TrajectoryRecord, sink: DiagnosticSink) -> None:
    """Report the items of the row's request input and response output that the fallback invocation
    left out as no conversation items (gap ``conversation_from_rollout_record``, detail
    ``dropped_items=<n>``): ``rollout_item_invalid``, a warning on the row."""
    for gap in record.gaps:
        if gap.code == "conversation_from_rollout_record" and (gap.detail or "").startswith("dropped_items="):
            count = gap.detail.removeprefix("dropped_items=")
            message = (
                f"rollout {slot.identity.rollout_id}: {count} item(s) of the row's request input and response "
                "output are not conversation items; left out of its conversation"
            )
            sink.add(Diagnostic("warning", "rollout_item_invalid", message, path=slot.path, line=slot.line or None))


def _first_error(exc: Exception) -> str:
    """The first problem of a failed projection, as ``field: message`` when pydantic says which."""
    if isinstance(exc, ValidationError) and exc.errors():
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        return f"{where}: {error['msg']}" if where else error["msg"]
    return f"{type(exc).__name__}: {exc}"


def _attached_row(
    row: dict[str, Any] | None,
    record: TrajectoryRecord,
    bundle: Any,
    capture: CaptureState,
    options: BuildOptions,
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The row to write with ``--attach`` and its pre-serialised attachments (the bundle).

    A trajectory without a rollout row (capture or sessions only) gets a row naming its identity
    (``_ng_rollout_id``, ``task_id``) when its rollout id is a valid one, so that building the output
    again identifies it the same way.
    """
    out = dict(row) if row is not None else _identity_row(record)
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


def _identity_row(record: TrajectoryRecord) -> dict[str, Any]:
    if not EXPLICIT_ID.match(record.rollout_id):
        return {}
    return {"_ng_rollout_id": record.rollout_id, "task_id": record.task_id}


def capture_attachment(rollout_id: str, capture: CaptureState) -> dict[str, Any]:
    """``ng_model_call_capture`` as the collector attaches it after projection (payloads stripped)."""
    attachment: dict[str, Any] = {
        "rollout_id": rollout_id,
        "metrics": aggregate(capture),
        "calls": [_attached_call(record) for record in capture.records],
    }
    if capture.gaps:
        attachment["gaps"] = capture.gaps
    return attachment


_CALL_KEYS = tuple(ModelCallRecord.model_fields)
"""A captured call's keys in the order pydantic writes them."""


def _attached_call(record: ModelCallRecord) -> dict[str, Any]:
    """One captured call without its payloads, keys in field order. Its ``tool_calls`` are JSON values
    as read and are kept as they are: pydantic's dump stops at about 255 levels, and a tool call's
    ``arguments`` may be a value nested up to the 1,024 levels a line holds."""
    dumped = record.model_dump(mode="json", exclude={*PAYLOAD_KEYS, "tool_calls"})
    return {
        key: record.tool_calls if key == "tool_calls" else dumped[key]
        for key in _CALL_KEYS
        if key in dumped or key == "tool_calls"
    }


def aggregate(capture: CaptureState) -> dict[str, Any]:
    """Aggregate metrics of the captured calls: sums of known values, and the count."""

    def total(name: str) -> Any:
        values = [getattr(record, name) for record in capture.records if getattr(record, name) is not None]
        return sum(values) if values else None

    names = ("tokens_in", "tokens_out", "tokens_reasoning", "tokens_total", "cached_tokens", "latency_total_ms")
    return {**{name: total(name) for name in names}, "num_calls": len(capture.records)}


def strip_capture_payloads(attachment: dict[str, Any]) -> dict[str, Any]:
    """A copy of a capture attachment without call payloads."""
    calls = attachment.get("calls")
    if not isinstance(calls, list):
        return attachment
    stripped = [without_payloads([c])[0] if isinstance(c, dict) else c for c in calls]
    return {**attachment, "calls": stripped}


BUILD_GC_THRESHOLD = (50_000, 20, 100)
"""Cycle-collector thresholds while building (Python's default is 700, 10, 10)."""
