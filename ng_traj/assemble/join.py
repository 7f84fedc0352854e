"""The reference join of observation references to captured calls.

Source: ``join_model_call_observations`` in ``nemo_gym/rollout_observability.py`` of nemo-gym 0.7.0.
First a pre-step: a captured call whose ``client_session_id`` (the request's ``x-session-id``) equals
an invocation's id, and which has a ``model_call_id``, gets a ref appended to that invocation unless
an equivalent ref is there already. Then exact identifiers only: a ref with a ``model_call_id`` matches calls with that
id (and with its ``model_ref`` / ``response_id`` where the ref sets them); otherwise the exact
``(model_ref, response_id)`` key. No match, several matches and a second claim on an owned call
become gaps; every captured call no invocation owns becomes a ``capture:`` ownership gap. Joining
twice equals joining once. The input bundle is not modified.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ng_traj.contract import (
    AgentInvocation,
    AgentObservationBundle,
    ContextCompactionObservation,
    ModelCallRecord,
    ModelCallRef,
    ObservationGap,
)
from ng_traj.contract.base import built_model
from ng_traj.contract.observations import dedupe_gaps
from ng_traj.sources.native import observation_bundle

JOIN_CODES = frozenset(
    {"model_call_reference_ambiguous", "model_call_reference_conflict", "model_call_reference_unmatched"}
)


COMPACTION_PREFIXES = ("model_calls:", "before_model_call:", "after_model_call:")
"""How the details of a compaction's join gaps start (the compaction field the ref is in)."""


def is_stale_join_gap(gap: ObservationGap) -> bool:
    """Gaps a previous join produced, which a new join replaces: the join codes, the ``capture:``
    ownership gaps of unowned calls, and the ownership gaps of compaction refs (without the last, a
    second join kept them in front of the gaps it made again, and joining twice reordered the gaps)."""
    if gap.code in JOIN_CODES:
        return True
    if gap.code != "model_call_ownership_unavailable" or gap.detail is None:
        return False
    if gap.invocation_id is None:
        return gap.detail.startswith("capture:")
    return gap.detail.startswith(COMPACTION_PREFIXES)


class _Index:
    """Captured calls indexed by ``model_call_id`` and by ``(model_ref, response_id)``."""

    def __init__(self, calls: Sequence[ModelCallRecord]) -> None:
        self.by_id: dict[str, list[int]] = {}
        self.by_response: dict[tuple[str, str, str], list[int]] = {}
        for position, call in enumerate(calls):
            if call.model_call_id:
                self.by_id.setdefault(call.model_call_id, []).append(position)
            if call.model_ref is not None and call.response_id:
                key = (call.model_ref.type, call.model_ref.name, call.response_id)
                self.by_response.setdefault(key, []).append(position)
        self.calls = calls

    def candidates(self, ref: ModelCallRef) -> list[int]:
        if ref.model_call_id:
            return [
                position
                for position in self.by_id.get(ref.model_call_id, [])
                if (ref.model_ref is None or ref.model_ref == self.calls[position].model_ref)
                and (ref.response_id is None or ref.response_id == self.calls[position].response_id)
            ]
        assert ref.model_ref is not None and ref.response_id is not None
        return self.by_response.get((ref.model_ref.type, ref.model_ref.name, ref.response_id), [])

    def canonical(self, position: int) -> ModelCallRef:
        """The ref naming the indexed call at ``position``: its id, server and response id, which are
        valid already (the call is indexed by an id, or by both the others), so not validated again."""
        call = self.calls[position]
        values = {"model_call_id": call.model_call_id, "model_ref": call.model_ref, "response_id": call.response_id}
        return built_model(ModelCallRef, values)

    def name(self, position: int) -> str | None:
        call = self.calls[position]
        return call.model_call_id or call.response_id


RefKey = tuple[str | None, tuple[str, str] | None, str | None]


def _ref_key(ref: ModelCallRef | ModelCallRecord) -> RefKey:
    server = (ref.model_ref.type, ref.model_ref.name) if ref.model_ref is not None else None
    return (ref.model_call_id, server, ref.response_id)


