"""``ng-traj convert IN -o OUT``: trajectory JSONL to a Parquet dataset, and back."""

from __future__ import annotations

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
from ng_traj.io.atomic import STDOUT, atomic_file
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES


def command(
    source: Annotated[
        Path,
        typer.Argument(
            metavar="SOURCE",
            help="Trajectory JSONL (or --attach rollout rows) to convert to Parquet, or a Parquet dataset directory "
            "to convert to JSONL.",
            show_default=False,
        ),
    ],
    output: Annotated[
        str,
        typer.Option(
            "-o",
            "--output",
            help="The dataset directory, or the JSONL file ('-' for standard output).",
            show_default=False,
        ),
    ],
    max_line_bytes: Annotated[
        int, typer.Option(help="Skip (and report) JSONL lines longer than this many bytes.", min=1)
    ] = DEFAULT_MAX_LINE_BYTES,
    debug: Annotated[bool, typer.Option("--debug", help=DEBUG_HELP)] = False,
) -> None:
    """Convert between trajectory JSONL and a Parquet dataset (the direction follows the input).

    JSONL -> Parquet writes one folder per table (trajectories, invocations, conversation_items,
    turns, model_calls, tool_calls, gaps, compactions) and a manifest, ng_traj.json; the run
    column names the converted file. Parquet -> JSONL writes the trajectories back, byte for byte
    as ng-traj build writes them. Outputs are written atomically. Records that break the contract
    are reported and skipped: exit 1; exit 2 for usage errors.
    """
    guarded(debug, lambda: _run(source, output, max_line_bytes))


def _run(source: Path, output: str, max_line_bytes: int) -> int:
    if not source.exists():
        raise RunError(f"{source}: no such file or directory")
    refuse_parquet_file(source)
    from ng_traj.writers.dataset_paths import OLD_LAYOUT, is_dataset, is_old_layout, table_folder_of
    from ng_traj.writers.parquet_convert import dataset_to_jsonl, jsonl_to_dataset
    from ng_traj.writers.parquet_layout import DatasetError

    console = stderr_console()
    sink = DiagnosticSink(diagnostic_printer(console))
    if source.is_dir():
        if is_old_layout(source):
            raise RunError(f"{source} {OLD_LAYOUT}")
        if table_folder_of(source) is not None:
            raise RunError(f"{source} is a table folder of a Parquet dataset: name the dataset folder {source.parent}")
        if not is_dataset(source):
            raise RunError(f"{source} is a directory but not an ng-traj Parquet dataset (no ng_traj.json)")
        if output != STDOUT and output.endswith(".parquet"):
            raise RunError(f"{source} is a dataset already: name a JSONL output")
        try:
            with atomic_file(output) as handle:
                counts = dataset_to_jsonl(source, handle.write, sink)
        except DatasetError as exc:
            raise RunError(str(exc)) from exc
    else:
        if output == STDOUT:
            raise RunError("a Parquet dataset is a directory: name it with -o")
        if output.endswith(".jsonl"):
            raise RunError(
                f"{source} is JSONL and converts to a Parquet dataset (a directory): name it like out.parquet"
            )
        counts = jsonl_to_dataset(source, output, sink, max_line_bytes=max_line_bytes)
    failed = counts.skipped or sink.errors
    console.print(
        f"converted {counts.written} trajectories: {source} -> {output}; {counts.skipped} record(s) skipped, "
        f"{sink.errors} error(s), {sink.warnings} warning(s)",
        markup=False,
    )
    return EXIT_DATA if failed else EXIT_OK
