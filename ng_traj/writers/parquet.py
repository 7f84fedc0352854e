"""The Parquet dataset: a directory with one Parquet file per table (``parquet_tables.py``).

Layout: ``<out>/trajectories.parquet``, ``invocations.parquet``, ``conversation_items.parquet``,
``turns.parquet``, ``model_calls.parquet``, ``tool_calls.parquet``, ``gaps.parquet`` and
``compactions.parquet``; plain Parquet (zstd), readable by DuckDB, Polars and pandas without ng-traj.
Rows are in trajectory order, so ``trajectory_index`` ascends in every file.

Writing streams (PRODUCT.md §7, bug-shapes B16): each table buffers the rows of whole trajectories
and writes them out as one row group once they reach :data:`ROW_GROUP_BYTES` (estimated from their
text) or :data:`ROW_GROUP_ROWS`; memory is bounded by those buffers plus one trajectory, never by the
corpus. The boundaries depend only on the sequence of trajectories, so the same build writes the
same bytes whatever ``--jobs``. The directory is written under a temporary name and renamed when
complete (``io/atomic.py``): a killed build leaves the previous dataset or none.

Reading streams too: every table is read batch by batch in step, and one trajectory's rows at a time
are joined back into its ``ng_trajectory`` JSON value.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from ng_traj.contract import TrajectoryRecord
from ng_traj.diagnostics import RunError
from ng_traj.io.atomic import atomic_directory, output_folder
from ng_traj.writers.parquet_rows import Encoded, Extras, RowEncoder, record_rows, record_value

KEY_FIELDS = [
    pa.field("trajectory_index", pa.int64(), nullable=False),
    pa.field("rollout_id", pa.string(), nullable=False),
    pa.field("task_id", pa.string(), nullable=False),
]
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
        ("agent", S),
        ("producer", S),
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
"""Every table's Arrow schema, in dataset order."""

TABLES = tuple(SCHEMAS)
JSON_COLUMNS = {
    "conversation_items": ("item",),
    "turns": ("question", "answer", "reasoning_content"),
    "model_calls": ("request", "response"),
    "tool_calls": ("output",),
}
"""Columns holding JSON text (``null`` stored as a missing value)."""


ROW_GROUP_BYTES = 8 << 20
"""A table's buffered rows are written as a row group from about this many bytes of text."""
ROW_GROUP_ROWS = 100_000
"""... or from this many rows."""
COMPRESSION = "zstd"
COMPRESSION_LEVEL = 1
DATASET_VERSION = "1"


def table_path(directory: Path, table: str) -> Path:
    """Path of ``table``'s file inside a dataset directory."""
    return directory / f"{table}.parquet"


def is_dataset(path: Path) -> bool:
    """True when ``path`` is a directory holding a ``trajectories.parquet`` table."""
    return path.is_dir() and table_path(path, "trajectories").is_file()


def _plain_columns(table: str) -> list[str]:
    """Columns worth a dictionary and statistics: all but the JSON text ones (large, mostly unique)."""
    return [name for name in SCHEMAS[table].names if name not in JSON_COLUMNS.get(table, ())]


def _json_array(values: tuple[bytes | None, ...]) -> pa.Array:
    """A string array from JSON texts already encoded as UTF-8 by orjson (no decoding, no re-validation)."""
    return pa.array(values, type=pa.binary()).view(pa.string())


