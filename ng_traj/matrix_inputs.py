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

import errno
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ng_traj.assemble.build import BuildOptions
from ng_traj.assemble.pipeline import build, prepare
from ng_traj.contract import TrajectoryRecord
from ng_traj.contract.revisions import keys_0_7
from ng_traj.diagnostics import Diagnostic, DiagnosticSink, RunError
from ng_traj.io.files import check_regular
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES
from ng_traj.io.spans import text_copies
from ng_traj.matrix import NO_PRODUCER, UNKNOWN, RecordContext, agent_invocations
from ng_traj.records import ReadRecord, read_dataset_records, read_file, row_facts
from ng_traj.sources.capture.record import token_stats
from ng_traj.sources.detect import own_output, skipped_link, unreadable, walk
from ng_traj.sources.rollouts.rows import is_rollout_row
from ng_traj.sources.sniff import first_record
from ng_traj.writers.dataset_paths import MISSING_MANIFEST, is_dataset, without_manifest

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
    own: list[tuple[Path, str]] = field(default_factory=list)
    """Files of a named folder that ng-traj's export or report wrote there, with their description:
    skipped (one info each), not built as raw inputs named one by one (a warning each)."""
    unreadable: list[OSError] = field(default_factory=list)
    """Folders under a named folder not handed to the build whole that could not be listed, and files
    there that could not be opened."""
    links: list[Path] = field(default_factory=list)
    """Symbolic links to folders under such a named folder: not entered (one info each)."""


def _kind(file: Path) -> str:
    """``trajectories``, ``rows`` (rollout rows carrying ``ng_trajectory``) or ``raw``, by the first record."""
    first = first_record(file) if ".jsonl" in file.name else None
    if not isinstance(first, dict):
        return "raw"
    if first.keys() >= TRAJECTORY_KEYS:
        return "trajectories"
    return "rows" if is_rollout_row(first) and isinstance(first.get("ng_trajectory"), dict) else "raw"


def _unopenable(file: Path) -> OSError | None:
    """Why ``file`` cannot be opened for reading, else ``None`` (also for a pipe or device, which
    the build reports as not a regular file)."""
    try:
        check_regular(file)
    except OSError as exc:
        return None if exc.errno == errno.EINVAL else exc
    return None


def _walked(
    named: Path, on_error: Callable[[OSError], None], on_link: Callable[[Path], None]
) -> list[tuple[Path, str]]:
    """``(file, kind)`` of each file under the folder ``named`` (:func:`_kind`), a dataset folder
    under it once, as itself (``dataset``), not as its table files."""
    found: list[tuple[Path, str]] = []
    datasets: set[Path] = set()
    for file in walk(named, on_error, on_link):
        owner = next((parent for parent in file.parents if parent.is_relative_to(named) and is_dataset(parent)), None)
        if owner is None:
            found.append((file, _kind(file)))
        elif owner not in datasets:
            datasets.add(owner)
            found.append((owner, "dataset"))
    return found


