"""Planning a build: one slot per trajectory to write, in output order, before anything is assembled.

Pass one over the rollouts files keeps only an index entry per row (identity and byte location), so
memory grows by a few hundred bytes per rollout, never with payload size. Capture
artifacts are attributed by exact rollout id: to the rows of the single run
that has the id, to the run the manifest names, or, when several runs have it, to none (ambiguous);
artifacts with no row become trajectories of their own. Slots are ordered by rollout id with task,
rollout and attempt numbers compared as numbers, then run file name, then line.
"""

from __future__ import annotations

import hashlib
import re
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain
from pathlib import Path, PurePosixPath
from typing import overload

from ng_traj.assemble.attribution import (
    Attribution,
    CaptureIds,
    RowIndex,
    RowKey,
    attribute,
    manifest_runs,
    run_label_map,
    runs_named,
)
from ng_traj.assemble.inputs import Inputs, RolloutFile
from ng_traj.contract import ObservationGap
from ng_traj.diagnostics import Diagnostic, DiagnosticSink, plural, safe_text
from ng_traj.io.compression import logical_name
from ng_traj.io.files import forget_regular, open_regular, path_order
from ng_traj.io.lines import JsonLine, quiet_objects, read_json_objects
from ng_traj.io.spans import text_copy
from ng_traj.sources.capture.store import CaptureFiles
from ng_traj.sources.manifest import ManifestEntry
from ng_traj.sources.native import NativeUnit, index_units, load_unit
from ng_traj.sources.rollouts.rows import (
    Identity,
    identity,
    not_a_rollout_row_message,
    object_key_problems,
    recorded_run_ids,
    reward_problem,
    row_kind,
    task_from_rollout_id,
)

_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[object, ...]:
    """Sort key comparing digit runs as numbers (``2-1`` < ``10-0``), ties broken by the text itself.

    The parts are a tuple of their own (text and numbers alternate in it, so any two compare), and
    the text follows it: ``0-`` and ``0-1`` compare by their parts, never text against a number.
    """
    parts = _DIGITS.split(text)
    return (tuple(int(part) if index % 2 else part for index, part in enumerate(parts)), text)


@dataclass(frozen=True, slots=True)
class Slot:
    """One trajectory to build.

    Attributes:
        identity: Canonical task and rollout ids.
        run: Run (rollouts file name) of the row; ``None`` for artifacts without a row.
        path: Rollouts file of the row, or ``None``.
        line: 1-based line of the row; offset and size locate its bytes.
        capture: Capture files attributed to this trajectory (all stores).
        build_gaps: ng-traj gaps about the trajectory's artifacts.
        named: The named inputs the trajectory's artifacts were found under.
        native: Native session units attributed to this trajectory.
        run_label: The run's label (``attribution.run_label_map``; ``""`` without a run).
        file_label: The rollouts file named like its run's label (``None`` without a row).
    """

    identity: Identity
    run: str | None
    path: str | None
    line: int
    offset: int
    size: int
    capture: tuple[CaptureFiles, ...]
    build_gaps: tuple[ObservationGap, ...]
    named: tuple[str, ...]
    native: tuple[NativeUnit, ...] = ()
    run_label: str = ""
    file_label: str | None = None

    def sort_key(self, labels: Mapping[str, str]) -> tuple[object, ...]:
        """Output order: rollout id (numbers as numbers), rows before orphan artifacts, run (by its
        ``labels`` entry, ``attribution.run_label_map``), line."""
        rank = 0 if self.path is not None else 1
        run = labels.get(self.run, self.run) if self.run is not None else ""
        return (natural_key(self.identity.rollout_id), rank, run, self.line)


@dataclass
class PlanStats:
    """Counts gathered while planning."""

    rows: int = 0
    task_input_rows: int = 0
    rows_without_identity: int = 0
    orphan_captures: list[str] = field(default_factory=list)
    ambiguous_captures: list[str] = field(default_factory=list)
    unattributed: list[dict[str, object]] = field(default_factory=list)


