"""Discovery and planning work done once: folders resolved once per build, files checked without
file objects; every path and every diagnostic as without those shortcuts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ng_traj.assemble.inputs import discover
from ng_traj.diagnostics import Diagnostic, DiagnosticSink
from ng_traj.io import files
from ng_traj.io.files import resolved, resolved_folders
from ng_traj.sources.detect import claims
from ng_traj.sources.native import folders_of, joined_ids
from ng_traj.sources.openclaw import reader as openclaw_reader


def _tree(root: Path) -> list[Path]:
    """Paths through plain folders, a folder symlink, a file symlink, a loop, ``..`` and missing names."""
    (root / "real" / "deep").mkdir(parents=True)
    (root / "real" / "deep" / "f.jsonl").write_text("{}\n")
    (root / "link").symlink_to(root / "real", target_is_directory=True)
    (root / "real" / "file_link.jsonl").symlink_to(root / "real" / "deep" / "f.jsonl")
    (root / "loop_a").symlink_to(root / "loop_b")
    (root / "loop_b").symlink_to(root / "loop_a")
    (root / "real" / "up").symlink_to("..", target_is_directory=True)
    return [
        root / "real" / "deep" / "f.jsonl",
        root / "link" / "deep" / "f.jsonl",
        root / "link" / "file_link.jsonl",
        root / "real" / "up" / "link" / "deep" / "f.jsonl",
        root / "link" / "deep" / ".." / "deep" / "f.jsonl",
        root / "loop_a" / "x.jsonl",
        root / "loop_a",
        root / "real" / "missing" / "x.jsonl",
        root / "real" / "deep",
        Path("relative") / "x.jsonl",
        Path("."),
        Path("/"),
    ]


def test_paths_resolve_the_same_with_folders_cached(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths = _tree(tmp_path)
    plain = [resolved(path) for path in paths]
    assert plain[1] == plain[0] and plain[2] == plain[0] and plain[3] == plain[0]
    assert plain[5] == paths[5] and plain[7] == paths[7]  # a loop is left absolute, a missing name as it is
    with resolved_folders():
        cached = [resolved(path) for path in paths]
        again = [resolved(path) for path in reversed(paths)][::-1]  # from the cache this time
    assert cached == plain and again == plain


def test_a_full_folder_cache_starts_again_with_the_same_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths = _tree(tmp_path)
    plain = [resolved(path) for path in paths]
    monkeypatch.setattr(files, "RESOLVED_FOLDERS", 2)
    with resolved_folders():
        assert [resolved(path) for path in paths * 2] == plain * 2


def test_the_folder_cache_ends_with_its_block(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    file = tmp_path / "x" / "f.jsonl"
    (tmp_path / "x").symlink_to(tmp_path / "a", target_is_directory=True)
    with resolved_folders():
        assert resolved(file) == tmp_path / "a" / "f.jsonl"
    (tmp_path / "x").unlink()
    (tmp_path / "x").symlink_to(tmp_path / "b", target_is_directory=True)
    assert resolved(file) == tmp_path / "b" / "f.jsonl"  # the next build resolves afresh
    with resolved_folders():
        assert resolved(file) == tmp_path / "b" / "f.jsonl"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_a_file_that_cannot_be_opened_is_one_unreadable_file(tmp_path):
    locked = tmp_path / "in" / "locked.jsonl"
    locked.parent.mkdir()
    locked.write_text('{"responses_create_params": {}}\n')
    locked.chmod(0o000)
    diagnostics: list[Diagnostic] = []
    try:
        inputs = discover([locked.parent], DiagnosticSink(diagnostics.append))
    finally:
        locked.chmod(0o600)
    assert inputs.by_kind == {"unreadable": 1}
    assert [(d.severity, d.code, d.message, d.path) for d in diagnostics] == [
        ("error", "unreadable_file", "Permission denied", str(locked))
    ]


def test_a_symlink_to_a_pipe_is_unclaimed_and_its_target_checked(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    os.mkfifo(tmp_path / "pipe")
    (folder / "rows.jsonl").symlink_to(tmp_path / "pipe")
    diagnostics: list[Diagnostic] = []
    inputs = discover([folder], DiagnosticSink(diagnostics.append))
    assert inputs.by_kind == {"unclaimed": 1}
    assert [d.code for d in diagnostics] == ["input_unclaimed"]
    assert "not a regular file" in diagnostics[0].message


def test_capture_files_name_the_input_each_was_found_under(tmp_path):
    store = tmp_path / "capture" / "policy"
    store.mkdir(parents=True)
    for rollout in ("0-0", "0-1", "0-2"):
        (store / f"{rollout}.capture.jsonl").write_text('{"model_call_id": "m", "dialect": "responses"}\n')
    (store / "0-3.capture.incomplete").write_text("")
    named_file = store / "0-1.capture.jsonl"  # named first: the store's first file, then the folder's others
    inputs = discover([named_file, tmp_path / "capture"], DiagnosticSink())
    found = {key[0]: inputs.named_for(key[0], files) for key, stores in inputs.capture.items() for files in stores}
    assert found == {
        "0-0": str(tmp_path / "capture"),
        "0-1": str(named_file),
        "0-2": str(tmp_path / "capture"),
        "0-3": str(tmp_path / "capture"),
    }
    assert inputs.overlaps == {str(tmp_path / "capture"): {str(named_file)}}


def test_resolved_folder_and_parent_are_resolved_as_text(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths = _tree(tmp_path)
    folders = [str(resolved(path)) for path in paths]
    parents = [str(resolved(path).parent) for path in paths]
    with resolved_folders():
        assert [files.resolved_folder(path) for path in paths] == folders
        assert [files.resolved_parent(path) for path in paths] == parents
        assert [files.resolved_parent(path) for path in reversed(paths)][::-1] == parents  # cached
    assert [files.resolved_parent(path) for path in paths] == parents


def test_a_noted_regular_file_is_taken_at_its_word_only_within_the_block(tmp_path):
    real = tmp_path / "f.jsonl"
    real.write_text("{}\n")
    link = tmp_path / "l.jsonl"
    link.symlink_to(real)
    assert files.is_regular(real) and not files.is_regular(link) and not files.is_regular(tmp_path)
    assert files.is_link(link) and not files.is_link(real)
    with resolved_folders():
        files.note_regular(real)
        real.unlink()
        real.symlink_to(link.resolve())  # the inputs are taken not to change while they are planned
        assert files.is_regular(real) and not files.is_link(real)
        assert not files.is_regular(tmp_path / "missing" / "x.jsonl")
        files.forget_regular([real])
        assert not files.is_regular(real) and files.is_link(real)
    assert files.is_link(real)


def test_folder_names_are_those_of_the_resolved_parts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths = [path for path in _tree(tmp_path) if path.name]
    (tmp_path / ".hidden" / "a").mkdir(parents=True)
    paths += [tmp_path / ".hidden" / "a" / "x.jsonl", tmp_path / "real" / "." / "deep" / "f.jsonl"]
    for path in paths:
        expected = tuple(dict.fromkeys(part for part in resolved(path).parent.parts if part != "/"))
        assert folders_of([path]) == expected
        with resolved_folders():
            assert folders_of([path, path]) == expected
    both = folders_of(paths[:2])
    assert both == tuple(
        dict.fromkeys(part for path in paths[:2] for part in resolved(path).parent.parts if part != "/")
    )
    assert folders_of([]) == ()


def test_joined_ids_share_a_scan_that_is_the_only_one():
    one, two = ("a", "b"), ("c", "a")
    assert joined_ids([one]) is one
    assert joined_ids([two, one]) == ("a", "b", "c") and joined_ids([frozenset({"b", "a"})]) == ("a", "b")
    assert joined_ids([]) == ()


def test_capture_files_of_one_folder_are_claimed_alike(tmp_path):
    store = tmp_path / "policy"
    store.mkdir()
    tools = tmp_path / "sess" / "tool-results"
    tools.mkdir(parents=True)
    (tmp_path / "sess.jsonl").write_text('{"type": "user", "sessionId": "s"}\n')
    names = ["0-0.capture.jsonl", "0-1.capture.jsonl.gz", "0-2.capture.incomplete"]
    for folder in (store, tools):
        for name in names:
            (folder / name).write_bytes(b"")
    cache: dict = {}
    for folder in (store, tools):
        for name in names:
            assert claims(folder / name, cache) == claims(folder / name)
    assert [claim.kind for claim in claims(tools / names[0], cache)] == ["capture", "claude_code"]
    assert sorted(cache) == [str(store), str(tools)]


def test_whether_a_transcript_is_openclaw_s_is_worked_out_once_per_file(tmp_path, monkeypatch):
    session = tmp_path / "s.jsonl"
    session.write_text('{"type": "session", "version": 3, "id": "s", "timestamp": "2026-01-01T00:00:00Z"}\n')
    asked = []
    real = openclaw_reader.is_openclaw_transcript
    monkeypatch.setattr(openclaw_reader, "is_openclaw_transcript", lambda path: asked.append(path) or real(path))
    assert [claim.kind for claim in claims(session)] == ["pi"]
    assert asked == [session]
    (tmp_path / "sessions.json").write_text("{}")
    assert [claim.kind for claim in claims(session)] == ["openclaw"] and len(asked) == 2


def test_paths_as_text_sort_as_their_path_objects_do():
    texts = [
        "a/b/c",
        "a/b-c",
        "a/b",
        "a/b c/d",
        "a/b.c/d",
        "a/b!/x",
        "/x/y",
        "/x-y",
        "//x/y",
        "/",
        "../z",
        "-z/a",
        ".",
        "a/\udcff/b",
        "a/é/b",
    ]
    assert sorted(texts, key=files.path_order) == [str(path) for path in sorted(map(Path, texts))]


def test_discovery_indexes_native_files_as_text_in_path_order(tmp_path):
    for folder in ("1-0", "1", "1-0/x"):
        (tmp_path / "s" / folder).mkdir(parents=True, exist_ok=True)
        header = {"type": "session", "version": 3, "id": f"s{folder}", "timestamp": "t", "cwd": "/"}
        (tmp_path / "s" / folder / "a.jsonl").write_text(json.dumps(header) + "\n")
    inputs = discover([tmp_path / "s"], DiagnosticSink())
    found = inputs.native["pi"]
    assert all(type(path) is str for path in found)
    assert sorted(found, key=files.path_order) == [str(path) for path in sorted(map(Path, found))]
    assert sorted(found, key=files.path_order) != sorted(found)  # text order is not Path order here


@pytest.mark.parametrize(
    "name, kept",
    [("0-0.capture.jsonl", ""), ("0-0.capture.jsonl.gz", None), ("other.capture.jsonl", None)],
)
def test_a_capture_file_named_as_its_store_names_it_keeps_no_path_text(tmp_path, name, kept):
    from ng_traj.sources.capture.store import CaptureFiles

    path = str(tmp_path / name)
    files_ = CaptureFiles.of(str(tmp_path), "0-0", path)
    assert files_.file == (path if kept is None else kept)
    assert files_.capture("0-0") == path


def test_a_capture_file_named_directly_keeps_its_text(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "0-0.capture.jsonl").write_text('{"model_call_id": "m", "dialect": "responses"}\n')
    for named in (Path("0-0.capture.jsonl"), tmp_path / "0-0.capture.jsonl"):
        inputs = discover([named], DiagnosticSink())
        [((rollout, _), (found,))] = inputs.capture.items()
        assert found.capture(rollout) == str(named)


def test_slots_share_one_string_per_task_id_and_one_capture_tuple_per_set_of_stores(small_corpus):
    """Held for every rollout until the build ends: the rollouts of one task share their task id's
    string, the rollouts whose capture files are their stores' own share one tuple of entries, and
    native units their equal hints."""
    from ng_traj.assemble.pipeline import prepare

    _, slots, _ = prepare([small_corpus], DiagnosticSink(lambda diagnostic: None), max_line_bytes=1 << 24)
    by_task: dict[str, set[int]] = {}
    for slot in slots:
        by_task.setdefault(slot.identity.task_id, set()).add(id(slot.identity.task_id))
    assert all(len(ids) == 1 for ids in by_task.values())
    assert len(by_task) < len(slots)  # some task has several rollouts, so the sharing is tested
    captured = [slot for slot in slots if slot.capture]
    assert len(captured) > 2 and all(entry.file == "" for slot in captured for entry in slot.capture)
    assert len({id(slot.capture) for slot in captured}) == len({slot.capture for slot in captured}) == 1
    hints = [hint for slot in slots for unit in slot.native for hint in unit.hints]
    assert len(hints) > len(set(hints))  # OpenClaw trees of one mode and root key, so the sharing is tested
    assert len({id(hint) for hint in hints}) == len(set(hints))


def test_the_plan_gives_back_the_slots_it_was_given_in_output_order():
    """Rows kept as columns come back as the slots they were, ordered with the slots kept whole:
    rollout id with numbers as numbers, rows before artifacts without one, then run label and line;
    a slice is a list, and the rows of one rollout id keep their order by line."""
    from ng_traj.assemble.plan import Plan, Slot, _Row
    from ng_traj.sources.rollouts.rows import Identity

    planned = Plan()
    orphan = Slot(Identity("10", "10-0"), None, None, 0, 0, 0, (), (), ("in",))
    planned.add(orphan)
    file = ("run", "in/run.jsonl", "run", "run.jsonl")
    for rollout, line in [("10-0", 3), ("2-1", 1), ("10-0", 2)]:
        row = _Row(Identity(rollout.split("-")[0], rollout), None, line, 100 * line, 7, ())  # type: ignore[arg-type]
        planned.add_row(row, file, (), ("in",), ())
    fallback = Identity("unknown", "run.jsonl:9", derived=False, problem="no ids")
    planned.add_row(_Row(fallback, None, 9, 900, 5, ()), file, (), ("in",), ())  # type: ignore[arg-type]
    planned.order({"run": "run"})

    got = [(slot.identity.rollout_id, slot.line, slot.offset) for slot in planned]
    assert got == [("2-1", 1, 100), ("10-0", 2, 200), ("10-0", 3, 300), ("10-0", 0, 0), ("run.jsonl:9", 9, 900)]
    assert len(planned) == 5 and planned[3] is orphan and planned[4].identity is fallback
    assert planned[1] == Slot(
        Identity("10", "10-0"), "run", "in/run.jsonl", 2, 200, 7, (), (), ("in",), (), "run", "run.jsonl"
    )
    assert planned[1:3] == [planned[1], planned[2]] and planned[-1] == planned[4]
