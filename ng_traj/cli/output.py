"""Where a command's diagnostics, summary and progress go, in the format the user chose.

``--output-format`` takes three values:

* ``text``: one ``path:line: severity[code] pointer: message`` line per diagnostic on standard
  error, info codes summarised (one line per code with its count unless ``--verbose``; none with
  ``--quiet``), then the command's summary; a progress display while it works when standard error
  is a terminal.
* ``json``: every diagnostic as one JSON line as it is found, then the summary line, last
  (``ng_traj.contract.output`` describes the lines; ``--quiet`` and ``--verbose`` change nothing).
* ``github``: GitHub Actions workflow commands (``::error file=PATH,line=N::[code] message``;
  ``::warning``; ``::notice`` for info), info summarised as in ``text``, then the one-line summary.

``json`` and ``github`` lines go to standard output, unless standard output carries the command's
results (``-o -``, the matrix): then to standard error, as ``text`` always does.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from ng_traj.cli.common import stderr_console, stdout_errors
from ng_traj.diagnostics import (
    CODES,
    OUTPUT_VERSION,
    Diagnostic,
    DiagnosticSink,
    RunError,
    printable,
    safe_json,
    safe_text,
)

OUTPUT_FORMATS = ("text", "json", "github")

OUTPUT_FORMAT_HELP = (
    "How diagnostics and the summary are written: text (for people, on standard error), json (one JSON "
    "object per line, the summary last) or github (GitHub Actions annotations). json and github go to "
    "standard output unless it carries the command's results."
)
VERBOSE_HELP = "List every info diagnostic (by default each info code is printed once, with its count)."
QUIET_HELP = "Leave info diagnostics out; warnings and errors are still printed."
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help=QUIET_HELP)]
VerboseOption = Annotated[bool, typer.Option("--verbose", "-v", help=VERBOSE_HELP)]


def output_format_option() -> Any:
    """The ``--output-format`` option, shared by every command."""
    return typer.Option("--output-format", metavar="FORMAT", help=OUTPUT_FORMAT_HELP)


def json_alias_option() -> Any:
    """``--json``: the deprecated, hidden spelling of ``--output-format json``."""
    return typer.Option("--json", hidden=True, help="Deprecated: use --output-format json.")


def choose_format(requested: str | None, json_alias: bool = False) -> str:
    """The output format from ``--output-format`` (``None`` when not given: text) and the deprecated
    ``--json``.

    Raises:
        RunError: An unknown format, or ``--json`` with an ``--output-format`` other than json (an
            explicit ``--output-format text`` is refused too, not overridden).
    """
    if requested is not None and requested not in OUTPUT_FORMATS:
        raise RunError(f"--output-format {requested!r}: choose from {', '.join(OUTPUT_FORMATS)}")
    if json_alias and requested not in (None, "json"):
        raise RunError(f"--json means --output-format json: drop one of --json and --output-format {requested}")
    return "json" if json_alias else requested or "text"


def verbosity(quiet: bool, verbose: bool) -> int:
    """-1 for ``--quiet``, 1 for ``--verbose``, else 0.

    Raises:
        RunError: Both were given.
    """
    if quiet and verbose:
        raise RunError("--quiet and --verbose: give one")
    return -1 if quiet else int(verbose)


_DATA_ESCAPES = str.maketrans({"%": "%25", "\r": "%0D", "\n": "%0A"})
_PROPERTY_ESCAPES = str.maketrans({"%": "%25", "\r": "%0D", "\n": "%0A", ":": "%3A", ",": "%2C"})
_COMMANDS = {"error": "error", "warning": "warning", "info": "notice"}


def github_annotation(diagnostic: Diagnostic) -> str:
    """``::error file=PATH,line=N::[code] pointer: message`` (``warning``; ``notice`` for info)."""
    pointer = f"{diagnostic.pointer}: " if diagnostic.pointer else ""
    text = f"[{diagnostic.code}] {pointer}{diagnostic.message}"
    return workflow_command(_COMMANDS[diagnostic.severity], text, diagnostic.path, diagnostic.line)


def workflow_command(name: str, text: str, path: str | None = None, line: int | None = None) -> str:
    """One GitHub Actions workflow command line, ``::name file=PATH,line=N::text``.

    The text escapes ``%``, carriage return and newline as the runner's command parser requires;
    the file property ``:`` and ``,`` too. Other control characters are shown as escapes (``\\x1b``).
    """
    properties = []
    if path:
        properties.append(f"file={printable(safe_text(path).translate(_PROPERTY_ESCAPES))}")
    if line is not None:
        properties.append(f"line={line}")
    head = f"::{name}" + (" " + ",".join(properties) if properties else "")
    return f"{head}::{printable(safe_text(text).translate(_DATA_ESCAPES))}"


class _Amount(ProgressColumn):
    """Bytes (``1.2/3.4 MB``) for a byte step, ``n/total`` for a counted one (``n/?`` without a total)."""

    def __init__(self) -> None:
        super().__init__()
        self._bytes, self._count = DownloadColumn(), MofNCompleteColumn()

    def render(self, task: Task) -> Text:
        return (self._bytes if task.fields.get("bytes") else self._count).render(task)


REDRAW_SECONDS = 0.05
"""Least time between two updates of a step's display: the work reports far more often than that."""