class Plan(Sequence[Slot]):
    """The planned slots in output order, the rows' slots held as columns and made when asked for.

    A slot of a rollout row is kept as its ids' strings, a rollouts-file number, its line, offset and
    size in arrays, and references to its capture, named-input and native-unit tuples (shared between
    slots where equal): about 210 bytes a rollout less than a ``Slot`` object with its ``Identity``
    and three integers (tracemalloc, the benchmark corpus). The rare slots without a row (capture or
    sessions alone) are kept as they are. Each access makes a new, equal ``Slot``; a slice gives a
    list of them.
    """

    def __init__(self) -> None:
        self._files: list[tuple[str, str, str, str | None]] = []  # run, path, run label, file label
        self._file_numbers: dict[tuple[str, str], int] = {}
        self._tasks: list[str] = []
        self._rollouts: list[str] = []
        self._not_derived: dict[int, Identity] = {}  # rows identified by file and line
        self._file = array("l")
        self._where = array("q")  # line, offset and size of each row
        self._capture: list[tuple[CaptureFiles, ...]] = []
        self._named: list[tuple[str, ...]] = []
        self._native: list[tuple[NativeUnit, ...]] = []
        self._others: list[Slot] = []
        self._order = array("q")  # >= 0: a row's column; < 0: ~ its position in ``_others``

    def add(self, slot: Slot) -> None:
        """Plan ``slot`` as it is (a trajectory without a row)."""
        self._order.append(~len(self._others))
        self._others.append(slot)

    def add_row(
        self,
        row: _Row,
        file: tuple[str, str, str, str | None],
        capture: tuple[CaptureFiles, ...],
        named: tuple[str, ...],
        native: tuple[NativeUnit, ...],
    ) -> None:
        """Plan the slot of a rollout row: ``file`` is (run, rollouts file, run label, file label)."""
        identity = row.identity
        number = self._file_numbers.setdefault(file[:2], len(self._files))
        if number == len(self._files):
            self._files.append(file)
        column = len(self._rollouts)
        if not identity.derived:
            self._not_derived[column] = identity
        self._tasks.append(identity.task_id)
        self._rollouts.append(identity.rollout_id)
        self._file.append(number)
        self._where.extend((row.line, row.offset, row.size))
        self._capture.append(capture)
        self._named.append(named)
        self._native.append(native)
        self._order.append(column)

    def order(self, labels: Mapping[str, str]) -> None:
        """Put the slots in output order (:meth:`Slot.sort_key`; ties keep the order they were added in)."""

        def key(entry: int) -> tuple[object, ...]:
            if entry < 0:
                return self._others[~entry].sort_key(labels)
            run_label = self._files[self._file[entry]][2]
            return (natural_key(self._rollouts[entry]), 0, run_label, self._where[3 * entry])

        self._order = array("q", sorted(self._order, key=key))

    def _slot(self, entry: int) -> Slot:
        if entry < 0:
            return self._others[~entry]
        identity = self._not_derived.get(entry) or Identity(self._tasks[entry], self._rollouts[entry])
        run, path, run_label, file_label = self._files[self._file[entry]]
        line, offset, size = self._where[3 * entry : 3 * entry + 3]
        capture, named, native = self._capture[entry], self._named[entry], self._native[entry]
        return Slot(identity, run, path, line, offset, size, capture, (), named, native, run_label, file_label)

    def __len__(self) -> int:
        return len(self._order)

    @overload
    def __getitem__(self, index: int) -> Slot: ...
    @overload
    def __getitem__(self, index: slice) -> list[Slot]: ...
    def __getitem__(self, index: int | slice) -> Slot | list[Slot]:
        if isinstance(index, slice):
            return [self._slot(entry) for entry in self._order[index]]
        return self._slot(self._order[index])

    def __iter__(self) -> Iterator[Slot]:
        return map(self._slot, self._order)


