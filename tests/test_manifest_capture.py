"""A manifest row naming a capture file: it adds the file to its rollout, loses no other file, and
reports the calls that end up in two rollouts; a row whose path cannot be looked at says why."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import orjson
import pytest

from conftest import FIXTURES, run_cli
from ng_traj.assemble.inputs import discover
from ng_traj.diagnostics import DiagnosticSink
from ng_traj.sources.manifest import read_manifest

RETAINED = FIXTURES / "build" / "retained_run" / "input"


def _calls(path: Path) -> dict[str, list[str]]:
    records = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    return {record["rollout_id"]: [call["model_call_id"][-4:] for call in record["model_calls"]] for record in records}


def test_a_manifest_row_adds_a_capture_file_to_its_rollout_and_drops_none(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(RETAINED, "run")
    Path("m2.csv").write_text("rollout_id,path\n0-0,run/capture/0-1.capture.jsonl\n")
    result = run_cli("build", "run", "-o", "base.jsonl", "-q")
    assert result.exit_code == 0, result.stderr
    result = run_cli("build", "run", "--manifest", "m2.csv", "-o", "man2.jsonl", "-v")
    assert result.exit_code == 0, result.stderr
    base, calls = _calls(Path("base.jsonl")), _calls(Path("man2.jsonl"))
    assert base["0-0"] == ["0001", "0002", "0003"] and base["0-1"] == ["000b", "000c"]
    assert calls["0-0"] == ["0001", "0002", "0003", "000b", "000c"]  # its own file kept, the manifest's added
    assert calls["0-1"] == ["000c"]  # the judge store's copy, 0-1's by its name
    assert (
        "run/capture/0-1.capture.jsonl: warning[manifest_capture_shared]: the manifest (m2.csv:2) gives this file "
        "to rollout 0-0, but run/judge_capture/0-1.capture.jsonl, which rollout 0-1 keeps by its name, also holds "
        "model_call_id 0000000000000000000000000000000c: those calls are in both trajectories"
    ) in result.stderr
    assert {key: value for key, value in calls.items() if key not in ("0-0", "0-1")} == {
        key: value for key, value in base.items() if key not in ("0-0", "0-1")
    }


def test_a_manifest_row_giving_a_file_no_call_is_shared_warns_of_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(RETAINED, "run")
    Path("m.csv").write_text("rollout_id,path\n0-0,run/capture/3-0.capture.jsonl\n")
    result = run_cli("build", "run", "--manifest", "m.csv", "-o", "out.jsonl", "-v")
    assert result.exit_code == 0, result.stderr
    assert "manifest_capture_shared" not in result.stderr
    assert run_cli("build", "run", "-o", "base.jsonl", "-q").exit_code == 0
    base = _calls(Path("base.jsonl"))
    calls = _calls(Path("out.jsonl"))
    assert calls["0-0"] == base["0-0"] + base["3-0"]
    assert calls.get("3-0", []) == []


def test_discovery_keeps_every_capture_file_of_one_store_given_to_one_rollout(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    for name in ("0-0.capture.jsonl", "0-1.capture.jsonl", "0-0.capture.incomplete"):
        (store / name).write_text('{"model_call_id": "m", "dialect": "responses"}\n' if "jsonl" in name else "")
    manifest = tmp_path / "m.csv"
    manifest.write_text("rollout_id,path\n0-0,store/0-1.capture.jsonl\n")
    sink = DiagnosticSink()
    inputs = discover([store], sink, manifest=read_manifest(manifest, sink))
    [((rollout, _), files)] = inputs.capture.items()
    assert sorted(f.capture(rollout) for f in files) == [
        str(store / "0-0.capture.jsonl"),
        str(store / "0-1.capture.jsonl"),
    ]
    assert [f.incomplete for f in files].count(True) == 1
    assert [(path, named) for path, named, _ in inputs.reattributed] == [(str(store / "0-1.capture.jsonl"), "0-1")]


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symbolic links")
def test_a_manifest_path_that_is_a_symlink_loop_says_so(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    manifest = tmp_path / "m.csv"
    manifest.write_text("rollout_id,path\n0-0,a\n0-0,missing.jsonl\n")
    seen: list = []
    assert read_manifest(manifest, DiagnosticSink(seen.append)) == []
    found = [(d.code, d.line, d.message) for d in seen]
    assert found == [
        (
            "unreadable_file",
            2,
            f"path {tmp_path / 'a'} cannot be read ({os.strerror(errno.ELOOP)}); the row is skipped",
        ),
        ("manifest_row_invalid", 3, f"path {tmp_path / 'missing.jsonl'} does not exist"),
    ]
