"""OpenClaw compaction checkpoint copies found beside a store entry's transcript."""

from __future__ import annotations

from ng_traj.sources.openclaw.store import StoreEntry, checkpoints_for


def test_checkpoint_copies_are_matched_by_name_not_as_a_glob_pattern(tmp_path):
    folder = tmp_path / "agents" / "main" / "sessions"
    folder.mkdir(parents=True)
    names = ("s[1].checkpoint.a.jsonl", "s[1].checkpoint..jsonl", "s[1].checkpoint.jsonl", "s1.checkpoint.b.jsonl")
    for name in names:
        (folder / name).write_text('{"type": "session"}\n')
    entry = StoreEntry("agent:main:main", "s[1]", None, False, folder / "sessions.json", None)
    found = checkpoints_for(entry, tmp_path / "agents", None)
    # ``[1]`` is part of the id (a glob read it as the class of ``1``, taking another session's copy).
    assert [path.name for path in found] == ["s[1].checkpoint..jsonl", "s[1].checkpoint.a.jsonl"]
