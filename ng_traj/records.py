"""Trajectory records read back from finished outputs, with what the input says about each.

The commands that look at built trajectories (``matrix``, ``export``, ``show``, ``report``) read them
through :func:`read_inputs`. Three kinds of input are told apart by what they are:

* a **Parquet dataset** (a folder holding ``ng_traj.json``): its trajectories in dataset order, with
  the ``run``, ``agent``, ``producer`` and ``reward`` columns the build wrote beside them;
* **trajectory rows** (JSONL of rollout rows carrying ``ng_trajectory``: a collector run with
  observability on, or ``ng-traj build --attach`` output): each row's trajectory with the row's
  ``agent_ref.name``, ``reward`` and first observation bundle's ``source``; the run is the file
  (named by the shortest tail of its path that no other named file shares);
* **trajectory JSONL** (bare ``ng_trajectory`` records): the record alone; run, agent, producer and
  reward are unknown (``None``), since the record has no place for them.

Lines are classified one by one as ``ng-traj validate`` does (``checks.is_bare_trajectory``). Every
line or trajectory that cannot be read is reported to the sink with its file and line (or 1-based
dataset position) and skipped: an unreadable line as ``io.lines`` reports it, a row without a
trajectory as ``trajectory_missing`` (a warning), a trajectory the contract rejects with the
code of its first problem (``validate`` lists them all), and a broken dataset as ``dataset_invalid``.
Records are streamed one at a time.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import ValidationError

from ng_traj.assemble.attribution import run_label_map
from ng_traj.checks import TRAJECTORY_MISSING, findings_from_error, is_bare_trajectory
from ng_traj.contract import TrajectoryRecord
from ng_traj.diagnostics import Diagnostic, DiagnosticSink, RunError
from ng_traj.input_kind import CODE as NOT_TRAJECTORIES
from ng_traj.input_kind import holds_trajectories, not_trajectories
from ng_traj.io.files import check_inputs
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES, read_json_objects
from ng_traj.sources.detect import own_output, skipped_link, unreadable, walk
from ng_traj.sources.sniff import json_named
from ng_traj.writers.dataset_paths import (
    MISSING_MANIFEST,
    is_dataset,
    refuse_parquet_file,
    table_folder_of,
    without_manifest,
)
from ng_traj.writers.jsonl import record_json

Kind = Literal["trajectories", "rows", "dataset"]


@dataclass(frozen=True, slots=True)
class ReadRecord:
    """One trajectory read back, and what its input says about it.

    Attributes:
        value: The ``ng_trajectory`` JSON value: as read from JSONL (keys in the file's order); for a
            dataset, as the JSONL of the same build holds it (the record written out again).
        record: ``value`` validated against the contract.
        source: The file or dataset folder, as named (or as found under a named folder).
        position: 1-based line number in a JSONL file; 1-based trajectory position in a dataset.
        kind: ``"trajectories"`` (bare records), ``"rows"`` (rollout rows) or ``"dataset"``.
        run: The run's label (dataset ``run`` column; the file's label for rows); ``None`` unknown.
        agent: The row's ``agent_ref.name`` (dataset ``agent`` column); ``None`` unknown.
        producer: ``source`` of the row's first observation bundle (dataset ``producer`` column).
        reward: The row's numeric ``reward`` (dataset ``reward`` column); ``None`` unknown.
        row: The whole rollout row for ``"rows"`` (``ng_trajectory`` included); else ``None``.
    """

    value: dict[str, Any]
    record: TrajectoryRecord
    source: str
    position: int
    kind: Kind
    run: str | None = None
    agent: str | None = None
    producer: str | None = None
    reward: float | None = None
    row: dict[str, Any] | None = None


def row_facts(row: Mapping[str, Any]) -> tuple[str | None, str | None, float | None]:
    """``(agent, producer, reward)`` of a rollout row: ``agent_ref.name``, the ``source`` of its
    ``ng_agent_observations`` bundle (the first of a list), and ``reward`` when it is a finite number."""
    agent_ref = row.get("agent_ref")
    agent = agent_ref.get("name") if isinstance(agent_ref, Mapping) else None
    bundle = row.get("ng_agent_observations")
    if isinstance(bundle, list):
        bundle = bundle[0] if bundle else None
    producer = bundle.get("source") if isinstance(bundle, Mapping) else None
    reward = row.get("reward")
    reward = float(reward) if type(reward) in (int, float) and abs(reward) < 1e308 else None
    return (
        agent if isinstance(agent, str) and agent else None,
        producer if isinstance(producer, str) and producer else None,
        reward,
    )


def _validated(
    value: Any, pointer_base: str, where: Mapping[str, Any], sink: DiagnosticSink
) -> TrajectoryRecord | None:
    """The contract's record for ``value``, or ``None`` with its first problem reported."""
    try:
        return TrajectoryRecord.model_validate(value)
    except ValidationError as exc:
        finding = next(findings_from_error(exc, value, pointer_base))
        message = f"{finding.message}; skipped (ng-traj validate lists every problem)"
        sink.add(Diagnostic("error", finding.code, message, pointer=finding.pointer or None, **where))
        return None


