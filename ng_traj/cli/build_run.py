"""The body of ``ng-traj build``: check the request, run the pipeline, render the summary."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from ng_traj.assemble.build import BuildOptions, Encode, encode_line
from ng_traj.assemble.inputs import refuse_output_among_inputs
from ng_traj.assemble.pipeline import BuildSummary, build, prepare
from ng_traj.assemble.run import run_slots
from ng_traj.cli.common import (
    EXIT_DATA,
    EXIT_OK,
    gym_release,
    left_alone,
    refuse_compressed_name,
    refuse_folder_name,
)
from ng_traj.cli.output import Reporter
from ng_traj.diagnostics import DiagnosticSink, RunError, plural, printable, safe_text
from ng_traj.io.atomic import STDOUT, AbortWrite, atomic_file, check_file_target, written_path
from ng_traj.io.compression import logical_name
from ng_traj.io.files import check_inputs
from ng_traj.io.spans import text_copies
from ng_traj.redact import Redactor, check_keys, compile_patterns
from ng_traj.roles import parse_roles, unmatched_roles
from ng_traj.sources.detect import forcible_kinds
from ng_traj.sources.manifest import read_manifest
from ng_traj.writers.spool import SpoolLines, spool_appender, spool_folder


@dataclass(frozen=True)
class BuildRequest:
    """The parsed command line of ``ng-traj build``."""

    inputs: list[Path]
    output: str | None
    output_format: str
    force_kind: str | None
    manifest: Path | None
    roles: tuple[str, ...]
    attach: bool
    payloads: bool
    redact: bool
    redact_keys: tuple[str, ...]
    redact_patterns: tuple[str, ...]
    max_line_bytes: int
    stdout_is_terminal: bool
    jobs: int = 1
    gym_release: str = "0.7"
    engine: str = "local"
    ray_address: str | None = None
    ray_cpus: int | None = None
    report_format: str = "text"
    level: int = 0
    fail_on: str | None = None


FORMATS = ("jsonl", "parquet")
ENGINES = ("local", "ray")
FAIL_ON = ("error", "warning")
"""The severities ``--fail-on`` takes: exit 1 once a diagnostic of it (or, for ``warning``, an error) was reported."""


def output_format(requested: str | None, output: str) -> str:
    """The output format: as requested, else ``parquet`` for a path ending in ``.parquet``, else ``jsonl``.

    A ``--format`` the output's name contradicts is refused rather than obeyed: ``-o x.jsonl --format
    parquet`` would make a dataset folder named like a JSONL file, ``-o x.parquet --format jsonl`` a
    JSONL file named like a dataset, and every later command would read the name wrongly.

    Raises:
        RunError: An unknown format, Parquet to standard output, or a format the name contradicts.
    """
    chosen = requested or ("parquet" if Path(output).name.endswith(".parquet") else "jsonl")  # out.parquet/ too
    named = logical_name(Path(output).name)
    if chosen not in FORMATS:
        raise RunError(f"--format {requested!r}: choose from {', '.join(FORMATS)}")
    if chosen == "parquet" and output == STDOUT:
        raise RunError("a Parquet dataset is a directory: name it with -o (standard output takes JSONL only)")
    if chosen == "parquet" and named.endswith((".jsonl", ".json")):
        raise RunError(
            f"-o {output} names a JSONL file, but --format parquet writes a dataset folder: "
            "name the folder (x.parquet) or drop --format"
        )
    if chosen == "jsonl" and named.endswith(".parquet"):
        raise RunError(
            f"-o {output} names a Parquet dataset, but --format jsonl writes a JSONL file: "
            "name the file (x.jsonl) or drop --format"
        )
    return chosen


def _check(request: BuildRequest) -> tuple[str, str]:
    kinds = forcible_kinds()
    if request.force_kind is not None and request.force_kind not in kinds:
        raise RunError(f"--as {request.force_kind!r}: choose from {', '.join(kinds)}")
    if request.fail_on is not None and request.fail_on not in FAIL_ON:
        raise RunError(f"--fail-on {request.fail_on!r}: choose from {', '.join(FAIL_ON)}")
    _check_engine(request)
    if request.output is None and request.stdout_is_terminal:
        raise RunError("name an output file with -o (or -o - for standard output)")
    output = STDOUT if request.output is None else request.output
    if not output:
        raise RunError("-o needs a path (or - for standard output)")
    chosen = output_format(request.output_format, output)
    gym_release(request.gym_release, chosen)
    if chosen == "parquet" and request.attach:
        raise RunError("--attach writes rollout rows (JSONL); a Parquet dataset holds trajectories: drop one")
    if output != STDOUT:
        if chosen == "jsonl":
            refuse_folder_name(output, "out.jsonl")
            refuse_compressed_name(output)
        _check_target(output, chosen, probe=False)  # nothing made yet: probed once no input is the output
    if output != STDOUT and request.manifest is not None:
        _refuse_manifest_as_output(request.manifest, Path(output))
    return output, chosen


def _check_target(output: str, chosen: str, *, probe: bool = True) -> None:
    """Check the output before any input is read (again when it is written); with ``probe``, by
    making and removing a file beside it (``io.atomic.output_folder``).

    Raises:
        RunError: The output cannot be written there (its folder is missing, read-only, ...).
    """
    if chosen == "parquet":
        from ng_traj.writers.parquet import check_target

        check_target(Path(output), probe=probe)
    else:
        check_file_target(Path(output), probe=probe)


def _refuse_manifest_as_output(manifest: Path, output: Path) -> None:
    """Stop before anything is read when ``output`` would replace the ``--manifest`` file: the same
    file by any path (a symlink to it, a hard link of it), or, for a dataset, a folder holding it.
    The rollouts and capture inputs are refused alike when the inputs are walked (``assemble/inputs.py``).

    Raises:
        RunError: As above, naming both.
    """
    if not output.exists() or not manifest.exists():
        return
    real, target = Path(os.path.realpath(manifest)), Path(os.path.realpath(output))
    same = real == target
    with contextlib.suppress(OSError):
        same = same or os.path.samefile(manifest, output)
    if same:
        raise RunError(
            f"output {output} is the --manifest file {manifest}; writing would replace it: name another output"
        )
    if target in real.parents:
        raise RunError(
            f"output {output} is a folder holding the --manifest file {manifest}; writing would remove it: "
            "name another output"
        )


def _check_engine(request: BuildRequest) -> None:
    if request.engine not in ENGINES:
        raise RunError(f"--engine {request.engine!r}: choose from {', '.join(ENGINES)}")
    if request.ray_address is not None and request.engine != "ray":
        raise RunError("--ray-address names the Ray cluster of --engine ray: add --engine ray")
    if (request.ray_address or "").startswith("ray://"):
        raise RunError(
            f"--ray-address {request.ray_address}: Ray Client connections are not supported (the driver must read "
            "the inputs and the workers' output): run the build on a node of the cluster (--ray-address auto) "
            "or as a Ray job"
        )
    if request.engine == "ray":
        from ng_traj.assemble.engine_ray import require_ray

        require_ray()


def run(request: BuildRequest) -> int:
    """Run a build; returns the exit code: 1 when a named input yields nothing or nothing is built."""
    output, chosen = _check(request)
    try:
        roles = parse_roles(request.roles)
        patterns = compile_patterns(request.redact_patterns)
        check_keys(request.redact_keys)
    except ValueError as exc:
        raise RunError(str(exc)) from exc
    check_inputs(request.inputs)  # after the flags, before the manifest is read (checked alike) or the output probed
    with text_copies():  # the text of compressed rollouts files, removed when the build ends
        return _build(request, output, chosen, roles, patterns)


def _build(
    request: BuildRequest, output: str, chosen: str, roles: dict[str, str], patterns: tuple[re.Pattern[str], ...]
) -> int:
    reporter = Reporter("build", request.report_format, request.level, results_on_stdout=output == STDOUT)
    sink = reporter.sink
    summary = None
    with reporter.feedback() as feedback:
        feedback.step("planning: reading and attributing inputs")
        manifest = read_manifest(request.manifest, sink) if request.manifest else []
        exclude = None if output == STDOUT else written_path(Path(output))
        pending = exclude is not None and refuse_output_among_inputs(
            [*request.inputs, *(entry.path for entry in manifest)], exclude
        )
        probe = (lambda: None) if exclude is None else lambda: _check_target(output, chosen)
        if not pending:  # else the output may yet be refused: probed once discovery decided
            probe()
        inputs, slots, stats = prepare(
            request.inputs,
            sink,
            force_kind=request.force_kind,
            manifest=manifest,
            max_line_bytes=request.max_line_bytes,
            exclude=exclude,
            discovered=probe if pending else None,
            offer_as=True,
        )
        feedback.finish_steps()
        options = BuildOptions(
            capture_enabled=inputs.capture_enabled,
            payloads=request.payloads,
            attach=request.attach,
            redactor=Redactor(request.redact_keys, patterns) if request.redact else None,
            roles=roles,
            max_line_bytes=request.max_line_bytes,
            release=gym_release(request.gym_release, chosen),
        )
        advance = feedback.step("building trajectories", len(slots))
        opened, engine = _engine(request, output, chosen, roles)
        with contextlib.suppress(AbortWrite), opened as (write, encode):
            on_slot = lambda _: advance()  # noqa: E731
            summary = build(
                inputs, slots, stats, options, sink, write, on_slot, encode=encode, jobs=request.jobs, engine=engine
            )
            feedback.finish_steps()
            if not summary.tally.trajectories and output != STDOUT:
                raise AbortWrite
    assert summary is not None
    for warning in unmatched_roles(roles, summary.tally.by_role.servers, "this build"):
        sink.add(warning)
    failed = summary.empty_inputs or not summary.tally.trajectories or _fails_on(request.fail_on, sink)
    code = EXIT_DATA if failed else EXIT_OK
    _render(summary, reporter, output, code)
    return code


def _safe(value: Any) -> Any:
    """``value`` with every string valid UTF-8 (non-UTF-8 file names in paths)."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, list):
        return [_safe(item) for item in value]
    if isinstance(value, dict):
        return {_safe(key): _safe(item) for key, item in value.items()}
    return value


