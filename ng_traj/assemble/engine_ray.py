"""``--engine ray``: the planned rollouts assembled by Ray Data tasks, on one machine or a cluster.

The driver plans as the local engine does (``assemble/plan.py``), then cuts the plan into the
chunks of the Parquet layout (``writers/parquet_layout.py``: chunk ``k`` holds output positions
``k * chunk_size`` to ``(k + 1) * chunk_size - 1``) and hands them to
``ray.data.from_items(...).map_batches(...)``, one chunk per task; there is no ``groupby`` and no
shuffle, since each rollout is assembled from its own artifacts only (``assemble/build.py``). A
task assembles its chunk's rollouts in order with :func:`build_chunk` and writes their encoded
output itself: a Parquet task writes chunk ``k`` of every table (``part-0000k.parquet``) into the
dataset's temporary folder, a JSONL task writes its chunk's lines to one segment file that the
driver appends to the output in plan order (``writers/spool.py``). What comes back to the driver
is small: per rollout the facts the summary counts and the diagnostics raised, which the driver
replays in rollout order, so output bytes, diagnostics and summary are those of the local engine.

Failures: a task whose worker process dies is retried by Ray (:data:`MAX_RETRIES`, and on
``OSError``, a storage hiccup); anything else a task raises stops the build, as it does locally. A
rollout whose projection fails is the minimal record with ``projection_failed`` here as locally,
since the same assembly runs. Outputs are written atomically (``io/atomic.py``): the dataset
folder, the output file and the segments all live under temporary names until every chunk is done;
an interrupted build stops Ray's work before they are removed.

Ray is an optional dependency (``pip install 'ng-traj[ray]'``, or ``pip install -e '.[ray]'`` in a
checkout) and is imported only here, when a build runs with ``--engine ray``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import logging
import os
import pickle
import shutil
import signal
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ng_traj.assemble.build import BuildOptions, encode_line
from ng_traj.assemble.chunks import ChunkResult, assemble_chunk
from ng_traj.assemble.plan import Slot
from ng_traj.assemble.run import BuildTally, young_collections
from ng_traj.diagnostics import DiagnosticSink, RunError
from ng_traj.io.atomic import STDOUT, atomic_directory, atomic_file, check_interrupted
from ng_traj.roles import RoleTally
from ng_traj.sources import sqlite_copy
from ng_traj.writers.dataset_paths import MANIFEST, TABLE_NAMES
from ng_traj.writers.spool import spool_appender

EXTRA = "pip install 'ng-traj[ray]' (from a source checkout: pip install -e '.[ray]')"
"""How to install what ``--engine ray`` needs: the extra of the installed package, or of a checkout
installed as the README does (``pip install -e .``), where ``ng-traj[ray]`` would fetch another copy."""
MAX_RETRIES = 3
"""Times Ray runs a chunk again after its worker died (or it raised ``OSError``)."""
CHUNK_SIZE = 4096
"""Rollouts per chunk: the Parquet layout's trajectories per chunk file (``parquet_layout.CHUNK_SIZE``)."""
SCRATCH = ".chunk-"
"""Prefix of a Parquet task's scratch folder inside the dataset's temporary folder."""


def require_ray() -> None:
    """Check, without importing it, that Ray is installed.

    Raises:
        RunError: Ray is not installed (the message names the extra to install).
    """
    if importlib.util.find_spec("ray") is None:
        raise RunError(f"--engine ray needs Ray, which is not installed: {EXTRA}")


@dataclass(frozen=True)
class ChunkTarget:
    """Where a task writes its chunk's output (picklable: it travels with every task).

    Attributes:
        format: ``jsonl`` or ``parquet``.
        folder: The segment folder (JSONL) or the dataset's temporary folder (Parquet); a path every
            worker can write to.
        roles: Model-server name -> role, for the ``role`` column of ``model_calls`` (Parquet).
        chunk_size: Rollouts per chunk.
    """

    format: str
    folder: str
    roles: dict[str, str] = field(default_factory=dict)
    chunk_size: int = CHUNK_SIZE


def build_chunk(chunk: int, slots: Sequence[Slot], options: BuildOptions, target: ChunkTarget) -> ChunkResult:
    """Assemble chunk ``chunk`` of the plan (``slots``, its rollouts in order) and write its encoded output.

    JSONL: the chunk's lines, in order, to ``<folder>/<chunk>.jsonl``. Parquet: chunk ``chunk`` of
    every table, written in a scratch folder and moved to ``<folder>/<table>/part-<chunk>.parquet``
    (a retried task replaces what a killed one left). The bytes are those the local engine writes
    for the same rollouts.

    Raises:
        OSError: The output could not be written.
    """
    start = chunk * target.chunk_size
    with young_collections():
        if target.format == "parquet":
            return _parquet_chunk(chunk, start, slots, options, target)
        path = os.path.join(target.folder, f"{chunk:05d}.jsonl")
        return assemble_chunk(options, slots, chunk, start=start, encode=encode_line, segment=path)


