"""``ng_perf``: the per-rollout performance summary nemo-gym 0.7.0 attaches beside ``ng_trajectory``.

Source: ``_build_ng_perf`` in ``nemo_gym/rollout_collection.py`` of nemo-gym 0.7.0. Computed from the
built trajectory, only when it has an invocation:

* owned calls: each invocation's refs, in order, resolved against the trajectory's model calls by
  ``model_call_id`` (agreeing with the ref's ``model_ref`` / ``response_id`` where it sets them),
  else by the exact ``(model_ref, response_id)``; a ref counts only when exactly one call matches,
  and a call counts once however many refs resolve to it;
* ``num_turns``: per invocation its turns, else its owned calls, else 1, summed;
* ``num_tool_calls``: tool calls of the trajectory's invocations;
* ``token_observability_coverage``: owned calls / ``num_turns``, at most 1.0;
* ``prompt_tokens``, ``cached_prompt_tokens``, ``completion_tokens``, ``reasoning_tokens``: sums over
  the owned calls, each present only when some call reports it (``total_tokens`` is not summed);
* ``total_latency_ms``: the collector's wall time of the agent run, which only the collector
  measured: kept from the row's recorded ``ng_perf`` when it has one, else absent.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ng_traj.assemble.project import FALLBACK_INVOCATION_ID
from ng_traj.contract import ModelCallRef, TrajectoryModelCall, TrajectoryRecord

TOKEN_SUMS = (
    ("prompt_tokens", "prompt_tokens"),
    ("cached_prompt_tokens", "cached_tokens"),
    ("completion_tokens", "completion_tokens"),
    ("reasoning_tokens", "reasoning_tokens"),
)
"""``ng_perf`` key -> the ``token_stats`` field it sums."""


class _Calls:
    def __init__(self, calls: list[TrajectoryModelCall]) -> None:
        self.calls = calls
        self.by_id: dict[str, list[int]] = {}
        self.by_response: dict[tuple[str, str, str], list[int]] = {}
        for position, call in enumerate(calls):
            meta = call.response_metadata
            if call.model_call_id:
                self.by_id.setdefault(call.model_call_id, []).append(position)
            if meta.model_ref is not None and meta.response_id:
                key = (meta.model_ref.type, meta.model_ref.name, meta.response_id)
                self.by_response.setdefault(key, []).append(position)

    def match(self, ref: ModelCallRef) -> int | None:
        if ref.model_call_id:
            candidates = [
                position
                for position in self.by_id.get(ref.model_call_id, [])
                if ref.model_ref in (None, self.calls[position].response_metadata.model_ref)
                and ref.response_id in (None, self.calls[position].response_metadata.response_id)
            ]
        elif ref.model_ref is not None and ref.response_id:
            candidates = self.by_response.get((ref.model_ref.type, ref.model_ref.name, ref.response_id), [])
        else:
            candidates = []
        return candidates[0] if len(candidates) == 1 else None


def _has_fallback_gap(record: TrajectoryRecord) -> bool:
    return any(gap.code == "conversation_from_rollout_record" for gap in record.gaps)


def ng_perf(record: TrajectoryRecord, recorded: Any = None) -> dict[str, Any] | None:
    """The ``ng_perf`` value of a trajectory (module docstring gives the rules); ``None`` without invocations.

    ng-traj's fallback invocation (rebuilt from the row, gap ``conversation_from_rollout_record``) is
    no agent evidence and does not count: a rollout with only that one gets no ``ng_perf``, as the
    collector writes none for a row without observations.

    Args:
        record: The built trajectory.
        recorded: The row's own ``ng_perf`` value, whose ``total_latency_ms`` is kept.
    """
    invocations = [
        invocation
        for invocation in record.invocations
        if not (invocation.invocation_id == FALLBACK_INVOCATION_ID and _has_fallback_gap(record))
    ]
    if not invocations:
        return None
    index = _Calls(record.model_calls)
    seen: set[int] = set()
    owned: list[TrajectoryModelCall] = []
    owned_by: Counter[str] = Counter()
    for invocation in invocations:
        for ref in invocation.model_calls:
            position = index.match(ref)
            if position is None or position in seen:
                continue
            seen.add(position)
            owned.append(record.model_calls[position])
            owned_by[invocation.invocation_id] += 1
    ids = [invocation.invocation_id for invocation in invocations]
    tools = Counter(tool.invocation_id for tool in record.tool_calls)
    turns = Counter(turn.invocation_id for turn in record.turns)
    num_turns = sum(turns[name] or owned_by[name] or 1 for name in ids)
    perf: dict[str, Any] = {
        "num_turns": num_turns,
        "num_tool_calls": sum(tools[name] for name in ids),
        "token_observability_coverage": min(1.0, len(owned) / num_turns),
    }
    for key, stat in TOKEN_SUMS:
        values = [value for call in owned if (value := getattr(call.token_stats, stat)) is not None]
        if values:
            perf[key] = sum(values)
    latency = recorded.get("total_latency_ms") if isinstance(recorded, dict) else None
    if isinstance(latency, int | float) and not isinstance(latency, bool):
        perf["total_latency_ms"] = latency
    return perf
