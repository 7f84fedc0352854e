"""The build pipeline: discover inputs, plan slots, assemble and write, summarise.

``build`` is the library entry point behind ``ng-traj build``; it writes through a callback, so the
caller decides where bytes go (an atomic file, standard output, a test buffer).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ng_traj.assemble.build import BuildOptions, Encode, encode_line
from ng_traj.assemble.inputs import Inputs, discover
from ng_traj.assemble.plan import Plan, PlanStats, Slot, plan
from ng_traj.assemble.run import BuildTally, run_slots
from ng_traj.diagnostics import DiagnosticSink, lines_skipped
from ng_traj.io.files import resolved_folders
from ng_traj.sources.manifest import ManifestEntry


@dataclass
class BuildSummary:
    """What a build did; rendered on standard error or as JSON (``--output-format json``)."""

    inputs: Inputs
    stats: PlanStats
    tally: BuildTally
    sink: DiagnosticSink
    empty_inputs: list[str] = field(default_factory=list)

    @property
    def lines_skipped(self) -> int:
        """Input lines skipped as unreadable."""
        return lines_skipped(self.sink)

    def to_json(self) -> dict[str, Any]:
        """The summary as a JSON object (stable keys; the diagnostics are counted by the caller's sink)."""
        tally, stats = self.tally, self.stats
        return {
            "trajectories": tally.trajectories,
            "by_origin": dict(sorted(tally.by_origin.items())),
            "inputs_by_kind": dict(sorted(self.inputs.by_kind.items())),
            "rollout_rows": stats.rows,
            "task_input_rows": stats.task_input_rows,
            "rows_without_identity": stats.rows_without_identity,
            "lines_skipped": self.lines_skipped,
            "invocations": tally.invocations,
            "model_calls": tally.model_calls,
            "tool_calls": tally.tool_calls,
            "roles": tally.by_role.to_json(),
            "projection_failures": tally.projection_failures,
            "gaps_by_code": dict(sorted(tally.gaps_by_code.items())),
            "native_session_totals": dict(sorted(tally.session_totals.items())),
            "orphan_captures": sorted(stats.orphan_captures),
            "ambiguous_captures": sorted(stats.ambiguous_captures),
            "unattributed_sessions": stats.unattributed,
            "unsupported_inputs": [{"path": p, "recognised_as": d} for p, d in sorted(self.inputs.unsupported)],
            "empty_inputs": self.empty_inputs,
        }


def prepare(
    paths: list[Path],
    sink: DiagnosticSink,
    *,
    force_kind: str | None = None,
    manifest: list[ManifestEntry] = (),  # type: ignore[assignment]
    max_line_bytes: int,
    exclude: Path | None = None,
    discovered: Callable[[], None] | None = None,
    offer_as: bool = False,
) -> tuple[Inputs, Plan, PlanStats]:
    """Discover and plan: the slots to build, in output order.

    Args:
        exclude: The output file: never read as an input, even inside a named folder.
        offer_as: The command has ``--as`` (``inputs.discover``).
        discovered: Called once the inputs are discovered (the output refused if it is one of them),
            before planning reads them.

    Raises:
        RunError: A named input cannot be read (``io.files.check_inputs``).
    """
    with resolved_folders():  # the inputs are taken not to change while they are discovered and planned
        inputs = discover(paths, sink, force_kind=force_kind, manifest=manifest, exclude=exclude, offer_as=offer_as)
        if discovered is not None:
            discovered()
        slots, stats = plan(inputs, sink, max_line_bytes=max_line_bytes, manifest=manifest)
    inputs.planned()
    return inputs, slots, stats


def build(
    inputs: Inputs,
    slots: Sequence[Slot],
    stats: PlanStats,
    options: BuildOptions,
    sink: DiagnosticSink,
    write: Callable[[Any], Any],
    on_slot: Callable[[Slot], None] | None = None,
    *,
    encode: Encode = encode_line,
    jobs: int = 1,
    engine: Callable[..., BuildTally] = run_slots,
) -> BuildSummary:
    """Assemble and write every slot; return the summary.

    ``encode`` turns each built slot into what ``write`` takes (the JSONL line by default; the
    Parquet rows for a dataset); ``jobs`` worker processes assemble slots when above 1. ``engine``
    runs the slots (``run.run_slots`` here, or ``engine_ray.RayEngine.run`` with what its ``open`` gave).
    """
    tally = engine(slots, options, sink, write, on_slot, encode=encode, jobs=jobs)
    empty = [
        named
        for named in inputs.named
        if tally.by_named[named] == 0 and not any(tally.by_named[o] for o in inputs.overlaps.get(named, ()))
    ]
    return BuildSummary(inputs, stats, tally, sink, empty)
