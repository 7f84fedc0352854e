"""``ng-traj schema``: print, write or check the generated JSON Schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ng_traj.cli.common import EXIT_DATA, EXIT_OK, DebugOption, guarded, stderr_console, stdout_errors
from ng_traj.diagnostics import RunError


def command(
    name: Annotated[
        str | None,
        typer.Argument(
            metavar="NAME",
            help="ng_trajectory, ng_agent_observations or ng_traj_output (a line of --output-format json); "
            "all when omitted.",
        ),
    ] = None,
    write: Annotated[bool, typer.Option("--write", help="Write the files into --dir instead of printing.")] = False,
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
        with stdout_errors():
            for each in names:
                typer.echo(render(each), nl=False)
        return EXIT_OK
    if not directory.is_dir():
        raise RunError(f"schema folder {directory} does not exist")
    console = stderr_console()
    stale = []
    for each in names:
        target = directory / file_name(each)
        text = render(each)
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current == text:
            continue
        if check:
            stale.append(str(target))
            continue
        with atomic_file(target) as handle:
            handle.write(text.encode("utf-8"))
        console.print(f"wrote {target}")
    if stale:
        again = "ng-traj schema --write" + (f" --dir {directory}" if directory != Path("schemas") else "")
        console.print(f"[red]out of date:[/] {escape(', '.join(stale))} (run `{escape(again)}`)")
        return EXIT_DATA
    return EXIT_OK
