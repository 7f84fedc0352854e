"""Where a Parquet dataset's parts are, told from paths alone (no pyarrow: the CLI checks its
arguments with these before loading it). The layout is described in ``parquet_layout.py``."""

from __future__ import annotations

from pathlib import Path

from ng_traj.diagnostics import RunError

MANIFEST = "ng_traj.json"
"""The manifest file at the top of a dataset folder."""
TABLE_NAMES = (
    "trajectories",
    "invocations",
    "conversation_items",
    "turns",
    "model_calls",
    "tool_calls",
    "gaps",
    "compactions",
)
"""The tables, in dataset order; each is a folder of the dataset."""


def is_dataset(path: Path) -> bool:
    """True when ``path`` is a folder holding a dataset manifest."""
    return path.is_dir() and (path / MANIFEST).is_file()


MISSING_MANIFEST = f"laid out as a Parquet dataset, but its manifest {MANIFEST} is missing: not an ng-traj dataset"
"""Why a folder :func:`without_manifest` holds is not read."""


def without_manifest(path: Path) -> bool:
    """True when ``path`` is a folder laid out as a dataset (a ``trajectories`` table folder holding
    Parquet files) whose manifest is missing: no ng-traj dataset, though it looks like one."""
    tables = path / TABLE_NAMES[0]
    return (
        path.is_dir()
        and not (path / MANIFEST).exists()
        and tables.is_dir()
        and any(entry.suffix == ".parquet" for entry in tables.iterdir())
    )


def is_old_layout(path: Path) -> bool:
    """True when ``path`` is a folder of the first layout (loose ``trajectories.parquet`` and siblings)."""
    return path.is_dir() and (path / "trajectories.parquet").is_file() and not (path / MANIFEST).exists()


def dataset_of_table_file(path: Path) -> Path | None:
    """The dataset folder a table file belongs to (a chunk file, or a loose file of the first layout)."""
    if is_dataset(path.parent.parent) and path.parent.name in TABLE_NAMES:
        return path.parent.parent
    if is_old_layout(path.parent):
        return path.parent
    return None


OLD_LAYOUT = (
    "is a Parquet dataset in the first layout (one loose file per table), which this version does not "
    "read: build it again, or convert its JSONL again, to get the layout with one folder per table"
)


def table_folder_of(path: Path) -> Path | None:
    """The dataset folder ``path`` is a table folder of, or ``None``."""
    return path.parent if path.name in TABLE_NAMES and is_dataset(path.parent) else None


PARQUET_MAGIC = b"PAR1"
"""The first (and last) four bytes of every Parquet file."""
DATASET_KIND = (
    "an ng-traj Parquet dataset (already built; use validate, matrix, show or report, or convert it to JSONL)"
)
"""What ``build`` says a dataset named as its input is."""


def is_parquet_file(path: Path) -> bool:
    """True when the regular file ``path`` starts with the Parquet magic bytes (``False`` if unreadable)."""
    if not path.is_file():
        return False
    try:
        with open(path, "rb") as handle:
            return handle.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC
    except OSError:
        return False


def parquet_kind(path: Path) -> str | None:
    """What ``build`` says a Parquet file or a dataset's manifest is (``None`` for other files)."""
    if path.name == MANIFEST and is_dataset(path.parent):
        return f"the manifest of the ng-traj Parquet dataset {path.parent} (already built; name the dataset folder)"
    if not path.name.endswith(".parquet") or not is_parquet_file(path):
        return None
    dataset = dataset_of_table_file(path)
    if dataset is not None:
        return f"a Parquet table file of the ng-traj dataset {dataset} (already built; name the dataset folder)"
    return "a Parquet file (ng-traj reads Parquet only as a dataset folder it wrote)"


def refuse_parquet_file(path: Path) -> None:
    """Stop with a usage error when ``path`` is a Parquet file, which would read as garbled JSONL.

    Raises:
        RunError: The regular file ``path`` starts with the Parquet magic bytes.
    """
    if not is_parquet_file(path):
        return
    dataset = dataset_of_table_file(path)
    if dataset is not None:
        raise RunError(f"{path} is a Parquet table file of a dataset, not JSONL: name the dataset folder {dataset}")
    raise RunError(f"{path} is a Parquet file, not JSONL: ng-traj reads Parquet only as a dataset folder it wrote")
