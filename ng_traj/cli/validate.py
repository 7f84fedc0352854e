"""``ng-traj validate FILE...``: check trajectory files against the ng_trajectory 1.0 contract."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import orjson
import typer

from ng_traj.cli.common import (
    DEBUG_HELP,
    EXIT_DATA,
    EXIT_OK,
    JSON_HELP,
    byte_progress,
    diagnostic_printer,
    guarded,
    refuse_parquet_file,
    stderr_console,
)
from ng_traj.diagnostics import Diagnostic, DiagnosticSink, RunError
from ng_traj.io.compression import is_compressed
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES


@dataclass
class Tally:
    """Counts for the summary line."""

    files: int = 0
    records: int = 0
    invalid: int = 0
    skipped: int = 0


def command(
    files: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE", help="ng_trajectory JSONL files, rollout JSONL files, or Parquet dataset directories."
        ),
    ],
    json_output: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
    max_line_bytes: Annotated[
        int, typer.Option(help="Skip (and report) lines longer than this many bytes.", min=1)
    ] = DEFAULT_MAX_LINE_BYTES,
    debug: Annotated[bool, typer.Option("--debug", help=DEBUG_HELP)] = False,
) -> None:
    """Check trajectory files: the 1.0 contract, its invariants and cross-references.

    Reads ng_trajectory JSONL, rollout rows carrying ng_trajectory (and ng_agent_observations), or
    Parquet datasets written by ng-traj (rows joined back into records; the line is the record's position).
    Prints one line per problem, `path:line: severity[code] pointer: message`, then a summary.
    Files are streamed; nothing is written. Exit 0 when every record is valid (warnings allowed),
    1 when any record or line is invalid, 2 for usage errors.
    """
    guarded(debug, lambda: _run(files, json_output, max_line_bytes))


def _run(files: list[Path], json_output: bool, max_line_bytes: int) -> int:
    for path in files:
        if not path.exists():
            raise RunError(f"{path}: no such file")
        if path.is_dir() and not (path / "trajectories.parquet").is_file():
            raise RunError(f"{path} is a directory but not an ng-traj Parquet dataset; name the JSONL files to check")
        refuse_parquet_file(path)
    from ng_traj.validate import validate_dataset, validate_file

    tally = Tally()
    with byte_progress(enabled=not json_output) as progress:
        emit = _json_emitter() if json_output else diagnostic_printer(progress.console)
        sink = DiagnosticSink(emit)
        for path in files:
            tally.files += 1
            if path.is_dir():
                result = validate_dataset(path, sink)
            else:
                progress.start(path.name, None if is_compressed(path) else path.stat().st_size)
                result = validate_file(path, sink, max_line_bytes=max_line_bytes, on_progress=progress.advance_to)
            tally.records += result.records
            tally.invalid += result.invalid
            tally.skipped += result.skipped
    _summary(tally, sink, json_output)
    return EXIT_DATA if sink.errors else EXIT_OK


def _json_emitter():
    write = sys.stdout.buffer.write

    def emit(diagnostic: Diagnostic) -> None:
        write(orjson.dumps({"type": "diagnostic", **diagnostic.to_json()}) + b"\n")

    return emit


def _summary(tally: Tally, sink: DiagnosticSink, json_output: bool) -> None:
    summary = {
        "type": "summary",
        "files": tally.files,
        "records": tally.records,
        "valid": tally.records - tally.invalid,
        "invalid": tally.invalid,
        "lines_skipped": tally.skipped,
        "errors": sink.errors,
        "warnings": sink.warnings,
        "by_code": dict(sorted(sink.by_code.items())),
    }
    if json_output:
        sys.stdout.buffer.write(orjson.dumps(summary) + b"\n")
        return
    verdict = "[bold red]invalid[/]" if sink.errors else "[bold green]valid[/]"
    stderr_console().print(
        f"{verdict}: {tally.files} file(s), {tally.records} record(s), {tally.invalid} invalid, "
        f"{tally.skipped} line(s) skipped; {sink.errors} error(s), {sink.warnings} warning(s)"
    )