@dataclass(slots=True)
class _Row:
    identity: Identity
    file: RolloutFile
    line: int
    offset: int
    size: int
    run_ids: tuple[str, ...] = ()


def _scan(
    file: RolloutFile, sink: DiagnosticSink, stats: PlanStats, max_line_bytes: int, strings: dict[str, str]
) -> list[_Row]:
    """Index the rollout rows of one file (a compressed file's text is kept to re-read them, ``io/spans.py``);
    ``strings``: one string object per id text, shared by the rows' identities (:func:`_index_row`)."""
    rows: list[_Row] = []
    task_inputs = 0
    with text_copy(file.path) as copy:
        for line in read_json_objects(file.path, sink, max_line_bytes=max_line_bytes, copy=copy):
            task_inputs += _index_row(file, line, rows, sink, stats, strings)
    if task_inputs:
        stats.task_input_rows += task_inputs
        sink.add(
            Diagnostic(
                "warning" if not rows else "info",
                "task_input_rows",
                f"{plural(task_inputs, 'row is a task input', 'rows are task inputs')} (no response, reward or "
                "attachment): not rollouts, not built",
                path=str(file.path),
            )
        )
    stats.rows += len(rows)
    return rows


def _index_row(
    file: RolloutFile, line: JsonLine, rows: list[_Row], sink: DiagnosticSink, stats: PlanStats, strings: dict[str, str]
) -> int:
    """Add the row of ``line`` to ``rows``; 1 when the line is a task input (not indexed), else 0. A
    line that is neither a rollout nor a task input is reported (``rollout_row_unrecognised``) and
    skipped. The row's task and rollout ids are taken from ``strings`` when an equal text is there
    (another row's), else added: the rollouts of a task (and the rows of one rollout id in several
    runs) then hold one string, not one each (about 40 bytes a rollout, held until the build ends).

    A row without identity is named by the file's name with any compression suffix dropped, so
    compressing a retained run changes no rollout id.
    """
    kind = row_kind(line.value)
    if kind == "task_input":
        return 1
    if kind == "other":
        message = not_a_rollout_row_message(line.value)
        where = {"path": str(file.path), "line": line.line, "offset": line.offset}
        sink.add(Diagnostic("warning", "rollout_row_unrecognised", message, **where))
        return 0
    ident = identity(line.value, logical_name(file.path.name), line.line)
    task, rollout = (
        strings.setdefault(ident.task_id, ident.task_id),
        strings.setdefault(ident.rollout_id, ident.rollout_id),
    )
    if task is not ident.task_id or rollout is not ident.rollout_id:
        ident = replace(ident, task_id=task, rollout_id=rollout)
    if not ident.derived:
        stats.rows_without_identity += 1
        sink.add(
            Diagnostic(
                "warning",
                "rollout_identity_invalid" if ident.invalid else "rollout_identity_unavailable",
                f"{ident.problem}; identified as {ident.rollout_id}",
                path=str(file.path),
                line=line.line,
                offset=line.offset,
            )
        )
    reward = reward_problem(line.value)
    for key, why in [*object_key_problems(line.value), *([("reward", reward)] if reward else [])]:
        where = {"path": str(file.path), "line": line.line, "offset": line.offset, "pointer": key}
        sink.add(Diagnostic("warning", "row_value_invalid", why, **where))
    rows.append(_Row(ident, file, line.line, line.offset, line.size, recorded_run_ids(line.value)))
    return 0


