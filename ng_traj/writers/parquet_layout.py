"""The Parquet dataset's layout: its folders, chunk files, manifest and the Arrow schema of every table.

A dataset is a folder::

    out.parquet/
      ng_traj.json                     the manifest (below)
      trajectories/part-00000.parquet  one folder per table, chunk files numbered in build order
      trajectories/part-00001.parquet
      invocations/part-00000.parquet
      ...

Chunk ``k`` of every table holds the rows of trajectories ``k * chunk_size`` to
``(k + 1) * chunk_size - 1`` (positions in the build's output order), so a file's name follows from
the build plan alone: the same build writes the same files whatever ``--jobs``, and a writer of one
chunk needs to know nothing of the others. Every table has a file for every chunk, empty or not, so
each table folder shows its schema even when it has no rows.

Each table folder is an ordinary Parquet dataset that DuckDB, Polars, pandas and pyarrow read whole
by default (``out.parquet/model_calls``, or ``out.parquet/model_calls/*.parquet``). The top-level
folder is not one: its tables have different columns, so DuckDB and Polars stop on the schema
mismatch, and pyarrow (and pandas through it) stops on the manifest, which is not Parquet. The
manifest is named without a leading ``_`` or ``.`` for that reason: pyarrow skips such files and
would otherwise read the tables together as one. Table folders have no ``=`` in their names, so no
reader takes them for hive partitions.

The manifest, ``ng_traj.json``: ``{"format": "ng-traj-parquet", "layout": 2, "ng_traj_version",
"schema_version", "contract_revision", "trajectories": N, "chunk_size": n, "tables": {name:
{"path": folder, "rows": count, "files": [relative paths, in order]}}}``. Layout 1 (ng-traj 0.1 and
earlier) was one loose ``<table>.parquet`` file per table at the top; it is recognised and refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

import ng_traj
from ng_traj.contract import CONTRACT_REVISION, SCHEMA_VERSION
from ng_traj.diagnostics import plural
from ng_traj.writers.dataset_paths import MANIFEST, OLD_LAYOUT, is_old_layout

KEY_FIELDS = [
    pa.field("trajectory_index", pa.int64(), nullable=False),
    pa.field("run", pa.string(), nullable=False),
    pa.field("rollout_id", pa.string(), nullable=False),
    pa.field("task_id", pa.string(), nullable=False),
]
"""Columns every table starts with; ``(run, rollout_id)`` identifies a trajectory across datasets."""

REF = pa.struct(
    [
        pa.field("model_call_id", pa.string()),
        pa.field("model_ref_type", pa.string()),
        pa.field("model_ref_name", pa.string()),
        pa.field("response_id", pa.string()),
    ]
)
REFS = pa.list_(REF)
S, F, INT, B = pa.string(), pa.float64(), pa.int64(), pa.bool_()


def _schema(*columns: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([*KEY_FIELDS, *(pa.field(name, kind) for name, kind in columns)])


SCHEMAS: dict[str, pa.Schema] = {
    "trajectories": _schema(
        ("schema_version", S),
        ("source_file", S),
        ("agent", S),
        ("producer", S),
        ("reward", F),
        ("task_index", INT),
        ("rollout_index", INT),
        ("attempt", INT),
        ("invocation_count", INT),
        ("turn_count", INT),
        ("model_call_count", INT),
        ("tool_call_count", INT),
        ("gap_count", INT),
    ),
    "invocations": _schema(
        ("invocation_index", INT),
        ("invocation_id", S),
        ("parent_invocation_id", S),
        ("spawned_by_tool_call_id", S),
        ("status", S),
        ("duration_ms", F),
        ("error_type", S),
        ("model_calls", REFS),
        ("conversation_item_count", INT),
    ),
    "conversation_items": _schema(
        ("invocation_index", INT),
        ("invocation_id", S),
        ("item_index", INT),
        ("type", S),
        ("message_role", S),
        ("call_id", S),
        ("name", S),
        ("item", S),
    ),
    "turns": _schema(
        ("turn_index", INT),
        ("invocation_id", S),
        ("turn_no", INT),
        ("timestamp", F),
        ("question", S),
        ("answer", S),
        ("reasoning_content", S),
        ("resolved", B),
        ("step_count", INT),
        ("model_calls", REFS),
    ),
    "model_calls": _schema(
        ("call_index", INT),
        ("model_call_id", S),
        ("started_at", F),
        ("completed_at", F),
        ("duration_ms", F),
        ("response_id", S),
        ("model_ref_type", S),
        ("model_ref_name", S),
        ("role", S),
        ("model", S),
        ("dialect", S),
        ("status_code", INT),
        ("response_status", S),
        ("finish_reason", S),
        ("upstream_attempted", B),
        ("response_source", S),
        ("upstream_status_code", INT),
        ("local_response_reason", S),
        ("error_category", S),
        ("latency_ttft_ms", F),
        ("prompt_tokens", INT),
        ("completion_tokens", INT),
        ("reasoning_tokens", INT),
        ("total_tokens", INT),
        ("cached_tokens", INT),
        ("request", S),
        ("response", S),
    ),
    "tool_calls": _schema(
        ("tool_index", INT),
        ("invocation_id", S),
        ("tool_call_id", S),
        ("sandbox_id", S),
        ("tool_name", S),
        ("started_at", F),
        ("completed_at", F),
        ("duration_ms", F),
        ("timing_source", S),
        ("status", S),
        ("error_type", S),
        ("output", S),
    ),
    "gaps": _schema(("gap_index", INT), ("code", S), ("invocation_id", S), ("detail", S)),
    "compactions": _schema(
        ("compaction_index", INT),
        ("source", S),
        ("invocation_id", S),
        ("observed_at", F),
        ("trigger", S),
        ("tokens_before", INT),
        ("tokens_after", INT),
        ("outcome", S),
        ("summary", S),
        ("first_kept_item_id", S),
        ("before_model_call", REF),
        ("model_calls", REFS),
        ("after_model_call", REF),
    ),
}
"""Each table's row columns (what ``parquet_rows`` makes and reads back), in dataset order."""

