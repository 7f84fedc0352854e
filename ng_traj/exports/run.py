"""The driver of ``ng-traj export``: read, map, write atomically, report what each rollout lost.

Outputs (``-o OUT``):

* ``atif``: a folder with one ATIF document per rollout, ``<rollout_id>.json`` (characters other
  than letters, digits, ``.``, ``_`` and ``-`` replaced by ``_``, and leading dots too, so no name
  is hidden (``.`` and ``..`` are ``_`` and ``__``); a name longer than 160 characters keeps its
  first 143 and ends in ``-<16 hex digits of the SHA-256 of the rollout id>``, so every file name
  stays under 200 bytes; when two rollouts would share a name, each gets ``-<8 hex digits of its
  trace id>`` too, whatever the input order);
* ``otlp``: one JSON Lines file, a ``TracesData`` per rollout per line, in input order; with
  ``split``, a folder with one ``<rollout_id>.jsonl`` per rollout (named as above);
* the completeness report, ``<OUT>.completeness.json`` beside the output.

Every output replaces its target only when the export completes and wrote at least one rollout
(``io.atomic``); an existing output folder only when it is empty or an earlier export's
(:func:`check_folder`); an output that is, or is a folder holding, one of the inputs is refused.
The completeness report is written first (to its temporary, synced), then the documents replace their
target, then the report replaces its own: an export whose report cannot be written leaves neither,
and the last check of an existing output folder reads the earlier report, which says what the
earlier export wrote there. Paths in the report are text as ``validate`` writes
them (``diagnostics.safe_text``: the bytes of a non-UTF-8 file name as U+FFFD).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal

import orjson

from ng_traj.checks import TRAJECTORY_MISSING
from ng_traj.contract import TrajectoryRecord
from ng_traj.diagnostics import LINE_SKIP_CODES, Diagnostic, DiagnosticSink, RunError, safe_text
from ng_traj.exports.common import Completeness, Rollout, hex_id
from ng_traj.io.atomic import AbortWrite, atomic_directory, atomic_file, check_replaceable_folder, written_path
from ng_traj.records import read_inputs, refuse_input_as_output

Format = Literal["atif", "otlp"]
REPORT_VERSION = "1"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_LEADING_DOTS = re.compile(r"^\.+")
NAME_MAX = 160
"""The longest file-name stem made from a rollout id, in characters (all ASCII, so bytes too): with
a collision's ``-<tag>-<where>`` (18) and ``.jsonl`` a name stays under 200 bytes (the usual limit
is 255)."""


def name_stem(rollout_id: str) -> str:
    """The file-name stem of a rollout id: ASCII, at most :data:`NAME_MAX` characters, never empty,
    never starting with ``.`` (see the module docstring). Deterministic; distinct long ids give
    distinct stems (their digests differ), and stems that still coincide are told apart by
    :class:`_Names`."""
    base = _UNSAFE.sub("_", rollout_id) or "_"
    base = _LEADING_DOTS.sub(lambda dots: "_" * len(dots.group()), base)
    if len(base) > NAME_MAX:
        digest = hex_id(rollout_id.encode("utf-8", "surrogatepass"), length=16)
        base = f"{base[: NAME_MAX - 17]}-{digest}"
    return base


@dataclass(slots=True)
class Outcome:
    """One rollout's result: ``status`` ``complete``, ``lossy``, ``refused`` or ``not_written``."""

    rollout: Rollout
    status: str
    output: str | None
    report: Completeness
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        rollout = self.rollout
        head = {
            "source": safe_text(rollout.source),
            "line": rollout.position,
            "run": rollout.run,
            "task_id": rollout.task_id,
            "rollout_id": rollout.rollout_id,
            "status": self.status,
            "output": None if self.output is None else safe_text(self.output),
            "reason": self.reason,
        }
        return {**{k: v for k, v in head.items() if v is not None}, **self.report.to_json()}

    def line(self) -> str:
        where = f" -> {self.output}" if self.output else ""
        why = f": {self.reason}" if self.reason else f": {self.report.summary()}"
        return f"{self.rollout.rollout_id}{where}: {self.status}{why}"


