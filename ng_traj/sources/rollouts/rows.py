"""Rollout records: the JSONL rows a NeMo Gym collector writes.

Format: one JSON object per line in completion order (not sorted), in the main output file and, for
failed rollouts, the ``<stem>_failures.jsonl`` sidecar; together they form a *run*. A row carries the
agent's ``response``, the ``responses_create_params`` it was given, the reward and verifier fields,
the identity keys ``_ng_task_index``, ``_ng_rollout_index``, ``_ng_attempt_index`` (only when > 0) and,
since 2026-08-20, ``_ng_rollout_id``; with observability on, also ``ng_model_call_capture``,
``ng_agent_observations`` and ``ng_trajectory``. Materialized input rows
(``responses_create_params`` without a ``response``) are task inputs, not rollouts.

Identity follows ``maybe_rollout_id_from_run_body`` and ``_trajectory_identity`` exactly. Rows without any identity key get ``<file name>:<line>`` and a gap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ng_traj.diagnostics import json_quoted, quoted, safe_text
from ng_traj.io.compression import logical_name
from ng_traj.io.lines import JSON_TYPES, decode_line
from ng_traj.io.spans import read_span

EXPLICIT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
TASK_KEYS = ("task_id", "problem_id", "instance_id")
FAILURES_SUFFIX = "_failures.jsonl"

ROLLOUT_MARKERS = (
    "response",
    "reward",
    "_ng_failure_class",
    "ng_model_call_capture",
    "ng_agent_observations",
    "ng_trajectory",
    "judge_evaluations",
    "judge_response",
)
"""A row with any of these keys is a rollout; one with none of them is a task input row when it has
:data:`TASK_INPUT_KEY`, else no row of a rollouts file at all (:func:`row_kind`)."""

TASK_INPUT_KEY = "responses_create_params"
"""The key of a materialized task input row (NeMo Gym's input to a rollout)."""


class IdentityError(ValueError):
    """The row's identity keys are malformed (an invalid ``_ng_rollout_id``, task, rollout or attempt
    index); the message names the key and quotes its value as JSON text (:func:`json_quoted`)."""


@dataclass(frozen=True, slots=True)
class Identity:
    """Canonical identity of a rollout.

    Attributes:
        task_id: ``task_id`` / ``problem_id`` / ``instance_id`` as text, else the task index, else
            ``unknown``.
        rollout_id: The reference rollout id, or ``<file name>:<line>`` when the row has none.
        derived: False when ``rollout_id`` is the file-and-line fallback.
        problem: Why the row has no derived id, when it has none.
        invalid: True when the row has identity keys but a malformed one (:class:`IdentityError`),
            False when it has none or a derived id.
    """

    task_id: str
    rollout_id: str
    derived: bool = True
    problem: str | None = None
    invalid: bool = False


def is_rollout_row(row: dict[str, Any]) -> bool:
    """True for a rollout record, False for a task input row (no response, reward or attachment)."""
    return any(key in row for key in ROLLOUT_MARKERS)


def row_kind(row: dict[str, Any]) -> str:
    """``"rollout"`` for a rollout record (:func:`is_rollout_row`), ``"task_input"`` for a task input
    row (:data:`TASK_INPUT_KEY` without a rollout key), ``"other"`` for an object with neither (``{}``,
    a stray record): not a row of a rollouts file."""
    if is_rollout_row(row):
        return "rollout"
    return "task_input" if TASK_INPUT_KEY in row else "other"


def not_a_rollout_row_message(row: dict[str, Any]) -> str:
    """The ``rollout_row_unrecognised`` message of a row :func:`row_kind` calls ``"other"``."""
    keys = ", ".join((*ROLLOUT_MARKERS, TASK_INPUT_KEY))
    held = (
        f"its keys: {', '.join(quoted(key) for key in list(row)[:5])}{', …' if len(row) > 5 else ''}"
        if row
        else "no keys"
    )
    return f"not a rollout row nor a task input (none of {keys}; {held}); skipped"


def rollout_id(row: dict[str, Any]) -> str | None:
    """The reference rollout id of ``row``, or ``None`` when it has no identity keys.

    Raises:
        IdentityError: ``_ng_rollout_id`` is not a string matching ``^[A-Za-z0-9][A-Za-z0-9._-]*$``,
            ``_ng_attempt_index`` is not an integer, or (without ``_ng_rollout_id``) ``_ng_task_index``
            or ``_ng_rollout_index`` is a number that is not a non-negative integer (:func:`_index`).
    """
    explicit = row.get("_ng_rollout_id")
    if explicit is not None:
        if not isinstance(explicit, str) or not EXPLICIT_ID.match(explicit):
            raise IdentityError(f"_ng_rollout_id {json_quoted(explicit)} is not a valid rollout id")
        base = explicit
    else:
        task, rollout = _index(row, "_ng_task_index"), _index(row, "_ng_rollout_index")
        if task is None or rollout is None:
            return None
        base = f"{task}-{rollout}"
    attempt = row.get("_ng_attempt_index")
    if attempt is not None:
        try:
            number = int(attempt)
        except (TypeError, ValueError) as exc:
            raise IdentityError(f"_ng_attempt_index {json_quoted(attempt)} is not an integer") from exc
        if number > 0:
            base = f"{base}-a{number}"
    return base


def task_id(row: dict[str, Any]) -> str:
    """``str`` of the first non-null ``task_id``, ``problem_id``, ``instance_id``; else the task index
    (``unknown`` when there is none or it is no valid index, :func:`_index`)."""
    for key in TASK_KEYS:
        if _scalar(row.get(key)) is not None:
            return str(row[key])
    try:
        index = _index(row, "_ng_task_index")
    except IdentityError:
        index = None
    return "unknown" if index is None else str(index)


def _index(row: dict[str, Any], key: str) -> Any:
    """The row's ``key`` (``_ng_task_index`` or ``_ng_rollout_index``) for an id, ``None`` when absent
    (the key missing, or JSON null).

    The collector stamps these as non-negative integers. Any other JSON value but text is no index:
    a boolean, a float (``1.5``, ``1e3``; an integer of 2^64 or more parses as one, and would make an
    id like ``1e+30-0``), a negative integer (an id the resources server cannot parse back), a list
    or an object raise :class:`IdentityError`, so the row is named by file and line and reported
    as malformed (``rollout_identity_invalid``), as for a malformed ``_ng_rollout_id``. Text is kept
    and formatted as upstream formats it (``"x"`` gives the id ``x-0``).
    """
    value = row.get(key)
    if value is None or isinstance(value, str) or (type(value) is int and value >= 0):
        return value
    raise IdentityError(f"{key} {json_quoted(value)} is not a non-negative integer")


def _scalar(value: Any) -> Any:
    """``value``, or ``None`` for a list or an object: a task key holding one counts as absent
    (its text would not be an id, and ``str`` of a value nested 1,000 deep raises ``RecursionError``)."""
    return None if isinstance(value, list | dict) else value


def identity(row: dict[str, Any], file_name: str, line: int) -> Identity:
    """Canonical identity of a row read from line ``line`` of the file named ``file_name``."""
    try:
        derived = rollout_id(row)
        problem = None if derived is not None else "no _ng_rollout_id and no task/rollout indices"
        invalid = False
    except IdentityError as exc:
        derived, problem, invalid = None, str(exc), True
    if derived is None:
        fallback = f"{safe_text(file_name)}:{line}"
        return Identity(task_id(row), fallback, derived=False, problem=problem, invalid=invalid)
    return Identity(task_id(row), derived)


def task_from_rollout_id(rollout: str) -> str:
    """Task id parsed from a derived ``<task>-<rollout>[-a<n>]`` id, else ``unknown``."""
    match = re.fullmatch(r"(-?\d+)-(-?\d+)(?:-a\d+)?", rollout)
    return match.group(1) if match else "unknown"


OBJECT_KEYS = (
    "response",
    "responses_create_params",
    "ng_model_call_capture",
    "ng_agent_observations",
    "ng_trajectory",
    "raw_rollout",
)
"""Row keys ng-traj reads as objects (null counts as absent)."""


def object_key_problems(row: dict[str, Any]) -> list[tuple[str, str]]:
    """``(key, why)`` for each of :data:`OBJECT_KEYS` the row holds as a value that is not an object
    (nor null): such a value is not read, so what it would have given is missing."""
    problems = []
    for key in OBJECT_KEYS:
        value = row.get(key)
        if value is not None and not isinstance(value, dict):
            kind = JSON_TYPES.get(type(value), type(value).__name__)
            problems.append((key, f"{key} is JSON {kind}, expected an object; not read"))
    return problems


def reward_problem(row: dict[str, Any]) -> str | None:
    """Why the row's ``reward`` is not read, or ``None`` (a finite number, or absent or null).

    NeMo Gym's verify response declares ``reward: float`` and its collector writes the number; a
    string (``"1.0"``), a boolean, a list or an object is not a reward and is not coerced: the
    rollout is built without one (``show`` prints ``—``). A number too large to be finite is not one
    either.
    """
    value = row.get("reward")
    if value is None or (type(value) in (int, float) and abs(value) < 1e308):
        return None
    if type(value) in (int, float):
        return f"reward {quoted(value)} is not a finite number; not read"
    kind = JSON_TYPES.get(type(value), type(value).__name__)
    return f"reward is JSON {kind} ({quoted(value)}), expected a number; not read, the rollout has no reward"


def recorded_run_ids(row: dict[str, Any]) -> tuple[str, ...]:
    """Run ids a row records for its retained native artifacts (PinchBench ``raw_rollout.run_id``)."""
    raw = row.get("raw_rollout")
    run_id = raw.get("run_id") if isinstance(raw, dict) else None
    return (run_id,) if isinstance(run_id, str) and run_id else ()


def run_name(path: Path) -> str:
    """The run a rollouts file belongs to: the main file's path (itself, or the main file of a sidecar).

    Runs are told apart by path, so two folders' ``rollouts.jsonl`` are two runs. A compression
    suffix is not part of the run: ``rollouts.jsonl.gz`` and ``rollouts_failures.jsonl.zst`` are the
    run ``rollouts.jsonl``, as they were before they were compressed.
    """
    name = logical_name(path.name)
    if name.endswith(FAILURES_SUFFIX):
        return str(path.with_name(name[: -len(FAILURES_SUFFIX)] + ".jsonl"))
    return str(path.with_name(name))


def load_row(path: str, line: int, offset: int, size: int) -> Any:
    """Read and decode again the row first read at ``line`` (``offset``, ``size`` bytes) of ``path``.

    Repairs (lone surrogates) were reported on the first read and are applied silently here. In a
    compressed file, ``offset`` is in its decompressed text (``io/spans.py``).
    """
    raw = read_span(path, offset, size)
    value, _ = decode_line(raw.strip(), (path, line, offset), at_eof=False)
    return value
