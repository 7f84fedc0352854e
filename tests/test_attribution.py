"""Attribution of native sessions to rollouts: the ways, their order, conflicts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pytest

from conftest import FIXTURES, run_cli, run_json

E2E = FIXTURES / "native_e2e"


def _write(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _build(tmp_path: Path, *args) -> tuple[list[dict], dict]:
    out = tmp_path / "out.jsonl"
    result = run_json("build", *args, "-o", out)
    assert result.exit_code == 0, result.stderr
    return [orjson.loads(line) for line in out.read_bytes().splitlines()], result.summary


def _session(sid: str, tool_ids: list[str], response_id: str | None = None) -> list[dict]:
    message = {
        "role": "assistant",
        "content": [{"type": "toolCall", "id": t, "name": "exec", "arguments": {}} for t in tool_ids],
        "stopReason": "toolUse",
        "usage": {"input": 1, "output": 1},
    }
    if response_id:
        message["responseId"] = response_id
    return [
        {"type": "session", "version": 3, "id": sid, "timestamp": "2026-04-13T03:00:00Z", "cwd": "/w"},
        {"type": "message", "id": "a", "parentId": None, "timestamp": "2026-04-13T03:00:01Z", "message": message},
    ]


def test_tool_call_id_set_attributes_a_session_without_response_ids(tmp_path):
    root = tmp_path / "run"
    shutil.copytree(E2E, root)
    shutil.rmtree(root / "sessions")
    _write(root / "sessions" / "anon.jsonl", _session("anon", ["toolu_pi"]))
    records, summary = _build(tmp_path, root)
    pi = next(r for r in records if r["rollout_id"] == "0-1")
    assert [inv["invocation_id"] for inv in pi["invocations"]] == ["anon"]
    assert pi["invocations"][0]["model_calls"][0]["model_call_id"] == f"{4:032x}"
    assert summary["unattributed_sessions"] == []


def test_session_claimed_by_two_rollouts_is_used_for_neither(tmp_path):
    root = tmp_path / "run"
    shutil.copytree(E2E, root)
    shutil.rmtree(root / "sessions")
    _write(
        root / "sessions" / "both.jsonl",
        [
            *_session("both", [], "chatcmpl-e2e-1"),
            {
                "type": "message",
                "id": "b",
                "parentId": "a",
                "timestamp": "2026-04-13T03:00:02Z",
                "message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "x"}],
                    "stopReason": "stop",
                    "responseId": "chatcmpl-pi-2",
                },
            },
        ],
    )
    records, summary = _build(tmp_path, root)
    own = next(r for r in records if r["rollout_id"] == "both")
    assert own["task_id"] == "unknown"
    assert {"code": "rollout_attribution_ambiguous", "invocation_id": None, "detail": "rollouts=0-0,0-1"} in own["gaps"]
    assert summary["by_origin"] == {"rollout_row": 2, "session_without_row": 1}


def test_manifest_session_id_names_one_session_of_several(tmp_path):
    root = tmp_path / "run"
    root.mkdir()
    _write(root / "rollouts.jsonl", [{"_ng_task_index": 0, "_ng_rollout_index": 0, "response": {"output": []}}])
    _write(root / "sessions" / "one.jsonl", _session("one", ["t1"]))
    _write(root / "sessions" / "two.jsonl", _session("two", ["t2"]))
    _write(root / "manifest.jsonl", [{"rollout_id": "0-0", "path": "sessions", "session_id": "two"}])
    records, _ = _build(tmp_path, root / "rollouts.jsonl", root / "sessions", "--manifest", root / "manifest.jsonl")
    by_id = {r["rollout_id"]: r for r in records}
    assert [inv["invocation_id"] for inv in by_id["0-0"]["invocations"]] == ["two"]
    assert "one" in by_id


def test_attach_keeps_every_session_of_a_rollout(tmp_path):
    root = tmp_path / "run"
    root.mkdir()
    _write(root / "rollouts.jsonl", [{"_ng_task_index": 0, "_ng_rollout_index": 0, "response": {"output": []}}])
    _write(root / "0-0" / "first.jsonl", _session("first", ["t1"]))
    _write(root / "0-0" / "second.jsonl", _session("second", ["t2"]))
    out = tmp_path / "rows.jsonl"
    assert run_cli("build", root, "-o", out, "--attach").exit_code == 0
    (row,) = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    invocations = [
        r["invocation_id"] for r in row["ng_agent_observations"]["records"] if r["kind"] == "agent_invocation"
    ]
    assert invocations == ["first", "second"]
    assert [inv["invocation_id"] for inv in row["ng_trajectory"]["invocations"]] == ["first", "second"]


@pytest.mark.parametrize(
    ("kind", "sample", "name", "session"),
    [
        (
            "claude_code",
            "claude_code/cli_v3/input/9b5a4c6e-1f7d-4a5b-8c2e-000000000005.jsonl",
            "session.jsonl",
            "9b5a4c6e-1f7d-4a5b-8c2e-000000000005",
        ),
        (
            "codex",
            "codex/legacy/rollout-2025-07-01T10-00-00-0197c000-0000-7000-8000-000000000005.jsonl",
            "session.jsonl",
            "0197c000-0000-7000-8000-000000000005",
        ),
        ("opencode", "opencode/exports/input/ses_exp.json", "session.json", "ses_exp"),
    ],
)
def test_a_manifest_kind_forces_every_reader_as_accepts(tmp_path, kind, sample, name, session):
    root = tmp_path / "run"
    _write(root / "rollouts.jsonl", [{"_ng_task_index": 0, "_ng_rollout_index": 0, "response": {"output": []}}])
    shutil.copy(FIXTURES / sample, root / name)
    _write(root / "manifest.jsonl", [{"rollout_id": "0-0", "path": name, "kind": kind}])
    result = run_cli(
        "build",
        root / "rollouts.jsonl",
        root / name,
        "--manifest",
        root / "manifest.jsonl",
        "-o",
        tmp_path / "out.jsonl",
    )
    assert result.exit_code == 0, result.stderr
    assert "manifest_row_invalid" not in result.stderr
    records = [orjson.loads(line) for line in (tmp_path / "out.jsonl").read_bytes().splitlines()]
    assert [(r["rollout_id"], [inv["invocation_id"] for inv in r["invocations"]]) for r in records] == [
        ("0-0", [session])
    ]


def test_a_manifest_accepts_every_kind_as_accepts():
    from ng_traj.sources.detect import forcible_kinds

    assert {"rollouts", "capture", "claude_code", "codex", "hermes", "openclaw", "opencode", "pi"} <= set(
        forcible_kinds()
    )


def test_response_ids_are_read_only_for_the_units_nothing_before_them_places(monkeypatch):
    from ng_traj.assemble.pipeline import prepare
    from ng_traj.diagnostics import DiagnosticSink
    from ng_traj.sources.pi import session

    scanned = []
    scan = session.scan_session
    monkeypatch.setattr(session, "scan_session", lambda path: scanned.append(Path(path).name) or scan(path))
    _, slots, _ = prepare([E2E], DiagnosticSink(), max_line_bytes=1 << 20)
    placed = {slot.identity.rollout_id: [unit.key for unit in slot.native] for slot in slots}
    assert placed == {"0-0": ["sess-e2e"], "0-1": ["sess-pi"]}  # by its folder, and by its response id
    assert scanned == ["2026-04-13T03-01-00-000Z_sess-pi.jsonl"]  # the OpenClaw transcript's folder placed it
