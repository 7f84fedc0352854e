"""``ng-traj convert IN -o OUT``: trajectory JSONL to a Parquet dataset, and back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ng_traj.cli.common import (
    EXIT_DATA,
    EXIT_OK,
    PATH_CHECKS,
    RELEASE_HELP,
    DebugOption,
    MaxLineBytesOption,
    guarded,
    gym_release,
    left_alone,
    refuse_compressed_name,
    refuse_folder_name,
)
from ng_traj.cli.output import (
    QuietOption,
    Reporter,
    VerboseOption,
    choose_format,
    output_format_option,
    verbosity,
)
from ng_traj.diagnostics import DiagnosticSink, RunError, lines_skipped, plural, printable, safe_text
from ng_traj.io.atomic import STDOUT, atomic_file
from ng_traj.io.files import check_inputs
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES
from ng_traj.writers.dataset_paths import refuse_parquet_file

if TYPE_CHECKING:
    from ng_traj.contract.revisions import Release
    from ng_traj.writers.parquet_convert import Converted


def command(
    source: Annotated[
        Path,
        typer.Argument(
            metavar="SOURCE",
            help="Trajectory JSONL (or --attach rollout rows) to convert to Parquet, or a Parquet dataset directory "
            "to convert to JSONL.",
            show_default=False,
            **PATH_CHECKS,
        ),
    ],
    output: Annotated[
        str,
        typer.Option(
            "-o",
            "--output",
            metavar="FILE",
            help="The dataset directory, or the JSONL file ('-' for standard output).",
            show_default=False,
        ),
    ],
    max_line_bytes: MaxLineBytesOption = DEFAULT_MAX_LINE_BYTES,
    output_format: Annotated[str, output_format_option()] = "text",
    quiet: QuietOption = False,
    verbose: VerboseOption = False,
    gym_release_: Annotated[
        str, typer.Option("--gym-release", metavar="RELEASE", help=f"{RELEASE_HELP} Parquet -> JSONL only.")
    ] = "0.7",
    debug: DebugOption = False,
) -> None:
    """Convert between trajectory JSONL and a Parquet dataset (the direction follows the input).

    JSONL -> Parquet writes one folder per table (trajectories, invocations, conversation_items,
    turns, model_calls, tool_calls, gaps, compactions) and a manifest, ng_traj.json; the run
    column names the converted file. Parquet -> JSONL writes the trajectories back, byte for byte
    as ng-traj build writes them, in the contract revision --gym-release names (pre-0.7 reports
    values it leaves out). Outputs are written atomically. Records that break the contract are
    reported and skipped: exit 1; exit 2 for usage errors. Diagnostics and a summary follow
    (--output-format: text on standard error, json or github on standard output, or on standard
    error with -o -).
    """
    guarded(
        debug,
        lambda: _run(
            source, output, max_line_bytes, choose_format(output_format), verbosity(quiet, verbose), gym_release_
        ),
    )


def _run(source: Path, output: str, max_line_bytes: int, output_format: str, level: int, requested: str) -> int:
    check_inputs([source])
    refuse_parquet_file(source)
    release = gym_release(requested, "jsonl" if source.is_dir() else "parquet")
    if source.is_dir() and output != STDOUT:
        refuse_folder_name(output, "out.jsonl")
        refuse_compressed_name(output)
    if not source.is_dir():
        if output == STDOUT:
            raise RunError("a Parquet dataset is a directory: name it with -o")
        if output.endswith(".jsonl"):
            raise RunError(
                f"{source} is JSONL and converts to a Parquet dataset (a directory): name it like out.parquet"
            )
    _refuse_source_as_output(source, output)
    from ng_traj.writers.parquet_convert import jsonl_to_dataset

    reporter = Reporter("convert", output_format, level, results_on_stdout=output == STDOUT)
    sink = reporter.sink
    with reporter.feedback() as feedback:
        if source.is_dir():
            counts = _to_jsonl(source, output, sink, feedback.step(f"{source.name} -> JSONL (trajectories)"), release)
        else:
            update = feedback.step(f"{source.name} -> Parquet", source.stat().st_size, in_bytes=True)
            counts = jsonl_to_dataset(source, output, sink, max_line_bytes=max_line_bytes, on_progress=update)
        feedback.finish_steps()
    skipped_lines = lines_skipped(sink)
    code = EXIT_DATA if counts.skipped or skipped_lines or sink.errors or not counts.written else EXIT_OK
    kept = "" if counts.written or source.is_dir() else f" (nothing written: {left_alone(output)})"
    lines = "" if source.is_dir() else f"{plural(skipped_lines, 'line')} skipped, "  # a dataset has no lines
    line = (
        f"converted {plural(counts.written, 'trajectory', 'trajectories')}: {source} -> {output}{kept}; "
        f"{lines}{plural(counts.skipped, 'record')} skipped, {plural(sink.errors, 'error')}, "
        f"{plural(sink.warnings, 'warning')}"
    )
    data = {
        "source": safe_text(source),
        "output": safe_text(output),
        "written": counts.written,
        "skipped": counts.skipped,
        "lines_skipped": skipped_lines,
    }
    reporter.summary(data, code, line, lambda console: console.print(printable(line), markup=False))
    return code


def _refuse_source_as_output(source: Path, output: str) -> None:
    """Stop before anything is read or written when ``output`` is ``source`` (by any path) or a
    folder holding it (``records.refuse_input_as_output``); a folder that is no dataset is refused
    later, for what it is.

    Raises:
        RunError: As above.
    """
    from ng_traj.records import refuse_input_as_output
    from ng_traj.writers.dataset_paths import is_dataset

    if output != STDOUT and (not source.is_dir() or is_dataset(source)):
        refuse_input_as_output([source], Path(output))


def _to_jsonl(
    source: Path, output: str, sink: DiagnosticSink, advance: Callable[[], None], release: Release
) -> Converted:
    """A dataset back to JSONL in the contract revision ``release`` (``advance`` called per trajectory written).

    Raises:
        RunError: ``source`` is no dataset, ``output`` names a dataset, or a table or column is missing.
    """
    from ng_traj.writers.dataset_paths import OLD_LAYOUT, is_dataset, is_old_layout, table_folder_of
    from ng_traj.writers.parquet_convert import dataset_to_jsonl
    from ng_traj.writers.parquet_layout import DatasetError

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
            return dataset_to_jsonl(source, handle.write, sink, on_record=advance, release=release)
    except DatasetError as exc:
        raise RunError(str(exc)) from exc
