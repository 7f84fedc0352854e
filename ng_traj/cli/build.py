"""``ng-traj build INPUT... -o OUT``: assemble one ng_trajectory record per rollout."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ng_traj.cli.common import (
    PATH_CHECKS,
    RELEASE_HELP,
    DebugOption,
    MaxLineBytesOption,
    RedactKeyOption,
    RedactOption,
    RedactPatternOption,
    guarded,
)
from ng_traj.cli.output import (
    QuietOption,
    VerboseOption,
    choose_format,
    json_alias_option,
    output_format_option,
    verbosity,
)
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES

KINDS_HELP = (
    "Force the kind of every named input: rollouts, capture, pi, openclaw, hermes, claude_code, codex or opencode."
)
ROLE_HELP = (
    "NAME=ROLE: the role of model server NAME (its model_ref.name), e.g. judge_model=judge, "
    "policy_model=policy, user_model=user_simulator (repeatable)."
)


def command(
    inputs: Annotated[
        list[Path],
        typer.Argument(
            metavar="INPUT",
            help="Rollout JSONL files, capture stores, session files of pi, OpenClaw, Hermes, Claude Code, Codex or "
            "OpenCode, or folders holding them.",
            show_default=False,
            **PATH_CHECKS,
        ),
    ],
    output: Annotated[
        str | None,
        typer.Option(
            "-o", "--output", metavar="FILE", help="Output file; '-' for standard output.", show_default=False
        ),
    ] = None,
    records_format: Annotated[
        str | None,
        typer.Option(
            "--format",
            metavar="FORMAT",
            help="Format of the records written to OUT: jsonl, or parquet (a dataset directory); default parquet "
            "when OUT ends in .parquet, else jsonl. (--output-format is how diagnostics are written.)",
            show_default=False,
        ),
    ] = None,
    force_kind: Annotated[str | None, typer.Option("--as", metavar="KIND", help=KINDS_HELP, show_default=False)] = None,
    manifest: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="JSONL or CSV mapping rollout_id to artifact paths (and run).",
            show_default=False,
            **PATH_CHECKS,
        ),
    ] = None,
    role: Annotated[
        list[str] | None, typer.Option("--role", metavar="NAME=ROLE", help=ROLE_HELP, show_default=False)
    ] = None,
    attach: Annotated[
        bool, typer.Option("--attach", help="Write the rollout rows with ng_trajectory attached.")
    ] = False,
    no_payloads: Annotated[
        bool, typer.Option("--no-payloads", help="Leave model-call request and response payloads out.")
    ] = False,
    redact: RedactOption = False,
    redact_key: RedactKeyOption = None,
    redact_pattern: RedactPatternOption = None,
    output_format: Annotated[str | None, output_format_option()] = None,
    quiet: QuietOption = False,
    verbose: VerboseOption = False,
    json_output: Annotated[bool, json_alias_option()] = False,
    max_line_bytes: MaxLineBytesOption = DEFAULT_MAX_LINE_BYTES,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            metavar="N",
            help="Worker processes assembling rollouts (output identical to 1); at most one per CPU. Default 1; "
            "with --engine ray, the CPUs of the local Ray (default every CPU), or the tasks at once on a cluster.",
            min=1,
            show_default=False,
        ),
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            metavar="ENGINE",
            help="Where rollouts are assembled: local (this machine's processes), or ray (Ray Data tasks on a "
            "local Ray or the cluster of --ray-address; needs the ray extra). Output identical.",
        ),
    ] = "local",
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
            metavar="ADDR",
            help="With --engine ray: the Ray cluster to run on (auto: the cluster of this node; or HEAD:6379); "
            "default a local Ray started for the build.",
            show_default=False,
        ),
    ] = None,
    gym_release: Annotated[str, typer.Option("--gym-release", metavar="RELEASE", help=RELEASE_HELP)] = "0.7",
    fail_on: Annotated[
        str | None,
        typer.Option(
            "--fail-on",
            metavar="LEVEL",
            help="Exit 1 when a diagnostic of LEVEL was reported: error (a line skipped, a row not read, ...) "
            "or warning (also any warning). The output is written all the same. Default: exit 0 with "
            "diagnostics reported.",
            show_default=False,
        ),
    ] = None,
    debug: DebugOption = False,
) -> None:
    """Assemble trajectories from retained artifacts: rollout rows, model-call capture stores and the
    harnesses' own session files (pi, OpenClaw, Hermes, Claude Code, Codex, OpenCode).

    Every rollout row yields one ng_trajectory record (schema 1.0); capture files and sessions
    without a row yield their own; rows with no identity are identified by file and line. Records
    are ordered by rollout id and written as JSONL or as a Parquet dataset (a directory with one
    folder per table, each read whole by DuckDB, Polars or pandas). Diagnostics and a summary follow
    (--output-format: text on standard error, json or github on standard output, or on standard
    error with -o -). Exit 0 on success (warnings allowed), 1 when a named input yields nothing (or
    nothing at all is built: the output is then left as it was, or --fail-on's diagnostics were
    reported), 2 for usage errors.
    """
    settings = dict(
        inputs=inputs,
        output=output,
        output_format=records_format,
        force_kind=force_kind,
        manifest=manifest,
        roles=tuple(role or ()),
        attach=attach,
        payloads=not no_payloads,
        redact=redact or bool(redact_key) or bool(redact_pattern),
        redact_keys=tuple(redact_key or ()),
        redact_patterns=tuple(redact_pattern or ()),
        max_line_bytes=max_line_bytes,
        stdout_is_terminal=sys.stdout is not None and sys.stdout.isatty(),  # None when the shell closed it
        jobs=jobs or 1,
        gym_release=gym_release,
        engine=engine,
        ray_address=ray_address,
        ray_cpus=jobs,
        fail_on=fail_on,
    )
    guarded(debug, lambda: _run(settings, choose_format(output_format, json_output), verbosity(quiet, verbose)))


def _run(settings: dict, report_format: str, level: int) -> int:
    from ng_traj.cli.build_run import BuildRequest, run  # imported here, where an interrupt is handled

    return run(BuildRequest(**settings, report_format=report_format, level=level))
