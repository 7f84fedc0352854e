"""Writing the Parquet dataset: one folder per table, one chunk file per table and chunk (``parquet_layout.py``).

Plain Parquet (zstd), readable by DuckDB, Polars, pandas and pyarrow without ng-traj. Rows are in
trajectory order, so ``trajectory_index`` ascends in every table.

Writing streams: each table buffers the rows of whole trajectories and writes them out as one
row group once they reach :data:`ROW_GROUP_BYTES` (estimated from their text) or
:data:`ROW_GROUP_ROWS`, or when the chunk ends; memory is bounded by those buffers plus one
trajectory, never by the corpus. Chunk and row-group boundaries depend only on the sequence of
trajectories, so the same build writes the same bytes whatever ``--jobs``. The folder is written
under a temporary name and renamed when complete (``io/atomic.py``): a killed build leaves the
previous dataset or none. The typed time and duration columns are computed from the float ones
with Arrow's vectorised kernels when a row group is written.

A row group is made into an Arrow table by the caller's thread and encoded, compressed and written
by one writing thread (pyarrow releases the GIL for that), while the caller goes on assembling:
at most one row group is in the writing thread at a time, and the thread takes them in the order
they were made, so the files hold the same bytes as when written in line. What the writing raises
(a full disk, say) is raised in the caller by the next write, or by ``close``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ng_traj.contract import TrajectoryRecord
from ng_traj.diagnostics import RunError
from ng_traj.io.atomic import atomic_directory, check_replaceable_folder, output_folder, written_path
from ng_traj.writers.dataset_paths import is_dataset, is_old_layout
from ng_traj.writers.parquet_arrays import NULL_FLOAT, column, scalar, texts
from ng_traj.writers.parquet_layout import (
    CHUNK_SIZE,
    DERIVED,
    JSON_COLUMNS,
    JSON_TYPE,
    MANIFEST,
    OLD_ENTRIES,
    OWN_ENTRIES,
    SCHEMAS,
    TABLES,
    file_schema,
    manifest,
    part_path,
)
from ng_traj.writers.parquet_rows import Encoded, Extras, RowEncoder, record_rows

ROW_GROUP_BYTES = 8 << 20
"""A table's buffered rows are written as a row group from about this many bytes of text."""
ROW_GROUP_ROWS = 100_000
"""... or from this many rows."""
PIECE_ROWS = 1024
"""Rows a table's buffer holds as Python values before they are made into Arrow arrays (a piece of
the row group to come). As Python objects a row of short values takes about ten times its text;
as Arrow arrays, about its text. So a table of small rows (gaps, say), which takes thousands of
trajectories to fill a row group, holds them compactly."""
COMPRESSION = "zstd"
COMPRESSION_LEVEL = 1
WRITE_BUFFER = 256 << 10
"""Bytes a chunk file's writes are gathered into before they reach the file: Parquet writes every
page header and page separately, mostly a few bytes or a few KiB each."""

_SCALE = {pa.timestamp("us", tz="UTC"): scalar(1e6), pa.duration("us"): scalar(1e3)}
"""Microseconds per unit of the float column: seconds for times, milliseconds for durations (Arrow
scalars: a Python float given to a compute function is converted as ``parquet_arrays.py`` avoids)."""
_LIMIT = scalar(9.0e15)
"""Microsecond counts kept exactly by a float64 (below 2**53); beyond (about year 2255), null."""


def _plain_columns(table: str) -> list[str]:
    """Columns worth a dictionary and statistics: all but the JSON text ones (large, mostly unique)."""
    return [name for name in file_schema(table).names if name not in JSON_COLUMNS.get(table, ())]


def _json_array(values: tuple[bytes | None, ...]) -> pa.Array:
    """A JSON array from texts already encoded as UTF-8 by orjson (no decoding, no re-validation),
    assembled from one buffer of the texts joined and their offsets (``parquet_arrays.texts``)."""
    return pa.ExtensionArray.from_storage(JSON_TYPE, texts(values))


def _typed(values: pa.Array, kind: pa.DataType) -> pa.Array:
    """Float seconds (times) or milliseconds (durations) as ``kind`` in microseconds, rounded to the
    nearest; values too large for microseconds are null."""
    micros = pc.round(pc.multiply(values, _SCALE[kind]))
    kept = pc.if_else(pc.less(pc.abs(micros), _LIMIT), micros, NULL_FLOAT)
    return pc.cast(kept, pa.int64()).view(kind)


