"""``ng-traj validate FILE...``: check trajectory files against the ng_trajectory 1.0 contract."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer

from ng_traj.cli.common import EXIT_DATA, EXIT_OK, PATH_CHECKS, DebugOption, MaxLineBytesOption, guarded
from ng_traj.cli.output import (
    QuietOption,
    Reporter,
    VerboseOption,
    choose_format,
    json_alias_option,
    output_format_option,
    verbosity,
)
from ng_traj.diagnostics import DiagnosticSink, RunError, plural, safe_text
from ng_traj.io.compression import is_compressed
from ng_traj.io.files import check_inputs
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES
from ng_traj.writers.dataset_paths import refuse_parquet_file


@dataclass
class Tally:
    """Counts for the summary."""

    files: int = 0
    records: int = 0
    invalid: int = 0
    skipped: int = 0
    """Everything skipped: JSONL lines, dataset trajectories and broken datasets (``lines_skipped``)."""
    dataset_skipped: int = 0
    """Of those, the trajectories of datasets whose rows could not be read."""
    datasets_stopped: int = 0
    """Of those, the datasets not read to their end (a missing table or column)."""
    with_0_7_keys: int = 0
    nothing_validated: list[str] = field(default_factory=list)


def command(
    files: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE",
            help="ng_trajectory JSONL files, rollout JSONL files, Parquet dataset directories, or folders of them.",
            **PATH_CHECKS,
        ),
    ],
    output_format: Annotated[str | None, output_format_option()] = None,
    quiet: QuietOption = False,
    verbose: VerboseOption = False,
    json_output: Annotated[bool, json_alias_option()] = False,
    max_line_bytes: MaxLineBytesOption = DEFAULT_MAX_LINE_BYTES,
    debug: DebugOption = False,
) -> None:
    """Check trajectory files: the 1.0 contract, its invariants and cross-references.

    Reads ng_trajectory JSONL, rollout rows carrying ng_trajectory (and ng_agent_observations), or
    Parquet datasets written by ng-traj (rows joined back into records; the line is the record's position).
    A folder that is no dataset is walked as build, show, export and matrix walk one: its JSONL and
    JSON files and the datasets inside it, in sorted order (other files are skipped, with an info).
    Prints one line per problem, `path:line: severity[code] pointer: message`, then a summary.
    Files are streamed; nothing is written. Exit 0 when every record is valid (warnings allowed),
    1 when any record or line is invalid or a named file holds no trajectory to check (empty, or
    rollout rows without ng_trajectory), 2 for usage errors.
    """
    guarded(
        debug, lambda: _run(files, choose_format(output_format, json_output), verbosity(quiet, verbose), max_line_bytes)
    )


def _run(files: list[Path], output_format: str, level: int, max_line_bytes: int) -> int:
    check_inputs(files)
    for path in files:
        if path.is_dir():
            _check_dataset_folder(path)
        refuse_parquet_file(path)
    from ng_traj.validate import Repeats, validate_dataset, validate_file

    tally = Tally()
    repeats = Repeats()  # across the JSONL files named; a dataset is compared within itself
    reporter = Reporter("validate", output_format, level)
    sink = reporter.sink
    files = _named_once(_found(files, sink, tally))
    with reporter.feedback() as feedback:
        for path in files:
            tally.files += 1
            if path.is_dir():
                feedback.step(f"{path.name} (dataset)")
                result = validate_dataset(path, sink)
            else:
                update = feedback.step(path.name, None if is_compressed(path) else _size(path), in_bytes=True)
                result = validate_file(path, sink, max_line_bytes=max_line_bytes, on_progress=update, repeats=repeats)
            tally.records += result.records
            tally.invalid += result.invalid
            tally.skipped += result.skipped
            if path.is_dir():
                tally.dataset_skipped += result.skipped - result.stopped
                tally.datasets_stopped += result.stopped
            tally.with_0_7_keys += result.with_0_7_keys
            if not (result.records or result.unreadable or result.stopped):  # else its error says why
                tally.nothing_validated.append(str(path))
        feedback.finish_steps()
    code = EXIT_DATA if sink.errors or tally.nothing_validated else EXIT_OK
    _summary(tally, reporter, code)
    return code


def _found(named: list[Path], sink: DiagnosticSink, tally: Tally) -> list[Path]:
    """The files and datasets the named paths stand for: a file or dataset folder as itself; any other
    folder walked as ``build``, ``show``, ``export`` and ``matrix`` walk one (``records.input_files``:
    sorted, hidden entries skipped, datasets inside kept whole), with their skip rules: a file found
    there is validated only when named as JSON Lines or JSON (else one ``input_unclaimed`` info), and
    not when ng-traj wrote it as an export or report (one ``input_unsupported`` info). A folder with
    nothing to validate is listed in ``tally.nothing_validated`` (exit 1).
    """
    from ng_traj.diagnostics import Diagnostic
    from ng_traj.records import UNCLAIMED, input_files
    from ng_traj.sources.detect import own_output
    from ng_traj.sources.sniff import json_named
    from ng_traj.writers.dataset_paths import MISSING_MANIFEST, is_dataset, is_old_layout, without_manifest

    found: list[Path] = []
    for path in named:
        if not path.is_dir() or is_dataset(path) or is_old_layout(path):
            found.append(path)
            continue
        if without_manifest(path):  # its tables are not read without it: one error says why
            sink.add(Diagnostic("error", "dataset_invalid", MISSING_MANIFEST, path=str(path)))
            continue
        before = len(found)
        for file in input_files([path], sink=sink):
            own = None if file.is_dir() else own_output(file)
            if own is not None:
                sink.add(Diagnostic("info", "input_unsupported", f"recognised as {own}; skipped", path=str(file)))
            elif file.is_dir() or json_named(file):
                found.append(file)
            else:
                sink.add(Diagnostic("info", "input_unclaimed", UNCLAIMED, path=str(file)))
        if len(found) == before:
            tally.nothing_validated.append(str(path))
    return found


def _size(path: Path) -> int | None:
    """The file's size in bytes for the progress bar; ``None`` when it cannot be looked at (reading
    it reports why: ``unreadable_file``)."""
    try:
        return path.stat().st_size
    except OSError:
        return None


def _named_once(files: list[Path]) -> list[Path]:
    """``files`` with each file or dataset kept at its first naming: a path that names one already
    named (itself again, ``./x.jsonl``, a symlink to it, a hard link of it: the same ``(st_dev, st_ino)``)
    is left out, as ``build``, ``matrix``, ``report`` and ``export`` read a path named twice once.
    Read twice, its every error was reported twice, and its records were not ``record_repeated``
    (they were compared with themselves, at the same place)."""
    seen: set[tuple[int, int]] = set()
    kept = []
    for path in files:
        try:
            info = path.stat()
        except OSError:  # a dangling or looping link found in a folder: reading it reports why
            kept.append(path)
            continue
        identity = (info.st_dev, info.st_ino)
        if identity not in seen:
            seen.add(identity)
            kept.append(path)
    return kept


def _summary(tally: Tally, reporter: Reporter, code: int) -> None:
    from ng_traj.contract.revisions import revision_needed

    data = {
        "files": tally.files,
        "records": tally.records,
        "valid": tally.records - tally.invalid,
        "invalid": tally.invalid,
        "lines_skipped": tally.skipped,
        "nothing_validated": [safe_text(path) for path in tally.nothing_validated],
        "revision": revision_needed(tally.with_0_7_keys, tally.records),  # no record: no revision claimed
    }
    sink = reporter.sink
    counts = (
        f"{plural(tally.files, 'file')}, {plural(tally.records, 'record')}, {tally.invalid} invalid, "
        f"{_skipped(tally)}; {plural(sink.errors, 'error')}, {plural(sink.warnings, 'warning')}"
        + (f"; {data['revision']}" if tally.records else "")
    )
    verdict = "invalid" if sink.errors else "nothing validated" if tally.nothing_validated else "valid"
    problems = [(path, "nothing was validated: it holds no trajectory record") for path in tally.nothing_validated]
    colour = "green" if verdict == "valid" else "red"
    text = lambda console: console.print(f"[bold {colour}]{verdict}[/]: {counts}")  # noqa: E731
    reporter.summary(data, code, f"{verdict}: {counts}", text, problems)


def _skipped(tally: Tally) -> str:
    """What was skipped, each in its own unit: JSONL lines, and (datasets have no lines) the
    trajectories of datasets whose rows could not be read and the datasets not read to their end;
    ``0 lines skipped`` when nothing was."""
    lines = tally.skipped - tally.dataset_skipped - tally.datasets_stopped
    parts = [f"{plural(lines, 'line')} skipped"] if lines or tally.skipped == 0 else []
    if tally.dataset_skipped:
        parts.append(f"{plural(tally.dataset_skipped, 'dataset trajectory', 'dataset trajectories')} skipped")
    if tally.datasets_stopped:
        parts.append(f"{plural(tally.datasets_stopped, 'dataset')} not read to the end")
    return ", ".join(parts)


def _check_dataset_folder(path: Path) -> None:
    """Refuse a table folder of a dataset (any other folder is a dataset, or is walked: :func:`_found`).

    Raises:
        RunError: ``path`` is a table folder of a dataset.
    """
    from ng_traj.writers.dataset_paths import table_folder_of

    dataset = table_folder_of(path)
    if dataset is not None:
        raise RunError(f"{path} is a table folder of a Parquet dataset: name the dataset folder {dataset}")