class DatasetWriter:
    """Writes trajectories into the tables of a dataset directory, one row group at a time.

    Args:
        directory: An existing, empty directory (the temporary one of :func:`open_dataset`).
        roles: Model-server name -> role, for the ``role`` column of ``model_calls``.
    """

    def __init__(self, directory: Path, roles: Mapping[str, str] | None = None) -> None:
        self.roles = dict(roles or {})
        self.count = 0
        """Trajectories added so far (the next one's ``trajectory_index``)."""
        self._buffers: dict[str, list[tuple[Any, ...]]] = {name: [] for name in TABLES}
        self._weights = dict.fromkeys(TABLES, 0)
        self._files = {
            name: pq.ParquetWriter(
                table_path(directory, name),
                schema.with_metadata({"ng_traj.table": name, "ng_traj.dataset_version": DATASET_VERSION}),
                compression=COMPRESSION,
                compression_level=COMPRESSION_LEVEL,
                use_dictionary=_plain_columns(name),
                write_statistics=_plain_columns(name),
            )
            for name, schema in SCHEMAS.items()
        }

    def encoder(self) -> RowEncoder:
        """What turns a built slot into rows for :meth:`add_rows` (with this writer's roles)."""
        return RowEncoder(self.roles)

    def add(self, record: TrajectoryRecord, extras: Extras) -> list[str]:
        """Append one trajectory; returns the problems of values written as null (``Encoded.problems``)."""
        encoded = Encoded.of(record_rows(self.count, record, extras, self.roles))
        self.add_rows(encoded)
        return encoded.problems()

    def add_rows(self, encoded: Encoded) -> None:
        """Append the rows of the next trajectory (made for position :attr:`count`, here or in a worker)."""
        for name, weight in encoded.weights.items():
            self._buffers[name].extend(encoded.rows[name])
            self._weights[name] += weight
            if self._weights[name] >= ROW_GROUP_BYTES or len(self._buffers[name]) >= ROW_GROUP_ROWS:
                self._flush(name)
        self.count += 1

    def _flush(self, name: str) -> None:
        rows = self._buffers[name]
        if not rows:
            return
        schema = SCHEMAS[name]
        json_columns = JSON_COLUMNS.get(name, ())
        columns = [
            _json_array(values) if f.name in json_columns else pa.array(values, type=f.type)
            for f, values in zip(schema, zip(*rows, strict=True), strict=True)
        ]
        self._files[name].write_table(pa.Table.from_arrays(columns, schema=schema), row_group_size=len(rows))
        self._buffers[name] = []
        self._weights[name] = 0

    def close(self) -> None:
        """Write the remaining rows and close every table file."""
        for name in TABLES:
            self._flush(name)
            self._files[name].close()

    def abort(self) -> None:
        """Close every file without writing buffered rows (the directory is about to be removed)."""
        for handle in self._files.values():
            with contextlib.suppress(Exception):
                handle.close()


def check_target(path: Path) -> None:
    """Refuse to replace anything but an ng-traj dataset holding nothing else (or nothing) at ``path``.

    Raises:
        RunError: The folder of ``path`` does not exist; ``path`` is a file, a directory that is not an ng-traj dataset, or a dataset
            directory that also holds other files or folders (which replacing it would delete).
    """
    output_folder(path)
    if not path.exists():
        return
    if not is_dataset(path):
        kind = "directory" if path.is_dir() else "file"
        raise RunError(f"output {path} is an existing {kind} that is not an ng-traj Parquet dataset; not replaced")
    tables = {table_path(path, name).name for name in TABLES}
    foreign = sorted(entry.name for entry in path.iterdir() if entry.name not in tables or not entry.is_file())
    if foreign:
        named = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise RunError(
            f"output {path} is a dataset that also holds {named}; not replaced (move those out or name another output)"
        )


@contextlib.contextmanager
def open_dataset(path: str | Path, roles: Mapping[str, str] | None = None) -> Iterator[DatasetWriter]:
    """Write a dataset at ``path`` atomically; an existing dataset there is replaced when done.

    Raises:
        RunError: The parent folder is missing, or ``path`` holds something other than a dataset.
    """
    with atomic_directory(path, check=check_target) as directory:
        writer = DatasetWriter(directory, roles)
        try:
            yield writer
        except BaseException:
            writer.abort()
            raise
        writer.close()


# -- reading ---------------------------------------------------------------------------------------


class DatasetError(Exception):
    """The directory is not a readable ng-traj dataset (a table or column is missing)."""


_BATCH_ROWS = 64


@dataclass
class _Cursor:
    """Rows of one table, read batch by batch, with one row of look-ahead."""

    rows: Iterator[dict[str, Any]]
    head: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.head = next(self.rows, None)

    def take(self, index: int) -> tuple[list[dict[str, Any]], int]:
        """Rows of trajectory ``index``, and how many rows before them named an earlier or unknown one."""
        taken: list[dict[str, Any]] = []
        stray = 0
        while self.head is not None and self.head["trajectory_index"] <= index:
            if self.head["trajectory_index"] == index:
                taken.append(self.head)
            else:
                stray += 1
            self.head = next(self.rows, None)
        return taken, stray


def _table_rows(path: Path, name: str) -> Iterator[dict[str, Any]]:
    try:
        handle = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise DatasetError(f"{path}: {exc}") from exc
    missing = [f.name for f in SCHEMAS[name] if f.name not in handle.schema_arrow.names]
    if missing:
        raise DatasetError(f"{path}: missing column(s) {', '.join(missing)}")
    if handle.metadata.num_row_groups == 0:  # pyarrow 18.0.0's iter_batches raises OSError for these
        return iter(())
    columns = SCHEMAS[name].names
    return (row for batch in handle.iter_batches(_BATCH_ROWS, columns=columns) for row in batch.to_pylist())