@dataclass
class _Step:
    """One step of a progress display; reports are gathered and passed on at most every REDRAW_SECONDS."""

    progress: Progress
    task: TaskID
    completed: float = 0
    shown: float = 0.0

    def __call__(self, completed: float | None = None, advance: float = 1) -> None:
        self.completed = self.completed + advance if completed is None else completed
        now = time.monotonic()
        if now - self.shown >= REDRAW_SECONDS:
            self.shown = now
            self.progress.update(self.task, completed=self.completed)

    def finish(self) -> None:
        total = self.progress.tasks[self.task].total
        total = self.completed if total is None else total
        self.progress.update(self.task, total=total, completed=total)


@dataclass
class Feedback:
    """The progress display of one command: a no-op when it is off."""

    progress: Progress | None = None
    steps: list[_Step] = field(default_factory=list)

    def step(self, description: str, total: float | None = None, *, in_bytes: bool = False) -> Callable[..., None]:
        """Show one step; return ``update(completed=None, advance=1)`` moving it (to ``completed``, else by
        ``advance``), cheap enough to call per record."""
        if self.progress is None:
            return lambda completed=None, advance=1: None
        self.steps.append(_Step(self.progress, self.progress.add_task(description, total=total, bytes=in_bytes)))
        return self.steps[-1]

    def finish_steps(self) -> None:
        """Show every step so far complete (a step of unknown length stops pulsing, at its count)."""
        for step in self.steps:
            step.finish()


