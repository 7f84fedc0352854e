"""Attributing native session units to rollouts (PRODUCT.md §3, §10.2).

In order, the first way that names any rollout decides: the manifest; a folder above the session
named exactly by a rollout id; exact-id attribution (the session's provider response ids match
captured ``response_id``s of exactly one rollout); a recorded PinchBench run id. A way that names
two or more rollouts is a conflict: the unit is used for none and becomes its own trajectory with
``rollout_attribution_ambiguous``. A unit nothing names is *unattributed*: its own trajectory,
keyed by its root session id with task ``unknown`` and the gap ``rollout_record_unavailable``.
A rollout id that exists in several runs needs the manifest to name the run (decision 2).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson

from ng_traj.contract import ObservationGap
from ng_traj.sources.capture import CaptureFiles
from ng_traj.sources.manifest import ManifestEntry
from ng_traj.sources.native import NativeUnit
from ng_traj.sources.sse import reassemble

RowKey = tuple[str, str]
"""(rollout id, run)."""


@dataclass(frozen=True, slots=True)
class Attribution:
    """Where a unit goes: a row, an orphan capture trajectory, or its own trajectory with a gap."""

    row: RowKey | None = None
    capture_id: str | None = None
    gap: ObservationGap | None = None
    reason: str = ""


@dataclass
class RowIndex:
    """What attribution needs of the planned rows."""

    runs_by_id: dict[str, set[str]]
    rows_by_run_id: dict[str, set[RowKey]]
    capture_ids: set[str]


def response_index(capture: Mapping[tuple[str, str | None], Mapping[str, CaptureFiles]]) -> dict[str, set[str]]:
    """Captured ``response_id`` -> capture rollout ids, read from every capture file of the build."""
    index: dict[str, set[str]] = {}
    for (rollout, _), stores in capture.items():
        for files in stores.values():
            if files.capture is None:
                continue
            for response_id in _response_ids(Path(files.capture)):
                index.setdefault(response_id, set()).add(rollout)
    return index


def _response_ids(path: Path) -> Iterable[str]:
    try:
        with open(path, "rb") as handle:
            for raw in handle:
                try:
                    line = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                if not isinstance(line, dict):
                    continue
                response = line.get("response")
                if response is None and isinstance(line.get("response_raw"), str):
                    response = reassemble(line["response_raw"], line.get("dialect"))
                if isinstance(response, dict) and isinstance(response.get("id"), str):
                    yield response["id"]
    except OSError:
        return


def _manifest_targets(unit: NativeUnit, manifest: list[ManifestEntry]) -> set[tuple[str, str | None]]:
    paths = [Path(path).resolve() for path in unit.paths]
    targets = set()
    for entry in manifest:
        root = entry.path.resolve()
        if any(path == root or root in path.parents for path in paths):
            targets.add((entry.rollout_id, entry.run))
    return targets


def attribute(
    unit: NativeUnit,
    rows: RowIndex,
    manifest: list[ManifestEntry],
    responses: Callable[[], dict[str, set[str]]],
) -> Attribution:
    """Decide where ``unit`` belongs (module docstring gives the order)."""
    candidates: list[tuple[str, set[tuple[str, str | None]]]] = [("manifest", _manifest_targets(unit, manifest))]
    for method in ("folder", "response_id", "run_id"):
        if candidates[-1][1]:
            break
        candidates.append((method, _targets(method, unit, rows, responses)))
    method, targets = candidates[-1]
    if not targets:
        return Attribution(gap=ObservationGap(code="rollout_record_unavailable", detail=f"session:{unit.key}"))
    rollouts = sorted({rollout for rollout, _ in targets})
    if len(rollouts) > 1:
        gap = ObservationGap(code="rollout_attribution_ambiguous", detail="rollouts=" + ",".join(rollouts))
        return Attribution(gap=gap, reason=f"{method} names several rollouts ({', '.join(rollouts)})")
    rollout = rollouts[0]
    known = rows.runs_by_id.get(rollout, set())
    runs = {run for _, run in targets if run} or known
    if len(runs) == 1 and runs <= known:
        return Attribution(row=(rollout, next(iter(runs))), reason=method)
    if not known and rollout in rows.capture_ids:
        return Attribution(capture_id=rollout, reason=method)
    if len(runs) > 1:
        gap = ObservationGap(code="rollout_attribution_ambiguous", detail="runs=" + ",".join(sorted(runs)))
        return Attribution(gap=gap, reason=f"rollout {rollout} exists in several runs")
    return Attribution(gap=ObservationGap(code="rollout_record_unavailable", detail=f"session:{unit.key}"))


def _targets(
    method: str, unit: NativeUnit, rows: RowIndex, responses: Callable[[], dict[str, set[str]]]
) -> set[tuple[str, str | None]]:
    if method == "folder":
        return {(name, None) for name in unit.folders if name in rows.runs_by_id}
    if method == "response_id":
        if not unit.response_ids:
            return set()
        index = responses()
        return {(rollout, None) for rid in unit.response_ids for rollout in index.get(rid, ())}
    return {key for run_id in unit.run_ids for key in rows.rows_by_run_id.get(run_id, ())}  # type: ignore[misc]