def plan(
    inputs: Inputs, sink: DiagnosticSink, *, max_line_bytes: int, manifest: Sequence[ManifestEntry] = ()
) -> tuple[Plan, PlanStats]:
    """Index every rollout row, capture artifact and native session unit; return slots in output order."""
    stats = PlanStats()
    strings: dict[str, str] = {}  # one string per task id and rollout id of the rows
    rows = [row for file in inputs.rollout_files for row in _scan(file, sink, stats, max_line_bytes, strings)]
    del strings
    index = _row_index(rows, sink)
    index.labels = run_label_map(row.file.run for row in rows)
    _check_manifest_runs(manifest, {row.file.run for row in rows}, sink)
    attached: dict[RowKey, tuple[CaptureFiles, ...]] = {}  # the slot's own tuple (most rows have one entry)
    orphans: dict[str, tuple[list[CaptureFiles], list[str]]] = {}
    sets: dict[tuple[CaptureFiles, ...], tuple[CaptureFiles, ...]] = {}  # one tuple per distinct set of entries
    for (rollout, manifest_run), stores in inputs.capture.items():
        files = tuple(sorted(stores, key=lambda found: found.store))
        files = sets.setdefault(files, files)
        known = index.runs_by_id.get(rollout, ())
        runs = manifest_runs([manifest_run] if manifest_run else [], known, index.labels)
        if len(runs) == 1 and (rollout, next(iter(runs))) not in index.repeated:
            key = (rollout, next(iter(runs)))
            attached[key] = (*attached[key], *files) if key in attached else files
        else:
            ambiguous = sorted(runs) if len(runs) > 1 else [run for run in runs for _ in range(2)]
            orphans.setdefault(rollout, ([], ambiguous))[0].extend(files)
    inputs.capture.clear()  # attached and orphans hold every entry: its keys and tuples let go before indexing
    if inputs.reattributed:
        _check_shared_calls(inputs.reattributed, attached, orphans, sink)
    index.capture_ids = set(orphans)
    captured = CaptureIds(
        lambda: chain(
            ((key[0], files) for key, files in attached.items()),
            ((rollout, files) for rollout, (files, _) in orphans.items()),
        ),
        empty=not attached and not orphans,
    )
    native = _attribute_units(inputs, index, list(manifest), captured, stats, sink)
    planned = Plan()
    for rollout, (files, runs) in orphans.items():
        planned.add(_orphan(inputs, index, rollout, files, runs, native.get(("capture", rollout), []), stats, sink))
    shared: dict[tuple[str, ...], tuple[str, ...]] = {}  # one tuple per distinct set of named inputs
    file_labels: dict[tuple[str, str], str] = {}
    rows.reverse()
    while rows:  # in file order, each row's index entry dropped as its slot is made (never all of both held)
        row = rows.pop()
        key = (row.identity.rollout_id, row.file.run)
        capture = attached.get(key, ()) if row.identity.derived else ()
        units = native.get(("row", *key), ())
        named = (row.file.named, *(inputs.named_for(key[0], f) for f in capture), *_unit_named(inputs, units))
        named = tuple(sorted(set(named)))
        named = shared.setdefault(named, named)
        path = str(row.file.path)
        label = index.labels.get(row.file.run, row.file.run)
        planned.add_row(row, (row.file.run, path, label, _file_label(label, path, file_labels)), capture, named, units)
    own: list[Slot] = native.get(("own",), [])  # type: ignore[assignment]
    for slot in _separate_repeated_sessions(own, sink):
        planned.add(slot)
    planned.order(index.labels)
    return planned, stats


def _file_label(label: str, path: str, file_labels: dict[tuple[str, str], str]) -> str:
    """The label of a row's rollouts file ``path`` in the run labelled ``label`` (a sidecar is named
    beside its run); ``file_labels`` holds the label of each (run label, rollouts file) made so far,
    one string each; valid UTF-8, as the run label is (``safe_text``)."""
    file_label = file_labels.get((label, path))
    if file_label is None:
        file_label = file_labels[(label, path)] = str(PurePosixPath(label).with_name(safe_text(Path(path).name)))
    return file_label