TABLES = tuple(SCHEMAS)
JSON_COLUMNS = {
    "conversation_items": ("item",),
    "turns": ("question", "answer", "reasoning_content"),
    "model_calls": ("request", "response"),
    "tool_calls": ("output",),
}
"""Columns holding JSON text (``null`` stored as a missing value)."""

TIME, DURATION = pa.timestamp("us", tz="UTC"), pa.duration("us")
DERIVED: dict[str, tuple[tuple[str, str, pa.DataType], ...]] = {
    "invocations": (("duration", "duration_ms", DURATION),),
    "turns": (("timestamp_utc", "timestamp", TIME),),
    "model_calls": (
        ("started_at_utc", "started_at", TIME),
        ("completed_at_utc", "completed_at", TIME),
        ("duration", "duration_ms", DURATION),
        ("latency_ttft", "latency_ttft_ms", DURATION),
    ),
    "tool_calls": (
        ("started_at_utc", "started_at", TIME),
        ("completed_at_utc", "completed_at", TIME),
        ("duration", "duration_ms", DURATION),
    ),
    "compactions": (("observed_at_utc", "observed_at", TIME),),
}
"""``(column, float column it is computed from, type)``: times (float UTC Unix seconds) as UTC
timestamps and durations (float milliseconds) as durations, both in microseconds, written beside
the float columns the contract's values are read back from."""

JSON_TYPE: pa.DataType = pa.json_()
"""Parquet's JSON logical type (pyarrow's ``arrow.json`` extension type, written as Parquet JSON)."""


def _file_field(table: str, field: pa.Field) -> pa.Field:
    if field.name in JSON_COLUMNS.get(table, ()):
        return pa.field(field.name, JSON_TYPE, metadata={"ng_traj.content": "json"})
    return field