@dataclass(slots=True)
class Exported:
    """The outcomes of an export, in input order, and how many records reading skipped as invalid
    (JSON objects that are no valid trajectory: one or more error diagnostics naming their line or
    dataset row); ``read`` counts both. Lines that are no record at all (not JSON, not an object) are
    not records: the caller counts them from its sink (``diagnostics.lines_skipped``)."""

    outcomes: list[Outcome] = field(default_factory=list)
    skipped: int = 0

    @property
    def read(self) -> int:
        """Records read: those with an outcome plus those skipped as invalid."""
        return len(self.outcomes) + self.skipped

    @property
    def written(self) -> int:
        return sum(1 for o in self.outcomes if o.output is not None)

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)


@dataclass(frozen=True, slots=True)
class ExportRequest:
    inputs: tuple[Path, ...]
    output: Path
    format: Format
    strict: bool = False
    split: bool = False
    agent_version: str = "unknown"
    session_id: str | None = None
    max_line_bytes: int = 0


def report_path(output: Path) -> Path:
    """Where the completeness report of ``output`` goes: ``<output>.completeness.json`` beside it."""
    return output.with_name(output.name + ".completeness.json")


def check_folder(path: Path, suffix: str) -> None:
    """Refuse to replace a folder unless it is empty or an earlier export's: every entry a file
    named ``*<suffix>`` that the completeness report beside it (:func:`report_path`) lists as a
    rollout's output. A folder of the user's own files, even of ``*<suffix>`` ones, is left alone.

    Raises:
        RunError: ``path`` is a folder with other entries (replacing it would delete them), or one
            this user may not write (``io.atomic.check_replaceable_folder``).
    """
    if not path.is_dir():
        return
    check_replaceable_folder(written_path(path))
    written = _reported_outputs(report_path(path))
    foreign = sorted(
        entry.name
        for entry in path.iterdir()
        if not (entry.is_file() and entry.name.endswith(suffix) and entry.name in written)
    )
    if foreign:
        named = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        report = report_path(path)
        why = "does not list them" if report.exists() else "is not there"
        raise RunError(
            f"output {path} is an existing folder that holds {named}, which no earlier export wrote (its "
            f"completeness report {report.name} beside it {why}); not replaced: name a new or empty folder"
        )