def _parquet_chunk(
    chunk: int, start: int, slots: Sequence[Slot], options: BuildOptions, target: ChunkTarget
) -> ChunkResult:
    from ng_traj.writers.parquet import DatasetWriter
    from ng_traj.writers.parquet_layout import part_name

    scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH}{chunk:05d}-", dir=target.folder))
    try:
        writer = DatasetWriter(scratch, target.roles, target.chunk_size)
        result = assemble_chunk(options, slots, chunk, start=start, encode=writer.encoder())
        outcomes = []
        try:
            for done in result.outcomes:
                writer.add_rows(done.payload)
                outcomes.append(dataclasses.replace(done, payload=None))
            writer.close()  # one chunk only: its files are part 0 of the scratch folder
        except BaseException:
            writer.abort()  # its files closed and its writing thread ended before the folder goes
            raise
        for table in TABLE_NAMES:
            os.replace(scratch / table / part_name(0), Path(target.folder, table, part_name(chunk)))
        return ChunkResult(chunk, tuple(outcomes), rows=dict(writer.rows))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _map_chunks(
    batch: dict[str, Any], options: BuildOptions, target: ChunkTarget, copies: str | None = None
) -> dict[str, Any]:
    """The ``map_batches`` function: one chunk in (pickled slots), its pickled :class:`ChunkResult` out,
    or the :class:`RunError` that stopped it (a usage error met while building, such as a ``--redact``
    mask the contract rejects: returned, so that Ray neither retries it nor wraps it).

    ``copies`` is the driver's folder of private SQLite copies (``sources/sqlite_copy.py``): a worker
    on the driver's machine makes its copies there, so that the driver removes them (Ray ends its
    workers without their exit handlers)."""
    if copies is not None:
        sqlite_copy.use_copies_folder(copies)
    results = []
    for chunk, slots in zip(batch["chunk"], batch["slots"], strict=True):
        try:
            results.append(pickle.dumps(build_chunk(int(chunk), pickle.loads(slots), options, target)))
        except RunError as exc:
            results.append(pickle.dumps(RunError(str(exc))))
    return {"chunk": list(batch["chunk"]), "result": results}


def _loaded(result: bytes) -> ChunkResult:
    """A chunk's result as :func:`_map_chunks` pickled it.

    Raises:
        RunError: The chunk stopped on one.
    """
    value = pickle.loads(result)
    if isinstance(value, RunError):
        raise value
    return value


@dataclass
class RayEngine:
    """The ``--engine ray`` build: :meth:`open` the output, then :meth:`run` the plan into it.

    Attributes:
        address: ``--ray-address``: the cluster to connect to; ``None`` starts a local Ray (or uses
            the one this process already started).
        cpus: CPUs of the local Ray (``--jobs``; ``None``: every CPU), or at most this many tasks at
            once on a cluster.
        chunk_size: Rollouts per task and per Parquet chunk file.
    """

    address: str | None = None
    cpus: int | None = None
    chunk_size: int = CHUNK_SIZE

    @contextlib.contextmanager
    def open(self, output: str, chosen: str, roles: dict[str, str]) -> Iterator[tuple[Callable[[Any], Any], Any]]:
        """The atomic output for :meth:`run`: ``(take each ChunkResult in order, ChunkTarget)``.

        Raises:
            RunError: As ``atomic_file`` and ``atomic_directory`` do.
        """
        if chosen == "parquet":
            from ng_traj.writers.parquet import check_target

            with atomic_directory(output, check=check_target) as folder:
                dataset = _Dataset(folder, self.chunk_size)
                yield dataset.take, ChunkTarget("parquet", str(folder), dict(roles), self.chunk_size)
                dataset.close()
            return
        near = None if output == STDOUT else Path(output).resolve().parent
        with atomic_file(output) as handle, tempfile.TemporaryDirectory(prefix=".ng-traj-ray-", dir=near) as folder:
            append = spool_appender(handle)
            yield lambda result: append(result.segment), ChunkTarget("jsonl", folder, dict(roles), self.chunk_size)

    def run(
        self,
        slots: Sequence[Slot],
        options: BuildOptions,
        sink: DiagnosticSink,
        write: Callable[[ChunkResult], Any],
        on_slot: Callable[[Slot], None] | None = None,
        *,
        encode: ChunkTarget,
        jobs: int = 1,
    ) -> BuildTally:
        """Assemble every slot on Ray; ``write`` takes each chunk's result in plan order.

        The signature is ``run.run_slots``'s (``encode`` is the :class:`ChunkTarget` of :meth:`open`,
        ``jobs`` unused: :attr:`cpus` says how many). Diagnostics reach ``sink`` in rollout order.

        Raises:
            RunError: Ray is missing or cannot start or connect.
        """
        tally = BuildTally(by_role=RoleTally(options.roles))
        if not slots:  # nothing to assemble: the empty chunk of a dataset is written here, Ray not started
            write(build_chunk(0, [], options, encode))
            return tally
        chunks = [slots[i : i + self.chunk_size] for i in range(0, len(slots), self.chunk_size)]
        with _ray_session(self.address, self.cpus) as ray_data:
            for result in _results(ray_data, chunks, options, encode, self.cpus if self.address else None):
                check_interrupted()
                write(result)
                for slot, done in zip(chunks[result.index], result.outcomes, strict=True):
                    for diagnostic in done.diagnostics:
                        sink.add(diagnostic)
                    tally.add(slot, done)
                    if on_slot is not None:
                        on_slot(slot)
        return tally


