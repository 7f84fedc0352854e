"""Rows of the Parquet dataset: a trajectory split into rows per table (``parquet_read.py`` joins them back).

The Arrow schemas are in ``writers/parquet_layout.py``; this module needs no pyarrow, so worker
processes and the build import it cheaply. One table per entity: ``trajectories``,
``invocations``, ``conversation_items``, ``turns``, ``model_calls``, ``tool_calls``, ``gaps`` and
``compactions``. Every row carries the key columns ``trajectory_index`` (0-based position of its
trajectory in the dataset, which is the line number minus one of the same build as JSONL; unique
even when several runs share a rollout id), ``run``, ``rollout_id`` and ``task_id``, then its
position in its parent list (``*_index``) and the entity's fields: ids, statuses and codes as
strings, times as float64 UTC Unix **seconds**, durations and latencies as float64
**milliseconds**, token counts and HTTP statuses as int64, and open values (payloads, conversation
items, questions, answers, tool outputs) as JSON text. Model-call refs are lists of
``{model_call_id, model_ref_type, model_ref_name, response_id}`` structs.

Convenience columns exist only here, never in ``ng_trajectory``: ``run`` (the run's label, as
the build names runs in gap details; for ``convert``, the converted file's name), and on
trajectories ``source_file`` (the rollouts file of the row, named like its run), ``reward``,
``task_index``, ``rollout_index`` and ``attempt`` (the row's ``reward``, ``_ng_task_index``,
``_ng_rollout_index``, ``_ng_attempt_index``; 0 for a row without one), ``agent`` (the row's
``agent_ref.name``) and ``producer`` (the ``source`` of the observation bundle of highest
precedence) on trajectories, ``role`` (from the build's role map by ``model_ref.name``) on model
calls. ``compactions`` holds the ``ContextCompactionObservation`` records of the observation bundles
a trajectory was projected from; ``ng_trajectory`` has no place for them, so they do not come back
when a dataset is converted to JSONL.

Rows are made from a validated record, open values serialised as ``record_json`` serialises them,
so a row holds exactly what the JSONL line holds; ``parquet_read.record_value`` rebuilds that JSON
value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from ng_traj.contract import (
    AgentObservationBundle,
    ContextCompactionObservation,
    TrajectoryModelCall,
    TrajectoryRecord,
    TrajectoryToolCall,
    TrajectoryTurn,
)
from ng_traj.writers.jsonl import dumps


@dataclass
class Extras:
    """What a trajectory's rows carry beyond the record (Parquet-only convenience columns).

    Attributes:
        agent: The rollout row's ``agent_ref.name``.
        producer: ``source`` of the highest-precedence observation bundle projected.
        compactions: ``(source, compaction observation as JSON)`` of every projected bundle.
        run: The run's label (``""`` for a trajectory without a rollout row).
        row: :func:`row_columns` of the rollout row: source file, reward, task, rollout and
            attempt indexes.
    """

    agent: str | None = None
    producer: str | None = None
    compactions: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    run: str = ""
    row: tuple[Any, ...] = (None, None, None, None, None)


def _integer(value: Any) -> int | None:
    return value if type(value) is int else None


def row_columns(row: Mapping[str, Any] | None, source_file: str | None) -> tuple[Any, ...]:
    """``(source_file, reward, task_index, rollout_index, attempt)`` of a rollout row (all null
    without one). A reward that is not a number, and indexes that are not integers, are null; a row
    without ``_ng_attempt_index`` is attempt 0, as upstream writes the key only above 0."""
    if row is None:
        return (source_file, None, None, None, None)
    reward = row.get("reward")
    reward = float(reward) if type(reward) in (int, float) and abs(reward) < 1e308 else None
    attempt = row.get("_ng_attempt_index", 0)
    return (
        source_file,
        reward,
        _integer(row.get("_ng_task_index")),
        _integer(row.get("_ng_rollout_index")),
        _integer(attempt),
    )


def extras_of(
    row: Mapping[str, Any] | None,
    bundles: Iterable[Any],
    mask: Callable[[Any], Any] | None = None,
    *,
    run: str = "",
    source_file: str | None = None,
) -> Extras:
    """The Parquet-only values of a trajectory: the row's ``agent_ref.name``, the first observation
    bundle's ``source`` (bundles in precedence order; values that are not bundles skipped), every
    compaction of the bundles (passed through ``mask``, the ``--redact`` masking, when given), the
    ``run`` label and the :func:`row_columns`."""
    agent_ref = row.get("agent_ref") if row is not None else None
    agent = agent_ref.get("name") if isinstance(agent_ref, dict) else None
    projected = [bundle for bundle in bundles if isinstance(bundle, AgentObservationBundle)]
    compactions = []
    for bundle in projected:
        for record in bundle.records:
            if isinstance(record, ContextCompactionObservation):
                dumped = record.model_dump(mode="json")
                compactions.append((bundle.source, mask(dumped) if mask is not None else dumped))
    producer = projected[0].source if projected else None
    agent = agent if isinstance(agent, str) else None
    return Extras(agent, producer, compactions, run, row_columns(row, source_file))


def _json(value: Any) -> bytes | None:
    """JSON text as UTF-8 bytes (Arrow takes them without decoding; see ``writers/parquet.py``).

    Copied once to its exact size: orjson's result keeps the slack of its growing buffer (up to
    twice the text), which rows waiting for their row group would otherwise hold.
    """
    return None if value is None else memoryview(dumps(value)).tobytes()


def _ref(ref: Any) -> dict[str, Any] | None:
    if ref is None:
        return None
    if isinstance(ref, Mapping):
        model_ref = ref.get("model_ref") or {}
        values = (ref.get("model_call_id"), model_ref.get("type"), model_ref.get("name"), ref.get("response_id"))
    else:
        model_ref = ref.model_ref
        values = (
            ref.model_call_id,
            *((model_ref.type, model_ref.name) if model_ref else (None, None)),
            ref.response_id,
        )
    return dict(zip(REF_FIELDS, values, strict=True))


REF_FIELDS = ("model_call_id", "model_ref_type", "model_ref_name", "response_id")


def _refs(refs: Iterable[Any]) -> list[dict[str, Any]]:
    return [_ref(ref) for ref in refs]  # type: ignore[misc]


Rows = dict[str, list[tuple[Any, ...]]]

_ROW_OVERHEAD = 64

COLUMN_KINDS = {
    "trajectories": "ntttttttnnnnnnnnn",
    "invocations": "ntttnttttnt-n",
    "conversation_items": "ntttntnttttt",
    "turns": "ntttntnnttt-n-",
    "model_calls": "ntttntnnnttttttntt-tnttnnnnnntt",
    "tool_calls": "ntttnttttnnntttt",
    "gaps": "ntttnttt",
    "compactions": "ntttnttntnnttt---",
}
"""Each table's row columns (``parquet_layout.SCHEMAS``, without pyarrow): ``t`` text (strings and
JSON), ``n`` numbers (int64 and float64), ``-`` anything else (booleans, lists, structs). Only text
columns hold ``str`` or ``bytes`` and only number columns hold ``int``, so :func:`weight` and the
int64 check of :meth:`Encoded.of` look at those alone."""
_TEXT = {name: tuple(n for n, kind in enumerate(kinds) if kind == "t") for name, kinds in COLUMN_KINDS.items()}
_NUMBERS = {name: tuple(n for n, kind in enumerate(kinds) if kind == "n") for name, kinds in COLUMN_KINDS.items()}


def weight(rows: list[tuple[Any, ...]], table: str) -> int:
    """Approximate bytes of some rows of ``table``: the text of its text columns (:data:`COLUMN_KINDS`),
    plus a fixed amount per row (row-group sizing)."""
    total = _ROW_OVERHEAD * len(rows)
    for n in _TEXT[table]:
        for row in rows:
            value = row[n]
            if value is not None:
                total += len(value)
    return total


INT64 = range(-(2**63), 2**63)
"""What a Parquet ``int64`` column holds; the contract's integers (token counts, statuses) are unbounded."""
_LOW, _HIGH = -(2**63), 2**63


