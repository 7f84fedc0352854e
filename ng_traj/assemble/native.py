"""Native sessions inside one rollout: refs by exact id, transcript usage, and the bundle to project.

Decision 5: a native assistant message is matched to a captured call of its
rollout by its provider response id or, when it has none, by its non-empty set of tool-call ids when
exactly one captured call has the same set; the ref then carries that call's ``model_call_id``,
``model_ref`` and ``response_id``. With no unique captured call no ref is emitted and the gap
``model_call_reference_unmatched`` (detail: the id tried) is recorded; a message with neither key gets
``model_response_id_unavailable``. Never by time, position or text.

A native call no captured call matches keeps the transcript's own usage as a model call
(``model_call_id`` null) with the gap ``model_call_usage_from_transcript`` (detail: the call's label),
unless a captured call of the rollout names the call's invocation as its ``client_session_id``: the
session's calls were captured (the join's pre-step gives them to the invocation), so its usage would
be counted twice (OpenCode steps without tool calls have no other key). Without any capture store
in the build no refs are made: every native call keeps its transcript usage, and
invocations that made calls get ``model_call_ownership_unavailable``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ng_traj.assemble.turns import TranscriptCall
from ng_traj.contract import AgentInvocation, AgentObservationBundle, ModelCallRecord, ModelCallRef, ObservationGap
from ng_traj.contract.trajectory import TrajectoryModelCall
from ng_traj.sources.native import NativeCall, NativeObservations, observation_bundle

TRANSCRIPT_GAP = "model_call_usage_from_transcript"


@dataclass
class ResolvedNative:
    """A native bundle with refs made, the gaps of doing so, transcript-only model calls, and every
    native call as transcript turns need it (in file order)."""

    bundle: AgentObservationBundle
    gaps: list[ObservationGap] = field(default_factory=list)
    transcript_calls: list[TrajectoryModelCall] = field(default_factory=list)
    turn_calls: list[TranscriptCall] = field(default_factory=list)


def _tool_key(record: ModelCallRecord) -> frozenset[str]:
    return frozenset(str(call.get("call_id")) for call in record.tool_calls if call.get("call_id"))


class _Captured:
    def __init__(self, records: Sequence[ModelCallRecord]) -> None:
        self.by_response: dict[str, list[ModelCallRecord]] = {}
        self.by_tools: dict[frozenset[str], list[ModelCallRecord]] = {}
        for record in records:
            if record.response_id:
                self.by_response.setdefault(record.response_id, []).append(record)
            key = _tool_key(record)
            if key:
                self.by_tools.setdefault(key, []).append(record)

    def match(self, call: NativeCall) -> tuple[ModelCallRecord | None, str | None]:
        """The unique captured call for ``call`` and the id tried."""
        if call.response_id:
            found = self.by_response.get(call.response_id, [])
            return (found[0] if len(found) == 1 else None), call.response_id
        if call.tool_call_ids:
            found = self.by_tools.get(call.tool_call_ids, [])
            return (found[0] if len(found) == 1 else None), ",".join(sorted(call.tool_call_ids))
        return None, None


def _ref(record: ModelCallRecord) -> ModelCallRef:
    return ModelCallRef(model_call_id=record.model_call_id, model_ref=record.model_ref, response_id=record.response_id)


def resolve_native(observations: NativeObservations, records: Sequence[ModelCallRecord] | None) -> ResolvedNative:
    """Make the refs of one loaded unit from its rollout's captured calls (``None``: no capture stores)."""
    refs: dict[str, list[ModelCallRef]] = {}
    resolved = ResolvedNative(observations.bundle)
    captured = _Captured(records) if records is not None else None
    sessions = {record.client_session_id for record in records or () if record.client_session_id}
    for call in observations.calls:
        matched, tried = captured.match(call) if captured is not None else (None, None)
        if matched is not None and (matched.model_call_id or (matched.model_ref and matched.response_id)):
            refs.setdefault(call.invocation_id, []).append(_ref(matched))
            resolved.turn_calls.append(_turn_call(call, refs[call.invocation_id][-1]))
            continue
        resolved.turn_calls.append(_turn_call(call, None))
        if captured is not None:
            code = "model_call_reference_unmatched" if tried else "model_response_id_unavailable"
            resolved.gaps.append(ObservationGap(code=code, invocation_id=call.invocation_id, detail=tried))
        transcript = call.transcript() if call.invocation_id not in sessions else None
        if transcript is not None:
            resolved.transcript_calls.append(transcript)
            gap = ObservationGap(
                code=TRANSCRIPT_GAP, invocation_id=call.invocation_id, detail=call.label or call.response_id
            )
            resolved.gaps.append(gap)
    if captured is None:
        calling = dict.fromkeys(call.invocation_id for call in observations.calls)
        resolved.gaps.extend(ObservationGap(code="model_call_ownership_unavailable", invocation_id=i) for i in calling)
    resolved.bundle = _with_refs(observations.bundle, refs)
    return resolved


def _turn_call(call: NativeCall, ref: ModelCallRef | None) -> TranscriptCall:
    return TranscriptCall(call.invocation_id, call.tool_call_ids, call.timestamp(), ref)


def _with_refs(bundle: AgentObservationBundle, refs: dict[str, list[ModelCallRef]]) -> AgentObservationBundle:
    if not refs:
        return bundle
    records = [
        record.model_copy(update={"model_calls": [*record.model_calls, *refs[record.invocation_id]]})
        if isinstance(record, AgentInvocation) and record.invocation_id in refs
        else record
        for record in bundle.records
    ]
    return observation_bundle(bundle.source, records, bundle.gaps)
