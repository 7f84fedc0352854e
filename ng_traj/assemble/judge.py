"""Judge calls of a rollout row, merged with the calls already known for the rollout.

Decision 21, by exact identifiers only. A judge call read from the row
(``sources/judge/records.py``) names a known call when it has the same ``model_call_id`` (when the judge
entry records one), else the same response id on a server that can be a judge
(``roles.may_be_judge``: with ``--role NAME=judge`` given, exactly those servers, which makes the
key the exact ``(model_ref, response_id)``). Known calls are looked up in this order:

1. the producer ``ng_trajectory``'s model calls: the call is there already (a row built before,
   then projected again), nothing is added;
2. the rollout's captured calls: the same call, seen twice; the captured call stays the model call
   and the judge record fills only what capture left null (payloads where capture kept neither the
   parsed nor the raw body, as in a collector attachment, with the gap
   ``model_call_payload_from_judge_record``, detail ``<location>:<response_id>``; token counts, model
   and status where the captured response had none);
3. none: the judge call becomes a model call of its own, after the captured calls, with the gap
   ``model_call_from_judge_record`` (detail ``<location>:<response_id>``).

Later judge records of the row are looked up among these calls too, the ones added in step 3
included. Several matches give ``model_call_reference_ambiguous``; a match already claimed by an
earlier judge record gives ``model_call_reference_conflict`` (detail ``<location>:<response_id>``,
invocation null); nothing is added then, since the call is among the known ones.

Judge calls from rows never enter the observation join, so no invocation owns them; captured judge
calls go through the reference join like every captured call and, as there, end with a ``capture:``
ownership gap when a bundle is joined.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ng_traj.assemble.rollout import record_mapping
from ng_traj.contract import ObservationGap
from ng_traj.contract.base import ModelServerRef
from ng_traj.roles import judge_server, may_be_judge, ref_name
from ng_traj.sources.judge.records import JudgeCall, SkippedJudgeRecord, read_judge_calls

JUDGE_RECORD_GAP = "model_call_from_judge_record"
JUDGE_PAYLOAD_GAP = "model_call_payload_from_judge_record"
_PAYLOADS = (("request", "request_raw"), ("response", "response_raw"))


@dataclass
class JudgeMerge:
    """The rollout's captured calls with judge values filled in, the judge-only calls, and the gaps."""

    capture_calls: list[Mapping[str, Any]]
    own_calls: list[dict[str, Any]] = field(default_factory=list)
    gaps: list[ObservationGap] = field(default_factory=list)


class _Known(NamedTuple):
    """Identity of one known call: where it is (``producer``/``capture``, position) and its keys.

    A tuple (one per known call of every rollout: cheaper to make than a frozen dataclass). Its
    server is the ``model_ref`` as recorded; its name (``roles.ref_name``) is read only when a judge
    call is matched by response id.
    """

    where: tuple[str, int]
    model_call_id: str | None
    response_id: str | None
    model_ref: Any


def _producer_calls(trajectory: Any) -> list[_Known]:
    calls = trajectory.get("model_calls") if isinstance(trajectory, Mapping) else None
    known = []
    for position, call in enumerate(calls if isinstance(calls, list) else []):
        if not isinstance(call, Mapping):
            continue
        metadata = call.get("response_metadata")
        metadata = metadata if isinstance(metadata, Mapping) else {}
        known.append(
            _Known(
                ("producer", position),
                call.get("model_call_id"),
                metadata.get("response_id"),
                metadata.get("model_ref"),
            )
        )
    return known


def _capture_calls(calls: Sequence[Mapping[str, Any]]) -> list[_Known]:
    return [
        _Known(("capture", position), call.get("model_call_id"), call.get("response_id"), call.get("model_ref"))
        for position, call in enumerate(calls)
    ]


def _matches(judge: JudgeCall, known: _Known, roles: Mapping[str, str]) -> bool:
    record = judge.record
    if record.model_call_id:
        return known.model_call_id == record.model_call_id
    return (
        bool(record.response_id)
        and known.response_id == record.response_id
        and may_be_judge(ref_name(known.model_ref), roles)
    )


def _filled(call: Mapping[str, Any], judge: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """``call`` with its null values taken from ``judge``, payloads only where capture kept no body;
    and whether a payload was filled so."""
    merged = dict(call)
    for key, value in judge.items():
        if merged.get(key) is None and key not in ("request", "response", "request_raw", "response_raw"):
            merged[key] = value
    filled = False
    for parsed, raw in _PAYLOADS:
        if merged.get(parsed) is None and merged.get(raw) is None:
            merged[parsed] = judge.get(parsed)
            filled = filled or merged[parsed] is not None
    return merged, filled


def _find(judge: JudgeCall, known: Sequence[_Known], roles: Mapping[str, str]) -> list[_Known]:
    """Known calls ``judge`` names, from the first kind that has any: producer, capture, judge records."""
    for kind in ("producer", "capture", "judge"):
        found = [k for k in known if k.where[0] == kind and _matches(judge, k, roles)]
        if found:
            return found
    return []


def merge_judge_calls(
    judge_calls: Sequence[JudgeCall],
    capture_calls: Sequence[Mapping[str, Any]],
    producer_trajectory: Any,
    roles: Mapping[str, str],
) -> JudgeMerge:
    """Merge a row's judge calls with its producer trajectory's and captured calls (module docstring).

    Args:
        judge_calls: The row's judge calls, in row order.
        capture_calls: The rollout's captured calls (``ModelCallRecord``-shaped mappings), capture order.
        producer_trajectory: The row's ``ng_trajectory`` value (its ``model_calls`` are read when present).
        roles: ``--role`` map, ``{model server name: role}``.
    """
    result = JudgeMerge(capture_calls=list(capture_calls))
    known = [*_producer_calls(producer_trajectory), *_capture_calls(capture_calls)]
    claimed: set[tuple[str, int]] = set()
    for judge in judge_calls:
        found = _find(judge, known, roles)
        if not found:
            where = ("judge", len(result.own_calls))
            known.append(_Known(where, judge.record.model_call_id, judge.record.response_id, None))
            claimed.add(where)
            result.own_calls.append(record_mapping(judge.record))
            result.gaps.append(ObservationGap(code=JUDGE_RECORD_GAP, detail=judge.label))
        elif len(found) > 1 or found[0].where in claimed:
            code = "model_call_reference_ambiguous" if len(found) > 1 else "model_call_reference_conflict"
            result.gaps.append(ObservationGap(code=code, detail=judge.label))
        else:
            claimed.add(found[0].where)
            kind, position = found[0].where
            if kind == "capture":
                merged, filled = _filled(result.capture_calls[position], record_mapping(judge.record))
                result.capture_calls[position] = merged
                if filled:
                    result.gaps.append(ObservationGap(code=JUDGE_PAYLOAD_GAP, detail=judge.label))
    return result


def judge_calls_of_row(
    row: Mapping[str, Any], capture_calls: Sequence[Mapping[str, Any]], roles: Mapping[str, str]
) -> tuple[JudgeMerge, list[SkippedJudgeRecord]]:
    """Read a row's judge records and merge them (``model_ref`` from a single ``--role NAME=judge``)."""
    server = judge_server(roles)
    judge_ref = ModelServerRef(type="responses_api_models", name=server) if server is not None else None
    calls, skipped = read_judge_calls(row, judge_ref)
    if not calls:
        return JudgeMerge(capture_calls=list(capture_calls)), skipped
    return merge_judge_calls(calls, capture_calls, row.get("ng_trajectory"), roles), skipped