def _outside(rows: list[tuple[Any, ...]], table: str) -> bool:
    """Whether any number column of ``rows`` holds an integer outside :data:`INT64`."""
    for n in _NUMBERS[table]:
        for row in rows:
            value = row[n]
            if type(value) is int and not _LOW <= value < _HIGH:
                return True
    return False


@dataclass(frozen=True, slots=True)
class Encoded:
    """One trajectory's rows per table, their :func:`weight` per table (computed where the rows are
    made), and ``nulled``: ``(table, row number, value)`` of each integer too large for ``int64``,
    written as null instead."""

    rows: Rows
    weights: dict[str, int]
    nulled: tuple[tuple[str, int, int], ...] = ()

    @classmethod
    def of(cls, rows: Rows) -> Encoded:
        """Rows with their weights, integers outside :data:`INT64` replaced by null."""
        nulled = []
        for name, table in rows.items():
            if not table or not _outside(table, name):
                continue
            for n, row in enumerate(table):
                if any(type(value) is int and value not in INT64 for value in row):
                    nulled.extend((name, n, value) for value in row if type(value) is int and value not in INT64)
                    table[n] = tuple(None if type(v) is int and v not in INT64 else v for v in row)
        return cls(rows, {name: weight(table, name) for name, table in rows.items() if table}, tuple(nulled))

    def problems(self) -> list[str]:
        """One message per nulled integer."""
        return [
            f"{name} row {n}: {value} exceeds Parquet's int64 range; written as null" for name, n, value in self.nulled
        ]