@dataclass
class Reporter:
    """Writes one command's diagnostics (as ``DiagnosticSink.emit``) and its summary.

    Args:
        command: ``build``, ``validate``, ``matrix``, ``convert``, ``export`` or ``report``, the
            summary's ``command``, each with its summary model in ``ng_traj/contract/output.py``; or
            ``show``, which writes text only.
        output_format: One of :data:`OUTPUT_FORMATS`.
        level: -1 ``--quiet``, 0 default, 1 ``--verbose`` (text and github only).
        results_on_stdout: Standard output carries the command's results; everything goes to stderr.
        verbose_option: The command has ``--verbose``: a summarised info code's line says it lists
            each; without it (``show``), the line names the first file the code was reported for.
    """

    command: str
    output_format: str = "text"
    level: int = 0
    results_on_stdout: bool = False
    verbose_option: bool = True
    console: Console = field(default_factory=stderr_console)
    sink: DiagnosticSink = field(init=False)
    _infos: dict[str, Diagnostic] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.sink = DiagnosticSink(self.emit)

    @property
    def stream(self) -> IO[bytes]:
        """Where json and github lines go."""
        return sys.stderr.buffer if self.results_on_stdout or self.output_format == "text" else sys.stdout.buffer

    def _write(self, data: bytes, *, flush: bool = False) -> None:
        """Write to :attr:`stream`; standard output that cannot be written is the run's error (standard
        error that cannot be written drops what it is given: ``common.Unreported``).

        Raises:
            RunError: Standard output cannot be written.
        """
        with stdout_errors():
            self.stream.write(data)
            if flush:
                self.stream.flush()

    def emit(self, diagnostic: Diagnostic) -> None:
        """Write one diagnostic now, or hold it back to be summarised (info, unless ``--verbose``)."""
        if self.output_format == "json":
            self._write(orjson.dumps(self._json_line(diagnostic)) + b"\n")
            return
        if diagnostic.severity == "info" and self.level < 1:
            if self.level == 0:
                self._infos.setdefault(diagnostic.code, diagnostic)
            return
        self._line(diagnostic.render() if self.output_format == "text" else github_annotation(diagnostic))

    def _line(self, text: str) -> None:
        if self.output_format != "text":
            self._write(text.encode("utf-8", "replace") + b"\n")
        elif self.console.is_terminal:  # a progress display may be live: print through it
            self.console.print(text, markup=False, highlight=False)
        else:
            sys.stderr.write(text + "\n")

    @staticmethod
    def _json_line(diagnostic: Diagnostic) -> dict[str, object]:
        return {"ng_traj_output": OUTPUT_VERSION, "type": "diagnostic", **diagnostic.to_json()}

    def flush_infos(self) -> None:
        """Write the held info diagnostics: itself when a code came once, else one line with the count."""
        for code, first in sorted(self._infos.items()):
            count = self.sink.by_code[code]
            if count == 1:
                self._line(first.render() if self.output_format == "text" else github_annotation(first))
                continue
            about = f"{count} times: {CODES.get(code, first.message)}{self._lists_each(first)}"
            text = f"info[{code}]: {about}"
            self._line(
                printable(text) if self.output_format == "text" else workflow_command("notice", f"[{code}] {about}")
            )
        self._infos.clear()

    def _lists_each(self, first: Diagnostic) -> str:
        if self.verbose_option:
            return " (--verbose lists each)"
        return f" (the first: {safe_text(first.path)})" if first.path else ""

    def counts(self) -> dict[str, object]:
        """The summary's ``diagnostics`` object."""
        sink = self.sink
        return {
            "errors": sink.errors,
            "warnings": sink.warnings,
            "infos": sink.by_severity["info"],
            "by_code": dict(sorted(sink.by_code.items())),
        }

    def summary(
        self,
        data: dict[str, Any],
        exit_code: int,
        line: str,
        text: Callable[[Console], None],
        problems: Iterable[tuple[str | None, str]] = (),
    ) -> None:
        """Finish: the held infos, the run's ``problems`` (``(path, message)``: why it exits 1 beyond the
        diagnostics), then the summary: ``data`` for json, ``line`` for github, ``text`` for text."""
        self.flush_infos()
        if self.output_format == "json":
            head = {"ng_traj_output": OUTPUT_VERSION, "type": "summary", "command": self.command}
            record = {**head, "exit_code": exit_code, "diagnostics": self.counts(), **data}
            self._write(orjson.dumps(safe_json(record)) + b"\n", flush=True)
            return
        if self.output_format == "github":
            for path, message in problems:
                self._line(workflow_command("error", message, path))
            self._line(printable(line))
            self._write(b"", flush=True)
            return
        for path, message in problems:
            where = f"{escape(printable(safe_text(path)))}: " if path else ""
            self.console.print(f"[bold red]error:[/] {where}{escape(printable(message))}")
        text(self.console)

    @contextlib.contextmanager
    def feedback(self) -> Iterator[Feedback]:
        """A progress display on standard error while the body runs: text format, on a terminal only."""
        if self.output_format != "text" or not self.console.is_terminal:
            yield Feedback()
            return
        columns = (TextColumn("{task.description}"), BarColumn(), _Amount(), TimeElapsedColumn())
        with Progress(*columns, console=self.console, transient=True) as progress:
            yield Feedback(progress)
