"""Shared test helpers: fixture paths, the CLI runner, and access to ``../shared/`` samples."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from ng_traj.cli import app
from ng_traj.diagnostics import Diagnostic

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
SHARED = Path(os.environ.get("NG_TRAJ_SHARED") or ROOT.parent / "shared")
"""The folder of real samples (``gym-examples/``, ``producer-samples/``, ``fuzz-cases/``...): beside
the repository, or where ``NG_TRAJ_SHARED`` names it."""


def shared_dir(*parts: str) -> Path:
    """Return a folder under :data:`SHARED`; skip the test when it is absent.

    With ``NG_TRAJ_REQUIRE_SHARED=1`` (set by ``.ci/run``) a missing folder fails the test instead.
    """
    path = SHARED.joinpath(*parts)
    if not path.exists():
        message = f"{path} is absent (tests over real samples need them; set NG_TRAJ_SHARED to their folder)"
        if os.environ.get("NG_TRAJ_REQUIRE_SHARED") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


def run_cli(*args: str):
    """Invoke ``ng-traj`` in-process; returns the result with ``exit_code``, ``stdout``, ``stderr``."""
    return CliRunner().invoke(app, [str(arg) for arg in args])


@dataclass
class JsonRun:
    """A command run with ``--output-format json``, its lines parsed.

    ``stderr`` holds the diagnostics as the text format renders them with ``--verbose`` (every one),
    so that tests can match the rendered lines; the real standard error was empty.
    """

    exit_code: int
    diagnostics: list[dict]
    summary: dict

    @property
    def stderr(self) -> str:
        fields = ("severity", "code", "message", "path", "line", "offset", "pointer")
        lines = [Diagnostic(**{key: d[key] for key in fields}).render() for d in self.diagnostics]
        return "".join(line + "\n" for line in lines)


def run_json(*args: str) -> JsonRun:
    """Invoke ``ng-traj`` with ``--output-format json`` (results written to a file, not standard output)."""
    result = run_cli(*args, "--output-format", "json")
    assert result.stderr == "", result.stderr
    lines = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert [line["type"] for line in lines] == ["diagnostic"] * (len(lines) - 1) + ["summary"]
    return JsonRun(result.exit_code, lines[:-1], lines[-1])


def generated_corpus(root: Path, rollouts: int, calls: int, seed: int) -> Path:
    """A retained run written by ``bench/corpus.py`` (seeded, so the same every time) under ``root``."""
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    from corpus import generate

    generate(root, rollouts=rollouts, calls=calls, seed=seed)
    return root


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory) -> Path:
    """130 rollouts of 2-6 calls: every dialect and agent, streams, one corrupt capture line (rollout 125)."""
    return generated_corpus(tmp_path_factory.mktemp("small_corpus"), 130, 4, 11)


def without_null_0_7_keys(record: dict) -> dict:
    """A trajectory value without the keys nemo-gym 0.7.0 added, asserting each was null."""
    from ng_traj.contract.revisions import ITEM_KEYS_0_7, METADATA_KEYS_0_7

    for call in record["model_calls"]:
        for key in METADATA_KEYS_0_7:
            assert call["response_metadata"].pop(key) is None
    for invocation in record["invocations"]:
        for item in invocation["conversation"]:
            for key in ITEM_KEYS_0_7.get(item.get("type"), ()):
                assert item.pop(key, None) is None
    return record


def table_file(dataset: Path, name: str, chunk: int = 0) -> Path:
    """Chunk file ``chunk`` of table ``name`` in a dataset folder."""
    return dataset / name / f"part-{chunk:05d}.parquet"


def rewrite_table(dataset: Path, name: str, table) -> None:
    """Replace the one chunk file of table ``name`` by ``table`` (a ``pyarrow.Table``), with the
    manifest's row count kept in step, as a damaged dataset whose manifest still agrees would be."""
    import orjson
    import pyarrow.parquet as pq

    pq.write_table(table, table_file(dataset, name))
    manifest = orjson.loads((dataset / "ng_traj.json").read_bytes())
    manifest["tables"][name]["rows"] = table.num_rows
    (dataset / "ng_traj.json").write_bytes(orjson.dumps(manifest))


def build_db(export: dict, target: Path, *, wal: bool = False) -> Path:
    """Create the Hermes SQLite database a ``*.db.json`` export describes (DDL, then rows in order) at ``target``."""
    connection = sqlite3.connect(target)
    if wal:
        connection.execute("PRAGMA journal_mode=wal")
    for table in ("schema_version", "sessions", "messages"):
        connection.execute(export["ddl"][table])
    for table in ("schema_version", "sessions", "messages"):
        for row in export[table]:
            names = ", ".join(f'"{name}"' for name in row)
            connection.execute(
                f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(row))})", list(row.values())
            )
    connection.commit()
    connection.close()
    return target


def build_valid(tmp_path: Path, *inputs: Path) -> list[dict]:
    """Build ``inputs`` (exit 0, no traceback) and return the records, each free of contract errors."""
    import orjson

    from ng_traj.checks import check_line

    out = tmp_path / "out.jsonl"
    result = run_cli("build", *inputs, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert "Traceback" not in result.stderr
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    for record in records:
        findings, _ = check_line(record)
        assert [f for f in findings if f.severity == "error"] == []
    return records
