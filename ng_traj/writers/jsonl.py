"""JSONL serialisation of output records.

Records are serialised with every field, nulls included, in the contract's field order (as NeMo Gym
dumps ``ng_trajectory`` with ``model_dump(mode="json")``; gym-reference.md §5.4), compact, UTF-8,
one record per line. The same function serialises a record wherever it is written (plain output,
``--attach`` rows, conversions), so a record always has the same bytes.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

from ng_traj.contract import TrajectoryRecord

SERIALISE_ERRORS = (PydanticSerializationError, ValueError, TypeError, RecursionError)
"""What a serialiser raises for values nested deeper than it allows (orjson and pydantic: ~255 levels)."""


def record_json(record: BaseModel) -> bytes:
    """Compact JSON of a contract record (all fields, nulls included), without a newline.

    Raises:
        PydanticSerializationError: A value is nested deeper than the serialiser allows; see
            :func:`trajectory_json` for the fallback.
    """
    return record.__pydantic_serializer__.to_json(record)


def _as_text(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return value


def trajectory_json(record: TrajectoryRecord) -> tuple[TrajectoryRecord, bytes, bool]:
    """Serialise a trajectory; when an open value is nested too deep to serialise, write the open
    values (payloads, tool outputs, turn questions and answers) as JSON *text* instead (the contract
    allows any JSON value there).

    Returns:
        The record as written, its JSON, and whether the fallback was needed.

    Raises:
        ValueError, RecursionError: Even the fallback failed (a conversation item too deep).
    """
    try:
        return record, record_json(record), False
    except SERIALISE_ERRORS:
        pass
    calls = [
        c.model_copy(update={"request": _as_text(c.request), "response": _as_text(c.response)})
        for c in record.model_calls
    ]
    tools = [t.model_copy(update={"output": _as_text(t.output)}) for t in record.tool_calls]
    turns = [
        t.model_copy(update={k: _as_text(getattr(t, k)) for k in ("question", "answer", "reasoning_content")})
        for t in record.turns
    ]
    record = record.model_copy(update={"model_calls": calls, "tool_calls": tools, "turns": turns})
    return record, record_json(record), True


def row_json(row: dict[str, Any], attachments: dict[str, bytes]) -> bytes:
    """Compact JSON of a rollout row with pre-serialised attachments (``ng_trajectory`` and others) added.

    A row nested too deep for orjson is written with the standard library instead.
    """
    try:
        return orjson.dumps({**row, **{key: orjson.Fragment(value) for key, value in attachments.items()}})
    except TypeError:
        full = {**row, **{key: json.loads(value) for key, value in attachments.items()}}
        return json.dumps(full, ensure_ascii=False, separators=(",", ":")).encode()
