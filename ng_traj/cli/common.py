"""What every command shares: error handling, exit codes, diagnostics output, progress.

Exit codes (PRODUCT.md §6, §10.15): 0 success (warnings allowed), 1 data errors, 2 usage or tool
errors, 130 interrupted, 141 standard output closed early. Expected errors print one red line and
no traceback; ``--debug`` adds the traceback of unexpected ones. Colour follows ``NO_COLOR`` and is
off when stderr is not a terminal.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from ng_traj.diagnostics import Diagnostic, RunError
from ng_traj.io.atomic import was_interrupted

EXIT_OK, EXIT_DATA, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 0, 1, 2, 130, 141

DEBUG_HELP = "Show a traceback for unexpected errors."
JSON_HELP = "Machine-readable output (JSON) instead of text."


def stderr_console() -> Console:
    """A console on standard error (colour off when not a terminal or under ``NO_COLOR``; ``:name:``
    emoji codes, which file names and line numbers such as ``x.jsonl:100:`` contain, never replaced)."""
    return Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


def guarded(debug: bool, body: Callable[[], int]) -> None:
    """Run a command body and exit with its code, mapping failures to exit codes.

    Raises:
        typer.Exit: Always, with the body's code, 2 for a :class:`RunError` or an unexpected error,
            130 on interrupt, 141 when standard output was closed by its reader.
    """
    console = stderr_console()
    try:
        code = body()
    except RunError as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}")
        code = EXIT_USAGE
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED  # said by the entry point (``cli.main``)
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, but not with success, since the output (or
        # the validation) did not finish; 141 is what a process killed by SIGPIPE reports.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        code = EXIT_BROKEN_PIPE
    except Exception as exc:
        if was_interrupted():  # the interrupt surfaced wrapped in another exception
            code = EXIT_INTERRUPTED
        else:
            if debug:
                traceback.print_exc()
            problem = escape(f"{type(exc).__name__}: {exc}")
            console.print(f"[bold red]internal error:[/] {problem} (run with --debug for a traceback)")
            code = EXIT_USAGE
    raise typer.Exit(code)


PARQUET_MAGIC = b"PAR1"
"""The first (and last) four bytes of every Parquet file."""


def refuse_parquet_file(path: Path) -> None:
    """Stop with a usage error when ``path`` is a Parquet file, which would read as garbled JSONL.

    Raises:
        RunError: The regular file ``path`` starts with the Parquet magic bytes.
    """
    if not path.is_file():
        return
    try:
        with open(path, "rb") as handle:
            magic = handle.read(len(PARQUET_MAGIC))
    except OSError:
        return
    if magic != PARQUET_MAGIC:
        return
    if (path.parent / "trajectories.parquet").is_file():
        raise RunError(f"{path} is a Parquet table file of a dataset, not JSONL: name the dataset folder {path.parent}")
    raise RunError(f"{path} is a Parquet file, not JSONL: ng-traj reads Parquet only as a dataset folder it wrote")


def diagnostic_printer(console: Console | None) -> Callable[[Diagnostic], None]:
    """Return a function printing one diagnostic line to stderr (through ``console`` when given)."""
    if console is None:
        write = sys.stderr.write
        return lambda diagnostic: write(diagnostic.render() + "\n")
    return lambda diagnostic: console.print(diagnostic.render(), markup=False, highlight=False)


@dataclass
class ByteProgress:
    """Progress over bytes read; a no-op when standard error is not a terminal."""

    progress: Progress | None
    task: int | None = None

    def start(self, description: str, total: int | None) -> None:
        """Begin a new bar for one input of ``total`` bytes (``None``: unknown, a compressed file's text)."""
        if self.progress is not None:
            self.task = self.progress.add_task(description, total=total)

    def advance_to(self, completed: int) -> None:
        """Move the current bar to ``completed`` bytes."""
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, completed=completed)

    @property
    def console(self) -> Console | None:
        """The live console to print through while the bar shows, if any."""
        return self.progress.console if self.progress is not None else None


@contextlib.contextmanager
def byte_progress(enabled: bool = True) -> Iterator[ByteProgress]:
    """A progress bar on standard error when it is a terminal, else nothing (PRODUCT.md §6)."""
    console = stderr_console()
    if not (enabled and console.is_terminal):
        yield ByteProgress(None)
        return
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        yield ByteProgress(progress)
