"""``ng-traj schema``: print, write or check the generated JSON Schemas."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ng_traj.cli.common import EXIT_DATA, EXIT_OK, DebugOption, guarded, stderr_console, stdout_errors
from ng_traj.diagnostics import RunError
from ng_traj.schema_names import names_help


def command(
    name: Annotated[
        str | None,
        typer.Argument(
            metavar="NAME",
            help=f"{names_help()}; all when omitted, one JSON document after another (on a terminal, each "
            "headed by its name).",
        ),
    ] = None,
    write: Annotated[
        bool, typer.Option("--write", help="Write the files into --dir (made if missing) instead of printing.")
    ] = False,
    check: Annotated[bool, typer.Option("--check", help="Exit 1 when a file in --dir differs.")] = False,
    directory: Annotated[Path, typer.Option("--dir", metavar="DIR", help="Folder of the schema files.")] = Path(
        "schemas"
    ),
    debug: DebugOption = False,
) -> None:
    """Print, write (--write) or check (--check) the JSON Schemas generated from the contract models."""
    guarded(debug, lambda: _run(name, write, check, directory))


def _run(name: str | None, write: bool, check: bool, directory: Path) -> int:
    from ng_traj.contract.schemas import SCHEMA_NAMES, file_name, render
    from ng_traj.io.atomic import atomic_file

    if name is not None and name not in SCHEMA_NAMES:
        raise RunError(f"unknown schema {name!r}; choose from {', '.join(SCHEMA_NAMES)}")
    if write and check:
        raise RunError("--write and --check: give one (--check compares without writing)")
    names = [name] if name else list(SCHEMA_NAMES)
    if not (write or check):
        _print(names, render)
        return EXIT_OK
    console = stderr_console()
    if write and not directory.exists():
        try:
            directory.mkdir(parents=True)
        except OSError as exc:
            raise RunError(f"schema folder {directory} cannot be made: {exc.strerror or exc}") from None
        console.print(f"made {escape(str(directory))}", markup=True, highlight=False)
    if not directory.is_dir():
        what = "is not a folder" if directory.exists() else "does not exist"
        raise RunError(f"schema folder {directory} {what}")
    stale, missing = [], []
    for each in names:
        target = directory / file_name(each)
        text = render(each)
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current == text:
            continue
        if check:
            (stale if current is not None else missing).append(str(target))
            continue
        with atomic_file(target) as handle:
            handle.write(text.encode("utf-8"))
        console.print(f"wrote {target}")
    if stale or missing:
        again = "ng-traj schema --write" + (f" --dir {directory}" if directory != Path("schemas") else "")
        for what, paths in (("missing", missing), ("out of date", stale)):
            if paths:
                console.print(f"[red]{what}:[/] {escape(', '.join(paths))} (run `{escape(again)}`)")
        return EXIT_DATA
    return EXIT_OK


def _print(names: list[str], render: Callable[[str], str]) -> None:
    """Each schema as one JSON document on standard output, one after another (``jq`` reads the
    stream). With several and standard output a terminal, standard error names each just before it
    is printed, so that every document on the screen is headed by its name; a file or a pipe gets
    the JSON alone, and standard error stays quiet."""
    import sys

    headed = len(names) > 1 and sys.stdout.isatty()
    with stdout_errors():
        for number, each in enumerate(names, start=1):
            if headed:
                sys.stdout.flush()
                sys.stderr.write(f"schema {each} ({number} of {len(names)}; name one to print it alone):\n")
                sys.stderr.flush()
            typer.echo(render(each), nl=False)
