"""Reading the Parquet dataset back: every table streamed in step, one trajectory's rows at a time.

The manifest names each table's chunk files in order (``parquet_layout.py``); the files are checked
against it before anything is read (each opens, has the row columns, and the rows add up to the
count recorded), then read batch by batch, and one trajectory's rows at a time are joined back into
its ``ng_trajectory`` JSON value. Only the row columns are read: the typed time and duration columns
are computed from them and not needed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from ng_traj.contract.revisions import METADATA_KEYS_0_7
from ng_traj.diagnostics import plural
from ng_traj.writers.parquet_layout import MANIFEST, SCHEMAS, TABLES, DatasetError, read_manifest

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


def _opened(file: Path) -> pa.NativeFile:
    """``file`` opened for reading by its bytes (pyarrow takes a text path as UTF-8, which a non-UTF-8
    name, surrogate escapes, is not).

    Raises:
        OSError: The file cannot be opened.
    """
    return pa.OSFile(os.fsencode(file), "rb")


def _checked(path: Path, name: str, relative: str) -> int:
    """Rows of one chunk file of table ``name``, after checking it opens and has the row columns.

    Raises:
        DatasetError: The file is missing, not Parquet, or lacks a column.
    """
    file = path / relative
    try:
        with _opened(file) as handle:
            metadata = pq.read_metadata(handle)
        names = metadata.schema.to_arrow_schema().names
    except OSError as exc:  # pyarrow's text repeats the path and the errno: the system's reason alone
        reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        raise DatasetError(f"{file}: {reason} (a chunk file of the table {name})") from exc
    except pa.ArrowException as exc:
        raise DatasetError(f"{file}: {exc}") from exc
    missing = [f.name for f in SCHEMAS[name] if f.name not in names]
    if missing:
        raise DatasetError(f"{file}: missing {plural(len(missing), 'column')}: {', '.join(missing)}")
    return metadata.num_rows


def _table_rows(path: Path, name: str, files: list[str]) -> Iterator[dict[str, Any]]:
    """The rows of table ``name`` (its row columns), file after file, batch by batch."""
    columns = SCHEMAS[name].names
    for relative in files:
        with _opened(path / relative) as source, pq.ParquetFile(source) as handle:
            if handle.metadata.num_row_groups == 0:  # pyarrow 18.0.0's iter_batches raises OSError for these
                continue
            for batch in handle.iter_batches(_BATCH_ROWS, columns=columns):
                yield from batch.to_pylist()


def _tables(path: Path) -> dict[str, Iterator[dict[str, Any]]]:
    """Each table's rows, every file checked first against the manifest.

    Raises:
        DatasetError: The manifest is missing or wrong (``read_manifest``), a file is missing or
            broken, or a table holds another number of rows than the manifest records.
    """
    tables = read_manifest(path)["tables"]
    readers = {}
    for name in TABLES:
        files = tables[name]["files"]
        rows = sum(_checked(path, name, relative) for relative in files)
        recorded = tables[name].get("rows")
        if rows != recorded:
            raise DatasetError(f"{path}: table {name} holds {plural(rows, 'row')} where {MANIFEST} records {recorded}")
        readers[name] = _table_rows(path, name, files)
    return readers


@dataclass
class DatasetRecord:
    """One trajectory read back: its position, its JSON value (or the error that prevented it).

    Attributes:
        stray_rows: Rows of child tables before this trajectory's that name no trajectory.
        missing_before: Trajectory indexes the ``trajectories`` table skips before this one.
        columns: The trajectory's Parquet-only convenience columns (:data:`CONVENIENCE`), as read.
    """

    index: int
    value: dict[str, Any] | None
    problem: str | None = None
    stray_rows: int = 0
    missing_before: int = 0
    columns: dict[str, Any] = field(default_factory=dict)


CONVENIENCE = ("run", "agent", "producer", "reward", "source_file", "task_index", "rollout_index", "attempt")
"""Columns of the ``trajectories`` table that ``ng_trajectory`` has no place for (``parquet_rows.py``)."""


def read_dataset(path: Path) -> Iterator[DatasetRecord]:
    """Yield every trajectory of the dataset at ``path``, in order, streaming.

    ``trajectory_index`` must count 0, 1, 2, ... down the ``trajectories`` table: a row that
    repeats an index or goes back is yielded as a problem without a value (its rows were given to
    the first one), and indexes it skips are counted in the next record's ``missing_before``.
    Rows of a child table that name no trajectory (or are out of order) are counted in the next
    record's ``stray_rows``. ``compactions`` is not read: ``ng_trajectory`` has no place for it.

    Raises:
        DatasetError: The manifest, a table file or a column is missing or unreadable, or a table
            holds another number of rows than the manifest says.
    """
    readers = _tables(path)
    heads = readers.pop("trajectories")
    cursors = {name: _Cursor(rows) for name, rows in readers.items() if name != "compactions"}
    last = -1
    for row, head in enumerate(heads, 1):
        index = head["trajectory_index"]
        if index <= last:
            problem = f"row {row} of the trajectories table repeats trajectory_index {index} or is out of order"
            yield DatasetRecord(index, None, f"{problem} (after {last}); skipped")
            continue
        record = _joined(head, cursors)
        record.missing_before, last = index - last - 1, index
        yield record
    leftover = sum(cursor.take(1 << 62)[1] for cursor in cursors.values())
    if leftover:
        yield DatasetRecord(
            -1,
            None,
            f"{plural(leftover, 'row')} {'names' if leftover == 1 else 'name'} no trajectory of the dataset",
            0,
        )


def _joined(head: dict[str, Any], cursors: dict[str, _Cursor]) -> DatasetRecord:
    """The trajectory of the ``trajectories`` row ``head``, joined with its rows of the other tables."""
    index = head["trajectory_index"]
    tables: dict[str, list[dict[str, Any]]] = {"trajectories": [head]}
    stray = 0
    for name, cursor in cursors.items():
        tables[name], skipped = cursor.take(index)
        stray += skipped
    columns = {name: head.get(name) for name in CONVENIENCE}
    problem = _incomplete(tables)
    if problem is not None:
        return DatasetRecord(index, None, f"rows do not form the trajectory ({problem}); skipped", stray, 0, columns)
    try:
        return DatasetRecord(index, record_value(tables), None, stray, 0, columns)
    except CellNotJson as exc:
        return DatasetRecord(index, None, f"rows do not form a trajectory: {exc}", stray, 0, columns)
    except KeyError as exc:
        return DatasetRecord(index, None, f"rows do not form a trajectory: no column {exc}", stray, 0, columns)
    except TypeError as exc:
        problem = f"rows do not form a trajectory: a value of the wrong type ({exc})"
        return DatasetRecord(index, None, problem, stray, 0, columns)


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
            return f"{name} has {plural(len(rows), 'row')} where the trajectory records {count}"
        if [row[column] for row in rows] != list(range(count)):
            return f"{name}: {column} does not run 0..{count - 1} in row order"
    return None


# -- rows back to the record's JSON value ---------------------------------------------------------


def _model_ref(row: Mapping[str, Any]) -> dict[str, Any] | None:
    if row["model_ref_type"] is None and row["model_ref_name"] is None:
        return None
    return {"type": row["model_ref_type"], "name": row["model_ref_name"]}


def _unref(ref: Mapping[str, Any]) -> dict[str, Any]:
    return {"model_call_id": ref["model_call_id"], "model_ref": _model_ref(ref), "response_id": ref["response_id"]}


class CellNotJson(ValueError):
    """A JSON text column whose cell does not hold JSON; the message names the table and column."""


def _unjson(row: Mapping[str, Any], column: str, table: str) -> Any:
    """The JSON value of ``row[column]`` (``None`` for null).

    Raises:
        CellNotJson: The text is not JSON (``model_calls.request holds no JSON: unexpected character ...``).
    """
    text = row[column]
    if text is None:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise CellNotJson(f"{table}.{column} holds no JSON: {exc}") from exc


def _pick(row: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    return {name: row[name] for name in names}


def record_value(tables: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The ``ng_trajectory`` JSON value of one trajectory from its rows (as dicts, in row order).

    Raises:
        CellNotJson: A JSON text column does not hold JSON.
        KeyError: A column is missing.
    """
    head = tables["trajectories"][0]
    items: dict[int, list[Any]] = {}
    for row in tables["conversation_items"]:
        items.setdefault(row["invocation_index"], []).append(_unjson(row, "item", "conversation_items"))
    invocations = [
        {
            **_pick(row, ("invocation_id", "parent_invocation_id", "spawned_by_tool_call_id", "status")),
            **_pick(row, ("duration_ms", "error_type")),
            "model_calls": [_unref(ref) for ref in row["model_calls"]],
            "conversation": items.get(row["invocation_index"], []),
        }
        for row in tables["invocations"]
    ]
    return {
        "schema_version": head["schema_version"],
        "task_id": head["task_id"],
        "rollout_id": head["rollout_id"],
        "invocations": invocations,
        "turns": [_unturn(row) for row in tables["turns"]],
        "model_calls": [_uncall(row) for row in tables["model_calls"]],
        "tool_calls": [_untool(row) for row in tables["tool_calls"]],
        "gaps": [_pick(row, ("code", "invocation_id", "detail")) for row in tables["gaps"]],
    }


