"""Indexing reads pi-family sessions without comparing entries for copies: the same ids as a full read."""

from __future__ import annotations

import pytest

from conftest import FIXTURES
from ng_traj.diagnostics import Diagnostic, DiagnosticSink
from ng_traj.sources.pi.observe import response_ids
from ng_traj.sources.pi.session import read_session

SESSIONS = sorted(
    path
    for folder in ("pi", "openclaw", "native_e2e")
    for path in (FIXTURES / folder).rglob("*.jsonl")
    if path.name != "expected.jsonl" and not path.name.endswith(".expected.jsonl") and not path.is_symlink()
)


def _facts(path, index_only: bool) -> tuple:
    session = read_session(path, DiagnosticSink(), index_only=index_only)
    return session.session_id, session.header, response_ids(session), [entry.id for entry in session.entries]


@pytest.mark.parametrize("path", SESSIONS, ids=lambda path: str(path.relative_to(FIXTURES)))
def test_an_index_read_has_the_ids_of_a_full_read(path):
    assert _facts(path, index_only=True) == _facts(path, index_only=False)


def test_an_index_read_marks_only_repeated_ids_and_reports_no_copies():
    path = FIXTURES / "pi" / "copied_context_compaction" / "input" / "session.jsonl"
    full: list[Diagnostic] = []
    session = read_session(path, DiagnosticSink(full.append))
    indexed: list[Diagnostic] = []
    index = read_session(path, DiagnosticSink(indexed.append), index_only=True)
    assert session.copied() == ["a2", "r2", "a1", "r1", "a3"]  # by content and by repeated id
    assert [d.code for d in full] == ["pi_entry_repeated", "pi_entry_repeated", "context_copied"]
    assert index.copied() == ["a1", "r1"]  # by repeated id only
    assert [d.code for d in indexed] == ["pi_entry_repeated", "pi_entry_repeated"]
    assert len(SESSIONS) > 20
