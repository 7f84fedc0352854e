"""``ng-traj export INPUT... --format atif|otlp -o OUT``: trajectories to ATIF documents or OTLP traces."""

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
    left_alone,
    redactor,
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
from ng_traj.diagnostics import RunError, lines_skipped, plural, printable, safe_text
from ng_traj.io.atomic import STDOUT
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES

EXIT_LOST = 3
"""Every rollout was exported, but the format could not hold something (the completeness report says what)."""

FORMATS = ("atif", "otlp")


def command(
    inputs: Annotated[
        list[Path],
        typer.Argument(
            metavar="INPUT",
            help="Trajectory JSONL, rollout rows carrying ng_trajectory (build --attach), Parquet datasets, "
            "or folders of them.",
            show_default=False,
            **PATH_CHECKS,
        ),
    ],
    format_: Annotated[
        str,
        typer.Option("--format", "-f", metavar="FORMAT", help="atif (ATIF v1.8 documents) or otlp (OTLP/JSON traces)."),
    ],
    output: Annotated[
        str,
        typer.Option(
            "-o",
            "--output",
            metavar="OUT",
            help="atif: a folder of <rollout_id>.json files; otlp: a .jsonl file (a folder with --split). "
            "The completeness report is written beside it, as OUT.completeness.json.",
            show_default=False,
            **PATH_CHECKS,
        ),
    ],
    strict: Annotated[
        bool,
        typer.Option(
            "--strict", help="Refuse (and report) every rollout NeMo Gym 0.7.0's own ATIF exporter would refuse."
        ),
    ] = False,
    split: Annotated[bool, typer.Option("--split", help="otlp: one file per rollout, in the folder OUT.")] = False,
    agent_version: Annotated[
        str | None,
        typer.Option(
            "--agent-version",
            metavar="TEXT",
            help="atif: the agent.version to write (default: unknown; the inputs carry none).",
        ),
    ] = None,
    session_id: Annotated[
        str | None,
        typer.Option("--session-id", metavar="TEXT", help="atif: the session_id to write (default: the run's label)."),
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
    """Export trajectories as ATIF v1.8 documents or OpenTelemetry traces (OTLP/JSON), one per rollout.

    A completeness report (OUT.completeness.json) says per rollout what the format could not hold; the
    summary has a line per rollout. Exit 0: everything exported, nothing lost; 3: everything exported,
    something lost (see the report); 1: input lines skipped, rollouts refused (--strict) or not written,
    or nothing exported; 2: usage errors. Outputs are written atomically.
    """
    guarded(
        debug,
        lambda: _run(
            tuple(inputs),
            format_,
            output,
            strict,
            split,
            agent_version,
            session_id,
            redactor(redact, redact_key, redact_pattern),
            max_line_bytes,
            choose_format(output_format),
            verbosity(quiet, verbose),
        ),
    )


def _run(
    inputs: tuple[Path, ...],
    format_: str,
    raw: str,
    strict: bool,
    split: bool,
    agent_version: str | None,
    session_id: str | None,
    mask: Callable[[Any], Any] | None,
    max_line_bytes: int,
    output_format: str,
    level: int,
) -> int:
    if format_ not in FORMATS:
        raise RunError(f"--format {format_!r}: choose atif or otlp")
    from ng_traj.io.compression import logical_path

    output = Path(raw)
    if raw == STDOUT:
        raise RunError(
            "-o -: export cannot write to standard output: it writes several files (a document per rollout, "
            "or traces) and a completeness report beside them; name a folder or file, such as -o atif/ "
            "or -o traces.jsonl"
        )
    if not output.name or output.name in (".", ".."):  # '', '.', 'x/..': no name to put the report beside
        raise RunError(
            f"-o {str(output)!r} has no name to put the completeness report beside (OUT.completeness.json): "
            "name the folder or file, such as -o atif/ or -o traces.jsonl"
        )
    from ng_traj.exports.run import check_report
    from ng_traj.io.atomic import is_special

    if is_special(output):  # /dev/null, /dev/stdout, a FIFO: the report beside it would be made in /dev
        raise RunError(
            f"-o {output} is not a regular file or folder (a device, a pipe, a standard stream): export writes "
            "a completeness report beside its output; name a folder or file, such as -o atif/ or -o traces.jsonl"
        )
    check_report(output)
    if split and format_ != "otlp":
        raise RunError("--split is for --format otlp (ATIF is one file per rollout already)")
    if format_ == "otlp" and (agent_version is not None or session_id is not None):
        given = "--agent-version" if agent_version is not None else "--session-id"
        raise RunError(f"{given} is for --format atif (OTLP traces have no place for it)")
    if format_ == "otlp" and not split:
        refuse_folder_name(raw, "traces.jsonl")
        refuse_compressed_name(raw)
    elif logical_path(output).suffix in (".jsonl", ".json"):
        raise RunError(
            f"-o {raw}: {'--split' if split else 'ATIF'} writes a folder of files, and {output.name} is named as "
            "one JSON file; name the folder without .jsonl or .json, such as -o " + ("traces/" if split else "atif/")
        )
    if format_ == "otlp" and not split and output.is_dir():
        raise RunError(f"{output} is a directory: an OTLP export is one .jsonl file (or use --split)")
    if (format_ == "atif" or split) and output.exists() and not output.is_dir():
        raise RunError(f"{output} exists and is not a directory")
    from ng_traj.exports.run import ExportRequest, export, report_path

    request = ExportRequest(
        inputs,
        output,
        format_,
        strict,
        split,
        agent_version or "unknown",
        session_id,
        max_line_bytes,  # type: ignore[arg-type]
    )
    reporter = Reporter("export", output_format, level)
    with reporter.feedback() as feedback:
        result = export(request, reporter.sink, mask, feedback.step("exporting"))
        feedback.finish_steps()
    sink = reporter.sink
    skipped_lines = lines_skipped(sink)
    lost = result.count("lossy")
    failed = (
        sink.errors or result.skipped or result.count("refused") or result.count("not_written") or not result.written
    )
    code = EXIT_DATA if failed else EXIT_LOST if lost else EXIT_OK
    report = report_path(output)
    written = f"-> {output}; report {report}" if result.written else f"nothing written: {left_alone(output)}"
    line = (
        f"exported {result.written} of {plural(result.read, 'record')} read as {format_} "
        f"({result.count('complete')} complete, {lost} lossy, {result.count('refused')} refused, "
        f"{result.count('not_written')} not written, {result.skipped} skipped as invalid)"
        f"{' ' if result.written else '; '}{written}; "
        f"{plural(skipped_lines, 'line')} skipped, {plural(sink.errors, 'error')}, {plural(sink.warnings, 'warning')}"
    )
    data = {
        "format": format_,
        "output": safe_text(output),
        "report": safe_text(report),
        "written": result.written,
        "read": result.read,
        "skipped_invalid": result.skipped,
        "lines_skipped": skipped_lines,
        "rollouts": [
            {"rollout_id": o.rollout.rollout_id, "status": o.status, "output": o.output, "summary": o.line()}
            for o in result.outcomes
        ],
    }

    def text(console) -> None:  # type: ignore[no-untyped-def]
        for outcome in result.outcomes if level >= 0 else ():  # --quiet: the summary line alone
            console.print(f"  {printable(outcome.line())}", markup=False)  # ids from the data: escaped
        console.print(printable(line), markup=False)

    reporter.summary(data, code, line, text)
    return code
