"""``ng-traj matrix INPUT...``: C1–C7 per agent (or producer), computed from the records."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ng_traj.cli.common import (
    EXIT_DATA,
    EXIT_OK,
    PATH_CHECKS,
    DebugOption,
    MaxLineBytesOption,
    guarded,
    stdout_console,
    stdout_errors,
)
from ng_traj.cli.output import (
    QuietOption,
    Reporter,
    VerboseOption,
    choose_format,
    output_format_option,
    verbosity,
)
from ng_traj.diagnostics import RunError, plural, printable
from ng_traj.io.atomic import write_all
from ng_traj.io.files import check_inputs
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES
from ng_traj.writers.dataset_paths import refuse_parquet_file

FORMATS = ("table", "markdown", "json", "csv")
MACHINE_FORMATS = ("json", "csv")
"""Formats written even over no record (an empty document a program can read); a table or Markdown
of no record is not written at all."""
GROUPINGS = ("agent", "producer")
if TYPE_CHECKING:
    from ng_traj.matrix_inputs import MatrixRecord


def command(
    inputs: Annotated[
        list[Path],
        typer.Argument(
            metavar="INPUT",
            help="ng_trajectory JSONL, rollout JSONL carrying ng_trajectory, a Parquet dataset, or raw inputs (built first).",
            show_default=False,
            **PATH_CHECKS,
        ),
    ],
    by: Annotated[
        str, typer.Option("--by", metavar="FIELD", help="Group by agent (the row's agent_ref) or producer.")
    ] = "agent",
    reference: Annotated[
        bool, typer.Option("--reference", help="Show the documented upstream row beside each group; mark differences.")
    ] = False,
    table_format: Annotated[
        str,
        typer.Option(
            "--format",
            metavar="FORMAT",
            help="How the matrix itself is written to standard output: table, markdown, json or csv "
            "(--output-format is how diagnostics and the summary are written).",
        ),
    ] = "table",
    role: Annotated[
        list[str] | None,
        typer.Option(
            "--role",
            metavar="NAME=ROLE",
            help="NAME=ROLE for model servers, used when raw inputs are built.",
            show_default=False,
        ),
    ] = None,
    max_line_bytes: MaxLineBytesOption = DEFAULT_MAX_LINE_BYTES,
    output_format: Annotated[str, output_format_option()] = "text",
    quiet: QuietOption = False,
    verbose: VerboseOption = False,
    debug: DebugOption = False,
) -> None:
    """Compute the C1–C7 capability matrix from records: V / O / X with the counts behind each cell.

    Each record is evaluated with the rules in docs/matrix.md; a group's cell is V when
    every record is V, X when every record is X, else O, shown as `O 37/50` (records that are V /
    records the criterion applies to), with the main reason (a gap code or a missing field) of every
    cell that is not V. The matrix goes to standard output (--format), diagnostics and a summary
    to standard error (--output-format: text, json or github). With no record there is nothing to
    measure: the summary says so, a table or Markdown is not written (json and csv give an empty
    document). Exit 0 when records were evaluated, 1 when none was, 2 for usage errors.
    """
    guarded(
        debug,
        lambda: run(
            inputs,
            by,
            reference,
            table_format,
            tuple(role or ()),
            max_line_bytes,
            Reporter("matrix", choose_format(output_format), verbosity(quiet, verbose), results_on_stdout=True),
        ),
    )


def run(
    inputs: list[Path],
    by: str,
    with_reference: bool,
    table_format: str,
    role: tuple[str, ...],
    max_line_bytes: int,
    reporter: Reporter,
) -> int:
    """Evaluate, render, and return the exit code."""
    from ng_traj.cli import matrix_render as render
    from ng_traj.contract.revisions import NO_RECORDS, revision_needed
    from ng_traj.matrix import tabulate
    from ng_traj.matrix_inputs import all_records
    from ng_traj.matrix_report import load_reference, report
    from ng_traj.roles import parse_roles, unmatched_roles

    if table_format not in FORMATS:
        raise RunError(f"--format {table_format!r}: choose from {', '.join(FORMATS)}")
    if by not in GROUPINGS:
        raise RunError(f"--by {by!r}: choose from {', '.join(GROUPINGS)}")
    try:
        roles = parse_roles(role)
    except ValueError as exc:
        raise RunError(str(exc)) from exc
    check_inputs(inputs)  # before anything looks inside them
    for path in inputs:
        _refuse_parquet(path)
    documented = load_reference()
    with reporter.feedback() as feedback:
        advance = feedback.step("evaluating records")
        records = all_records(inputs, reporter.sink, roles=roles, max_line_bytes=max_line_bytes)
        newer, servers = [0], set()
        groups = tabulate(
            ((item.record, item.context) for item in _counted(records, advance, newer, servers)),
            by,
            documented.concurrent,
        )
        feedback.finish_steps()
    for warning in unmatched_roles(roles, servers, "these records"):
        reporter.sink.add(warning)
    data = report(groups, by, documented if with_reference else None)
    if data["records"] or table_format in MACHINE_FORMATS:
        _write(data, table_format, render)
    code = EXIT_OK if data["records"] else EXIT_DATA
    sink = reporter.sink
    revision = revision_needed(newer[0], data["records"])  # no record: no revision claimed
    counts = f"{plural(sink.errors, 'error')}, {plural(sink.warnings, 'warning')}"
    if data["records"]:
        line = f"evaluated {plural(data['records'], 'record')} in {plural(len(data['groups']), 'group')}; {counts}; {revision}"
    else:
        line = f"{NO_RECORDS}; {counts}"
    summary = {"records": data["records"], "groups": len(data["groups"]), "revision": revision}
    reporter.summary(summary, code, line, lambda console: console.print(printable(line), markup=False))
    return code


def _counted(
    items: Iterable[MatrixRecord], advance: Callable[[], None], newer: list[int], servers: set[str]
) -> Iterator[MatrixRecord]:
    """``items``, calling ``advance`` for each, counting in ``newer[0]`` those with 0.7.0 fields and
    adding to ``servers`` the model servers (``model_ref.name``) their model calls name."""
    from ng_traj.roles import record_servers

    for item in items:
        advance()
        newer[0] += item.with_0_7_keys
        servers.update(record_servers(item.record))
        yield item


def _write(data: dict, table_format: str, render) -> None:
    """Write the matrix to standard output in one piece (the table as rich renders it for the terminal,
    unbounded elsewhere: ``stdout_console``), so that a full or closed standard output is met as any command meets it.

    Raises:
        RunError: Standard output cannot be written.
    """
    if table_format == "table":
        stdout = stdout_console(buffered=True)
        render.table(data, stdout)
        payload = stdout.file.getvalue().encode()
    else:
        text = {"markdown": render.markdown, "csv": render.csv_text}.get(table_format)
        payload = text(data).encode() if text is not None else render.json_bytes(data)
    with stdout_errors():
        write_all(sys.stdout.buffer, payload)
        sys.stdout.buffer.flush()


def _refuse_parquet(path: Path) -> None:
    """Stop with a usage error when ``path`` is a Parquet file or a dataset of the first layout.

    Raises:
        RunError: ``path`` is a Parquet file, or a dataset folder of the first layout.
    """
    from ng_traj.writers.dataset_paths import OLD_LAYOUT, is_dataset, is_old_layout

    if is_old_layout(path):
        raise RunError(f"{path} {OLD_LAYOUT}")
    if not is_dataset(path):
        refuse_parquet_file(path)