def _equivalent_keys(call: ModelCallRecord) -> set[RefKey]:
    """The ref keys that already name ``call``: its id with or without its server and response id,
    and its ``(server, response id)`` when both are known."""
    call_id, server, response = _ref_key(call)
    keys: set[RefKey] = {(call_id, None, None), (call_id, server, None), (call_id, None, response)}
    keys.add((call_id, server, response))
    if server is not None and response is not None:
        keys.add((None, server, response))
    return keys


def _session_refs(invocations: Sequence[AgentInvocation], calls: Sequence[ModelCallRecord]) -> None:
    """The ``client_session_id`` pre-step, in capture order (appends to the invocations' ref lists).

    Appended refs go to the end of the invocation's ``model_calls``, so a conflict with another
    invocation's explicit ref falls on whichever of the two the join reaches second, as upstream.
    """
    by_id = {invocation.invocation_id: invocation for invocation in invocations}
    keys = {invocation.invocation_id: {_ref_key(ref) for ref in invocation.model_calls} for invocation in invocations}
    for call in calls:
        if not call.client_session_id or not call.model_call_id:
            continue
        invocation = by_id.get(call.client_session_id)
        if invocation is None or _equivalent_keys(call) & keys[invocation.invocation_id]:
            continue
        ref = ModelCallRef(model_call_id=call.model_call_id, model_ref=call.model_ref, response_id=call.response_id)
        invocation.model_calls = [*invocation.model_calls, ref]
        keys[invocation.invocation_id].add(_ref_key(ref))


def _miss_code(candidates: list[int]) -> str:
    return "model_call_reference_ambiguous" if candidates else "model_call_reference_unmatched"


def _join_invocations(
    invocations: list[AgentInvocation], index: _Index, owners: dict[int, str], gaps: list[ObservationGap]
) -> None:
    for invocation in invocations:
        resolved: list[ModelCallRef] = []
        for ref in invocation.model_calls:
            candidates = index.candidates(ref)
            if len(candidates) != 1:
                gaps.append(
                    ObservationGap(
                        code=_miss_code(candidates),
                        invocation_id=invocation.invocation_id,
                        detail=ref.model_call_id or ref.response_id,
                    )
                )
                resolved.append(ref)
            elif candidates[0] in owners:
                gaps.append(
                    ObservationGap(
                        code="model_call_reference_conflict",
                        invocation_id=invocation.invocation_id,
                        detail=index.name(candidates[0]),
                    )
                )
                resolved.append(ref)
            else:
                owners[candidates[0]] = invocation.invocation_id
                resolved.append(index.canonical(candidates[0]))
        _set_model_calls(invocation, resolved)


def _set_model_calls(invocation: AgentInvocation, refs: list[ModelCallRef]) -> None:
    """``invocation.model_calls = refs`` without validating the list again when every ref is exactly a
    ``ModelCallRef`` (the invocation's own, validated, or a canonical one): pydantic would keep each as
    it is in a new list, and mark the field set, which is what this does; ``refs`` is a fresh list no
    one else holds. ``AgentInvocation`` has no model validator for an assignment to run. Any other
    value is assigned through pydantic."""
    if all(type(ref) is ModelCallRef for ref in refs):
        invocation.__dict__["model_calls"] = refs
        invocation.__pydantic_fields_set__.add("model_calls")
    else:
        invocation.model_calls = refs


