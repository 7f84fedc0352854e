"""Every real Hermes sample in ``../shared/producer-samples/hermes/`` builds into valid trajectories.

The samples were renamed for storage (SOURCES.md); they are copied into Hermes' own layout in a
temporary ``HERMES_HOME`` and the state.db export is turned into a real SQLite
database there. The counts per file are pinned as literals worked out by hand from the files, and
re-derived by :func:`_expected_items`, a small independent count over the raw JSON that does not use
ng-traj: one item per system/user/tool message, and per assistant message one output message, one
reasoning item when it has a ``reasoning`` string, and one function call per tool call; plus the
system prompt when the session keeps one (snapshots do; gateway transcripts do not). A ShareGPT
line gives one item per turn plus a reasoning item per ``gpt`` turn whose ``<think>`` block is not
blank.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pytest

from conftest import build_db, run_json, shared_dir
from ng_traj.checks import check_line

LAYOUT = {
    "hermes_gateway-transcript_context-compaction-injected.jsonl": "sessions/20260529_194259_6c5c20.jsonl",
    "hermes_gateway-transcript_20260525_075546_d4b801c7.jsonl": "sessions/20260525_075546_d4b801c7.jsonl",
    "hermes_session-log_20260403_000943_a550aa_cli.json": "sessions/session_20260403_000943_a550aa.json",
    "hermes_session-log_cron_with-tool-calls.json": "sessions/session_cron_5ef95dfc9c7b_20260405_020020.json",
    "hermes_session-log_small_no-tools.json": "sessions/session_20260524_233524_768de2.json",
    "hermes_gateway-sessions-store.json": "sessions/sessions.json",
    "hermes_request-dump_cron_max-retries-exhausted.json": (
        "sessions/request_dump_cron_020936b68efa_20260714_170030_20260714_173142_786782.json"
    ),
    "hermes_trajectory_samples_sharegpt.jsonl": "trajectory_samples.jsonl",
}

# rollout id -> (conversation items per invocation, tool calls (id suffix, status), compactions)
PINNED = {
    # gateway: user 1, assistant 1+1+2 calls, 2 tool results, summary 1, assistant 3, tool 1, assistant 2,
    # user 1, assistant 2 = 17; the pruned skill_view result proves no outcome.
    "20260529_194259_6c5c20": ([17], [("f4s3_1", "completed"), ("f4s3_2", "unknown"), ("fn2n_1", "completed")], 1),
    # gateway: user 1, assistant 3 (reasoning, text, cronjob call), tool 1, assistant 2 = 7.
    "20260525_075546_d4b801c7": ([7], [("3qy7_1", "completed")], 0),
    # in state.db and as a snapshot: one invocation from state.db (system prompt, 2 x (user + reasoning + text)).
    "20260403_000943_a550aa": ([7], [], 0),
    # state.db cron session: system, user, assistant 3, tool (exit_code 0), assistant 2 = 8.
    "cron_5ef95dfc9c7b_20260403_020001": ([8], [("a8l6_1", "completed")], 0),
    # snapshot only: system, user, assistant 3, tool, assistant 2 = 8.
    "cron_5ef95dfc9c7b_20260405_020020": ([8], [("b5uu_1", "completed")], 0),
    # snapshot only: system, user, reasoning + text (the pseudo [TOOL_CALL] stays text) = 4.
    "20260524_233524_768de2": ([4], [], 0),
    # state.db chain of three telegram sessions with no message rows: the system prompt each; 130834
    # ended by compression (its successor holds no summary); the first link states nothing.
    "20260417_091004_154e2af7": ([1, 1, 1], [], 1),
    # 13 ShareGPT lines: system, human, <think> reasoning, text = 4 each.
    **{f"trajectory_samples.jsonl:{n}": ([4], [], 0) for n in range(1, 14)},
}


def _home(tmp_path: Path) -> Path:
    samples = shared_dir("producer-samples", "hermes")
    home = tmp_path / "hermes_home"
    for name, target in LAYOUT.items():
        (home / target).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(samples / name, home / target)
    build_db(json.loads((samples / "hermes_state-db-v6_subset_export.json").read_text()), home / "state.db")
    return home


def _items(message: dict) -> int:
    if message.get("role") != "assistant":
        return 1
    reasoning = 1 if isinstance(message.get("reasoning"), str) and message["reasoning"] else 0
    calls = message.get("tool_calls")
    calls = json.loads(calls) if isinstance(calls, str) else calls or []
    return reasoning + 1 + len(calls)


def _expected_items(home: Path) -> dict[str, list[int]]:
    """Conversation items per session, counted from the raw files without ng-traj (module docstring)."""
    counts: dict[str, list[int]] = {}
    for path in sorted((home / "sessions").glob("*.jsonl")):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        counts[path.stem] = [sum(_items(m) for m in lines if m["role"] != "session_meta")]
    for path in sorted((home / "sessions").glob("session_*.json")):
        value = json.loads(path.read_text())
        counts[value["session_id"]] = [1 + sum(_items(m) for m in value["messages"])]
    for number, line in enumerate((home / "trajectory_samples.jsonl").read_text().splitlines(), start=1):
        turns = json.loads(line)["conversations"]
        thoughts = [t["value"].split("</think>")[0].removeprefix("<think>") for t in turns if t["from"] == "gpt"]
        counts[f"trajectory_samples.jsonl:{number}"] = [len(turns) + sum(bool(t.strip()) for t in thoughts)]
    return counts


def test_every_real_hermes_file_builds_valid_trajectories(tmp_path: Path) -> None:
    home = _home(tmp_path)
    out = tmp_path / "out.jsonl"
    result = run_json("build", home, "-o", out)
    assert result.exit_code == 0, result.stderr
    summary = result.summary
    records = {r["rollout_id"]: r for r in map(orjson.loads, out.read_bytes().splitlines())}
    assert sorted(records) == sorted(PINNED)
    for rollout, (items, tool_calls, compactions) in PINNED.items():
        record = records[rollout]
        assert [len(i["conversation"]) for i in record["invocations"]] == items, rollout
        assert [(t["tool_call_id"][-6:], t["status"]) for t in record["tool_calls"]] == tool_calls, rollout
        boundary = [g for g in record["gaps"] if g["code"] == "compaction_model_call_boundary_unavailable"]
        assert len(boundary) == compactions, rollout
        findings, _ = check_line(orjson.loads(orjson.dumps(record)))
        assert findings == [], rollout
    independent = _expected_items(home)
    for session, items in independent.items():
        if session != "20260403_000943_a550aa":  # that session comes from state.db (same count, checked below)
            assert PINNED[session][0] == items, session
    assert PINNED["20260403_000943_a550aa"][0] == independent["20260403_000943_a550aa"]
    by_code = summary["diagnostics"]["by_code"]
    assert by_code["input_unsupported"] == 1  # the request dump
    assert by_code["hermes_store_unused"] == 1  # the store names a session no file holds
    assert by_code["hermes_session_forms_differ"] == 1  # state.db keeps a leading newline the snapshot lacks
    assert summary["inputs_by_kind"] == {"hermes": 8, "unsupported": 1}
    assert summary["native_session_totals"]["sessions"] == 5


@pytest.mark.parametrize("sample", sorted(LAYOUT))
def test_each_sample_is_claimed_as_documented(sample: str) -> None:
    from ng_traj.sources.detect import claims

    path = shared_dir("producer-samples", "hermes") / sample
    kinds = [claim.kind for claim in claims(path)]
    assert kinds == (["unsupported"] if "request-dump" in sample else ["hermes"])
