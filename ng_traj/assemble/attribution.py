"""Attributing native session units to rollouts.

In order, the first way that names any rollout decides: the manifest (a row with ``session_id``
names only that session); a folder above the session named exactly by a rollout id; exact-id
attribution (the session's provider response ids, or for a session without them the exact tool-call
id sets of its calls, match captured calls of exactly one rollout); a recorded PinchBench run id. A way that names
two or more rollouts is a conflict: the unit is used for none and becomes its own trajectory with
``rollout_attribution_ambiguous``. A unit nothing names is *unattributed*: its own trajectory,
keyed by its root session id with task ``unknown`` and the gap ``rollout_record_unavailable``.
A rollout id that exists in several runs needs the manifest to name the run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ng_traj.contract import ObservationGap
from ng_traj.diagnostics import safe_text
from ng_traj.io.files import resolved
from ng_traj.io.lines import quiet_objects
from ng_traj.sources.capture.record import derived_response, tool_calls_and_reasoning
from ng_traj.sources.capture.store import CaptureFiles
from ng_traj.sources.manifest import ManifestEntry
from ng_traj.sources.native import NativeUnit, unit_response_ids

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

    runs_by_id: dict[str, tuple[str, ...]]
    """The runs holding each rollout id, each once (a tuple, not a set: most ids are in one run, and a
    rollout's entry is the planning memory that grows with the corpus)."""
    rows_by_run_id: dict[str, set[RowKey]]
    capture_ids: set[str]
    repeated: set[RowKey] = field(default_factory=set)
    labels: dict[str, str] = field(default_factory=dict)
    """Each run's :func:`run_label_map` label."""

    def run_labels(self, runs: Iterable[str]) -> str:
        """Runs for a gap detail: their labels, sorted and comma-joined."""
        return ",".join(sorted(self.labels.get(run, run) for run in runs))


def run_label_map(runs: Iterable[str]) -> dict[str, str]:
    """Each run's label: the shortest tail of its absolute path that no other run of the build ends
    with (its file name when that is unique). Labels name runs in gap details and order rows of
    equal rollout ids, so that output bytes do not depend on how, or from where, paths were typed.
    A label is text for JSON and Parquet: the bytes of a non-UTF-8 name are U+FFFD (``safe_text``)."""
    parts = {run: tuple(safe_text(part) for part in Path(os.path.abspath(run)).parts) for run in set(runs)}
    labels = {}
    for run, mine in parts.items():
        others = [theirs for other, theirs in parts.items() if other != run]
        size = next((k for k in range(1, len(mine)) if all(theirs[-k:] != mine[-k:] for theirs in others)), len(mine))
        labels[run] = "/".join(mine[-size:]).removeprefix("//")
    return labels


def runs_named(name: str, runs: Iterable[str]) -> set[str]:
    """The runs a manifest's ``run`` names: the run itself, its file name, or a path ending with it."""
    return {run for run in runs if run == name or Path(run).name == name or run.endswith("/" + name)}


def manifest_runs(named: Iterable[str], known: Iterable[str], every_run: Iterable[str]) -> set[str]:
    """The runs holding a rollout id (``known``) that the manifest's ``run`` values ``named`` name.

    All of ``known`` when nothing is named, or when the names match no run of the build at all (the
    artifacts then attach by rollout id alone, as ``manifest_run_unknown`` says).
    """
    named = [name for name in named if name]
    if not named:
        return set(known)
    runs = {match for name in named for match in runs_named(name, known)}
    if not runs and not any(runs_named(name, every_run) for name in named):
        return set(known)
    return runs


class CaptureIds:
    """Model-call identifiers of every captured call of the build, to the capture rollout ids holding them.

    Read from every capture file on first use only (exact-id attribution is the third way), keyed by
    ``response_id`` and by the call's exact set of tool-call ids (the fallback join key when a message has no response id).
    ``stores`` gives ``(capture rollout id, its capture files)`` of every rollout, once asked (a
    function, so that planning need not keep a second index of them); ``empty``: there are none.
    """

    def __init__(
        self, stores: Callable[[], Iterable[tuple[str, Sequence[CaptureFiles]]]], *, empty: bool = False
    ) -> None:
        self._stores = stores
        self._empty = empty
        self._built = False
        self.by_response: dict[str, set[str]] = {}
        self.by_tools: dict[frozenset[str], set[str]] = {}

    def _build(self) -> None:
        self._built = True
        for rollout, stores in self._stores():
            for files in stores:
                for response in _responses(capture) if (capture := files.capture(rollout)) else ():
                    if isinstance(response.get("id"), str):
                        self.by_response.setdefault(response["id"], set()).add(rollout)
                    calls, _ = tool_calls_and_reasoning(response)
                    key = frozenset(str(call["call_id"]) for call in calls if call.get("call_id"))
                    if key:
                        self.by_tools.setdefault(key, set()).add(rollout)

    @property
    def empty(self) -> bool:
        """True when the build has no capture store at all."""
        return self._empty

    def rollouts(self, response_ids: Iterable[str], tool_sets: Iterable[frozenset[str]]) -> set[str]:
        """Capture rollout ids holding any of these response ids or exact tool-call id sets."""
        if not self._built:
            self._build()
        found = {rollout for rid in response_ids for rollout in self.by_response.get(rid, ())}
        return found | {rollout for key in tool_sets for rollout in self.by_tools.get(key, ())}


def _responses(path: str) -> Iterator[dict[str, Any]]:
    for line in quiet_objects(path):
        response = derived_response(line)
        if response:
            yield response


def _manifest_targets(unit: NativeUnit, manifest: list[ManifestEntry]) -> set[tuple[str, str | None]]:
    if not manifest:  # nothing to match: the unit's paths are not resolved
        return set()
    paths = [resolved(Path(path)) for path in unit.paths]
    targets = set()
    for entry in manifest:
        if entry.session_id is not None and entry.session_id != unit.key:
            continue
        root = resolved(entry.path)
        if any(path == root or root in path.parents for path in paths):
            targets.add((entry.rollout_id, entry.run))
    return targets


def attribute(
    unit: NativeUnit,
    rows: RowIndex,
    manifest: list[ManifestEntry],
    captured: CaptureIds,
    tool_sets: Callable[[NativeUnit], Iterable[frozenset[str]]],
) -> Attribution:
    """Decide where ``unit`` belongs (module docstring gives the order).

    ``tool_sets`` gives the exact tool-call id sets of a unit's model calls; it is asked only for a
    unit without response ids that nothing before exact-id attribution placed.
    """
    candidates: list[tuple[str, set[tuple[str, str | None]]]] = [("manifest", _manifest_targets(unit, manifest))]
    for method in ("folder", "model_call_id", "run_id"):
        if candidates[-1][1]:
            break
        candidates.append((method, _targets(method, unit, rows, captured, tool_sets)))
    method, targets = candidates[-1]
    if not targets:
        return Attribution(gap=ObservationGap(code="rollout_record_unavailable", detail=f"session:{unit.key}"))
    rollouts = sorted({rollout for rollout, _ in targets})
    if len(rollouts) > 1:
        gap = ObservationGap(code="rollout_attribution_ambiguous", detail="rollouts=" + ",".join(rollouts))
        return Attribution(gap=gap, reason=f"{method} names several rollouts ({', '.join(rollouts)})")
    rollout = rollouts[0]
    known = rows.runs_by_id.get(rollout, ())
    named = {run for _, run in targets if run}
    runs = manifest_runs(named, known, rows.labels)
    if len(runs) == 1 and runs <= set(known):
        return Attribution(row=(rollout, next(iter(runs))), reason=method)
    if not known and rollout in rows.capture_ids:
        return Attribution(capture_id=rollout, reason=method)
    if len(runs) > 1:
        gap = ObservationGap(code="rollout_attribution_ambiguous", detail="runs=" + rows.run_labels(runs))
        return Attribution(gap=gap, reason=f"rollout {rollout} exists in several runs")
    return Attribution(gap=ObservationGap(code="rollout_record_unavailable", detail=f"session:{unit.key}"))


def _targets(
    method: str,
    unit: NativeUnit,
    rows: RowIndex,
    captured: CaptureIds,
    tool_sets: Callable[[NativeUnit], Iterable[frozenset[str]]],
) -> set[tuple[str, str | None]]:
    if method == "folder":
        return {(name, None) for name in unit.folders if name in rows.runs_by_id}
    if method == "model_call_id":
        if captured.empty:
            return set()
        ids = unit_response_ids(unit)  # read here, if the reader left them to the unit's scan_ids
        sets = () if ids else tool_sets(unit)
        return {(rollout, None) for rollout in captured.rollouts(ids, sets)}
    return {key for run_id in unit.run_ids for key in rows.rows_by_run_id.get(run_id, ())}  # type: ignore[misc]