def _fails_on(fail_on: str | None, sink: DiagnosticSink) -> bool:
    """Whether ``--fail-on`` turns the diagnostics reported into exit 1 (the output is written all the same)."""
    if fail_on is None:
        return False
    return sink.errors > 0 or (fail_on == "warning" and sink.warnings > 0)


def _engine(request: BuildRequest, output: str, chosen: str, roles: dict[str, str]) -> tuple[Any, Callable]:
    """The output to open and the engine that runs the slots into it (``--engine``)."""
    if request.engine == "ray":
        from ng_traj.assemble.engine_ray import RayEngine

        ray = RayEngine(request.ray_address, request.ray_cpus)
        return ray.open(output, chosen, roles), ray.run
    return _open_output(output, chosen, request.jobs, roles), run_slots


@contextlib.contextmanager
def _open_output(
    output: str, chosen: str, jobs: int, roles: dict[str, str]
) -> Iterator[tuple[Callable[[Any], Any], Encode]]:
    """The atomic output: a JSONL file (or standard output) or a Parquet dataset (pyarrow loaded here).

    With several jobs, JSONL lines come from the workers through spool files (``writers/spool.py``).
    """
    if chosen == "parquet":
        from ng_traj.writers.parquet import open_dataset

        with open_dataset(output, roles=roles) as dataset:
            yield dataset.add_rows, dataset.encoder()
        return
    if jobs > 1:
        with atomic_file(output) as handle, spool_folder() as folder:
            yield spool_appender(handle), SpoolLines(folder)
        return
    with atomic_file(output) as handle:
        yield handle.write, encode_line


