"""``ng-traj report INPUT... -o report.html``: one self-contained HTML file of the rollouts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from ng_traj.cli.common import (
    EXIT_DATA,
    EXIT_OK,
    PATH_CHECKS,
    DebugOption,
    MaxLineBytesOption,
    RedactKeyOption,
    RedactOption,
    RedactPatternOption,
    guarded,
    redactor,
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
from ng_traj.cli.show import INPUT_HELP, ROLE_HELP
from ng_traj.diagnostics import RunError, plural, printable
from ng_traj.io.atomic import STDOUT
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES


def command(
    inputs: Annotated[list[Path], typer.Argument(metavar="INPUT", help=INPUT_HELP, show_default=False, **PATH_CHECKS)],
    output: Annotated[
        str,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE",
            help="The HTML file to write ('-' for standard output, which then carries the HTML alone).",
            show_default=False,
            **PATH_CHECKS,
        ),
    ],
    compare: Annotated[
        list[Path] | None,
        typer.Option(
            "--compare",
            metavar="OTHER",
            help="Another build of the same tasks, compared side by side (repeatable: its inputs).",
            show_default=False,
            **PATH_CHECKS,
        ),
    ] = None,
    title: Annotated[str, typer.Option(metavar="TEXT", help="The page title.")] = "ng-traj report",
    role: Annotated[
        list[str] | None, typer.Option("--role", metavar="NAME=ROLE", help=ROLE_HELP, show_default=False)
    ] = None,
    redact: RedactOption = False,
    redact_key: RedactKeyOption = None,
    redact_pattern: RedactPatternOption = None,
    max_line_bytes: MaxLineBytesOption = DEFAULT_MAX_LINE_BYTES,
    output_format: Annotated[str, output_format_option()] = "text",
    quiet: QuietOption = False,
    verbose: VerboseOption = False,
    debug: DebugOption = False,
) -> None:
    """Write one self-contained HTML report of the rollouts of INPUT (no server, no network: it opens
    from file://): a rollout list with filters and search; per rollout a timeline of model and tool
    calls (parallel calls overlapping, sub-agents under the tool call that spawned them, a mark
    where a time is missing), the conversation as the model saw it, the exact requests from capture,
    token and latency totals per role and the gaps; the C1–C7 matrix with its legend; with --compare,
    a second build of the same tasks side by side.

    --redact masks secrets in the report as in build output. Diagnostics and a summary go to
    standard error (--output-format; with -o - every format goes there, standard output carrying
    the HTML alone). Exit 0 when a report was written, 1 when the inputs hold no
    rollout (nothing is written), 2 for usage errors.
    """
    guarded(
        debug,
        lambda: run(
            inputs,
            _file_output(output),
            list(compare or ()),
            title,
            tuple(role or ()),
            redactor(redact, redact_key, redact_pattern),
            max_line_bytes,
            Reporter(
                "report",
                choose_format(output_format),
                verbosity(quiet, verbose),
                results_on_stdout=str(output) == STDOUT,
            ),
        ),
    )


def _file_output(output: str) -> Path:
    """The ``-o`` of the HTML file, refused when named as a folder (``refuse_folder_name``)."""
    refuse_folder_name(output, "report.html")
    return Path(output)


def run(
    inputs: list[Path],
    output: Path,
    compare: list[Path],
    title: str,
    role: tuple[str, ...],
    mask: Callable[[Any], Any] | None,
    max_line_bytes: int,
    reporter: Reporter,
) -> int:
    """Read, render, write atomically (``output`` ``-``: to standard output, whole, once rendered);
    return the exit code."""
    from ng_traj.io.atomic import atomic_file, check_file_target
    from ng_traj.matrix import tabulate
    from ng_traj.matrix_inputs import record_context
    from ng_traj.matrix_report import load_reference, report
    from ng_traj.records import read_inputs, refuse_input_as_output
    from ng_traj.roles import parse_roles, record_servers, unmatched_roles
    from ng_traj.views import html

    try:
        roles = parse_roles(role)
    except ValueError as exc:
        raise RunError(str(exc)) from exc
    to_stdout = str(output) == STDOUT
    written = [] if to_stdout else [output]  # a file named '-' is an input like any other
    if not to_stdout:
        refuse_input_as_output([*inputs, *compare], output)  # before the output's folder is probed
        check_file_target(output)
    shown = mask or (lambda value: value)
    side, other = html.Collected(), html.Collected()
    servers: set[str] = set()  # the model servers the rollouts' calls name, for --role
    with reporter.feedback() as feedback:
        advance = feedback.step("reading rollouts")

        def records():
            for read in read_inputs(inputs, reporter.sink, max_line_bytes=max_line_bytes, outputs=written):
                advance()
                side.add(read, shown(read.value), roles, keep_detail=True)
                servers.update(record_servers(read.record))
                yield read.record, record_context(read)

        groups = tabulate(records(), "agent", load_reference().concurrent)
        for read in read_inputs(compare, reporter.sink, max_line_bytes=max_line_bytes, outputs=written):
            other.add(read, read.value, roles, keep_detail=False)
            servers.update(record_servers(read.record))
        feedback.finish_steps()
    for warning in unmatched_roles(roles, servers, "these rollouts"):
        reporter.sink.add(warning)
    code = EXIT_OK if side.entries else EXIT_DATA
    side, other = side.ordered(), other.ordered()
    if side.entries:
        page = html.render(
            title, side, report(groups, "agent", None), html.compare(side.entries, other.entries) if compare else None
        )
        with atomic_file(output) as handle:
            handle.write(page.encode("utf-8"))
    where = "standard output" if to_stdout else output
    line = (
        f"wrote {plural(len(side.entries), 'rollout')} to {where}" if side.entries else "no rollouts: nothing written"
    )
    if compare:
        line += f"; compared with {plural(len(other.entries), 'rollout')}"
    line += f"; {plural(reporter.sink.errors, 'error')}, {plural(reporter.sink.warnings, 'warning')}"
    data = {"rollouts": len(side.entries), "compared": len(other.entries), "output": str(output)}
    reporter.summary(data, code, line, lambda console: console.print(printable(line), markup=False))
    return code