def check_report(output: Path) -> None:
    """Refuse to replace a file at ``output``'s completeness report path (:func:`report_path`) that is
    not an earlier export's completeness report (a JSON object with ``ng_traj_completeness``): a file
    of the user's own that happens to have the name is left alone.

    Raises:
        RunError: The report path is a folder, or a file that is no completeness report.
    """
    report = report_path(output)
    if report.is_dir():
        raise RunError(f"{report} is a directory: the completeness report of {output} is written there")
    if not report.exists():
        return
    try:
        value = orjson.loads(report.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        value = None
    if not (isinstance(value, dict) and "ng_traj_completeness" in value):
        raise RunError(
            f"{report} exists and is not the completeness report of an earlier export; not replaced: "
            f"move it, or name another output than {output} (its report is written beside it, as "
            f"{report.name})"
        )


def _reported_outputs(report: Path) -> frozenset[str]:
    """The names of the files a completeness report lists as written (``rollouts[].output``, paths in
    the folder); empty when the report is missing, unreadable or not one."""
    try:
        value = orjson.loads(report.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return frozenset()
    if (
        not isinstance(value, dict)
        or "ng_traj_completeness" not in value
        or not isinstance(value.get("rollouts"), list)
    ):
        return frozenset()
    return frozenset(
        Path(item["output"]).name
        for item in value["rollouts"]
        if isinstance(item, dict) and isinstance(item.get("output"), str)
    )


def rollouts(
    request: ExportRequest,
    sink: DiagnosticSink,
    redact: Callable[[Any], Any] | None,
    on_skip: Callable[[], None] | None = None,
) -> Iterable[Rollout]:
    """The inputs' trajectories as :class:`Rollout` s, redacted when ``redact`` is given.

    ``on_skip`` is called once per record that reading skipped as invalid: the first error
    diagnostic of reading at each line (a file or dataset refused whole names none), unless the
    line is no record at all (:data:`~ng_traj.diagnostics.LINE_SKIP_CODES`: not JSON, not an object),
    and each rollout row that carries no trajectory (``trajectory_missing``, a warning: the rollout
    is not exported, so it counts as skipped and the export exits 1).
    """
    kwargs = {"max_line_bytes": request.max_line_bytes} if request.max_line_bytes else {}
    outputs = [request.output, report_path(request.output)]
    counted_at: set[tuple[str | None, int]] = set()

    def counted(diagnostic: Diagnostic) -> None:
        at = (diagnostic.path, diagnostic.line)
        if (
            on_skip is not None
            and (
                (diagnostic.severity == "error" and diagnostic.code not in LINE_SKIP_CODES)
                or diagnostic.code == TRAJECTORY_MISSING.code
            )
            and diagnostic.line is not None
            and at not in counted_at
        ):
            counted_at.add(at)  # type: ignore[arg-type]
            on_skip()
        sink.add(diagnostic)

    reading = DiagnosticSink(emit=counted) if on_skip is not None else sink
    for read in read_inputs(request.inputs, reading, outputs=outputs, **kwargs):
        value = with_defaults(read.value, read.record)
        value = redact(value) if redact else value
        agent_ref = (read.row or {}).get("agent_ref") if read.row else None
        yield Rollout(
            value,
            read.source,
            read.position,
            read.run,
            read.agent,
            read.producer,
            read.reward,
            agent_ref if isinstance(agent_ref, dict) else None,
        )


def with_defaults(value: dict[str, Any], record: TrajectoryRecord) -> dict[str, Any]:
    """``value`` with the top-level fields it leaves out as the contract defaults them (a record of
    the earlier revision may leave out ``schema_version`` and the lists), so the exports can read
    every field; ``value`` itself when it has them all."""
    missing = {name for name in TrajectoryRecord.model_fields if name not in value}
    return {**value, **record.model_dump(mode="json", include=missing)} if missing else value


class _Names:
    """File names per rollout, the same whatever the input order (see the module docstring)."""

    def __init__(self, folder: Path, suffix: str) -> None:
        self.folder = folder
        self.suffix = suffix
        self.taken: dict[str, list[tuple[str, Outcome]]] = {}

    def place(self, outcome: Outcome) -> Path:
        """The file for ``outcome``'s rollout (``outcome.output`` set to its name); the first holder
        of a name now shared is renamed to its tagged name."""
        rollout = outcome.rollout
        base = name_stem(rollout.rollout_id)
        tag = hex_id(rollout.seed, "trace")[:8]
        holders = self.taken.setdefault(base, [])
        if len(holders) == 1:
            first_tag, first = holders[0]
            tagged = f"{base}-{first_tag}{self.suffix}"
            (self.folder / str(first.output)).rename(self.folder / tagged)
            first.output = tagged
        outcome.output = f"{base}{self.suffix}" if not holders else f"{base}-{tag}{self.suffix}"
        if any(held_tag == tag for held_tag, _ in holders):  # the same run, task and rollout again
            where = hex_id(rollout.source.encode("utf-8", "surrogatepass"), str(rollout.position), length=8)
            outcome.output = f"{base}-{tag}-{where}{self.suffix}"
        holders.append((tag, outcome))
        return self.folder / outcome.output


def export(
    request: ExportRequest,
    sink: DiagnosticSink,
    redact: Callable[[Any], Any] | None = None,
    on_rollout: Callable[[], None] | None = None,
) -> Exported:
    """Export every input rollout; returns the outcomes in input order.

    Raises:
        RunError: An input cannot be read (``io.files.check_inputs``), or an output cannot be written.
    """
    from ng_traj.exports import atif, otlp

    result = Exported()

    def skip() -> None:
        result.skipped += 1

    def one(rollout: Rollout) -> tuple[Outcome, bytes | None]:
        report = Completeness()
        if request.strict:
            reason = atif.strict_refusal(rollout)
            if reason is not None:
                where = {"path": rollout.source, "line": rollout.position}
                sink.add(Diagnostic("error", "export_refused", f"rollout {rollout.rollout_id}: {reason}", **where))
                return Outcome(rollout, "refused", None, report, reason), None
        if request.format == "atif":
            document = atif.build_document(
                rollout, report, agent_version=request.agent_version, session_id=request.session_id
            )
            try:
                atif.validate(document)
            except ValueError as exc:
                message = f"rollout {rollout.rollout_id}: the ATIF models reject the document: {exc}"
                sink.add(Diagnostic("error", "export_invalid", message, path=rollout.source, line=rollout.position))
                return Outcome(rollout, "not_written", None, report, "rejected by the ATIF models"), None
            data = atif.document_bytes(document)
        else:
            traces = otlp.build_traces(rollout, report)
            if traces is None:
                message = f"rollout {rollout.rollout_id}: no model call or tool call has a time; no trace written"
                sink.add(Diagnostic("warning", "export_untimed", message, path=rollout.source, line=rollout.position))
                return Outcome(rollout, "not_written", None, report, "nothing timed"), None
            data = otlp.line_bytes(traces)
        return Outcome(rollout, "lossy" if report.lost else "complete", None, report), data

    refuse_input_as_output(request.inputs, request.output, report_path(request.output))
    # The report's temporary is the outer block, the documents' the inner one: the report is written
    # and synced before the documents replace their target, and renamed over its own right after.
    with contextlib.suppress(AbortWrite), atomic_file(report_path(request.output)) as report:
        if request.format == "otlp" and not request.split:
            with atomic_file(request.output) as handle:
                _to_file(request, sink, redact, on_rollout, one, handle, result, skip)
                if not result.written:
                    raise AbortWrite  # nothing exported: an earlier export at the output stays as it was
                _write_report(report, request, result)
            if not result.written:
                raise AbortWrite  # the file's own block dropped its text: the report's drops the report
        else:
            suffix = ".json" if request.format == "atif" else ".jsonl"
            check = lambda path: check_folder(path, suffix)  # noqa: E731
            with atomic_directory(request.output, check=check) as folder:
                names = _Names(folder, suffix)
                for rollout in rollouts(request, sink, redact, skip):
                    outcome, data = one(rollout)
                    if data is not None:
                        names.place(outcome).write_bytes(data)
                    result.outcomes.append(outcome)
                    if on_rollout:
                        on_rollout()
                if not result.written:
                    raise AbortWrite
                for outcome in result.outcomes:
                    if outcome.output is not None:
                        outcome.output = str(request.output / outcome.output)
                _write_report(report, request, result)
    return result


def _write_report(handle: BinaryIO, request: ExportRequest, result: Exported) -> None:
    """Write the completeness report to its temporary and sync it, inside the block writing the
    documents, before they replace their target: a report that cannot be written (a full disk)
    raises there, so the documents are dropped with it. The documents are committed first, while
    the earlier report beside them still says which files an earlier export wrote (the last check
    of the folder reads it), then the report: a failure leaves both as they were, and only a crash
    between the two renames can leave the new documents beside the earlier report.

    Raises:
        RunError: The report cannot be written (a full disk).
    """
    handle.write(report_bytes(request, result))
    handle.flush()
    os.fsync(handle.fileno())


def _to_file(
    request: ExportRequest,
    sink: DiagnosticSink,
    redact: Callable[[Any], Any] | None,
    on_rollout: Callable[[], None] | None,
    one: Callable[[Rollout], tuple[Outcome, bytes | None]],
    handle: BinaryIO,
    result: Exported,
    on_skip: Callable[[], None],
) -> None:
    line = 0
    for rollout in rollouts(request, sink, redact, on_skip):
        outcome, data = one(rollout)
        if data is not None:
            handle.write(data)
            line += 1
            outcome.output = f"{request.output}:{line}"
        result.outcomes.append(outcome)
        if on_rollout:
            on_rollout()


def report_bytes(request: ExportRequest, result: Exported) -> bytes:
    """The completeness report: JSON with a 2-space indent and a trailing newline."""
    report = {
        "ng_traj_completeness": REPORT_VERSION,
        "format": request.format,
        "strict": request.strict,
        "output": safe_text(request.output),
        "totals": {
            "rollouts": len(result.outcomes),
            "written": result.written,
            **{status: result.count(status) for status in ("complete", "lossy", "refused", "not_written")},
        },
        "rollouts": [outcome.to_json() for outcome in result.outcomes],
    }
    return orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