def _separate_repeated_sessions(own: list[Slot], sink: DiagnosticSink) -> list[Slot]:
    """Unattributed sessions with one session id, made one trajectory each.

    ``own`` is in the order the units were indexed (reader, then sorted paths). A session whose files
    hold the same bytes as an earlier one's (a copy) is built once: the copy is dropped and reported.
    Sessions with other content (excerpts of one file, a file edited after copying) are each built,
    the later ones with the rollout id ``<session id>~<n>`` (n = 2, 3, ... in that order), carrying the
    gap ``rollout_id_repeated`` (detail: the session id) and a ``session_repeated`` warning naming both.
    """
    groups: dict[str, list[Slot]] = {}
    for slot in own:
        groups.setdefault(slot.identity.rollout_id, []).append(slot)
    kept: list[Slot] = []
    for session, group in groups.items():
        contents: dict[bytes, int] = {}  # content digest -> index in kept
        for slot in group:
            where = _unit_where(slot)
            digest = _content_digest(slot.native[0])
            if digest is not None and digest in contents:
                original = contents[digest]
                message = f"session {session}: a copy of {_unit_where(kept[original])}; built once, from that file"
                sink.add(Diagnostic("info", "session_copy_skipped", message, path=where))
                named = tuple(sorted({*kept[original].named, *slot.named}))  # the copy's input yields that one
                kept[original] = replace(kept[original], named=named)
                continue
            number = len(contents) + 1
            contents[digest if digest is not None else where.encode()] = len(kept)
            if number == 1:
                kept.append(slot)
                continue
            rollout_id = f"{session}~{number}"
            message = (
                f"session {session} is also read from {_unit_where(group[0])} with other content: "
                f"built as rollout {rollout_id}"
            )
            sink.add(Diagnostic("warning", "session_repeated", message, path=where))
            gap = ObservationGap(code="session_id_repeated", detail=session)
            identity = replace(slot.identity, rollout_id=rollout_id)
            kept.append(replace(slot, identity=identity, build_gaps=(*slot.build_gaps, gap)))
    return kept


def _unit_where(slot: Slot) -> str:
    unit = slot.native[0]
    return unit.anchor or unit.paths[0]


def _content_digest(unit: NativeUnit) -> bytes | None:
    """SHA-256 over the unit's files (name order), or ``None`` when one cannot be read."""
    digest = hashlib.sha256()
    try:
        for path in unit.paths:
            with open_regular(Path(path)) as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            digest.update(b"\0")
    except OSError:
        return None
    return digest.digest()


def _check_shared_calls(
    reattributed: Sequence[tuple[str, str, ManifestEntry]],
    attached: Mapping[RowKey, Sequence[CaptureFiles]],
    orphans: Mapping[str, tuple[list[CaptureFiles], list[str]]],
    sink: DiagnosticSink,
) -> None:
    """Report each capture file the manifest gives one rollout that shares ``model_call_id`` values
    with a capture file the rollout its name names keeps (``manifest_capture_shared``, a warning).

    ``reattributed`` is :attr:`Inputs.reattributed`: ``(capture file, rollout id its name names,
    manifest entry)``. The file is read for the manifest's rollout only, but a copy of its calls in
    another store (a judge server's ``<rollout_id>.capture.jsonl``) stays with the named rollout, so
    those calls are in both trajectories: the warning names the ids (up to three) and both files.
    Only these files are read here, and only when the named rollout keeps a capture file.
    """
    named_ids = {named for _, named, _ in reattributed}
    kept_by_id: dict[str, list[str]] = {}
    for key, files in attached.items():  # once, not once per file the manifest gives away
        if key[0] in named_ids:
            kept_by_id.setdefault(key[0], []).extend(c for f in files if (c := f.capture(key[0])))
    for path, named, entry in reattributed:
        kept = kept_by_id.get(named, []) + [c for f in orphans.get(named, ([], []))[0] if (c := f.capture(named))]
        if not kept:
            continue
        mine = _call_ids(path)
        for other in kept:
            shared = sorted(mine & _call_ids(other))
            if not shared:
                continue
            more = len(shared) - 3
            ids = ", ".join(shared[:3]) + (f" and {more} more" if more > 0 else "")
            where = f" ({entry.where[0]}:{entry.where[1]})" if entry.where else ""
            message = (
                f"the manifest{where} gives this file to rollout {entry.rollout_id}, but {other}, which rollout "
                f"{named} keeps by its name, also holds model_call_id {ids}: those calls are in both trajectories"
            )
            sink.add(Diagnostic("warning", "manifest_capture_shared", message, path=path))


