"""``ng-traj matrix INPUT...``: C1–C7 per agent (or producer), computed from the records."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ng_traj.cli.common import (
    DEBUG_HELP,
    EXIT_DATA,
    EXIT_OK,
    diagnostic_printer,
    guarded,
    refuse_parquet_file,
    stderr_console,
)
from ng_traj.diagnostics import DiagnosticSink, RunError
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES

FORMATS = ("table", "markdown", "json", "csv")
GROUPINGS = ("agent", "producer")


def command(
    inputs: Annotated[
        list[Path],
        typer.Argument(
            metavar="INPUT",
            help="ng_trajectory JSONL, rollout JSONL carrying ng_trajectory, or raw inputs (built first).",
            show_default=False,
        ),
    ],
    by: Annotated[str, typer.Option("--by", help="Group by agent (the row's agent_ref) or producer.")] = "agent",
    reference: Annotated[
        bool, typer.Option("--reference", help="Show the documented upstream row beside each group; mark differences.")
    ] = False,
    output_format: Annotated[str, typer.Option("--format", help="table, markdown, json or csv.")] = "table",
    role: Annotated[
        list[str] | None,
        typer.Option("--role", help="NAME=ROLE for model servers, used when raw inputs are built.", show_default=False),
    ] = None,
    max_line_bytes: Annotated[
        int, typer.Option(help="Skip (and report) input lines longer than this many bytes.", min=1)
    ] = DEFAULT_MAX_LINE_BYTES,
    debug: Annotated[bool, typer.Option("--debug", help=DEBUG_HELP)] = False,
) -> None:
    """Compute the C1–C7 capability matrix from records: V / O / X with the counts behind each cell.

    Each record is evaluated with the rules in the README ("Matrix rules"); a group's cell is V when
    every record is V, X when every record is X, else O, shown as `O 37/50` (records that are V /
    records the criterion applies to), with the main reason (a gap code or a missing field) of every
    cell that is not V. The matrix goes to standard output, diagnostics and a summary line to
    standard error. Exit 0 when records were evaluated, 1 when none was, 2 for usage errors.
    """
    guarded(debug, lambda: run(inputs, by, reference, output_format, tuple(role or ()), max_line_bytes))


def run(
    inputs: list[Path], by: str, with_reference: bool, output_format: str, role: tuple[str, ...], max_line_bytes: int
) -> int:
    """Evaluate, render, and return the exit code."""
    from ng_traj.cli import matrix_render as render
    from ng_traj.matrix import tabulate
    from ng_traj.matrix_inputs import all_records
    from ng_traj.matrix_report import load_reference, report
    from ng_traj.roles import parse_roles

    if output_format not in FORMATS:
        raise RunError(f"--format {output_format!r}: choose from {', '.join(FORMATS)}")
    if by not in GROUPINGS:
        raise RunError(f"--by {by!r}: choose from {', '.join(GROUPINGS)}")
    try:
        roles = parse_roles(role)
    except ValueError as exc:
        raise RunError(str(exc)) from exc
    for path in inputs:
        _refuse_parquet(path)
    console = stderr_console()
    sink = DiagnosticSink(diagnostic_printer(console))
    documented = load_reference()
    records = all_records(inputs, sink, roles=roles, max_line_bytes=max_line_bytes)
    groups = tabulate(((item.record, item.context) for item in records), by, documented.concurrent)
    data = report(groups, by, documented if with_reference else None)
    _write(data, output_format, render)
    console.print(
        f"evaluated {data['records']} record(s) in {len(data['groups'])} group(s); "
        f"{sink.errors} error(s), {sink.warnings} warning(s)",
        markup=False,
    )
    return EXIT_OK if data["records"] else EXIT_DATA


def _write(data: dict, output_format: str, render) -> None:
    if output_format == "table":
        from rich.console import Console

        stdout = Console(highlight=False, emoji=False)
        if not stdout.is_terminal:
            stdout = Console(highlight=False, emoji=False, width=200)
        render.table(data, stdout)
        return
    text = {"markdown": render.markdown, "csv": render.csv_text}.get(output_format)
    sys.stdout.buffer.write(text(data).encode() if text is not None else render.json_bytes(data))
    sys.stdout.buffer.flush()


def _refuse_parquet(path: Path) -> None:
    """Stop with a usage error naming the conversion when ``path`` is a Parquet dataset or table.

    Raises:
        RunError: ``path`` is a dataset folder or a Parquet file.
    """
    from ng_traj.writers.dataset_paths import OLD_LAYOUT, is_dataset, is_old_layout

    if is_old_layout(path):
        raise RunError(f"{path} {OLD_LAYOUT}")
    if is_dataset(path):
        raise RunError(f"{path} is a Parquet dataset; matrix reads JSONL: ng-traj convert {path} -o FILE.jsonl first")
    refuse_parquet_file(path)
