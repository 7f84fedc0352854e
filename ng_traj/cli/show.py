"""``ng-traj show INPUT [ROLLOUT]``: the rollouts of an input, or one rollout, in the terminal."""

from __future__ import annotations

import os
import sys
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
    stdout_console,
    stdout_errors,
)
from ng_traj.cli.output import Reporter
from ng_traj.io.atomic import write_all
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES

INPUT_HELP = "ng_trajectory JSONL, rollout JSONL carrying ng_trajectory (build --attach), or a Parquet dataset."
RUN_HELP = "Only the rollouts of this run (the dataset's run column; for rows, the file's label)."
AGENT_HELP = "Only the rollouts of this agent (the row's agent_ref name)."
LINE_HELP = (
    "Only the record at this line of INPUT (in a dataset, its Nth trajectory): the N of INPUT:N in the list "
    "and in errors, to pick one of the records that share a rollout id and nothing else."
)
ROLE_HELP = "NAME=ROLE: label the calls of model server NAME with ROLE in the totals (repeatable)."
PAGER_LESS = "-RFX"
"""``less`` options when the user set none: keep colours, quit when it fits one screen, leave it on screen."""


def command(
    source: Annotated[Path, typer.Argument(metavar="INPUT", help=INPUT_HELP, show_default=False, **PATH_CHECKS)],
    rollout: Annotated[
        str | None, typer.Argument(metavar="[ROLLOUT]", help="The rollout id to show; without it, the list.")
    ] = None,
    run: Annotated[str | None, typer.Option("--run", metavar="RUN", help=RUN_HELP, show_default=False)] = None,
    agent: Annotated[str | None, typer.Option("--agent", metavar="AGENT", help=AGENT_HELP, show_default=False)] = None,
    line: Annotated[int | None, typer.Option("--line", metavar="N", min=1, help=LINE_HELP, show_default=False)] = None,
    role: Annotated[
        list[str] | None, typer.Option("--role", metavar="NAME=ROLE", help=ROLE_HELP, show_default=False)
    ] = None,
    pager: Annotated[
        bool, typer.Option("--pager/--no-pager", help="Page the output on a terminal ($PAGER, else less).")
    ] = True,
    redact: RedactOption = False,
    redact_key: RedactKeyOption = None,
    redact_pattern: RedactPatternOption = None,
    max_line_bytes: MaxLineBytesOption = DEFAULT_MAX_LINE_BYTES,
    debug: DebugOption = False,
) -> None:
    """Show what a rollout did: its invocation tree (sub-agents under the tool call that spawned
    them), each turn and model call with tokens and latency, tool calls with status and duration,
    token and latency totals per role, and its gaps by code with what each means.

    Without ROLLOUT, the rollouts of INPUT are listed. Rollout ids repeat across runs and agents:
    pick one with --run and --agent, or by its place with --line (an id that several rollouts share
    is an error listing them).
    Paged on a terminal; plain text when standard output is a file or a pipe. Diagnostics about
    unreadable lines go to standard error. Exit 0 when something was shown, 1 when the input holds
    no rollout, 2 for usage errors (an unknown or ambiguous rollout). --redact masks secrets in
    what is shown as in build output.
    """
    guarded(
        debug,
        lambda: show(
            source,
            rollout,
            run,
            agent,
            line,
            tuple(role or ()),
            pager,
            max_line_bytes,
            redactor(redact, redact_key, redact_pattern),
        ),
    )


def show(
    source: Path,
    rollout: str | None,
    run: str | None,
    agent: str | None,
    line: int | None,
    role: tuple[str, ...],
    pager: bool,
    max_line_bytes: int,
    mask: Callable[[Any], Any] | None = None,
) -> int:
    """Find, render and print; return the exit code."""
    from ng_traj.diagnostics import RunError
    from ng_traj.records import read_inputs
    from ng_traj.roles import parse_roles, record_servers, unmatched_roles
    from ng_traj.views import pick, terminal
    from ng_traj.views.tree import rollout_view

    try:
        roles = parse_roles(role)
    except ValueError as exc:
        raise RunError(str(exc)) from exc
    if roles and rollout is None:
        raise RunError("--role labels the totals of one rollout, and the list has none: name a ROLLOUT too")
    reporter = Reporter("show", verbose_option=False)
    reads = read_inputs([source], reporter.sink, max_line_bytes=max_line_bytes)
    console = stdout_console()  # not a terminal: rendered whole, then written (a closed pipe is one quiet 141)
    if rollout is None:
        entries = list(pick.listing(reads, run, agent, line))
        reporter.flush_infos()
        if not entries:
            message = "no rollouts" + (f" for the {pick.options_given(line)} given" if run or agent or line else "")
            _print(console, pager, lambda: console.print(message, markup=False))
            return EXIT_DATA
        _print(console, pager, lambda: console.print(terminal.rollout_list(entries)))
        return EXIT_OK
    read = pick.pick(reads, rollout, run, agent, line)
    for warning in unmatched_roles(roles, record_servers(read.record), "this rollout"):
        reporter.sink.add(warning)
    reporter.flush_infos()
    about = {
        "run": read.run,
        "agent": read.agent,
        "producer": read.producer,
        "reward": read.reward,
        "where": f"{read.source}:{read.position}",
    }
    view = rollout_view(mask(read.value) if mask else read.value, roles)
    _print(console, pager, lambda: terminal.render_rollout(view, about, console))
    return EXIT_OK


def _print(console, pager: bool, body) -> None:
    """Run ``body`` (which prints to ``console``) through the pager when on a terminal; else write
    what it rendered to standard output in one piece."""
    if not console.is_terminal:
        body()
        with stdout_errors():
            write_all(sys.stdout.buffer, console.file.getvalue().encode())
            sys.stdout.buffer.flush()
        return
    if not pager:
        body()
        return
    with console.capture() as captured:
        body()
    _page(captured.get())


def _page(text: str) -> None:
    """Show ``text`` (with its terminal styles) through ``$PAGER`` (a shell command; ``less`` when
    unset or empty, with ``$LESS`` defaulting to :data:`PAGER_LESS`).

    A pager that cannot be started or exits non-zero (a ``$PAGER`` naming no program, ``false``)
    has shown nothing the user quit: ``text`` is then written to standard output itself, after one
    line on standard error naming the pager and its exit status. A pager the user quits before the
    end (the pipe closes under us) exits 0 and is not a failure.
    """
    import subprocess

    command = os.environ.get("PAGER", "").strip() or "less"
    env = {**os.environ, "LESS": os.environ.get("LESS", PAGER_LESS)}
    data = text.encode("utf-8", "replace")
    try:
        process = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, env=env)
    except OSError as exc:
        status = f"could not be started ({exc.strerror or exc})"
    else:
        assert process.stdin is not None
        try:
            process.stdin.write(data)
            process.stdin.close()
        except OSError:  # BrokenPipeError: the pager quit (or died) before reading everything
            pass
        while True:
            try:
                code = process.wait()
                break
            except KeyboardInterrupt:  # Ctrl-C is the pager's to handle, as pydoc leaves it
                continue
        if code == 0:
            return
        status = f"exited with status {code}" if code > 0 else f"was stopped by signal {-code}"
    sys.stderr.write(
        f"ng-traj show: the pager {command!r} {status}; printing here instead "
        "(set PAGER to a working pager, or pass --no-pager)\n"
    )
    sys.stderr.flush()
    with stdout_errors():
        write_all(sys.stdout.buffer, data)
        sys.stdout.buffer.flush()