@dataclass
class _Dataset:
    """The driver's side of a Parquet build on Ray: table folders made, rows counted, manifest written last."""

    folder: Path
    chunk_size: int
    chunks: int = 0
    count: int = 0
    rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TABLE_NAMES, 0))

    def __post_init__(self) -> None:
        for table in TABLE_NAMES:
            (self.folder / table).mkdir()

    def take(self, result: ChunkResult) -> None:
        self.chunks += 1
        self.count += len(result.outcomes)
        for table, count in result.rows.items():
            self.rows[table] += count

    def close(self) -> None:
        """Remove what killed tasks left and write the manifest (a folder with a manifest is complete)."""
        from ng_traj.writers.parquet_layout import manifest

        for leftover in self.folder.glob(f"{SCRATCH}*"):
            shutil.rmtree(leftover, ignore_errors=True)
        data = manifest(self.chunks, self.chunk_size, self.count, self.rows)
        (self.folder / MANIFEST).write_bytes(data)


def _results(
    ray_data: Any, chunks: list[list[Slot]], options: BuildOptions, target: ChunkTarget, concurrency: int | None
) -> Iterator[ChunkResult]:
    """Each chunk's result, in chunk order, from Ray Data (which keeps the order, ``preserve_order``;
    :func:`in_order` makes sure)."""
    items = [{"chunk": k, "slots": pickle.dumps(chunk)} for k, chunk in enumerate(chunks)]
    with warnings.catch_warnings():  # retries are task options, which Ray 2.60 warns it will rename
        warnings.filterwarnings("ignore", message=".*ray_remote_args.* is deprecated")
        dataset = ray_data.from_items(items, override_num_blocks=len(items)).map_batches(
            _map_chunks,
            batch_size=1,
            batch_format="numpy",
            fn_kwargs={"options": options, "target": target, "copies": sqlite_copy.copies_folder_in_use()},
            concurrency=concurrency,
            max_retries=MAX_RETRIES,
            retry_exceptions=[OSError],
        )
    rows = dataset.iter_rows()
    try:
        yield from in_order(_loaded(row["result"]) for row in rows)
    finally:
        close = getattr(rows, "close", None)
        if close is not None:
            close()


def in_order(results: Iterable[ChunkResult]) -> Iterator[ChunkResult]:
    """``results`` by chunk number from 0, whatever order they arrive in; each is held only until
    the chunks before it have come.

    Raises:
        RuntimeError: A chunk never came (the results end with later chunks still held).
    """
    waiting: dict[int, ChunkResult] = {}
    following = 0
    for result in results:
        waiting[result.index] = result
        while following in waiting:
            yield waiting.pop(following)
            following += 1
    if waiting:
        raise RuntimeError(f"Ray returned no result for chunk {following} of the plan")


@contextlib.contextmanager
def _ray_session(address: str | None, cpus: int | None) -> Iterator[Any]:
    """``ray.data``, with Ray started (or connected to) quietly; a Ray this block started is shut down
    when it ends, an interrupt included, before the caller removes its temporary outputs.

    Raises:
        RunError: Ray is missing, or does not start or connect.
    """
    require_ray()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise RunError(f"--engine ray could not load Ray ({exc}): {EXTRA}") from exc
    started = not ray.is_initialized()
    if started:
        _init(ray, address, cpus)
    for name in ("ray", "ray.data"):  # before the settings below, which Ray Data answers with a warning
        logging.getLogger(name).setLevel(logging.ERROR)
    with warnings.catch_warnings():  # Ray's own settings it deprecated, set when the context is made
        warnings.simplefilter("ignore", DeprecationWarning)
        context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    context.enable_auto_log_stats = False
    try:
        yield ray.data
    finally:
        if started:
            ray.shutdown()


def _init(ray: Any, address: str | None, cpus: int | None) -> None:
    """``ray.init`` without its log lines, dashboard or signal handlers of its own (ng-traj's stay)."""
    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    quiet = {"log_to_driver": False, "logging_level": logging.ERROR}
    try:
        if address is None:
            ray.init(address="local", num_cpus=cpus, include_dashboard=False, **quiet)  # never someone else's
        else:
            ray.init(address=address, **quiet)
    except Exception as exc:
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        raise RunError(f"--engine ray: cannot start {where}: {exc}") from exc
    finally:
        for number, handler in handlers.items():
            if handler is not None:
                signal.signal(number, handler)