def read_file(
    path: Path,
    sink: DiagnosticSink,
    *,
    run: str | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    label: str | None = None,
) -> Iterator[ReadRecord]:
    """Stream the records of one trajectory JSONL or trajectory-rows file (classified per line).

    A file that holds no trajectory records (``input_kind``) is one ``input_not_trajectories`` error.

    Args:
        path: The file (plain or compressed, as ``io.lines`` reads it).
        sink: Receives one diagnostic per skipped line or record.
        run: The run label given to the records of rows.
        max_line_bytes: Longer lines are skipped and reported.
        label: Name to report and record instead of ``path`` (a temporary file).
    """
    name = label or str(path)
    reason = not_trajectories(path, max_line_bytes=max_line_bytes)
    if reason is not None:
        sink.add(Diagnostic("error", NOT_TRAJECTORIES, reason, path=name))
        return
    for line in read_json_objects(path, sink, max_line_bytes=max_line_bytes):
        where = {"path": name, "line": line.line, "offset": line.offset}
        if is_bare_trajectory(line.value):
            record = _validated(line.value, "", where, sink)
            if record is not None:
                yield ReadRecord(line.value, record, name, line.line, "trajectories")
            continue
        row = line.value
        value = row.get("ng_trajectory")
        if value is None:
            message = "the rollout row has no ng_trajectory; skipped (ng-traj build assembles one)"
            sink.add(Diagnostic("warning", TRAJECTORY_MISSING.code, message, **where))
            continue
        record = _validated(value, "ng_trajectory", where, sink)
        if record is not None:
            agent, producer, reward = row_facts(row)
            yield ReadRecord(value, record, name, line.line, "rows", run, agent, producer, reward, row)


def read_dataset_records(path: Path, sink: DiagnosticSink) -> Iterator[ReadRecord]:
    """Stream the trajectories of a Parquet dataset with their convenience columns.

    A dataset whose manifest, tables or columns are broken is one ``dataset_invalid`` error (what
    was read before it is kept); a trajectory whose rows are broken is reported and skipped.
    """
    from ng_traj.writers.parquet_convert import dataset_entries
    from ng_traj.writers.parquet_layout import DatasetError

    name = str(path)
    try:
        for entry in dataset_entries(path, sink):
            if entry.value is None:
                continue
            where = {"path": name, "line": entry.index + 1}
            record = _validated(entry.value, "", where, sink)
            if record is None:
                continue
            columns = entry.columns
            reward = columns.get("reward")
            yield ReadRecord(
                orjson.loads(record_json(record)),
                record,
                name,
                entry.index + 1,
                "dataset",
                columns.get("run") or None,
                columns.get("agent") or None,
                columns.get("producer") or None,
                float(reward) if isinstance(reward, (int, float)) else None,
            )
    except DatasetError as exc:
        sink.add(Diagnostic("error", "dataset_invalid", str(exc), path=name))