@dataclass
class DatasetRecord:
    """One trajectory read back: its position, its JSON value (or the error that prevented it).

    Attributes:
        stray_rows: Rows of child tables before this trajectory's that name no trajectory.
        missing_before: Trajectory indexes the ``trajectories`` table skips before this one.
    """

    index: int
    value: dict[str, Any] | None
    problem: str | None = None
    stray_rows: int = 0
    missing_before: int = 0


def read_dataset(path: Path) -> Iterator[DatasetRecord]:
    """Yield every trajectory of the dataset at ``path``, in order, streaming.

    ``trajectory_index`` must count 0, 1, 2, ... down the ``trajectories`` table: a row that
    repeats an index or goes back is yielded as a problem without a value (its rows were given to
    the first one), and indexes it skips are counted in the next record's ``missing_before``.
    Rows of a child table that name no trajectory (or are out of order) are counted in the next
    record's ``stray_rows``. ``compactions`` is not read: ``ng_trajectory`` has no place for it.

    Raises:
        DatasetError: A table file or column is missing or unreadable.
    """
    needed = [name for name in TABLES if name != "compactions"]
    missing = [name for name in needed if not table_path(path, name).is_file()]
    if missing:
        raise DatasetError(f"{path}: not an ng-traj Parquet dataset (missing {', '.join(missing)})")
    heads = _table_rows(table_path(path, "trajectories"), "trajectories")
    cursors = {name: _Cursor(_table_rows(table_path(path, name), name)) for name in needed[1:]}
    last = -1
    for row, head in enumerate(heads, 1):
        index = head["trajectory_index"]
        if index <= last:
            problem = f"row {row} of trajectories.parquet repeats trajectory_index {index} or is out of order"
            yield DatasetRecord(index, None, f"{problem} (after {last}); skipped")
            continue
        record = _joined(head, cursors)
        record.missing_before, last = index - last - 1, index
        yield record
    leftover = sum(cursor.take(1 << 62)[1] for cursor in cursors.values())
    if leftover:
        yield DatasetRecord(-1, None, f"{leftover} row(s) name no trajectory of the dataset", 0)


def _joined(head: dict[str, Any], cursors: dict[str, _Cursor]) -> DatasetRecord:
    """The trajectory of the ``trajectories`` row ``head``, joined with its rows of the other tables."""
    index = head["trajectory_index"]
    tables: dict[str, list[dict[str, Any]]] = {"trajectories": [head]}
    stray = 0
    for name, cursor in cursors.items():
        tables[name], skipped = cursor.take(index)
        stray += skipped
    problem = _incomplete(tables)
    if problem is not None:
        return DatasetRecord(index, None, f"rows do not form the trajectory ({problem}); skipped", stray)
    try:
        return DatasetRecord(index, record_value(tables), None, stray)
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        return DatasetRecord(index, None, f"rows do not form a trajectory ({type(exc).__name__}: {exc})", stray)


_POSITIONS = {
    "invocations": ("invocation_index", "invocation_count"),
    "turns": ("turn_index", "turn_count"),
    "model_calls": ("call_index", "model_call_count"),
    "tool_calls": ("tool_index", "tool_call_count"),
    "gaps": ("gap_index", "gap_count"),
}
"""Child table -> its position column and the ``trajectories`` column counting its rows."""


def _incomplete(tables: dict[str, list[dict[str, Any]]]) -> str | None:
    """Why a trajectory's rows are not all there or not in order (``None`` when they are).

    Each child table's position column must run 0, 1, 2, ... in row order, as many rows as the
    parent row counts; conversation items do so within each invocation.
    """
    head = tables["trajectories"][0]
    groups = [(name, column, head[count], tables[name]) for name, (column, count) in _POSITIONS.items()]
    items: dict[Any, list[dict[str, Any]]] = {}
    for row in tables["conversation_items"]:
        items.setdefault(row["invocation_index"], []).append(row)
    for invocation in tables["invocations"]:
        position = invocation["invocation_index"]
        count = invocation["conversation_item_count"]
        groups.append((f"conversation_items of invocation {position}", "item_index", count, items.pop(position, [])))
    if items:
        return f"conversation_items has rows for invocation_index {next(iter(items))}, which the trajectory lacks"
    for name, column, count, rows in groups:
        if len(rows) != count:
            return f"{name} has {len(rows)} row(s) where the trajectory records {count}"
        if [row[column] for row in rows] != list(range(count)):
            return f"{name}: {column} does not run 0..{count - 1} in row order"
    return None
