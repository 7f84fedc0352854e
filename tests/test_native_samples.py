"""Every real pi and OpenClaw sample builds into valid trajectories, as single files and in native layout.

The expected counts come from ``_independent_counts``: a deliberately plain reading of the files that
shares no code with ``ng_traj`` (the samples are linear transcripts, so no tree walk is needed), and
the counts it gives were checked by hand against the files.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from conftest import build_valid as _build
from conftest import shared_dir


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _is_call(message: dict) -> bool:
    if message.get("role") != "assistant" or (message.get("provider"), message.get("model")) == (
        "openclaw",
        "gateway-injected",
    ):
        return False
    return bool(message.get("content")) or message.get("stopReason") not in ("error", "aborted")


def _independent_counts(path: Path) -> dict:
    """Calls, tool records and timing/outcome/orphan gaps of one linear transcript, by plain reading."""
    messages = [line["message"] for line in _lines(path) if line.get("type") == "message"]
    calls = [m for m in messages if _is_call(m)]
    visible = [
        b["id"]
        for m in messages
        if m.get("role") == "assistant"
        for b in m.get("content") or []
        if b.get("type") == "toolCall"
    ]
    results = [m for m in messages if m.get("role") == "toolResult"]
    paired = [r for r in results if r.get("toolCallId") in visible]
    unowned = [r for r in results if r.get("toolCallId") not in visible]
    timed = [r for r in paired if isinstance((r.get("details") or {}).get("durationMs"), int | float)]
    unanswered = set(visible) - {r["toolCallId"] for r in paired}
    return {
        "calls": len(calls),
        "tools": len(paired),
        "tool_timing_unavailable": len(paired) - len(timed) + len(unanswered),
        "tool_result_unowned": len(unowned),
        "compactions": sum(1 for line in _lines(path) if line.get("type") == "compaction"),
    }


def _samples(kind: str) -> list[Path]:
    return sorted(p for p in shared_dir("producer-samples", kind).iterdir() if ".jsonl" in p.name)


@pytest.mark.parametrize("kind", ["pi", "openclaw"])
def test_each_real_transcript_alone(tmp_path, kind):
    for path in _samples(kind):
        (record,) = _build(tmp_path, path)
        expected = _independent_counts(path)
        gaps = Counter(gap["code"] for gap in record["gaps"])
        assert len(record["invocations"]) == 1, path.name
        assert len(record["model_calls"]) == expected["calls"], path.name
        assert len(record["tool_calls"]) == expected["tools"], path.name
        assert gaps["tool_timing_unavailable"] == expected["tool_timing_unavailable"], path.name
        assert gaps["tool_result_unowned"] == expected["tool_result_unowned"], path.name
        assert gaps["model_call_usage_from_transcript"] == expected["calls"], path.name
        assert gaps["compaction_model_call_boundary_unavailable"] == expected["compactions"], path.name


def _native_layout(tmp_path: Path) -> Path:
    """Copy the OpenClaw samples to the paths SOURCES.md names (``agents/<id>/sessions/...``)."""
    sources = shared_dir("producer-samples") / "SOURCES.md"
    root = tmp_path / "state"
    for row in sources.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in row.split("|")]
        if len(cells) < 4 or not cells[1].startswith("openclaw/"):
            continue
        native = re.sub(r"^.*?(agents/)", r"\1", cells[3])
        target = root / native
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(sources.parent / cells[1], target)
    return root


def test_openclaw_samples_in_their_native_layout(tmp_path):
    root = _native_layout(tmp_path)
    records = {r["rollout_id"]: r for r in _build(tmp_path, root)}
    samples = shared_dir("producer-samples", "openclaw")
    # agents/main: root 003d9e5b (9 failed Bedrock turns: no model calls) + two sub-agents.
    main = records["003d9e5b-51f2-496b-911f-3564cacac047"]
    assert [(i["invocation_id"], i["parent_invocation_id"]) for i in main["invocations"]] == [
        ("agent:main:main", None),
        ("agent:main:subagent:4d666967-5fba-475a-96eb-7df2a2b2cc2c", "agent:main:main"),
        ("agent:main:subagent:b6f01560-d6ef-4e0c-ae20-cb988307845e", "agent:main:main"),
    ]
    children = [
        "openclaw_v3_subagent_aborted_sibling.jsonl",
        "openclaw_v3_subagent_aborted_prompt-error_toolcalls.jsonl",
    ]
    counts = [
        _independent_counts(samples / name)
        for name in ["openclaw_v3_root-session_provider-errors_bedrock.jsonl", *children]
    ]
    assert len(main["model_calls"]) == sum(c["calls"] for c in counts)
    assert len(main["tool_calls"]) == sum(c["tools"] for c in counts)
    assert not [
        g for g in main["gaps"] if g["code"] in ("subagent_hierarchy_incomplete", "agent_transcript_unavailable")
    ]
    # agents/chairong: its main transcript (82ed8b29) is not in the samples; both sub-agents are.
    chairong = records["82ed8b29-1f0d-4b58-ae49-edc6817b0dcf"]
    assert [i["invocation_id"] for i in chairong["invocations"]] == [
        "agent:chairong:main",
        "agent:chairong:subagent:19647620-32c2-425b-8c2d-f4bfdf2c6bac",
        "agent:chairong:subagent:3693e136-b9c5-4ca8-ad53-f78c269e06ba",
    ]
    gaps = [(g["code"], g["invocation_id"], g["detail"]) for g in chairong["gaps"]]
    assert ("agent_transcript_unavailable", "agent:chairong:main", "82ed8b29-1f0d-4b58-ae49-edc6817b0dcf") in gaps
    assert ("subagent_hierarchy_incomplete", None, None) in gaps
    sub = [
        _independent_counts(samples / n)
        for n in ["openclaw_v3_subagent_done_exec-tools.jsonl", "openclaw_v3_subagent_timeout_exec-process-tools.jsonl"]
    ]
    assert len(chairong["model_calls"]) == sum(c["calls"] for c in sub)
    # the rotated .deleted archive names a session no store entry names: its own trajectory.
    archive = records["e619a9c5-4bc9-4060-bdd8-6dafac385dd4"]
    expected = _independent_counts(next(samples.glob("*.deleted.*")))
    assert (len(archive["model_calls"]), len(archive["tool_calls"])) == (expected["calls"], expected["tools"])
    assert len(records) == 3


def test_pinned_counts_of_the_samples(tmp_path):
    """Counts read off the files by hand (grep of roles and toolCall blocks), pinned."""
    expected = {
        "openclaw_v3_compaction-fromHook_thinking_rotated": (55, 55, 1),
        "openclaw_v3_root-session_provider-errors_bedrock": (0, 0, 0),
        "openclaw_v3_subagent_aborted_prompt-error_toolcalls": (2, 2, 0),
        "openclaw_v3_subagent_aborted_sibling": (3, 2, 0),  # the aborted turn streamed a toolCall: a call
        "openclaw_v3_subagent_done_exec-tools": (7, 6, 0),
        "openclaw_v3_subagent_timeout_exec-process-tools": (5, 5, 0),
        "pi_v1-legacy_compaction-bashExecution_excerpt_lines-0-and-600-660": (
            28,
            21,
            1,
        ),  # 29 assistants, 1 empty aborted
        "pi_v1-legacy_large-session_excerpt_lines-0-and-150-349": (85, 78, 0),  # 88 assistants, 3 empty aborted
        "pi_v1-legacy_model-change-burst_excerpt_lines-0-and-700-720": (8, 5, 0),
    }
    for path in _samples("openclaw") + _samples("pi"):
        counts = _independent_counts(path)
        assert (counts["calls"], counts["tools"], counts["compactions"]) == expected[path.name.split(".jsonl")[0]], (
            path.name
        )
