"""Damaged and live Hermes databases: a writer holding a transaction, truncated files, foreign SQLite.

PRODUCT.md §10.13: the database is read through a private copy, so the original and its folder are
never touched and a live writer is never blocked; what cannot be read is reported, the rest is built.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import orjson
from test_hermes_golden import build_db

from conftest import FIXTURES, run_cli

V6 = FIXTURES / "hermes" / "db_v6_lineage" / "input" / "state.db.json"
ROOT = "20260325_090000_root01"


def _export() -> dict:
    return json.loads(V6.read_text())


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _build(*inputs: Path, out: Path):
    return run_cli("build", *inputs, "-o", out, "--json")


def _trajectories(out: Path) -> dict[str, dict]:
    return {r["rollout_id"]: r for r in map(orjson.loads, out.read_bytes().splitlines())}


def test_live_writer_is_neither_blocked_nor_read_uncommitted(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    db = build_db(_export(), home / "state.db", wal=True)
    writer = sqlite3.connect(db)
    writer.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', 'committed', 1.0)", (ROOT,)
    )
    writer.commit()  # committed into the WAL, not checkpointed while the writer stays open
    writer.execute("BEGIN IMMEDIATE")
    writer.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', 'uncommitted', 2.0)", (ROOT,)
    )
    before = _digest(home)
    assert "state.db-wal" in before
    result = _build(home, out=tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert _digest(home) == before
    contents = [c.get("content") for c in _trajectories(tmp_path / "out.jsonl")[ROOT]["invocations"][0]["conversation"]]
    assert "committed" in contents and "uncommitted" not in contents
    writer.commit()  # the writer was never blocked
    writer.close()


def test_reading_leaves_the_folder_untouched(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    build_db(_export(), home / "state.db")
    before = _digest(home)
    assert _build(home, out=tmp_path / "out.jsonl").exit_code == 0
    assert _digest(home) == before  # no -wal or -shm created beside the original


def test_damaged_messages_table_keeps_what_is_readable(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    db = build_db(_export(), home / "state.db")
    with sqlite3.connect(db) as connection:
        pages = {
            name: page
            for name, page in connection.execute("SELECT name, rootpage FROM sqlite_master WHERE type='table'")
        }
        page_size = connection.execute("PRAGMA page_size").fetchone()[0]
    data = bytearray(db.read_bytes())
    start = (pages["messages"] - 1) * page_size
    data[start : start + page_size] = b"\xff" * page_size  # the messages table's page is destroyed
    db.write_bytes(bytes(data))
    result = _build(home, out=tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert "error[hermes_db_unreadable]" in result.stderr
    built = _trajectories(tmp_path / "out.jsonl")
    assert sorted(built) == [ROOT, "20260325_091000_orphan", "20260325_100000_compa1", "20260325_110000_brch01"]
    gaps = [(g["code"], g["invocation_id"], g["detail"]) for g in built[ROOT]["gaps"]]
    assert ("agent_transcript_unavailable", ROOT, "state.db:DatabaseError") in gaps
    assert built[ROOT]["invocations"][1]["parent_invocation_id"] == ROOT  # lineage survives from sessions


def test_truncated_database_is_reported_and_the_rest_built(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    db = build_db(_export(), home / "state.db")
    db.write_bytes(db.read_bytes()[: 3 * 4096])  # a partial copy: SQLite finds every page suspect
    (home / "20260402_090000_gate01.jsonl").write_text(
        '{"role": "user", "content": "hi", "timestamp": "2026-04-02T09:00:00"}\n'
    )
    result = _build(home, out=tmp_path / "out.jsonl")
    assert result.exit_code == 0
    summary = json.loads(result.stdout)
    assert summary["diagnostics"]["by_code"]["hermes_db_unreadable"] == 1
    assert list(_trajectories(tmp_path / "out.jsonl")) == ["20260402_090000_gate01"]


def test_named_database_without_hermes_tables_yields_nothing(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    with sqlite3.connect(db) as connection:
        connection.execute("CREATE TABLE session (id TEXT)")
    result = _build(db, out=tmp_path / "out.jsonl")
    assert result.exit_code == 1  # the named input yielded nothing usable (PRODUCT.md §10.15)
    assert "not a Hermes state.db: table sessions lacks id" in result.stderr


def test_other_sqlite_files_are_recognised_not_read(tmp_path: Path) -> None:
    other = tmp_path / "opencode.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE session (id TEXT)")
    result = _build(tmp_path, out=tmp_path / "out.jsonl")
    assert "info[input_unsupported]" in result.stderr
    assert "SQLite database that is not a Hermes state.db" in result.stderr
