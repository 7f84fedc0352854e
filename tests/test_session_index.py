"""Indexing scans pi-family sessions for their header and response ids: the same as a full read."""

from __future__ import annotations

import orjson
import pytest

from conftest import FIXTURES, shared_dir
from ng_traj.diagnostics import Diagnostic, DiagnosticSink
from ng_traj.io.files import resolved_folders
from ng_traj.sources.native import folders_of
from ng_traj.sources.pi.observe import response_ids
from ng_traj.sources.pi.session import read_session, scan_header, scan_session

SESSIONS = sorted(
    path
    for folder in ("pi", "openclaw", "native_e2e")
    for path in (FIXTURES / folder).rglob("*.jsonl")
    if path.name != "expected.jsonl" and not path.name.endswith(".expected.jsonl") and not path.is_symlink()
)


def test_a_full_read_marks_copies_by_content_and_by_repeated_id():
    path = FIXTURES / "pi" / "copied_context_compaction" / "input" / "session.jsonl"
    full: list[Diagnostic] = []
    session = read_session(path, DiagnosticSink(full.append))
    assert session.copied() == ["a2", "r2", "a1", "r1", "a3"]  # by content and by repeated id
    assert [d.code for d in full] == ["pi_entry_repeated", "pi_entry_repeated", "context_copied"]
    assert len(SESSIONS) > 20


def _full(path) -> tuple:
    session = read_session(path, DiagnosticSink())
    return session.session_id, session.header, response_ids(session)


def _scanned(path) -> tuple:
    session, ids = scan_session(path)
    assert not session.entries
    header = scan_header(path)  # read only as far as the header: the same session
    assert (header.path, header.session_id, header.header, header.entries) == (
        session.path,
        session.session_id,
        session.header,
        [],
    )
    return session.session_id, session.header, ids


def _samples() -> list:
    folders = [shared_dir("producer-samples", "pi"), shared_dir("producer-samples", "openclaw")]
    found = [path for folder in folders for path in sorted(folder.rglob("*.jsonl*")) if path.is_file()]
    fuzz = shared_dir("fuzz-cases")
    return found + sorted(path for path in fuzz.glob("*pi*.jsonl") if path.is_file())


@pytest.mark.parametrize("path", SESSIONS, ids=lambda path: str(path.relative_to(FIXTURES)))
def test_a_scan_has_the_header_and_response_ids_of_a_full_read(path):
    assert _scanned(path) == _full(path)


def test_a_scan_agrees_with_a_full_read_on_real_samples():
    samples = _samples()
    assert len(samples) > 5
    for path in samples:
        assert _scanned(path) == _full(path), path


def _write(path, lines) -> None:
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))


def _assistant(entry_id, response, *, parent=None, role="assistant", time=1):
    message = {"role": role, "content": [], "timestamp": time, "responseId": response}
    return {"type": "message", "id": entry_id, "parentId": parent, "timestamp": "t", "message": message}


HEADER = {"type": "session", "version": 3, "id": "s1"}


@pytest.mark.parametrize(
    "lines",
    [
        # a copy (same id, same content) keeps its response id even after the id is rewritten
        [HEADER, _assistant("a", "r1"), _assistant("a", "r1", parent="x"), _assistant("a", "r2")],
        # other content for an id replaces the earlier entry's response id
        [HEADER, _assistant("a", "r1"), _assistant("a", "r2"), _assistant("b", "r3", parent="a")],
        # an id named like the line of an entry without one
        [HEADER, {"type": "message", "message": {"role": "assistant", "responseId": "r1"}}, _assistant("line-2", "r2")],
        # v2: hookMessage is read as custom before entries are compared
        [
            {**HEADER, "version": 2},
            _assistant("a", "r1", role="hookMessage"),
            _assistant("a", "r1", role="custom"),
            _assistant("a", "r2"),
        ],
        # an event log: message_end events, a copy of one passed over once its original is rewritten
        [
            HEADER,
            {"type": "message_end", "id": "e", "parentId": None, "message": {"role": "assistant", "responseId": "r1"}},
            {"type": "message_end", "id": "e", "parentId": "q", "message": {"role": "assistant", "responseId": "r1"}},
            {"type": "message_end", "id": "e", "parentId": None, "message": {"role": "assistant", "responseId": "r2"}},
            _assistant("m", "r3"),
        ],
        # no header: entries with parentId are v2+, a header line after a passed-over object is the header
        [{"note": 1}, HEADER, _assistant("a", "r1")],
        [_assistant("a", "r1"), HEADER, _assistant("a", "r2")],
        # v1 (no ids) and the unsupported newer layout
        [{"type": "session", "id": "s1"}, {"type": "message", "message": {"role": "assistant", "responseId": "r1"}}],
        [{"kind": "header", "id": "s1"}, _assistant("a", "r1")],
    ],
)
def test_a_scan_follows_repeated_ids_as_a_full_read_does(tmp_path, lines):
    path = tmp_path / "2026-01-01_s1.jsonl"
    _write(path, lines)
    assert _scanned(path) == _full(path)


def test_a_scan_of_an_unreadable_file_has_no_ids(tmp_path):
    path = tmp_path / "gone.jsonl"
    assert _scanned(path) == ("gone", None, frozenset())


def test_folders_resolved_once_per_folder_are_those_of_each_file(tmp_path):
    real = tmp_path / "real" / "run-7"
    real.mkdir(parents=True)
    (real / "a.jsonl").write_text("{}\n")
    (tmp_path / "linked").symlink_to(real)  # a folder that is a link
    other = tmp_path / "elsewhere" / "rollout-3"
    other.mkdir(parents=True)
    (other / "b.jsonl").write_text("{}\n")
    (real / "b.jsonl").symlink_to(other / "b.jsonl")  # a file that is a link, in a folder already resolved
    (tmp_path / "loop").symlink_to(tmp_path / "loop")  # a folder that never resolves
    paths = [tmp_path / "linked" / "a.jsonl", real / "a.jsonl", real / "b.jsonl", tmp_path / "linked" / "b.jsonl"]
    paths += [tmp_path / "loop" / "c.jsonl", tmp_path / "missing" / "d.jsonl"]
    alone = [folders_of([path]) for path in paths]
    with resolved_folders():
        assert [folders_of([path]) for path in paths] == alone
        assert "rollout-3" in folders_of([real / "b.jsonl"])
        assert "linked" not in folders_of([tmp_path / "linked" / "a.jsonl"])