def classify(paths: list[Path]) -> MatrixInputs:
    """Sort the files under ``paths`` into record files and raw inputs.

    Trajectory files are always read. Rows carrying ``ng_trajectory`` are read as they are, unless
    raw inputs are given too: then they go to the build with them, so that a capture store of the
    same run attaches to its rows (re-projecting a collector row is idempotent) instead of giving
    capture-only trajectories. A named folder all of whose files are built is passed to the build
    whole, so that the build reports its files as for ``ng-traj build FOLDER``; for any other, a
    folder under it that cannot be listed, or a file there the build would be given that cannot be
    opened, is in :attr:`MatrixInputs.unreadable`. The named paths
    were checked (``io.files.check_inputs``) before anything else looked at them.

    Raises:
        RunError: A named folder is laid out as a dataset without its manifest.
    """
    kinds: dict[Path, list[tuple[Path, str]]] = {}
    unlisted: dict[Path, list[OSError]] = {}
    links: dict[Path, list[Path]] = {}
    for named in paths:
        if without_manifest(named):
            raise RunError(f"{named}: {MISSING_MANIFEST}")
        errors, linked = unlisted.setdefault(named, []), links.setdefault(named, [])
        kinds[named] = [(named, "dataset")] if is_dataset(named) else _walked(named, errors.append, linked.append)
    built = ("raw", "rows") if any(k == "raw" for files in kinds.values() for _, k in files) else ("raw",)
    inputs = MatrixInputs()
    for named, files in kinds.items():
        read = [file for file, kind in files if kind not in built]
        inputs.records.extend(read)
        if read:
            for file, kind in files:
                own = own_output(file) if kind in built and file != named else None
                if own is not None:
                    inputs.own.append((file, own))
                elif kind in built and (problem := _unopenable(file)) is not None:
                    inputs.unreadable.append(problem)  # named to the build on its own, it would stop the run
                elif kind in built:
                    inputs.raw.append(file)
        elif files:  # the build reports what it skips in the folder (ng-traj's own outputs as info)
            inputs.raw.append(named)
            continue
        inputs.unreadable.extend(unlisted[named])
        inputs.links.extend(links[named])
    return inputs


def row_context(row: Mapping[str, Any], record: TrajectoryRecord) -> RecordContext:
    """Agent, producer and rollout-level usage of a row (``matrix.RecordContext``)."""
    agent, source, _ = row_facts(row)
    if source is None:
        source = PRODUCER_TRAJECTORY if agent_invocations(record) else NO_PRODUCER
    response = row.get("response")
    stats = token_stats(response.get("usage") if isinstance(response, Mapping) else None)
    usage = any(stats[name] is not None for name in ("tokens_in", "tokens_out", "tokens_total"))
    return RecordContext(agent, source, usage)


def read_records(
    path: Path, sink: DiagnosticSink, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, label: str | None = None
) -> Iterator[MatrixRecord]:
    """Stream the records of one trajectory file, trajectory-rows file or Parquet dataset
    (``records.py``; what cannot be read is reported there and skipped).

    Args:
        path: The file or dataset folder.
        sink: Receives one diagnostic per skipped line or record.
        max_line_bytes: Longer lines are skipped and reported.
        label: Name to report instead of ``path`` (the built temporary file).
    """
    if is_dataset(path):
        found = read_dataset_records(path, sink)
    else:
        found = read_file(path, sink, max_line_bytes=max_line_bytes, label=label)
    for read in found:
        yield MatrixRecord(read.record, record_context(read), bool(keys_0_7(read.value)))


def record_context(read: ReadRecord) -> RecordContext:
    """What the matrix knows of a record read back: its row's context, its dataset columns, or nothing."""
    if read.row is not None:
        return row_context(read.row, read.record)
    if read.kind == "dataset":
        return _dataset_context(read)
    return _plain_context(read.record)


def _dataset_context(read: ReadRecord) -> RecordContext:
    """A dataset keeps the row's agent and producer, not its usage."""
    producer = read.producer or (PRODUCER_TRAJECTORY if agent_invocations(read.record) else NO_PRODUCER)
    return RecordContext(read.agent, producer, False)


def _plain_context(record: TrajectoryRecord) -> RecordContext:
    return RecordContext(None, UNKNOWN if agent_invocations(record) else NO_PRODUCER, False)


def all_records(
    paths: list[Path], sink: DiagnosticSink, *, roles: Mapping[str, str], max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[MatrixRecord]:
    """Every record of the named inputs (checked by the caller: ``io.files.check_inputs``): record
    files in path order, then the build of the raw inputs."""
    inputs = classify(paths)
    for exc in inputs.unreadable:
        sink.add(unreadable(exc))
    for folder in inputs.links:
        sink.add(skipped_link(folder))
    for path, own in inputs.own:
        sink.add(Diagnostic("info", "input_unsupported", f"recognised as {own}; skipped", path=str(path)))
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
