"""JSONL serialisation of output records.

Records are serialised with every field, nulls included, in the contract's field order (as NeMo Gym
dumps ``ng_trajectory`` with ``model_dump(mode="json")``), compact, UTF-8,
one record per line. The same function serialises a record wherever it is written (plain output,
``--attach`` rows, conversions), so a record always has the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson
from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

from ng_traj.contract import TrajectoryRecord
from ng_traj.contract.observations import AgentInvocation
from ng_traj.contract.revisions import Release, earlier_exclusions, in_earlier
from ng_traj.io.lines import deep_dumps

SERIALISE_ERRORS = (PydanticSerializationError, ValueError, TypeError, RecursionError)
"""What a serialiser raises for values nested deeper than it allows (orjson and pydantic: ~255 levels)."""


def record_json(record: BaseModel, release: Release = "0.7", *, newline: bool = False) -> bytes:
    """Compact JSON of a contract record (all fields, nulls included), without a newline unless
    ``newline`` (an output line: the newline is written by orjson, so the bytes are not copied to add it).

    ``release`` ``pre-0.7`` leaves out the fields nemo-gym 0.7.0 added (``contract/revisions.py``).

    The bytes are exactly those of pydantic's ``model_dump_json()`` (the goldens pin it, and
    ``tests/test_parquet.py`` compares both over the fixtures and a generated corpus), made by orjson:
    models become their fields in declaration order followed by their extra keys, and open values
    (payloads, conversation parts) are JSON values already, which orjson writes several times faster
    than pydantic's type inference does.

    Raises:
        TypeError: A value is nested deeper than orjson allows; see :func:`payloads_as_text`.
    """
    option = orjson.OPT_APPEND_NEWLINE if newline else None
    return dumps(record, earlier_model_fields if release == "pre-0.7" else model_fields, option)


def dumps(value: Any, default: Callable[[Any], dict[str, Any]] | None = None, option: int | None = None) -> bytes:
    """``orjson.dumps`` with contract models as :func:`model_fields` (and orjson's ``option`` flags).

    orjson reports anything raised inside ``default`` as a ``TypeError`` caused by it; an interrupt
    (Ctrl-C, or SIGTERM turned into one) is raised again as itself, so that it stops the command
    instead of passing for a value too deep to serialise.

    Raises:
        TypeError: A value is nested deeper than orjson allows, or is not JSON.
    """
    try:
        return orjson.dumps(value, default=default or model_fields, option=option)
    except TypeError as exc:
        if exc.__cause__ is not None and not isinstance(exc.__cause__, Exception):
            raise exc.__cause__ from None
        raise


def model_fields(value: Any) -> dict[str, Any]:
    """A contract model as its fields in declaration order, then its extra keys (orjson's ``default``).

    The mapping may be the model's own ``__dict__``: read it, never change it.

    Raises:
        TypeError: ``value`` is not a pydantic model (orjson reports it).
    """
    names = _FIELD_NAMES.get(type(value))
    if names is None:
        if not isinstance(value, BaseModel):
            raise TypeError(f"{type(value).__name__} is not a contract model")
        names = _FIELD_NAMES[type(value)] = tuple(type(value).model_fields)
    values = value.__dict__
    # A validated model's fields are in declaration order already (the usual case): handed over as
    # they are, since orjson only reads them.
    fields = values if tuple(values) == names else {name: values[name] for name in names}
    extra = value.__pydantic_extra__
    return {**fields, **extra} if extra else fields


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def earlier_model_fields(value: Any) -> dict[str, Any]:
    """:func:`model_fields` without the fields the revision before nemo-gym 0.7.0 lacks, and invocations
    without the conversation items it has no place for."""
    fields = model_fields(value)
    if isinstance(value, AgentInvocation):
        fields = {**fields, "conversation": [item for item in fields["conversation"] if in_earlier(item)]}
    excluded = _EXCLUDED.get(type(value))
    if excluded is None:
        excluded = _EXCLUDED[type(value)] = earlier_exclusions(type(value))
    return {key: item for key, item in fields.items() if key not in excluded} if excluded else fields


_EXCLUDED: dict[type, frozenset[str]] = {}


def _as_text(value: Any) -> Any:
    if isinstance(value, dict | list):
        return _deep_dumps(value)
    return value


def _deep_dumps(value: Any) -> str:
    """Compact JSON text of a value however deep (``io/lines.deep_dumps``)."""
    return deep_dumps(value, ensure_ascii=False, separators=(",", ":"))


def payloads_as_text(record: TrajectoryRecord) -> TrajectoryRecord:
    """The record with its open values (payloads, tool outputs, turn questions, answers and reasoning)
    as JSON *text*: the fallback for values nested too deep for the JSON writers (the contract allows
    any JSON value there).

    Raises:
        RecursionError: A value is too deep even for the standard library's serialiser.
    """
    calls = [
        c.model_copy(update={"request": _as_text(c.request), "response": _as_text(c.response)})
        for c in record.model_calls
    ]
    tools = [t.model_copy(update={"output": _as_text(t.output)}) for t in record.tool_calls]
    turns = [
        t.model_copy(update={k: _as_text(getattr(t, k)) for k in ("question", "answer", "reasoning_content")})
        for t in record.turns
    ]
    return record.model_copy(update={"model_calls": calls, "tool_calls": tools, "turns": turns})


def row_json(row: dict[str, Any], attachments: dict[str, bytes]) -> bytes:
    """Compact JSON of a rollout row with pre-serialised attachments (``ng_trajectory`` and others) added.

    A row nested too deep for orjson (255 levels) is written with the standard library instead
    (``io/lines.deep_dumps``), as rows are at most 1,024 deep (the line reader's limit).
    """
    try:
        return orjson.dumps({**row, **{key: orjson.Fragment(value) for key, value in attachments.items()}})
    except TypeError:
        full = {**row, **{key: json.loads(value) for key, value in attachments.items()}}
        return _deep_dumps(full).encode()