def _table(name: str, rows: list[tuple[Any, ...]]) -> pa.Table:
    """A row group of ``name``'s file from its rows (tuples in row-column order)."""
    json_columns = JSON_COLUMNS.get(name, ())
    columns = {
        f.name: _json_array(values) if f.name in json_columns else column(values, f.type)
        for f, values in zip(SCHEMAS[name], zip(*rows, strict=True), strict=True)
    }
    for derived, source, kind in DERIVED.get(name, ()):
        columns[derived] = _typed(columns[source], kind)
    schema = file_schema(name)
    return pa.Table.from_arrays([columns[f.name] for f in schema], schema=schema)


def _joined(pieces: list[pa.Table]) -> pa.Table:
    """A row group's pieces as one table of one chunk per column (the bytes Parquet writes depend
    on how a column is chunked, and the same rows make the same file however they were pieced)."""
    if len(pieces) == 1:
        return pieces[0]
    return pa.concat_tables(pieces).combine_chunks()


class DatasetWriter:
    """Writes trajectories into the chunk files of a dataset folder, one row group at a time.

    Args:
        directory: An existing, empty folder (the temporary one of :func:`open_dataset`).
        roles: Model-server name -> role, for the ``role`` column of ``model_calls``.
        chunk_size: Trajectories per chunk file.
    """

    def __init__(self, directory: Path, roles: Mapping[str, str] | None = None, chunk_size: int = CHUNK_SIZE) -> None:
        self.directory = directory
        self.roles = dict(roles or {})
        self.chunk_size = chunk_size
        self.count = 0
        """Trajectories added so far (the next one's ``trajectory_index``)."""
        self.rows = dict.fromkeys(TABLES, 0)
        """Rows written per table."""
        self._buffers: dict[str, list[tuple[Any, ...]]] = {name: [] for name in TABLES}
        self._pieces: dict[str, list[pa.Table]] = {name: [] for name in TABLES}
        self._buffered = dict.fromkeys(TABLES, 0)
        """Rows per table waiting for their row group, in pieces and in the buffer."""
        self._weights = dict.fromkeys(TABLES, 0)
        for name in TABLES:
            (directory / name).mkdir()
        self._chunk = 0
        self._sinks: dict[str, pa.NativeFile] = {}
        self._files = self._open(0)
        self._thread: ThreadPoolExecutor | None = None  # started with the first write (after any fork)
        self._writing: Future[None] | None = None

    def _open(self, chunk: int) -> dict[str, pq.ParquetWriter]:
        files = {}
        for name in TABLES:
            path = os.fsencode(part_path(self.directory, name, chunk))  # bytes: pyarrow takes no surrogates
            self._sinks[name] = sink = pa.BufferedOutputStream(pa.OSFile(path, "wb"), WRITE_BUFFER)
            files[name] = pq.ParquetWriter(
                sink,
                file_schema(name).with_metadata({"ng_traj.table": name}),
                compression=COMPRESSION,
                compression_level=COMPRESSION_LEVEL,
                use_dictionary=_plain_columns(name),
                write_statistics=_plain_columns(name),
            )
        return files

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
        if self.count and self.count % self.chunk_size == 0:
            self._close_chunk()
            self._chunk += 1
            self._files = self._open(self._chunk)
        for name, weight in encoded.weights.items():
            rows = encoded.rows[name]
            self._buffers[name].extend(rows)
            self._buffered[name] += len(rows)
            self._weights[name] += weight
            if self._weights[name] >= ROW_GROUP_BYTES or self._buffered[name] >= ROW_GROUP_ROWS:
                self._flush(name)
            elif len(self._buffers[name]) >= PIECE_ROWS:
                self._pieces[name].append(_table(name, self._buffers[name]))
                self._buffers[name] = []
        self.count += 1

    def _flush(self, name: str) -> None:
        rows, pieces, count = self._buffers[name], self._pieces[name], self._buffered[name]
        if not count:
            return
        self._written()  # the row group before is written before this one is made: one table held at a time
        if rows:
            pieces.append(_table(name, rows))
        self._buffers[name], self._pieces[name], self._buffered[name], self._weights[name] = [], [], 0, 0
        del rows  # their texts are in the pieces now
        self._write(self._files[name].write_table, _joined(pieces), count)
        self.rows[name] += count

    def _write(self, task: Callable[..., None], *args: Any) -> None:
        """Run ``task(*args)`` in the writing thread once what it was given before is done."""
        self._written()
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="ng-traj-parquet")
        self._writing = self._thread.submit(task, *args)

    def _written(self) -> None:
        """Wait for the writing thread's task; raises what it raised."""
        writing, self._writing = self._writing, None
        if writing is not None:
            writing.result()

    def _close_chunk(self) -> None:
        for name in TABLES:
            self._flush(name)
        self._write(_close_all, (*self._files.values(), *self._sinks.values()))

    def close(self) -> None:
        """Write the remaining rows, close every file and write the manifest (last: a folder with a
        manifest is complete)."""
        self._close_chunk()
        self._stop()
        data = manifest(self._chunk + 1, self.chunk_size, self.count, self.rows)
        (self.directory / MANIFEST).write_bytes(data)

    def abort(self) -> None:
        """Close every file without writing buffered rows (the folder is about to be removed)."""
        with contextlib.suppress(Exception):
            self._stop()
        for handle in (*self._files.values(), *self._sinks.values()):
            with contextlib.suppress(Exception):
                handle.close()

    def _stop(self) -> None:
        """Wait for the writing thread to finish its task and end it; raises what the task raised."""
        try:
            self._written()
        finally:
            if self._thread is not None:
                self._thread.shutdown(wait=True)
                self._thread = None