def record_rows(index: int, record: TrajectoryRecord, extras: Extras, roles: Mapping[str, str]) -> Rows:
    """Split one trajectory into rows per table, each row a tuple in schema order.

    Open values are written as JSON text with ``record_json``'s own rules, so they hold exactly what
    the JSONL line holds.

    Args:
        index: The trajectory's position in the dataset.
        record: The trajectory.
        extras: Convenience values and compaction observations.
        roles: Model-server name -> role, for the ``role`` column (unmapped: null).
    """
    key = (index, extras.run, record.rollout_id, record.task_id)
    counts = (len(record.invocations), len(record.turns), len(record.model_calls), len(record.tool_calls))
    source_file, *numbers = extras.row
    head = (*key, record.schema_version, source_file, extras.agent, extras.producer, *numbers)
    questions, requests = _shared_questions(record)
    rows: Rows = {
        "trajectories": [(*head, *counts, len(record.gaps))],
        "invocations": [],
        "conversation_items": [],
        "turns": [_turn_row(key, n, turn, questions.get(n)) for n, turn in enumerate(record.turns)],
        "model_calls": [_call_row(key, n, call, roles, requests.get(n)) for n, call in enumerate(record.model_calls)],
        "tool_calls": [_tool_row(key, n, tool) for n, tool in enumerate(record.tool_calls)],
        "gaps": [(*key, n, g.code, g.invocation_id, g.detail) for n, g in enumerate(record.gaps)],
        "compactions": [_compaction_row(key, n, *pair) for n, pair in enumerate(extras.compactions)],
    }
    for n, invocation in enumerate(record.invocations):
        conversation = invocation.conversation
        rows["invocations"].append(
            (
                *key,
                n,
                invocation.invocation_id,
                invocation.parent_invocation_id,
                invocation.spawned_by_tool_call_id,
                invocation.status,
                invocation.duration_ms,
                invocation.error_type,
                _refs(invocation.model_calls),
                len(conversation),
            )
        )
        rows["conversation_items"].extend(
            _item_row(key, n, invocation.invocation_id, m, item) for m, item in enumerate(conversation)
        )
    return rows


def _text(item: Any, name: str) -> str | None:
    value = item.__dict__.get(name)
    if value is None and item.__pydantic_extra__:
        value = item.__pydantic_extra__.get(name)
    return value if isinstance(value, str) else None


def _item_row(key: tuple, invocation: int, invocation_id: str, n: int, item: Any) -> tuple[Any, ...]:
    names = ("type", "role", "call_id", "name")
    return (*key, invocation, invocation_id, n, *(_text(item, name) for name in names), _json(item))


def _shared_questions(record: TrajectoryRecord) -> tuple[dict[int, bytes], dict[int, tuple[str, bytes]]]:
    """The questions serialised once for both tables: ``turn number -> question JSON`` and ``call number
    -> (request key, that JSON)``, for each turn whose one ref names a call whose request holds the
    question itself (``input`` or ``messages``, the same list or a list of the same items: the turn was
    made from that call, ``assemble/turns.py``, and no item needed a ``type``). The call's request is
    then written with the question's text in its place (:func:`_request_json`), instead of serialising
    the conversation twice.

    Raises:
        TypeError: A question is nested too deep for orjson at its depth inside the request
            (:func:`_nested_json`), where serialising the request would have raised it.
    """
    calls = record.model_calls
    by_id = {call.model_call_id: n for n, call in enumerate(calls) if call.model_call_id}
    questions: dict[int, bytes] = {}
    requests: dict[int, tuple[str, bytes]] = {}
    for t, turn in enumerate(record.turns):
        refs = turn.model_calls
        n = by_id.get(refs[0].model_call_id) if len(refs) == 1 and refs[0].model_call_id else None
        if n is None or n in requests:
            continue
        request = calls[n].request
        if not isinstance(request, dict):
            continue
        name = "input" if "input" in request else "messages"
        part, question = request.get(name), turn.question
        if type(part) is not list or type(question) is not list or not _same_items(question, part):
            continue
        questions[t] = text = _nested_json(question)
        requests[n] = (name, text)
    return questions, requests