def _call_ids(path: str) -> set[str]:
    """The ``model_call_id`` values of a capture file's lines (lines that are not JSON objects, and a
    file that cannot be read, give none: reading it for its rollout reports them)."""
    return {line["model_call_id"] for line in quiet_objects(path) if isinstance(line.get("model_call_id"), str)}


def _check_manifest_runs(manifest: Sequence[ManifestEntry], runs: set[str], sink: DiagnosticSink) -> None:
    for entry in manifest:
        if entry.run is not None and not runs_named(entry.run, runs):
            message = f"run {entry.run!r} names no rollouts file of the build; the row's artifacts attach by id alone"
            where, line = entry.where or (str(entry.path), None)
            sink.add(Diagnostic("warning", "manifest_run_unknown", message, path=where, line=line))


def _row_index(rows: list[_Row], sink: DiagnosticSink) -> RowIndex:
    """Runs per rollout id, rows per recorded run id, and the (rollout, run) keys several rows share."""
    index = RowIndex({}, {}, set())
    seen: dict[RowKey, _Row] = {}
    alone: dict[str, tuple[str]] = {}
    for row in rows:
        key = (row.identity.rollout_id, row.file.run)
        if key in seen and row.identity.derived:
            index.repeated.add(key)
            message = f"rollout id {key[0]} also on line {seen[key].line}: artifacts attach to neither row"
            sink.add(Diagnostic("warning", "rollout_id_repeated", message, path=str(row.file.path), line=row.line))
        seen.setdefault(key, row)
        runs = index.runs_by_id.get(row.identity.rollout_id, ())
        if not runs:  # most rollout ids are in one run: one tuple per run, shared by its ids
            index.runs_by_id[row.identity.rollout_id] = alone.setdefault(row.file.run, (row.file.run,))
        elif row.file.run not in runs:
            index.runs_by_id[row.identity.rollout_id] = (*runs, row.file.run)
        for run_id in row.run_ids:
            index.rows_by_run_id.setdefault(run_id, set()).add(key)
    return index


def _unit_named(inputs: Inputs, units: Sequence[NativeUnit]) -> set[str]:
    return {inputs.native_named.get(path, path) for unit in units for path in unit.paths}


def _attribute_units(
    inputs: Inputs,
    index: RowIndex,
    manifest: list[ManifestEntry],
    captured: CaptureIds,
    stats: PlanStats,
    sink: DiagnosticSink,
) -> dict[tuple[str, ...], Sequence]:
    """Units per target: ``("row", rollout, run)`` (a tuple, the slot's), ``("capture", rollout)``, or own
    slots under ``("own",)``.

    Takes each reader's files out of ``inputs.native`` (which ``Inputs.planned`` empties anyway).
    """
    targets: dict[tuple[str, ...], Sequence] = {}
    shared_hints: dict[tuple[str, str], tuple[str, str]] = {}
    for name in sorted(inputs.native):
        files = inputs.native.pop(name)  # a reader's files are dropped once it has indexed them, not kept for the next
        files.sort(key=path_order)  # as text, in the order their Path objects would sort

        def placed(unit: NativeUnit) -> tuple[NativeUnit, Attribution]:
            """Where ``unit`` goes, and the unit without its response ids and folder names (attributed:
            kept lean per slot), its hints shared with other units' equal ones (an OpenClaw tree's
            mode and root key are most units' alike), decided as the reader makes it (reports
            nothing: ``index_units``)."""
            where = attribute(unit, index, manifest, captured, _tool_sets)
            if where.row is not None and where.row in index.repeated:
                gap = ObservationGap(code="rollout_attribution_ambiguous", detail=f"rows={where.row[0]}")
                where = Attribution(gap=gap, reason=f"rollout {where.row[0]} is on several rows of {where.row[1]}")
            hints = tuple(shared_hints.setdefault(hint, hint) for hint in unit.hints)
            return replace(unit, response_ids=(), folders=(), scan_ids=None, hints=hints), where

        decided = index_units(name, files, sink, placed)
        forget_regular(files)
        files.clear()  # the units keep the paths as text
        for unit, where in decided:
            if where.row is not None:
                key = ("row", *where.row)
                targets[key] = (*targets.get(key, ()), unit)  # the slot's own tuple: most rows have one unit
            elif where.capture_id is not None:
                targets.setdefault(("capture", where.capture_id), []).append(unit)
            else:
                targets.setdefault(("own",), []).append(_own_slot(inputs, unit, where, stats, sink))
    return targets


