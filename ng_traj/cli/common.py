"""What every command shares: error handling and exit codes (diagnostics, summary and progress: ``output.py``).

Exit codes: 0 success (warnings allowed), 1 data errors, 2 usage or tool errors, 130 interrupted
(143 when by SIGTERM: ``cli.main``), 141 standard output closed early. Expected errors print one
red line and no traceback; ``--debug`` adds the traceback of unexpected ones. Colour follows ``NO_COLOR`` and is
off when stderr is not a terminal.

Standard output that cannot be written (a full disk, a device error) is the run's error, said in one
line (exit 2); standard output closed by its reader (``| head``) stops the command quietly with 141,
the status of a process SIGPIPE ends. Standard error that cannot be written cannot say anything:
from its first failed write on, what would go there is dropped, and the command runs on to its own
exit code.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperCommand

from ng_traj.diagnostics import RunError, printable
from ng_traj.io.atomic import command_outputs, was_interrupted
from ng_traj.io.lines import MAX_LINE_BYTES_LIMIT

if TYPE_CHECKING:
    from ng_traj.contract.revisions import Release

EXIT_OK, EXIT_DATA, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 0, 1, 2, 130, 141

PATH_CHECKS: dict[str, Any] = {"readable": False}
"""The keyword arguments of every ``typer.Argument`` or ``typer.Option`` that names a path: Typer's
own readability check, which answers an unreadable path with the usage block, is off. Commands check
their input paths themselves (``io.files.check_inputs``: one line with the path and the reason, exit
2, for a missing, looped or unreadable input alike), and an output path need not be readable."""

DEBUG_HELP = "Show a traceback for unexpected errors."
DebugOption = Annotated[bool, typer.Option("--debug", help=DEBUG_HELP)]
MaxLineBytesOption = Annotated[
    int,
    typer.Option(
        metavar="BYTES",
        help="Skip (and report) input lines longer than this many bytes (at most 1 TiB).",
        min=1,
        max=MAX_LINE_BYTES_LIMIT,
    ),
]
RELEASE_HELP = (
    "The NeMo Gym release whose trajectory models the JSON output must satisfy: 0.7 (nemo-gym 0.7.0 and "
    "later) or pre-0.7 (earlier releases: the same records without the fields 0.7.0 added)."
)


RedactOption = Annotated[
    bool, typer.Option("--redact", help="Mask secrets (exact key names, credential patterns) in the output.")
]
RedactKeyOption = Annotated[
    list[str] | None,
    typer.Option(
        "--redact-key",
        metavar="KEY",
        help="Another exact key name to mask, its value masked whole (repeatable). A key the trajectory "
        "contract constrains anywhere (type, role, status, content, a count...) is refused: masking it would "
        "make the records invalid; mask text with --redact-pattern.",
        show_default=False,
    ),
]
RedactPatternOption = Annotated[
    list[str] | None,
    typer.Option(
        "--redact-pattern",
        metavar="REGEX",
        help="Another secret shape to mask in text, a Python regular expression; with a group named "
        "'secret', only that group is masked (repeatable).",
        show_default=False,
    ),
]
"""The ``--redact`` options of every command that writes trajectory content (``redact.py``)."""


def redactor(redact: bool, keys: list[str] | None, patterns: list[str] | None) -> Callable[[Any], Any] | None:
    """The masker of a value (a copy with secrets masked) that the ``--redact`` options ask for, or
    ``None`` when none is given (``--redact-key`` and ``--redact-pattern`` imply ``--redact``).

    Raises:
        RunError: A ``--redact-pattern`` is not a regular expression or matches the empty string; a
            ``--redact-key`` is empty or names a field the trajectory contract constrains
            (``redact.check_keys``). Checked before any input is read.
    """
    if not (redact or keys or patterns):
        return None
    from ng_traj.redact import Redactor, check_keys, compile_patterns

    try:
        check_keys(keys or ())
        return Redactor(keys or (), compile_patterns(patterns or ())).value
    except ValueError as exc:
        raise RunError(str(exc)) from exc


def refuse_compressed_name(output: str) -> None:
    """Refuse a JSONL output named like a compressed file (``out.jsonl.gz``, ``.zst``): ng-traj writes
    plain text, which tools that go by the name would fail to read.

    Raises:
        RunError: ``output`` ends in a compression suffix.
    """
    from ng_traj.io.compression import logical_name

    name = Path(output).name
    lowered = name.lower()  # .GZ and .Zst too
    plain = name[: len(name) - (len(lowered) - len(logical_name(lowered)))]
    if plain != name:
        raise RunError(
            f"-o {output}: the output is written as plain JSONL, not compressed; name it {plain} "
            "(and compress it afterwards, with gzip or zstd, if you need to: ng-traj reads it back either way)"
        )


def left_alone(output: str | Path) -> str:
    """What became of an output nothing was written to: ``X was left as it was`` when there is one
    (an earlier run's), ``X was not made`` when there is none."""
    return f"{output} was left as it was" if os.path.lexists(output) else f"{output} was not made"


def refuse_folder_name(output: str, example: str) -> None:
    """Refuse a file output named as a folder (``-o results/``): the name would lose its ``/`` and a
    file named ``results`` would be written, where the user asked for a folder.

    Args:
        output: The ``-o`` argument as given.
        example: A file name to suggest inside it (``out.jsonl``).

    Raises:
        RunError: ``output`` ends in ``/`` (dropping it is suggested unless a folder has that name).
    """
    if output.endswith(os.sep) or (os.altsep is not None and output.endswith(os.altsep)):
        folder = output.rstrip(os.sep + (os.altsep or ""))
        raise RunError(
            f"-o {output} names a folder (it ends in {os.sep}), and this output is one file: name the file, "
            f"such as {output}{example}"
            + (f", or drop the {os.sep} to write the file {folder}" if folder and not os.path.isdir(folder) else "")
        )


def stderr_console() -> Console:
    """A console on standard error (colour off when not a terminal or under ``NO_COLOR``; ``:name:``
    emoji codes, which file names and line numbers such as ``x.jsonl:100:`` contain, never replaced)."""
    return Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


PIPED_WIDTH = 1_000_000
"""The width, in columns, of what a command prints on standard output when it is not a terminal: no
line of a table or text is cut, folded or wrapped short of it (a row stays one line, a path whole)."""


def stdout_console(buffered: bool = False) -> Console:
    """A console for what a command prints on standard output.

    On a terminal, the terminal itself (its width and colours), or, with ``buffered``, a console
    writing into memory (``console.file``, an ``io.StringIO``) that renders as the terminal would.
    Elsewhere (a pipe, a file) always one writing into memory, without colour and
    :data:`PIPED_WIDTH` columns wide: rich's own default there, 80 columns, would ellipsise or fold
    table cells such as the file paths of ``show``'s ``where`` column. No ``:name:`` emoji codes
    replaced (file names and ``x.jsonl:100:`` contain them), no highlighting.
    """
    import io

    terminal = Console(highlight=False, emoji=False)
    if terminal.is_terminal and not buffered:
        return terminal
    width = terminal.width if terminal.is_terminal else PIPED_WIDTH
    colours = terminal.color_system if terminal.is_terminal else None
    return Console(file=io.StringIO(), highlight=False, emoji=False, width=width, color_system=colours)


def guarded(debug: bool, body: Callable[[], int]) -> None:
    """Run a command body and exit with its code, mapping failures to exit codes (module docstring).

    Raises:
        typer.Exit: Always, with the body's code, 2 for a :class:`RunError` or an unexpected error,
            130 on interrupt, 141 when standard output was closed by its reader.
    """
    real_stderr = sys.stderr
    sys.stderr = Unreported(real_stderr, [False])
    _stdout_failures.clear()
    try:
        with command_outputs():  # a signal after an output is committed does not undo the outcome
            code = _outcome(debug, body)
    finally:
        sys.stderr.flush()  # the diagnostics written as text are out before the command ends
        sys.stderr = real_stderr
    raise typer.Exit(code)


_stdout_failures: list[str] = []
"""The error of a failed write to standard output, kept so that the run ends with it even when the
code it was raised in caught it (all later writes succeed: they go to ``/dev/null``)."""


def _outcome(debug: bool, body: Callable[[], int]) -> int:
    console = stderr_console()
    try:
        code = body()
        with stdout_errors():
            sys.stdout.flush()  # what is still buffered fails here, not unreported at exit
        if _stdout_failures:
            raise RunError(_stdout_failures[0])
    except RunError as exc:
        message = _stdout_failures[0] if _stdout_failures else str(exc)  # may quote an id from the data
        console.print(f"[bold red]error:[/] {escape(printable(message))}")
        code = EXIT_USAGE
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED  # said by the entry point (``cli.main``)
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, but not with success, since the output (or
        # the validation) did not finish; 141 is what a process killed by SIGPIPE reports.
        _discard(sys.stdout)
        code = EXIT_BROKEN_PIPE
    except Exception as exc:
        if was_interrupted():  # the interrupt surfaced wrapped in another exception
            code = EXIT_INTERRUPTED
        elif _stdout_failures:  # the failed write, wrapped in another exception by the code it broke
            console.print(f"[bold red]error:[/] {escape(_stdout_failures[0])}")
            code = EXIT_USAGE
        else:
            if debug:
                traceback.print_exc()
            problem = escape(printable(f"{type(exc).__name__}: {exc}"))
            console.print(f"[bold red]internal error:[/] {problem} (run with --debug for a traceback)")
            code = EXIT_USAGE
    return code


def _discard(stream: Any) -> None:
    """Point ``stream``'s descriptor at ``/dev/null``, so that what is still buffered for it is
    flushed there at exit instead of failing again (nothing to do for a stream without one)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)


@contextlib.contextmanager
def stdout_errors() -> Iterator[None]:
    """Turn a failed write to standard output into the run's error (a closed pipe stays a
    ``BrokenPipeError``, which :func:`guarded` makes a quiet 141).

    Raises:
        RunError: An ``OSError`` other than a closed pipe left the block.
    """
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        _discard(sys.stdout)
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        _stdout_failures.append(f"cannot write standard output: {reason}")
        raise RunError(_stdout_failures[-1]) from exc


class Unreported:
    """A stream (standard error) that drops, silently, everything from its first failed write on (a
    full disk, a closed pipe): what cannot be written cannot be reported either, and the command goes
    on to its exit code. Its ``buffer`` (the bytes under a text stream) shares the same state."""

    def __init__(self, stream: Any, failed: list[bool]) -> None:
        self._stream = stream
        self._failed = failed

    def write(self, data: Any) -> int:
        """Write ``data``; after a failed write, drop it."""
        self._attempt(self._stream.write, data)
        return len(data)

    def flush(self) -> None:
        """Flush; after a failed write, do nothing."""
        self._attempt(self._stream.flush)

    def _attempt(self, action: Callable[..., Any], *args: Any) -> None:
        if self._failed[0]:
            return
        try:
            action(*args)
        except (OSError, ValueError):  # ValueError: the stream was closed
            self._failed[0] = True
            _discard(self._stream)

    @property
    def buffer(self) -> Unreported:
        """The binary stream under a text stream, dropping writes alike."""
        return Unreported(self._stream.buffer, self._failed)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class Command(TyperCommand):
    """The class of every ``ng-traj`` command: its arguments are named in the usage line and the
    help by their metavar alone, ``INPUT...`` for one taken any number of times and ``[ROLLOUT]`` for
    an optional one (Typer 0.29 wrote ``{INPUT}...`` and ``INPUT <list[Path]>``: Python type names
    that mean nothing to the user). Options are shown as Typer shows them. Typer 0.26 and later
    carry their own copy of click: parameters are told apart by ``param_type_name``, not by class."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        """``[OPTIONS]`` and each parameter's usage, an argument's as :func:`argument_name` names it."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            is_argument = param.param_type_name == "argument"
            pieces.extend([argument_name(param)] if is_argument else param.get_usage_pieces(ctx))
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """The Arguments and Options sections; an argument's row named as in the usage line."""
        arguments, options = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append((argument_name(param), record[1]))
            else:
                options.append(record)
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def argument_name(param: Any) -> str:
    """How help and usage name an argument: its metavar (else its name in capitals), ``...`` after
    it when it is taken any number of times, in brackets when it is optional (``INPUT...``, ``[ROLLOUT]``)."""
    name = param.metavar or (param.name or "").upper()
    name += "..." if param.nargs != 1 else ""
    return name if param.required or name.startswith("[") else f"[{name}]"  # a metavar may say it already


def gym_release(requested: str, chosen_format: str) -> Release:
    """The contract revision of the JSON output (``--gym-release``).

    Raises:
        RunError: An unknown release, or ``pre-0.7`` for a Parquet dataset (which keeps every field;
            the revision is chosen when converting it to JSONL).
    """
    from ng_traj.contract.revisions import RELEASES  # the contract models load only when a command runs

    if requested not in RELEASES:
        raise RunError(f"--gym-release {requested!r}: choose from {', '.join(RELEASES)}")
    if requested == "pre-0.7" and chosen_format == "parquet":
        raise RunError("a Parquet dataset keeps every field: choose --gym-release when converting it to JSONL")
    return requested  # type: ignore[return-value]