def _same_items(question: list[Any], part: list[Any]) -> bool:
    """Whether ``question`` is ``part`` or holds exactly its objects, in order (so their JSON is the same)."""
    return question is part or (len(question) == len(part) and all(a is b for a, b in zip(question, part, strict=True)))


def _nested_json(value: Any) -> bytes:
    """``_json(value)``, serialised inside a list: orjson counts the depth of the value as it does in a
    request's ``input`` or ``messages`` (an object, then the list), so a value too deep there raises
    here too, as serialising the request did. The brackets are cut in the one copy ``_json`` makes.

    Raises:
        TypeError: The value is nested too deep at that depth.
    """
    return memoryview(dumps([value]))[1:-1].tobytes()


def _request_json(request: Any, shared: tuple[str, bytes] | None) -> bytes | None:
    """A call's request as JSON: with a shared question (:func:`_shared_questions`) in place as its
    serialised text (an ``orjson.Fragment``, key order kept), else serialised whole."""
    if shared is None:
        return _json(request)
    name, text = shared
    return _json({**request, name: orjson.Fragment(text)})


def _turn_row(key: tuple, n: int, turn: TrajectoryTurn, question: bytes | None = None) -> tuple[Any, ...]:
    return (
        *key,
        n,
        turn.invocation_id,
        turn.turn_no,
        turn.timestamp,
        _json(turn.question) if question is None else question,
        _json(turn.answer),
        _json(turn.reasoning_content),
        turn.resolved,
        turn.step_count,
        _refs(turn.model_calls),
    )


def _call_row(
    key: tuple, n: int, call: TrajectoryModelCall, roles: Mapping[str, str], shared: tuple[str, bytes] | None = None
) -> tuple[Any, ...]:
    meta, tokens = call.response_metadata, call.token_stats
    ref_type, name = (meta.model_ref.type, meta.model_ref.name) if meta.model_ref is not None else (None, None)
    return (
        *key,
        n,
        call.model_call_id,
        call.started_at,
        call.completed_at,
        call.duration_ms,
        meta.response_id,
        ref_type,
        name,
        roles.get(name) if name is not None else None,
        meta.model,
        meta.dialect,
        meta.status_code,
        meta.response_status,
        meta.finish_reason,
        meta.upstream_attempted,
        meta.response_source,
        meta.upstream_status_code,
        meta.local_response_reason,
        meta.error_category,
        meta.latency_ttft_ms,
        tokens.prompt_tokens,
        tokens.completion_tokens,
        tokens.reasoning_tokens,
        tokens.total_tokens,
        tokens.cached_tokens,
        _request_json(call.request, shared),
        _json(call.response),
    )


def _tool_row(key: tuple, n: int, tool: TrajectoryToolCall) -> tuple[Any, ...]:
    return (
        *key,
        n,
        tool.invocation_id,
        tool.tool_call_id,
        tool.sandbox_id,
        tool.tool_name,
        tool.started_at,
        tool.completed_at,
        tool.duration_ms,
        tool.timing_source,
        tool.status,
        tool.error_type,
        _json(tool.output),
    )


def _compaction_row(key: tuple, n: int, source: str, compaction: Mapping[str, Any]) -> tuple[Any, ...]:
    names = ("invocation_id", "observed_at", "trigger", "tokens_before", "tokens_after", "outcome", "summary")
    return (
        *key,
        n,
        source,
        *(compaction.get(name) for name in names),
        compaction.get("first_kept_item_id"),
        _ref(compaction.get("before_model_call")),
        _refs(compaction.get("model_calls") or []),
        _ref(compaction.get("after_model_call")),
    )


@dataclass(frozen=True)
class RowEncoder:
    """Turns a built slot into its dataset rows (picklable, so ``--jobs`` workers make the rows).

    Attributes:
        roles: Model-server name -> role, for the ``role`` column of ``model_calls``.
    """

    roles: Mapping[str, str] = field(default_factory=dict)

    def __call__(self, index: int, built: Any) -> Encoded:
        """Rows of ``built`` (an ``assemble.build.Built``) at dataset position ``index`` (values too
        deep for JSON degrade as ``Built.encoded`` says)."""
        encoded = Encoded.of(built.encoded(lambda record: record_rows(index, record, built.extras, self.roles)))
        for problem in encoded.problems():
            built.note("value_out_of_range", problem)
        return encoded
