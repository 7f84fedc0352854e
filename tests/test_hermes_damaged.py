"""Damaged and live Hermes databases: a writer holding a transaction, truncated files, foreign SQLite.

The database is read through a private copy, so the original and its folder are
never touched and a live writer is never blocked; what cannot be read is reported, the rest is built.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import orjson

from conftest import FIXTURES, build_db, run_cli, run_json

V6 = FIXTURES / "hermes" / "db_v6_lineage" / "input" / "state.db.json"
ROOT = "20260325_090000_root01"


def _export() -> dict:
    return json.loads(V6.read_text())


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _build(*inputs: Path, out: Path):
    return run_json("build", *inputs, "-o", out)


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
    summary = result.summary
    assert summary["diagnostics"]["by_code"]["hermes_db_unreadable"] == 1
    assert list(_trajectories(tmp_path / "out.jsonl")) == ["20260402_090000_gate01"]


def test_named_database_without_hermes_tables_yields_nothing(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    with sqlite3.connect(db) as connection:
        connection.execute("CREATE TABLE session (id TEXT)")
    result = _build(db, out=tmp_path / "out.jsonl")
    assert result.exit_code == 1  # the named input yielded nothing usable
    assert "not a Hermes state.db: no table sessions" in result.stderr


def test_other_sqlite_files_are_recognised_not_read(tmp_path: Path) -> None:
    other = tmp_path / "notes.db"  # (opencode.db is the OpenCode reader's)
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE session (id TEXT)")
    result = _build(tmp_path, out=tmp_path / "out.jsonl")
    assert "info[input_unsupported]" in result.stderr
    assert "SQLite database that is not a Hermes state.db" in result.stderr


def test_parent_session_cycles_are_reported_and_cut_at_the_smallest_id(tmp_path: Path) -> None:
    export = _export()
    for row in export["sessions"]:
        if row["id"] == ROOT:
            row["parent_session_id"] = "20260325_090010_child1"  # root01 <-> child1
        if row["id"] == "20260325_100000_compa1":
            row["parent_session_id"] = row["id"]  # a session its own parent
    home = tmp_path / "home"
    home.mkdir()
    build_db(export, home / "state.db")
    result = _build(home, out=tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "[parent_cycle]" in line]
    assert warnings == [
        f"{home / 'state.db'}: warning[parent_cycle]: parent_session_id links form a cycle "
        f"({ROOT} -> 20260325_090010_child1 -> {ROOT}); the link of {ROOT} to 20260325_090010_child1 "
        f"is ignored and {ROOT} heads the tree",
        f"{home / 'state.db'}: warning[parent_cycle]: parent_session_id links form a cycle "
        "(20260325_100000_compa1 -> 20260325_100000_compa1); the link of 20260325_100000_compa1 to "
        "20260325_100000_compa1 is ignored and 20260325_100000_compa1 heads the tree",
    ]
    trajectories = _trajectories(tmp_path / "out.jsonl")
    lineage = {
        key: [(i["invocation_id"], i["parent_invocation_id"]) for i in record["invocations"]]
        for key, record in trajectories.items()
    }
    assert lineage[ROOT] == [(ROOT, None), ("20260325_090010_child1", ROOT)]
    assert lineage["20260325_100000_compa1"] == [("20260325_100000_compa1", None), ("20260325_101000_compb2", None)]
    assert "20260325_090010_child1" not in trajectories
    cut = [
        (g["invocation_id"], g["detail"]) for g in trajectories[ROOT]["gaps"] if g["code"] == "cyclic_subagent_parent"
    ]
    assert cut == [(ROOT, "20260325_090010_child1")]
    compa = trajectories["20260325_100000_compa1"]["gaps"]
    assert ("20260325_100000_compa1", "20260325_100000_compa1") in [
        (g["invocation_id"], g["detail"]) for g in compa if g["code"] == "cyclic_subagent_parent"
    ]


def test_text_schema_version_and_tool_calls_that_are_not_json_are_reported(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    db = build_db(_export(), home / "state.db")
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE schema_version SET version = 'abc'")
        (message_id,) = connection.execute(
            "SELECT MIN(id) FROM messages WHERE session_id = ? AND tool_calls IS NOT NULL", (ROOT,)
        ).fetchone()
        connection.execute("UPDATE messages SET tool_calls = '[{\"id\": ' WHERE id = ?", (message_id,))
    result = _build(home, out=tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    lines = [line.split(": ", 1)[1] for line in result.stderr.splitlines() if "warning[hermes_" in line]
    assert lines == [
        "warning[hermes_schema_version_unknown]: schema_version 'abc' is not one of 1-23; known columns read",
        f"warning[hermes_column_invalid]: session {ROOT}, messages.id={message_id}: tool_calls is not JSON; "
        "the message is kept without it",
    ]
    gaps = [(g["code"], g["detail"]) for g in _trajectories(tmp_path / "out.jsonl")[ROOT]["gaps"]]
    assert ("hermes_schema_version_unsupported", "schema_version=abc") in gaps
    assert ("agent_artifact_record_unparseable", f"state.db:messages.id={message_id}:tool_calls") in gaps


def _destroy_table_page(db: Path, table: str) -> None:
    with sqlite3.connect(db) as connection:
        (page,) = connection.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
        page_size = connection.execute("PRAGMA page_size").fetchone()[0]
    data = bytearray(db.read_bytes())
    data[(page - 1) * page_size : page * page_size] = b"\xff" * page_size
    db.write_bytes(bytes(data))


def test_a_damaged_schema_version_table_is_a_damaged_database_not_a_missing_version(tmp_path: Path) -> None:
    db = build_db(_export(), tmp_path / "state.db")
    _destroy_table_page(db, "schema_version")
    result = _build(db, out=tmp_path / "out.jsonl")
    assert result.exit_code == 1  # the only input yielded nothing
    assert "error[hermes_db_unreadable]: DatabaseError: database disk image is malformed" in result.stderr
    assert "hermes_schema_version_unknown" not in result.stderr


def test_a_database_without_its_messages_table_still_builds_its_sessions(tmp_path: Path) -> None:
    db = build_db(_export(), tmp_path / "state.db")
    with sqlite3.connect(db) as connection:
        connection.execute("DROP TABLE messages")
    result = _build(db, out=tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    built = _trajectories(tmp_path / "out.jsonl")
    assert sorted(built) == [ROOT, "20260325_091000_orphan", "20260325_100000_compa1", "20260325_110000_brch01"]
    gaps = [(g["code"], g["invocation_id"], g["detail"]) for g in built[ROOT]["gaps"]]
    assert ("agent_transcript_unavailable", ROOT, "state.db:OperationalError") in gaps
    assert built[ROOT]["invocations"][1]["parent_invocation_id"] == ROOT
    assert "no table messages; built without their transcript" in result.stderr


def test_files_forced_as_hermes_are_read_and_their_damage_reported(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE t (x)")
    result = run_cli("build", "--as", "hermes", other, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 1
    assert "error[hermes_db_unreadable]: not a Hermes state.db: no table sessions" in result.stderr
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\xff\xfe not json\nstill not\n")
    result = run_cli("build", "--as", "hermes", garbage, "-o", tmp_path / "out.jsonl")
    assert [
        line.split(": ")[1] for line in result.stderr.splitlines() if "garbage.bin:" in line and "error[" in line
    ] == [
        "error[invalid_utf8]",
        "error[invalid_json]",
    ]


def test_session_times_that_are_not_times_are_reported(tmp_path: Path) -> None:
    db = build_db(_export(), tmp_path / "state.db")
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE sessions SET started_at = 'yesterday' WHERE id = ?", (ROOT,))
    result = _build(db, out=tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.stderr
    assert [line.split(": ", 1)[1] for line in result.stderr.splitlines() if "hermes_time_invalid" in line] == [
        f"warning[hermes_time_invalid]: session {ROOT}: started_at 'yesterday' not a time; its duration is unknown"
    ]
    assert _trajectories(tmp_path / "out.jsonl")[ROOT]["invocations"][0]["duration_ms"] is None


def test_a_name_in_sqlite_master_that_is_not_utf8_costs_that_database(tmp_path: Path) -> None:
    """SQLite's "malformed database schema (<name>)" quotes the damaged name, and Python's ``sqlite3``
    raises ``UnicodeDecodeError`` (not ``sqlite3.Error``) decoding that message."""
    home = tmp_path / "home"
    home.mkdir()
    db = build_db(_export(), home / "state.db")
    data = db.read_bytes()
    assert b"sqlite_autoindex_sessions_1" in data
    db.write_bytes(data.replace(b"sqlite_autoindex_sessions_1", b"sql\xa3te_autoindex_sessions_1"))
    rows = tmp_path / "rollouts.jsonl"
    rows.write_bytes((FIXTURES / "build" / "legacy_attachments" / "input" / "rollouts.jsonl").read_bytes())
    result = _build(home, rows, out=tmp_path / "out.jsonl")
    assert result.exit_code == 1, result.stderr  # one input gave nothing; the others were built
    assert (
        f"{db}: error[hermes_db_unreadable]: its schema (sqlite_master) holds a name that is not UTF-8: the "
        "database is damaged; its sessions are not built\n"
    ) in result.stderr
    assert "UnicodeDecodeError" not in result.stderr and "codec" not in result.stderr
    assert len(_trajectories(tmp_path / "out.jsonl")) == len(rows.read_bytes().splitlines())


def test_a_state_db_with_a_damaged_header_is_reported_unreadable_not_skipped(tmp_path: Path) -> None:
    """Found by the fuzzer: a BOM (or any damage) in the first 16 bytes made the file no one's; in a
    folder build it was skipped with an info, and its sessions were lost without an error."""
    home = tmp_path / "home"
    home.mkdir()
    db = build_db(_export(), home / "state.db")
    db.write_bytes(b"\xef\xbb\xbf" + db.read_bytes())
    result = _build(home, out=tmp_path / "out.jsonl")
    found = [(d["severity"], d["code"], d["path"]) for d in result.diagnostics if d["path"] == str(db)]
    assert found == [("error", "hermes_db_unreadable", str(db))]
    assert result.exit_code == 1


def test_a_message_whose_text_is_not_utf8_is_built_and_reported_with_the_rest(tmp_path: Path) -> None:
    """SQLite keeps any bytes in a TEXT column: one message (or session column) that is not UTF-8 is
    read with U+FFFD in place of its bad bytes and reported, and every other message and session of the
    file is built as before (the query used to fail, losing the transcripts of every session in it)."""
    home, clean = tmp_path / "home", tmp_path / "clean"
    home.mkdir()
    clean.mkdir()
    build_db(_export(), clean / "state.db")
    db = build_db(_export(), home / "state.db")
    with sqlite3.connect(db) as writer:
        target = writer.execute(
            "SELECT MIN(id) FROM messages WHERE session_id = ? AND role = 'user'", (ROOT,)
        ).fetchone()[0]
        writer.execute("UPDATE messages SET content = CAST(x'48ffa3fe' AS TEXT) WHERE id = ?", (target,))
        writer.execute("UPDATE sessions SET system_prompt = CAST(x'54ff' AS TEXT) WHERE id = ?", (ROOT,))
    writer.close()
    expected = _build(clean, out=tmp_path / "clean.jsonl")
    result = _build(home, out=tmp_path / "out.jsonl")
    assert result.exit_code == expected.exit_code == 0
    seen = {(d["severity"], d["code"], d["message"]) for d in expected.diagnostics}
    found = sorted({(d["severity"], d["code"], d["message"]) for d in result.diagnostics} - seen)
    assert found == [
        (
            "warning",
            "hermes_column_invalid",
            f"session {ROOT}, messages.id={target}: content is not UTF-8 text; "
            "the message is kept with U+FFFD in place of the bytes that are not",
        ),
        (
            "warning",
            "hermes_column_invalid",
            f"session {ROOT}: sessions.system_prompt is not UTF-8 text; read with U+FFFD in place of the bytes that are not",
        ),
    ]
    built, before = _trajectories(tmp_path / "out.jsonl"), _trajectories(tmp_path / "clean.jsonl")
    assert sorted(built) == sorted(before)
    assert {k: v for k, v in built.items() if k != ROOT} == {k: v for k, v in before.items() if k != ROOT}
    conversation = built[ROOT]["invocations"][0]["conversation"]
    assert len(conversation) == len(before[ROOT]["invocations"][0]["conversation"])
    assert "H\ufffd\ufffd\ufffd" in [item.get("content") for item in conversation]
