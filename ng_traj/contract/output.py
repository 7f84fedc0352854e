"""The machine-readable output of every command (``--output-format json``): one JSON object per line.

Each line carries the format's version (``"ng_traj_output": 1``) and a ``type``: ``diagnostic``
lines come as the problems are found, and one ``summary`` line, the run's totals, is always the last.
The summary's ``command`` names the command and decides its other fields. These models exist to
generate ``schemas/ng_traj_output.schema.json``; the commands write the lines with orjson, and a
test checks every line they write against the schema. A new field is added without changing the
version; a field removed or changing meaning raises it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

Count = Annotated[int, Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Line(_Strict):
    ng_traj_output: Literal[1]
    """Version of this output format."""


class DiagnosticLine(_Line):
    """One problem found in the data, as it was found."""

    type: Literal["diagnostic"]
    path: str | None
    """The input file (or dataset folder) the problem is in; null when it is in none."""
    line: Annotated[int, Field(ge=1)] | None
    """1-based line in ``path`` (for a Parquet dataset, the trajectory's position); null when none."""
    offset: Count | None
    """Byte offset of the line's first byte in ``path``; null when not known."""
    severity: Literal["error", "warning", "info"]
    """``error``: the record or line is invalid or was skipped; ``warning``; ``info``."""
    code: str
    """Stable identifier of the kind of problem (the codes are listed in the documentation)."""
    pointer: str | None
    """Dotted field path inside the record (``invocations.0.conversation.3``); null when none."""
    message: str
    """One sentence saying what is wrong (and what to do, where there is something to do)."""


class DiagnosticCounts(_Strict):
    """How many diagnostics the run produced: every one, whatever ``--quiet`` or ``--verbose`` showed."""

    errors: Count
    warnings: Count
    infos: Count
    by_code: dict[str, Count]
    """Code -> number of diagnostics with it, codes sorted."""


class _Summary(_Line):
    type: Literal["summary"]
    exit_code: Literal[0, 1]
    """The command's exit code: 0 success (warnings allowed), 1 problems in the data."""
    diagnostics: DiagnosticCounts


class RoleTotals(_Strict):
    """Model calls of one role and the sums of their reported token counts (null when none reported one)."""

    calls: Count
    prompt_tokens: int | None
    completion_tokens: int | None
    total_tokens: int | None


class UnsupportedInput(_Strict):
    """An input recognised as a format ng-traj does not read."""

    path: str
    recognised_as: str


class UnattributedSession(_Strict):
    """A native session tied to no rollout: built on its own."""

    session: str
    paths: list[str]
    reason: str


class BuildSummaryLine(_Summary):
    """The totals of ``ng-traj build``."""

    command: Literal["build"]
    output: str
    """The output path, ``-`` for standard output."""
    trajectories: Count
    by_origin: dict[str, Count]
    """``rollout_row``, ``rollout_row_without_identity``, ``capture_without_row``, ``session_without_row``."""
    inputs_by_kind: dict[str, Count]
    rollout_rows: Count
    task_input_rows: Count
    rows_without_identity: Count
    lines_skipped: Count
    """Input lines skipped as unreadable."""
    invocations: Count
    model_calls: Count
    tool_calls: Count
    roles: dict[str, RoleTotals]
    projection_failures: Count
    gaps_by_code: dict[str, Count]
    native_session_totals: dict[str, int]
    """The producers' own session token totals, a cross-check of the model calls' counts."""
    orphan_captures: list[str]
    ambiguous_captures: list[str]
    unattributed_sessions: list[UnattributedSession]
    unsupported_inputs: list[UnsupportedInput]
    empty_inputs: list[str]
    """Named inputs nothing usable was built from (exit code 1)."""


class ValidateSummaryLine(_Summary):
    """The totals of ``ng-traj validate``."""

    command: Literal["validate"]
    files: Count
    records: Count
    """Trajectory records checked."""
    valid: Count
    invalid: Count
    lines_skipped: Count
    nothing_validated: list[str]
    """Named files (or datasets) holding no trajectory record to check (exit code 1)."""
    revision: str
    """Which contract revision the records need: ``0.7 fields present (...)`` when a record carries a
    field nemo-gym 0.7.0 added, else ``fits both revisions (...)``; with no record checked,
    ``no records: nothing to measure``."""


class MatrixSummaryLine(_Summary):
    """The totals of ``ng-traj matrix`` (the matrix itself is on standard output)."""

    command: Literal["matrix"]
    records: Count
    """Records evaluated."""
    groups: Count
    revision: str
    """Which contract revision the records need (as for ``validate``); with no record,
    ``no records: nothing to measure``."""


class ConvertSummaryLine(_Summary):
    """The totals of ``ng-traj convert``."""

    command: Literal["convert"]
    source: str
    output: str
    """The output path, ``-`` for standard output."""
    written: Count
    """Trajectories written."""
    skipped: Count
    """Records left out because they break the contract or are no trajectory."""
    lines_skipped: Count
    """Input lines skipped as unreadable (not JSON, not an object, cut short, too long): no record,
    so not among ``skipped``; an error diagnostic each. Always 0 from a Parquet dataset."""


class ExportedRollout(_Strict):
    """One rollout of an ``export``, as the completeness report records it."""

    rollout_id: str
    status: Literal["complete", "lossy", "refused", "not_written"]
    """``complete``: nothing lost; ``lossy``: written, something the format cannot hold left out;
    ``refused``: left out by ``--strict``; ``not_written``: it could not be exported."""
    output: str | None
    """The file it was written to; null when it was not written."""
    summary: str
    """The rollout's line of the text summary."""


class ExportSummaryLine(_Summary):
    """The totals of ``ng-traj export``."""

    command: Literal["export"]
    exit_code: Literal[0, 1, 3]  # type: ignore[assignment]
    """0 everything exported, nothing lost; 3 everything exported, something lost (see the
    completeness report); 1 input lines skipped, rollouts refused or not written, or nothing exported."""
    format: Literal["atif", "otlp"]
    output: str
    """The output folder (ATIF, OTLP with ``--split``) or file (OTLP)."""
    report: str
    """The completeness report's path (``OUT.completeness.json``)."""
    written: Count
    """Rollouts written."""
    read: Count
    """Records read: every rollout listed in ``rollouts`` plus those skipped as invalid."""
    skipped_invalid: Count
    """Records reading skipped as invalid (JSON objects that are no valid trajectory, one or more
    error diagnostics each, and rollout rows that carry no trajectory, a ``trajectory_missing``
    warning each); they have no outcome and are not in ``rollouts``."""
    lines_skipped: Count
    """Input lines skipped as unreadable (not JSON, not an object, cut short, too long): no record,
    so neither read nor skipped as invalid; an error diagnostic each."""
    rollouts: list[ExportedRollout]
    """Every rollout read (and not skipped as invalid), in input order."""


class ReportSummaryLine(_Summary):
    """The totals of ``ng-traj report``."""

    command: Literal["report"]
    rollouts: Count
    """Rollouts in the report (0: nothing was written, exit code 1)."""
    compared: Count
    """Rollouts of the ``--compare`` inputs (0 without ``--compare``)."""
    output: str
    """The HTML file's path."""


SummaryLine = Annotated[
    BuildSummaryLine
    | ValidateSummaryLine
    | MatrixSummaryLine
    | ConvertSummaryLine
    | ExportSummaryLine
    | ReportSummaryLine,
    Field(discriminator="command"),
]


class OutputLine(RootModel[Annotated[DiagnosticLine | SummaryLine, Field(discriminator="type")]]):
    """One line of ng-traj's JSON output: a diagnostic, or the run's summary (always the last line)."""