def file_schema(table: str) -> pa.Schema:
    """The columns of ``table``'s files: the row columns (JSON ones typed as JSON), each time and
    duration column followed by its typed twin (:data:`DERIVED`)."""
    twins: dict[str, list[pa.Field]] = {}
    for name, source, kind in DERIVED.get(table, ()):
        twins.setdefault(source, []).append(pa.field(name, kind))
    fields = []
    for field in SCHEMAS[table]:
        fields.append(_file_field(table, field))
        fields.extend(twins.get(field.name, ()))
    return pa.schema(fields)


LAYOUT = 2
FORMAT = "ng-traj-parquet"
CHUNK_SIZE = 4096
"""Trajectories per chunk file."""


def part_name(chunk: int) -> str:
    """The file name of chunk ``chunk`` (0-based) of a table."""
    return f"part-{chunk:05d}.parquet"


def part_path(directory: Path, table: str, chunk: int) -> Path:
    """Path of chunk ``chunk`` of ``table`` inside a dataset folder."""
    return directory / table / part_name(chunk)


def manifest(chunks: int, chunk_size: int, count: int, rows: dict[str, int]) -> bytes:
    """The manifest of a dataset of ``count`` trajectories in ``chunks`` chunks (``rows``: per table)."""
    value = {
        "format": FORMAT,
        "layout": LAYOUT,
        "ng_traj_version": ng_traj.__version__,
        "schema_version": SCHEMA_VERSION,
        "contract_revision": CONTRACT_REVISION,
        "trajectories": count,
        "chunk_size": chunk_size,
        "tables": {
            name: {
                "path": name,
                "rows": rows[name],
                "files": [f"{name}/{part_name(chunk)}" for chunk in range(chunks)],
            }
            for name in TABLES
        },
    }
    return orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n"


OWN_ENTRIES = frozenset({MANIFEST, *TABLES})
"""What a dataset folder holds: its manifest and table folders."""
OLD_ENTRIES = frozenset(f"{name}.parquet" for name in TABLES)
"""What a dataset folder of the first layout holds: one file per table."""


class DatasetError(Exception):
    """The folder is not a readable ng-traj dataset (no manifest, a table file or column missing)."""


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of the dataset at ``path``, checked for what the reader relies on.

    Raises:
        DatasetError: The folder is of the first layout, has no manifest, or the manifest is not
            JSON, names another format or a later layout, or does not list every table's chunk
            files (``<table>/part-00000.parquet``, ...; as many for every table). Nothing outside
            the table folders is ever read, whatever a manifest says.
    """
    if is_old_layout(path):
        raise DatasetError(f"{path} {OLD_LAYOUT}")
    try:
        value = orjson.loads((path / MANIFEST).read_bytes())
    except FileNotFoundError as exc:
        raise DatasetError(f"{path}: not an ng-traj Parquet dataset (no {MANIFEST})") from exc
    except (OSError, orjson.JSONDecodeError) as exc:
        raise DatasetError(f"{path}/{MANIFEST}: unreadable ({exc})") from exc
    if not isinstance(value, dict) or value.get("format") != FORMAT:
        raise DatasetError(f"{path}/{MANIFEST}: not an ng-traj dataset manifest")
    if value.get("layout") != LAYOUT:
        raise DatasetError(f"{path}/{MANIFEST}: layout {value.get('layout')!r}, this version reads layout {LAYOUT}")
    tables = value.get("tables")
    chunks: int | None = None
    for name in TABLES:
        entry = tables.get(name) if isinstance(tables, dict) else None
        files = entry.get("files") if isinstance(entry, dict) else None
        count = len(files) if isinstance(files, list) else 0
        chunks = count if chunks is None else chunks
        if not count or count != chunks or files != [f"{name}/{part_name(chunk)}" for chunk in range(count)]:
            raise DatasetError(f"{path}/{MANIFEST}: table {name} does not list its {plural(chunks or 1, 'chunk file')}")
    return value