def _tool_sets(unit: NativeUnit) -> list[frozenset[str]]:
    """The exact tool-call id sets of a unit's model calls (loads the unit; diagnostics come at build)."""
    observations = load_unit(unit, DiagnosticSink())
    calls = observations.calls if observations is not None else []
    return [call.tool_call_ids for call in calls if call.tool_call_ids]


def _own_slot(inputs: Inputs, unit: NativeUnit, where: Attribution, stats: PlanStats, sink: DiagnosticSink) -> Slot:
    reason = where.reason or "no manifest entry, rollout folder, matching response id or run id"
    stats.unattributed.append({"session": unit.key, "paths": list(unit.paths), "reason": reason})
    code = (
        "session_ambiguous"
        if where.gap and where.gap.code == "rollout_attribution_ambiguous"
        else "session_unattributed"
    )
    sink.add(
        Diagnostic(
            "warning" if code == "session_ambiguous" else "info",
            code,
            f"session {unit.key}: {reason}",
            path=unit.anchor or unit.paths[0],
        )
    )
    gap = where.gap or ObservationGap(code="rollout_record_unavailable", detail=f"session:{unit.key}")
    named = tuple(sorted(_unit_named(inputs, [unit])))
    return Slot(Identity("unknown", unit.key), None, None, 0, 0, 0, (), (gap,), named, (unit,))


def _orphan(
    inputs: Inputs,
    index: RowIndex,
    rollout: str,
    files: list[CaptureFiles],
    runs: list[str],
    units: list[NativeUnit],
    stats: PlanStats,
    sink: DiagnosticSink,
) -> Slot:
    names = [f.capture(rollout) or f.marker(rollout) for f in files]
    if runs:
        stats.ambiguous_captures.extend(names)
        repeated = len(set(runs)) == 1
        detail = f"rows={index.labels[runs[0]]}" if repeated else "runs=" + index.run_labels(runs)
        gap = ObservationGap(code="rollout_attribution_ambiguous", detail=detail)
        where = f"several rows of {runs[0]}" if repeated else f"several runs ({', '.join(runs)})"
        message = f"rollout {rollout} is on {where}; capture attached to none"
        sink.add(Diagnostic("warning", "capture_ambiguous", message, path=names[0]))
    else:
        stats.orphan_captures.extend(names)
        detail = "capture:" + ",".join(sorted(name.rsplit("/", 1)[-1] for name in names))
        gap = ObservationGap(code="rollout_record_unavailable", detail=detail)
    named = tuple(sorted({*(inputs.named_for(rollout, f) for f in files), *_unit_named(inputs, units)}))
    identity_ = Identity(task_from_rollout_id(rollout), rollout)
    return Slot(identity_, None, None, 0, 0, 0, tuple(files), (gap,), named, tuple(units))