def _join_compaction_calls(
    compaction: ContextCompactionObservation, index: _Index, owners: dict[int, str], gaps: list[ObservationGap]
) -> None:
    resolved: list[ModelCallRef] = []
    for ref in compaction.model_calls:
        candidates = index.candidates(ref)
        if len(candidates) != 1:
            detail = f"model_calls:{ref.model_call_id or ref.response_id}"
            gaps.append(
                ObservationGap(code=_miss_code(candidates), invocation_id=compaction.invocation_id, detail=detail)
            )
            resolved.append(ref)
            continue
        owner = owners.get(candidates[0])
        if owner != compaction.invocation_id:
            code = "model_call_reference_conflict" if owner is not None else "model_call_ownership_unavailable"
            detail = f"model_calls:{index.name(candidates[0])}"
            gaps.append(ObservationGap(code=code, invocation_id=compaction.invocation_id, detail=detail))
            resolved.append(ref)
            continue
        resolved.append(index.canonical(candidates[0]))
    compaction.model_calls = resolved


def _join_boundary(
    compaction: ContextCompactionObservation,
    field: str,
    index: _Index,
    owners: dict[int, str],
    gaps: list[ObservationGap],
) -> None:
    ref: ModelCallRef | None = getattr(compaction, field)
    if ref is None:
        return
    candidates = index.candidates(ref)
    if len(candidates) != 1:
        detail = f"{field}:{ref.model_call_id or ref.response_id}"
        gaps.append(ObservationGap(code=_miss_code(candidates), invocation_id=compaction.invocation_id, detail=detail))
        return
    owner = owners.get(candidates[0])
    if owner is not None and owner != compaction.invocation_id:
        detail = f"{field}:{index.name(candidates[0])}"
        gaps.append(
            ObservationGap(code="model_call_reference_conflict", invocation_id=compaction.invocation_id, detail=detail)
        )
        return
    setattr(compaction, field, index.canonical(candidates[0]))


def join_model_call_observations(
    bundle: AgentObservationBundle, calls: Sequence[ModelCallRecord]
) -> AgentObservationBundle:
    """Resolve the bundle's model-call refs against ``calls`` (one rollout's captured calls).

    Returns:
        A new bundle: canonical refs where exactly one unowned call matched, the bundle's gaps minus
        stale join gaps, then the new join and ownership gaps, de-duplicated in order.
    """
    return join_bundles([bundle], calls)[0]


def join_bundles(
    bundles: Sequence[AgentObservationBundle], calls: Sequence[ModelCallRecord]
) -> list[AgentObservationBundle]:
    """Join several bundles of one rollout (in precedence order) as one: ownership is shared.

    With one bundle this is exactly the reference join. With several, a call owned by an invocation
    of any bundle is owned, and the ``capture:`` gaps of calls no bundle owns go to the last bundle.
    Each joined bundle is made by ``sources/native.observation_bundle`` (not validated again when its
    records and gaps are the contract's models and its own check holds; pydantic's error otherwise).
    """
    index = _Index(calls)
    owners: dict[int, str] = {}
    joined: list[tuple[AgentObservationBundle, list[Any], list[ObservationGap]]] = []
    for bundle in bundles:
        records: list[Any] = [
            record.model_copy() if isinstance(record, AgentInvocation | ContextCompactionObservation) else record
            for record in bundle.records
        ]
        gaps: list[ObservationGap] = []
        invocations = [r for r in records if isinstance(r, AgentInvocation)]
        _session_refs(invocations, calls)
        _join_invocations(invocations, index, owners, gaps)
        joined.append((bundle, records, gaps))
    for _, records, gaps in joined:
        for compaction in (r for r in records if isinstance(r, ContextCompactionObservation)):
            _join_compaction_calls(compaction, index, owners, gaps)
            _join_boundary(compaction, "before_model_call", index, owners, gaps)
            _join_boundary(compaction, "after_model_call", index, owners, gaps)
    unowned = [
        ObservationGap(
            code="model_call_ownership_unavailable",
            detail=f"capture:{call.model_call_id or call.response_id or 'unknown'}:call_index={call.call_index}",
        )
        for position, call in enumerate(calls)
        if position not in owners
    ]
    if joined:
        joined[-1][2].extend(unowned)
    return [
        observation_bundle(
            bundle.source, records, dedupe_gaps([*(gap for gap in bundle.gaps if not is_stale_join_gap(gap)), *gaps])
        )
        for bundle, records, gaps in joined
    ]
