"""Discovery's walk and the OpenClaw store lookups it feeds: the same files, in the same order, as
the rules say (``os.walk`` top-down, sorted, hidden entries and symlinked folders skipped), however
the walk is read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ng_traj.diagnostics import DiagnosticSink
from ng_traj.io.files import resolved, resolved_folders
from ng_traj.sources.detect import walk
from ng_traj.sources.openclaw.store import read_stores, transcript_names


def _tree(root: Path) -> None:
    """``b`` before ``b-c`` as names, a folder's files before its folders, hidden entries, a link."""
    for name in ("b/z.jsonl", "b/a.jsonl", "b-c.jsonl", "a/x/y.jsonl", "a/w.jsonl", ".hidden/h.jsonl", "a/.h.jsonl"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("{}\n")
    (root / "top.jsonl").write_text("{}\n")


def test_walk_gives_files_in_sorted_order_files_before_subfolders(tmp_path):
    _tree(tmp_path)
    names = [str(path.relative_to(tmp_path)) for path in walk(tmp_path)]
    # by hand: the folder's own files (sorted: "b-c.jsonl" < "top.jsonl"), then "a" (its file, then
    # "a/x"), then "b"; ".hidden" and ".h.jsonl" are skipped
    assert names == ["b-c.jsonl", "top.jsonl", "a/w.jsonl", "a/x/y.jsonl", "b/a.jsonl", "b/z.jsonl"]


def test_a_symlinked_folder_not_entered_is_handed_to_on_link_and_said_by_every_command(tmp_path):
    """A folder reached through a link was skipped without a word: ``build FOLDER`` said only that
    nothing usable was built."""
    from conftest import FIXTURES, run_cli

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "run").symlink_to(FIXTURES / "build" / "retained_run" / "input", target_is_directory=True)
    linked: list[Path] = []
    assert list(walk(tmp_path / "in", on_link=linked.append)) == []
    assert linked == [tmp_path / "in" / "run"]
    said = f"{tmp_path / 'in' / 'run'}: info[folder_link_skipped]: a symbolic link to a folder, not followed"
    result = run_cli("build", tmp_path / "in", "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 1 and said in result.stderr, result.stderr
    assert run_cli("build", tmp_path / "in" / "run", "-o", tmp_path / "out.jsonl").exit_code == 0  # named: read
    for command in (["validate"], ["matrix"], ["show"]):
        result = run_cli(*command, tmp_path / "in")
        assert said in result.stderr, (command, result.stderr)


def test_walk_of_a_file_is_the_file_itself(tmp_path):
    file = tmp_path / "one.jsonl"
    file.write_text("{}\n")
    assert [found for found in walk(file)] == [file]
    assert next(walk(file)) is file  # discovery tells a named file by identity


def test_walk_lists_a_symlinked_file_but_never_enters_a_symlinked_folder(tmp_path):
    _tree(tmp_path / "in")
    (tmp_path / "in" / "linked").symlink_to(tmp_path / "in" / "a", target_is_directory=True)
    (tmp_path / "in" / "link.jsonl").symlink_to(tmp_path / "in" / "top.jsonl")
    names = [str(path.relative_to(tmp_path / "in")) for path in walk(tmp_path / "in")]
    assert "link.jsonl" in names
    assert not any(name.startswith("linked") for name in names)


def test_walk_matches_os_walk(tmp_path):
    _tree(tmp_path)
    (tmp_path / "ln").symlink_to(tmp_path / "b", target_is_directory=True)
    (tmp_path / "dangling.jsonl").symlink_to(tmp_path / "nowhere")
    expected = []
    for root, dirs, files in os.walk(tmp_path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        expected += [Path(root) / name for name in sorted(files) if not name.startswith(".")]
    assert list(walk(tmp_path)) == expected


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any folder")
def test_walk_hands_an_unlistable_folder_to_on_error(tmp_path):
    _tree(tmp_path)
    locked = tmp_path / "a" / "x"
    locked.chmod(0)
    try:
        errors: list[OSError] = []
        names = [str(path.relative_to(tmp_path)) for path in walk(tmp_path, errors.append)]
    finally:
        locked.chmod(0o755)
    assert "a/x/y.jsonl" not in names and "a/w.jsonl" in names
    assert [str(error.filename) for error in errors] == [str(locked)]


def test_store_entries_and_their_resolved_root(tmp_path):
    sessions = tmp_path / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    store = sessions / "sessions.json"
    store.write_text(
        '{"agent:main:main": {"sessionId": "s1", "sessionFile": "C:\\\\x\\\\t.jsonl", "forkedFromParent": true,'
        ' "compactionCheckpoints": [{"preCompaction": {"sessionFile": "/h/s1.jsonl"}},'
        ' {"postCompaction": {"sessionFile": "/h/c.jsonl"}}]}}'
    )
    with resolved_folders():
        stores = read_stores([store], tmp_path / "agents", DiagnosticSink())
        entry = stores.entries["agent:main:main"]
        assert stores.resolved_root() == resolved(tmp_path / "agents")
        assert stores.resolved_root() is stores.resolved_root()  # worked out once
    assert (entry.session_id, entry.session_file, entry.forked) == ("s1", "C:\\x\\t.jsonl", True)
    assert transcript_names(entry)[0] == "t.jsonl" and transcript_names(entry)[4] == "s1.jsonl"
    assert entry.checkpoint_files == ("c.jsonl",)  # s1.jsonl is the entry's own transcript name