def _render(summary: BuildSummary, reporter: Reporter, output: str, code: int) -> None:
    data = _safe({"output": output, **summary.to_json()})
    shown = {**data, "diagnostics": reporter.counts()}
    problems = [(named, "nothing usable was built from this input") for named in summary.empty_inputs]
    if not summary.tally.trajectories and output != STDOUT:
        problems.append((None, f"no trajectory was built; {left_alone(output)}"))
        shown["output"] = f"{data['output']} (not written)"

    def text(console) -> None:  # paths as text: their control characters escaped
        console.print(_table(shown) if console.is_terminal else printable(_one_line(shown)), markup=False)

    reporter.summary(data, code, _one_line(shown), text, problems)


def _one_line(data: dict) -> str:
    gaps = sum(data["gaps_by_code"].values())
    return (
        f"built {plural(data['trajectories'], 'trajectory', 'trajectories')} "
        f"({plural(data['model_calls'], 'model call')}, {plural(data['tool_calls'], 'tool-call record')}, "
        f"{plural(gaps, 'gap')}) -> {data['output']}; {plural(data['lines_skipped'], 'line')} skipped, "
        f"{plural(len(data['orphan_captures']), 'orphan capture file')}, "
        f"{plural(data['diagnostics']['errors'], 'error')}, {plural(data['diagnostics']['warnings'], 'warning')}"
    )


def _roles(roles: dict) -> str:
    parts = []
    for role, totals in roles.items():
        tokens = totals["total_tokens"]
        parts.append(f"{role} {plural(totals['calls'], 'call')}, {'?' if tokens is None else plural(tokens, 'token')}")
    return "; ".join(parts) or "-"


def _table(data: dict) -> Table:
    table = Table(title=Text(printable(f"ng-traj build -> {data['output']}")), show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    rows = [
        ("trajectories", str(data["trajectories"])),
        ("by origin", ", ".join(f"{k} {v}" for k, v in data["by_origin"].items()) or "-"),
        ("inputs by kind", ", ".join(f"{k} {v}" for k, v in data["inputs_by_kind"].items()) or "-"),
        ("rows", f"{data['rollout_rows']} rollout, {data['task_input_rows']} task input"),
        (
            "calls",
            f"{data['model_calls']} model, {plural(data['tool_calls'], 'tool-call record')}; "
            f"{plural(data['invocations'], 'invocation')}",
        ),
        ("roles", _roles(data["roles"])),
        ("lines skipped", str(data["lines_skipped"])),
        ("orphan captures", str(len(data["orphan_captures"]))),
        ("gaps", ", ".join(f"{k} {v}" for k, v in data["gaps_by_code"].items()) or "-"),
        (
            "diagnostics",
            f"{plural(data['diagnostics']['errors'], 'error')}, {plural(data['diagnostics']['warnings'], 'warning')}",
        ),
    ]
    for key, value in rows:
        table.add_row(key, Text(value))  # values hold names from the data: never markup
    return table
