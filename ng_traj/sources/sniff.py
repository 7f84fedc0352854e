"""What a sniffer sees of an input and what it may claim (shared by ``detect`` and the native readers)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

SNIFF_LINE_BYTES = 64 << 20
SNIFF_JSON_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class Claim:
    """A reader's claim on an input: ``kind`` is a readable kind, or ``unsupported`` with a description."""

    kind: str
    description: str


@dataclass(frozen=True, slots=True)
class Sniffed:
    """What a sniffer sees of a file: its path and its first JSON record (``None`` if unparseable)."""

    path: Path
    first: Any


def first_record(path: Path) -> Any:
    """The first JSON value of a JSONL file (also archives such as ``x.jsonl.reset.<ts>``), or the whole
    value of a ``.json`` file; ``None`` when unreadable or not JSON."""
    try:
        with open(path, "rb") as handle:
            if path.suffix == ".json":
                data = handle.read(SNIFF_JSON_BYTES + 1)
                return orjson.loads(data) if len(data) <= SNIFF_JSON_BYTES else None
            while True:
                line = handle.readline(SNIFF_LINE_BYTES)
                if not line:
                    return None
                if line.strip():
                    return orjson.loads(line)
    except (OSError, orjson.JSONDecodeError):
        return None
