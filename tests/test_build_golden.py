"""Golden builds of the retained-run fixtures, with expectations derived by hand.

Each fixture folder under ``fixtures/build/`` holds the inputs and ``expected.jsonl``. The per-rollout
facts below were written from the reference rules before the output was generated; the byte-level
golden then pins everything else. ``NG_TRAJ_UPDATE_GOLDEN=1`` rewrites the goldens for review with
``git diff`` (every changed line must be explained).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson
import pytest

from conftest import FIXTURES, run_cli, run_json, without_null_0_7_keys
from ng_traj.checks import check_line
from ng_traj.contract.revisions import keys_0_7

BUILD = FIXTURES / "build"
C = "{:032x}".format


def _golden(folder: Path, produced: bytes) -> None:
    expected = folder / "expected.jsonl"
    if os.environ.get("NG_TRAJ_UPDATE_GOLDEN") == "1":
        expected.write_bytes(produced)
    assert produced == expected.read_bytes()


def _facts(path: Path) -> list[tuple]:
    facts = []
    for line in path.read_bytes().splitlines():
        record = orjson.loads(line)
        calls = [
            (
                (call["model_call_id"] or "")[-2:],
                call["response_metadata"]["response_id"],
                tuple(
                    call["token_stats"][k]
                    for k in ("prompt_tokens", "completion_tokens", "reasoning_tokens", "total_tokens", "cached_tokens")
                ),
            )
            for call in record["model_calls"]
        ]
        gaps = [(gap["code"], gap["invocation_id"], gap["detail"]) for gap in record["gaps"]]
        invocations = [inv["invocation_id"] for inv in record["invocations"]]
        facts.append((record["rollout_id"], record["task_id"], invocations, calls, gaps))
    return facts


N = None
RETAINED = [
    (
        "0-0",
        "0",
        ["root"],
        [
            ("01", "resp_a1", (20, 8, 0, 28, 0)),
            ("02", "resp_a2", (35, 4, 2, 39, 20)),
            ("03", "resp_j00", (30, 2, N, 32, N)),
        ],
        [],
    ),
    (
        "0-1",
        "0",
        ["sess-01"],
        [("0b", "chatcmpl-01", (N, N, N, N, N)), ("0c", "resp_j01", (30, 2, N, 32, N))],
        [
            ("subagent_hierarchy_unavailable", N, N),
            ("model_call_ownership_unavailable", N, f"capture:{C(12)}:call_index=1"),
        ],
    ),
    (
        "1-0",
        "1",
        ["cc-session"],
        [("15", "msg_10a", (112, 9, N, 121, 100)), ("16", "msg_10b", (135, 6, N, 141, 110))],
        [("no_sandbox_runtime", N, N)],
    ),
    (
        "1-1",
        "1",
        ["rollout_record"],
        [("1f", "chatcmpl-11a", (40, 15, 5, 55, 32)), ("21", "chatcmpl-11c", (60, 3, N, 63, N))],
        [
            ("model_call_capture_records_unreadable", N, "count=1"),
            ("model_call_capture_incomplete", N, N),
            ("conversation_from_rollout_record", N, N),
            ("turns_unavailable", N, N),
        ],
    ),
    (
        "2-0",
        "2",
        ["2-0"],
        [],
        [
            ("subagent_hierarchy_unavailable", "2-0", N),
            ("no_sandbox_runtime", N, N),
            ("model_call_reference_unmatched", "2-0", "chatcmpl-20"),
            ("model_call_capture_no_records", N, N),
            ("model_calls_unavailable", N, N),
            ("turns_unavailable", N, N),
        ],
    ),
    (
        "2-1",
        "2",
        ["rollout_record"],
        [("29", "chatcmpl-21", (10, 256, N, 266, N))],
        [("conversation_from_rollout_record", N, N), ("turns_unavailable", N, N)],
    ),
    (
        "2-1-a1",
        "2",
        ["rollout_record"],
        [("2a", "chatcmpl-21a1", (10, 2, N, 12, N))],
        [("conversation_from_rollout_record", N, N), ("turns_unavailable", N, N)],
    ),
    (
        "3-0",
        "3",
        [],
        [("33", "chatcmpl-30", (10, 2, N, 12, N))],
        [
            ("rollout_record_unavailable", N, "capture:3-0.capture.jsonl"),
            ("turns_unavailable", N, N),
            ("conversation_unavailable", N, N),
        ],
    ),
    (
        "4-0",
        "4",
        ["rollout_record"],
        [("51", "msg_40", (330, 50, N, 380, 200)), ("52", "resp_j40", (30, 2, N, 32, N))],
        [("conversation_from_rollout_record", N, N), ("turns_unavailable", N, N)],
    ),
    (
        "5-0",
        "5",
        ["rollout_record"],
        [],
        [
            ("model_call_capture_no_records", N, N),
            ("conversation_from_rollout_record", N, N),
            ("model_calls_unavailable", N, N),
            ("turns_unavailable", N, N),
        ],
    ),
    (
        "5-1",
        "5",
        ["root"],
        [],
        [
            ("producer_trajectory_identity_mismatch", N, "rollout_id"),
            ("model_call_capture_no_records", N, N),
            ("model_calls_unavailable", N, N),
        ],
    ),
    (
        "10-0",
        "10",
        ["rollout_record"],
        [("47", N, (N, N, N, N, N)), ("48", "chatcmpl-100", (12, 2, N, 14, N))],
        [("conversation_from_rollout_record", N, N), ("turns_unavailable", N, N)],
    ),
    (
        "s7.eval-0",
        "geo-7",
        ["rollout_record"],
        [("3d", "resp_s7", (15, 9, 6, 24, N))],
        [("conversation_from_rollout_record", N, N), ("turns_unavailable", N, N)],
    ),
]

LEGACY = [
    (
        "0-0",
        "0",
        ["sess-a"],
        [("cc", N, (330, 50, N, 380, 200))],
        # its call is owned but the attachment kept no response: no captured turn, one from its conversation
        [("no_sandbox_runtime", N, N), ("turns_from_transcript", N, N)],
    ),
    (
        "0-1",
        "0",
        ["0-1"],
        [("dd", "chatcmpl-b", (10, 2, N, 12, N))],
        # no invocation owns the captured call, and its conversation holds no assistant output
        [("model_call_ownership_unavailable", N, "capture:" + "d" * 32 + ":call_index=0"), ("turns_unavailable", N, N)],
    ),
    ("1-0", "1", ["root"], [("ee", "resp_c", (10, 1, 0, 11, 0))], []),
    (
        "2-0",
        "2",
        ["rollout_record"],
        [("ff", N, (N, N, N, N, N))],
        [
            ("agent_observations_invalid", N, "ValidationError"),
            ("model_call_capture_call_invalid", N, "calls.1"),  # the attachment's second call is a string
            ("conversation_from_rollout_record", N, N),
            ("turns_unavailable", N, N),
        ],
    ),
    (
        "2-1",
        "2",
        ["rollout_record"],
        [],
        [
            ("producer_trajectory_invalid", N, "ValidationError"),
            ("conversation_from_rollout_record", N, N),
            ("model_calls_unavailable", N, N),
            ("turns_unavailable", N, N),
        ],
    ),
    (
        "3-0",
        "3",
        ["root"],
        [("aa", "resp_f", (10, 2, N, 12, N))],
        [("multimodal_history_redacted", N, N)],
    ),
]


# The one warning validate has for these outputs: rollout 2-0's ref that no captured call matched.
WARNINGS = {"retained_run": [(5, "unresolved_model_call_ref")], "legacy_attachments": []}


@pytest.mark.parametrize(("name", "facts"), [("retained_run", RETAINED), ("legacy_attachments", LEGACY)])
def test_golden_build(tmp_path, name, facts):
    folder = BUILD / name
    out = tmp_path / "out.jsonl"
    result = run_cli("build", folder / "input", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert _facts(out) == facts
    _golden(folder, out.read_bytes())
    found = []
    for number, line in enumerate(out.read_bytes().splitlines(), start=1):
        findings, _ = check_line(orjson.loads(line))
        found.extend((number, finding.code) for finding in findings)
    assert found == WARNINGS[name]


def test_retained_run_diagnostics_and_summary(tmp_path):
    folder = BUILD / "retained_run" / "input"
    result = run_json("build", folder, "-o", tmp_path / "out.jsonl")
    lines = [line.split(": ", 1)[0].removeprefix(str(folder) + "/") for line in result.stderr.splitlines()]
    assert sorted(lines) == sorted(
        ["rollouts.jsonl:7", "capture/1-1.capture.jsonl:2", "judge_capture/0-1.capture.jsonl:1"]
    )
    assert "error[invalid_json]" in result.stderr and "warning[capture_duplicate_conflict]" in result.stderr
    summary = result.summary
    assert summary["trajectories"] == 13
    assert summary["by_origin"] == {"capture_without_row": 1, "rollout_row": 12}
    assert summary["inputs_by_kind"] == {"capture": 13, "rollouts": 2}
    assert summary["lines_skipped"] == 2
    assert summary["orphan_captures"] == [str(folder / "capture" / "3-0.capture.jsonl")]
    assert summary["model_calls"] == 17 and summary["tool_calls"] == 2


def test_reprojecting_a_collector_row_is_idempotent(tmp_path):
    """A row written by a collector before 0.7.0 comes back as it was, in the earlier revision; in the
    0.7.0 one it only gains the new keys, null (as a 0.7.0 collector re-emitting it would write)."""
    rows = (BUILD / "legacy_attachments" / "input" / "rollouts.jsonl").read_bytes().splitlines()
    recorded = orjson.loads(rows[2])["ng_trajectory"]
    out = tmp_path / "earlier.jsonl"
    assert (
        run_cli("build", BUILD / "legacy_attachments" / "input", "-o", out, "--gym-release", "pre-0.7").exit_code == 0
    )
    assert orjson.loads(out.read_bytes().splitlines()[2]) == recorded
    current = orjson.loads((BUILD / "legacy_attachments" / "expected.jsonl").read_bytes().splitlines()[2])
    assert keys_0_7(recorded) == [] and keys_0_7(current) != []
    assert without_null_0_7_keys(current) == recorded


def test_output_is_identical_whatever_the_input_order_or_location(tmp_path):
    folder = BUILD / "retained_run" / "input"
    parts = ["judge_capture", "rollouts_failures.jsonl", "capture", "rollouts.jsonl"]
    copy = tmp_path / "elsewhere"
    shutil.copytree(folder, copy)
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert run_cli("build", *[folder / p for p in parts], "-o", first).exit_code == 0
    assert run_cli("build", *[copy / p for p in reversed(parts)], "-o", second).exit_code == 0
    assert first.read_bytes() == second.read_bytes() == (folder.parent / "expected.jsonl").read_bytes()