def input_files(paths: Iterable[Path], outputs: Iterable[Path] = (), sink: DiagnosticSink | None = None) -> list[Path]:
    """The datasets and files the named paths stand for: a dataset folder as itself, any other
    folder walked in sorted order (hidden entries skipped, datasets inside it kept whole).

    Args:
        outputs: The command's outputs: one found under a named folder (a report an earlier run
            wrote there, the files of an export folder) is no input unless its first record is a
            trajectory or a rollout row carrying one (:func:`input_kind.holds_trajectories`).
        sink: Receives an ``unreadable_file`` error for each folder under a named one that cannot
            be listed (its files are then not found; without a sink, such a folder is passed over).

    Raises:
        RunError: A named path cannot be read (``io.files.check_inputs``), or is a Parquet file, a
            table folder of a dataset (only a dataset folder is read as Parquet) or a dataset folder
            without its manifest.
    """
    on_error = (lambda exc: sink.add(unreadable(exc))) if sink is not None else None
    on_link = (lambda folder: sink.add(skipped_link(folder))) if sink is not None else None
    found: dict[Path, None] = {}
    written = [Path(os.path.realpath(output)) for output in outputs]
    paths = list(paths)
    check_inputs(paths)
    for named in paths:
        refuse_parquet_file(named)
        dataset = table_folder_of(named)
        if dataset is not None:
            raise RunError(f"{named} is a table folder of a Parquet dataset: name the dataset folder {dataset}")
        if without_manifest(named):
            raise RunError(f"{named}: {MISSING_MANIFEST}")
        for file in [named] if is_dataset(named) else walk(named, on_error, on_link):
            if file != named and written and _earlier_output(file, written):
                continue
            owner = next((p for p in file.parents if p.is_relative_to(named) and is_dataset(p)), None)
            found.setdefault(owner or file)
    return list(found)


def _earlier_output(file: Path, written: list[Path]) -> bool:
    """Whether ``file`` is, or is inside, one of the ``written`` outputs (resolved), and holds no trajectory."""
    real = Path(os.path.realpath(file))
    return any(real == output or output in real.parents for output in written) and not holds_trajectories(file)


def _identity(path: Path) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the file ``path`` names (through symbolic links), else ``None``."""
    try:
        found = os.stat(path)
    except (OSError, ValueError):
        return None
    return found.st_dev, found.st_ino


def refuse_input_as_output(inputs: Iterable[Path], *outputs: Path) -> None:
    """Stop before anything is written when an output would replace or remove an input: an output
    that is one of the input files (by any path, a hard link included), or a folder that holds one. An earlier output
    found under a named folder is not an input (:func:`input_files`).

    Raises:
        RunError: As above, naming the input; or a named input cannot be read.
    """
    targets = {Path(os.path.realpath(output)): output for output in outputs}
    linked = {identity: output for output in outputs if (identity := _identity(output)) is not None}
    for file in input_files(inputs, outputs):
        real = Path(os.path.realpath(file))
        same = linked.get(_identity(file)) if linked else None  # the output is a hard link of it
        for target, output in targets.items():
            if real == target or same is output:
                raise RunError(f"output {output} is one of the inputs; writing would replace it: name another output")
            if target in real.parents:
                raise RunError(
                    f"output {output} is a folder holding the input {file}; writing would remove it: "
                    "name another output"
                )


def read_inputs(
    paths: Iterable[Path],
    sink: DiagnosticSink,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    outputs: Iterable[Path] = (),
) -> Iterator[ReadRecord]:
    """Every record of the named inputs, in the order of :func:`input_files` (``outputs`` passed on).
    A file found in a named folder is read only when it is named as JSON Lines or JSON; any other is
    one ``input_unclaimed`` info diagnostic. One that ng-traj itself wrote there (an export's ATIF
    documents, OTLP traces or completeness report, a report's HTML page: ``detect.own_output``) is
    one ``input_unsupported`` info diagnostic saying so, and is not read.

    Raises:
        RunError: A named path cannot be read (``io.files.check_inputs``).
    """
    paths = [Path(path) for path in paths]
    named = set(paths)
    files = []
    for file in input_files(paths, outputs, sink):
        own = None if file in named or file.is_dir() else own_output(file)
        if own is not None:
            sink.add(Diagnostic("info", "input_unsupported", f"recognised as {own}; skipped", path=str(file)))
        elif file in named or file.is_dir() or json_named(file):
            files.append(file)
        else:  # a README, a page, a table beside the records in a named folder
            sink.add(Diagnostic("info", "input_unclaimed", UNCLAIMED, path=str(file)))
    labels = run_label_map(str(file) for file in files if not file.is_dir())
    for file in files:
        if file.is_dir():
            yield from read_dataset_records(file, sink)
        else:
            yield from read_file(file, sink, run=labels[str(file)], max_line_bytes=max_line_bytes)


UNCLAIMED = "not named as JSON Lines (*.jsonl) or JSON (*.json), compressed or not; skipped"
"""Why a file found in a named folder is not read (a file named on its own is read whatever its name)."""
