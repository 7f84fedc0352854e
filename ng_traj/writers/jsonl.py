"""JSONL serialisation of output records.

Records are serialised with every field, nulls included, in the contract's field order (as NeMo Gym
dumps ``ng_trajectory`` with ``model_dump(mode="json")``; gym-reference.md §5.4), compact, UTF-8,
one record per line. The same function serialises a record wherever it is written (plain output,
``--attach`` rows, conversions), so a record always has the same bytes.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel


def record_json(record: BaseModel) -> bytes:
    """Compact JSON of a contract record (all fields, nulls included), without a newline.

    The bytes are exactly those of pydantic's ``model_dump_json()`` (the goldens pin it, and
    ``tests/test_parquet.py`` compares both over the fixtures and a generated corpus), made by orjson:
    models become their fields in declaration order followed by their extra keys, and open values
    (payloads, conversation parts) are JSON values already, which orjson writes several times faster
    than pydantic's type inference does.
    """
    return orjson.dumps(record, default=model_fields)


def model_fields(value: Any) -> dict[str, Any]:
    """A contract model as its fields in declaration order, then its extra keys (orjson's ``default``).

    Raises:
        TypeError: ``value`` is not a pydantic model (orjson reports it).
    """
    names = _FIELD_NAMES.get(type(value))
    if names is None:
        if not isinstance(value, BaseModel):
            raise TypeError(f"{type(value).__name__} is not a contract model")
        names = _FIELD_NAMES[type(value)] = tuple(type(value).model_fields)
    values = value.__dict__
    fields = {name: values[name] for name in names}
    extra = value.__pydantic_extra__
    return {**fields, **extra} if extra else fields


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def row_json(row: dict[str, Any]) -> bytes:
    """Compact JSON of a rollout row whose attachments may be pre-serialised ``orjson.Fragment``s."""
    return orjson.dumps(row)