def _close_all(handles: tuple[pa.NativeFile | pq.ParquetWriter, ...]) -> None:
    """Close a chunk's writers, then their streams (a writer leaves a stream it was given open)."""
    for handle in handles:
        handle.close()


def check_target(path: Path, *, probe: bool = True) -> None:
    """Refuse to replace anything at ``path`` but an ng-traj dataset holding nothing else, or an empty folder.

    A dataset of the first layout (loose table files) may be replaced too. With ``probe``, a file is
    created and removed beside ``path`` to prove its folder writable (``io.atomic.output_folder``).

    Raises:
        RunError: The folder of ``path`` does not exist; ``path`` is a file, a folder that is not an
            ng-traj dataset, a dataset folder that also holds other files or folders (which
            replacing it would delete), or a folder this user may not write.
    """
    output_folder(path, probe=probe)
    check_replaceable_folder(written_path(path))
    if not path.exists() or (path.is_dir() and not any(path.iterdir())):  # an empty folder: nothing to lose
        return
    if not (is_dataset(path) or is_old_layout(path)):
        kind = "directory" if path.is_dir() else "file"
        raise RunError(
            f"output {path} is an existing {kind} that is not an ng-traj Parquet dataset; not replaced: "
            "name a new or empty folder"
        )
    own = OLD_ENTRIES if is_old_layout(path) else OWN_ENTRIES
    foreign = sorted(name for entry in path.iterdir() for name in _foreign(entry, own))
    if foreign:
        named = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise RunError(
            f"output {path} is a dataset that also holds {named}; not replaced (move those out or name another output)"
        )


def _foreign(entry: Path, own: frozenset[str]) -> list[str]:
    """What in an entry of a dataset folder is not the dataset's (and replacing it would delete):
    anything but the ``own`` entries, and in a table folder anything but chunk files."""
    if entry.name not in own or entry.is_symlink():
        return [entry.name]
    if entry.name not in SCHEMAS:
        return [] if entry.is_file() else [entry.name]
    if not entry.is_dir():
        return [entry.name]
    return [f"{entry.name}/{part.name}" for part in entry.iterdir() if not _is_part(part)]


def _is_part(path: Path) -> bool:
    return path.is_file() and not path.is_symlink() and path.name.startswith("part-") and path.suffix == ".parquet"


@contextlib.contextmanager
def open_dataset(
    path: str | Path, roles: Mapping[str, str] | None = None, chunk_size: int = CHUNK_SIZE
) -> Iterator[DatasetWriter]:
    """Write a dataset at ``path`` atomically; an existing dataset there is replaced when done.

    Raises:
        RunError: The parent folder is missing, or ``path`` holds something other than a dataset.
    """
    with atomic_directory(path, check=check_target) as directory:
        writer = DatasetWriter(directory, roles, chunk_size)
        try:
            yield writer
            writer.close()
        except BaseException:
            writer.abort()
            raise
