"""The records ``ng-traj matrix`` evaluates, from whatever the user names.

Every named file (folders are walked in sorted order) is sniffed by its first record:

* an ``ng_trajectory`` record (``schema_version``, ``task_id``, ``rollout_id``): a trajectory file;
* a rollout row carrying ``ng_trajectory`` (a collector run with observability on, or
  ``ng-traj build --attach`` output): a file of trajectory rows, whose ``agent_ref``,
  ``ng_agent_observations.source`` and ``response.usage`` give each record its context;
* anything else (rollout rows without trajectories, capture stores, session files): a raw input.
  All raw inputs (and, when there are any, the trajectory rows too) are built together first,
  exactly as ``ng-traj build --attach`` would (payloads kept), into a temporary file that is then
  read as trajectory rows.

Lines are classified one by one as ``ng-traj validate`` does (a line is a row when it carries
``ng_trajectory`` or rollout keys without ``schema_version``). Unreadable lines, invalid trajectories
and rows without a trajectory are reported and skipped; records are streamed, one at a time.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ng_traj.assemble.build import BuildOptions
from ng_traj.assemble.pipeline import build, prepare
from ng_traj.checks import findings_from_error, is_bare_trajectory
from ng_traj.contract import TrajectoryRecord
from ng_traj.contract.revisions import keys_0_7
from ng_traj.diagnostics import Diagnostic, DiagnosticSink, RunError
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES, read_json_objects
from ng_traj.io.spans import text_copies
from ng_traj.matrix import NO_PRODUCER, UNKNOWN, RecordContext, agent_invocations
from ng_traj.sources.capture.record import token_stats
from ng_traj.sources.detect import walk
from ng_traj.sources.rollouts.rows import is_rollout_row
from ng_traj.sources.sniff import first_record

TRAJECTORY_KEYS = frozenset({"schema_version", "task_id", "rollout_id"})
PRODUCER_TRAJECTORY = "ng_trajectory"


@dataclass(frozen=True, slots=True)
class MatrixRecord:
    """One trajectory to evaluate and what its row says about it."""

    record: TrajectoryRecord
    context: RecordContext
    with_0_7_keys: bool = False
    """The record carries a field nemo-gym 0.7.0 added (``contract/revisions.py``)."""


@dataclass
class MatrixInputs:
    """The named inputs, sorted into files read as records and raw inputs to build first."""

    records: list[Path] = field(default_factory=list)
    raw: list[Path] = field(default_factory=list)


def _kind(file: Path) -> str:
    """``trajectories``, ``rows`` (rollout rows carrying ``ng_trajectory``) or ``raw``, by the first record."""
    first = first_record(file) if ".jsonl" in file.name else None
    if not isinstance(first, dict):
        return "raw"
    if first.keys() >= TRAJECTORY_KEYS:
        return "trajectories"
    return "rows" if is_rollout_row(first) and isinstance(first.get("ng_trajectory"), dict) else "raw"


def classify(paths: list[Path]) -> MatrixInputs:
    """Sort the files under ``paths`` into record files and raw inputs.

    Trajectory files are always read. Rows carrying ``ng_trajectory`` are read as they are, unless
    raw inputs are given too: then they go to the build with them, so that a capture store of the
    same run attaches to its rows (re-projecting a collector row is idempotent) instead of giving
    capture-only trajectories. A named folder all of whose files are built is passed to the build
    whole, so that the build reports its files as for ``ng-traj build FOLDER``.

    Raises:
        RunError: A named path does not exist.
    """
    for named in paths:
        if not named.exists():
            raise RunError(f"{named}: no such file or directory")
    kinds = {named: [(file, _kind(file)) for file in walk(named)] for named in paths}
    built = ("raw", "rows") if any(k == "raw" for files in kinds.values() for _, k in files) else ("raw",)
    inputs = MatrixInputs()
    for named, files in kinds.items():
        read = [file for file, kind in files if kind not in built]
        inputs.records.extend(read)
        if read:
            inputs.raw.extend(file for file, kind in files if kind in built)
        elif files:
            inputs.raw.append(named)
    return inputs


def row_context(row: Mapping[str, Any], record: TrajectoryRecord) -> RecordContext:
    """Agent, producer and rollout-level usage of a row (``matrix.RecordContext``)."""
    agent_ref = row.get("agent_ref")
    agent = agent_ref.get("name") if isinstance(agent_ref, Mapping) else None
    bundle = row.get("ng_agent_observations")
    source = bundle.get("source") if isinstance(bundle, Mapping) else None
    if not (isinstance(source, str) and source):
        source = PRODUCER_TRAJECTORY if agent_invocations(record) else NO_PRODUCER
    response = row.get("response")
    stats = token_stats(response.get("usage") if isinstance(response, Mapping) else None)
    usage = any(stats[name] is not None for name in ("tokens_in", "tokens_out", "tokens_total"))
    return RecordContext(agent if isinstance(agent, str) and agent else None, source, usage)


def read_records(
    path: Path, sink: DiagnosticSink, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, label: str | None = None
) -> Iterator[MatrixRecord]:
    """Stream the records of one trajectory file or trajectory-rows file.

    Args:
        path: The file.
        sink: Receives one diagnostic per skipped line or record.
        max_line_bytes: Longer lines are skipped and reported.
        label: Name to report instead of ``path`` (the built temporary file).
    """
    name = label or str(path)
    for line in read_json_objects(path, sink, max_line_bytes=max_line_bytes):
        row = None if is_bare_trajectory(line.value) else line.value
        value = row.get("ng_trajectory") if row is not None else line.value
        where = {"path": name, "line": line.line, "offset": line.offset}
        if value is None:
            sink.add(
                Diagnostic(
                    "warning", "trajectory_missing", "the rollout row has no ng_trajectory; not evaluated", **where
                )
            )
            continue
        try:
            record = TrajectoryRecord.model_validate(value)
        except ValidationError as exc:
            finding = next(findings_from_error(exc, value, "ng_trajectory" if row is not None else ""))
            message = f"{finding.message}; not evaluated (ng-traj validate lists every problem)"
            sink.add(Diagnostic("error", finding.code, message, pointer=finding.pointer or None, **where))
            continue
        context = row_context(row, record) if row is not None else _plain_context(record)
        yield MatrixRecord(record, context, bool(keys_0_7(value)))


def _plain_context(record: TrajectoryRecord) -> RecordContext:
    return RecordContext(None, UNKNOWN if agent_invocations(record) else NO_PRODUCER, False)


def all_records(
    paths: list[Path], sink: DiagnosticSink, *, roles: Mapping[str, str], max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[MatrixRecord]:
    """Every record of the named inputs: record files in path order, then the build of the raw inputs.

    Raises:
        RunError: A named path does not exist.
    """
    inputs = classify(paths)
    for path in inputs.records:
        yield from read_records(path, sink, max_line_bytes=max_line_bytes)
    if not inputs.raw:
        return
    with tempfile.TemporaryDirectory(prefix="ng-traj-matrix-") as folder, text_copies():
        built = Path(folder) / "built.jsonl"
        found, slots, stats = prepare(inputs.raw, sink, max_line_bytes=max_line_bytes)
        options = BuildOptions(
            capture_enabled=found.capture_enabled, attach=True, roles=dict(roles), max_line_bytes=max_line_bytes
        )
        with open(built, "wb") as handle:
            build(found, slots, stats, options, sink, handle.write)
        yield from read_records(built, sink, max_line_bytes=max_line_bytes, label="(built from raw inputs)")
