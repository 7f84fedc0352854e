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
    """Compact JSON of a contract record (all fields, nulls included), without a newline."""
    return record.__pydantic_serializer__.to_json(record)


def row_json(row: dict[str, Any]) -> bytes:
    """Compact JSON of a rollout row whose attachments may be pre-serialised ``orjson.Fragment``s."""
    return orjson.dumps(row)