def _unturn(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **_pick(row, ("invocation_id", "task_id", "rollout_id", "turn_no", "timestamp")),
        "question": _unjson(row, "question", "turns"),
        "answer": _unjson(row, "answer", "turns"),
        "reasoning_content": _unjson(row, "reasoning_content", "turns"),
        **_pick(row, ("resolved", "step_count")),
        "model_calls": [_unref(ref) for ref in row["model_calls"]],
    }


def _uncall(row: Mapping[str, Any]) -> dict[str, Any]:
    metadata = ("model", "dialect", "status_code", "response_status", "finish_reason", *METADATA_KEYS_0_7)
    metadata = (*metadata, "error_category")
    tokens = ("prompt_tokens", "completion_tokens", "reasoning_tokens", "total_tokens", "cached_tokens")
    return {
        **_pick(row, ("model_call_id", "started_at", "completed_at", "duration_ms")),
        "request": _unjson(row, "request", "model_calls"),
        "response": _unjson(row, "response", "model_calls"),
        "response_metadata": {
            "response_id": row["response_id"],
            "model_ref": _model_ref(row),
            **_pick(row, metadata),
            "latency_ttft_ms": row["latency_ttft_ms"],
        },
        "token_stats": _pick(row, tokens),
    }


def _untool(row: Mapping[str, Any]) -> dict[str, Any]:
    names = ("invocation_id", "tool_call_id", "sandbox_id", "tool_name", "started_at", "completed_at")
    rest = ("duration_ms", "timing_source", "status", "error_type")
    return {**_pick(row, names), **_pick(row, rest), "output": _unjson(row, "output", "tool_calls")}
