"""The ``ng-traj`` command line: a thin shell over the library, one module per command.

Heavy imports (the contract models, pyarrow) happen inside the commands so that ``--help`` stays fast.
"""

from __future__ import annotations

import signal
from typing import Annotated

import typer

from ng_traj import __version__
from ng_traj.cli import build, convert, export, matrix, report, schema, show, validate
from ng_traj.cli.common import EXIT_INTERRUPTED, Command, stderr_console
from ng_traj.io.atomic import command_outputs, interrupt, interrupting_signal, was_interrupted

app = typer.Typer(
    name="ng-traj",
    help="Assemble NeMo Gym ng_trajectory records offline from retained rollout artifacts, "
    "validate trajectory files, report C1–C7 coverage, export ATIF and OpenTelemetry traces, "
    "and show rollouts in the terminal or an HTML report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ng-traj {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """ng-traj: trajectories from retained rollout artifacts."""


app.command("build", cls=Command)(build.command)
app.command("validate", cls=Command)(validate.command)
app.command("matrix", cls=Command)(matrix.command)
app.command("convert", cls=Command)(convert.command)
app.command("schema", cls=Command)(schema.command)
app.command("export", cls=Command)(export.command)
app.command("show", cls=Command)(show.command)
app.command("report", cls=Command)(report.command)


def main() -> None:
    """Console-script entry point. SIGINT and SIGTERM interrupt the command: outputs are cleaned up."""
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    committed = lambda: False  # noqa: E731
    try:
        with command_outputs() as committed:  # a signal after the command's commit changes nothing
            app()
        code = 0
    except SystemExit as exc:
        code = exc.code
    except (KeyboardInterrupt, Exception) as exc:
        # An interrupt outside a command's own handling, or one a library wrapped (pydantic while a
        # command imports its models): the recorded signal says so.
        if isinstance(exc, Exception) and not was_interrupted():
            raise
        code = EXIT_INTERRUPTED
    if code == EXIT_INTERRUPTED:  # said here once, wherever it was caught (Typer exits 130 silently)
        terminated = interrupting_signal() == signal.SIGTERM
        stderr_console().print("[yellow]terminated[/]" if terminated else "[yellow]interrupted[/]")
        code = 128 + signal.SIGTERM if terminated else code  # the shell's status for each signal
    if committed():
        # The outcome is decided and said. The interpreter's shutdown (which unloads pyarrow, say)
        # puts the default handlers back, so a signal arriving then would still kill the process
        # (exit 143 after the success line): it is ignored instead.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(code)
