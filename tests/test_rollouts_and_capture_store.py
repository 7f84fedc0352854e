"""Rollout identity and the capture store reader."""

from __future__ import annotations

import json

import pytest

from ng_traj.assemble.build import aggregate, capture_attachment
from ng_traj.assemble.rollout import capture_from_evidence
from ng_traj.diagnostics import DiagnosticSink
from ng_traj.sources.capture.store import CaptureFiles, capture_rollout_id, collect_capture
from ng_traj.sources.rollouts.rows import IdentityError, identity, rollout_id, task_from_rollout_id, task_id

POLICY = {"type": "responses_api_models", "name": "policy"}


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"_ng_task_index": 3, "_ng_rollout_index": 2}, "3-2"),
        ({"_ng_task_index": 3, "_ng_rollout_index": 2, "_ng_attempt_index": 1}, "3-2-a1"),
        ({"_ng_task_index": 3, "_ng_rollout_index": 2, "_ng_attempt_index": "2"}, "3-2-a2"),
        ({"_ng_task_index": 3, "_ng_rollout_index": 2, "_ng_attempt_index": 0}, "3-2"),
        ({"_ng_rollout_id": "step7.0-0", "_ng_task_index": 1, "_ng_rollout_index": 1}, "step7.0-0"),
        ({"_ng_rollout_id": "s7-3-2", "_ng_attempt_index": 1}, "s7-3-2-a1"),
        ({"_ng_rollout_id": None, "_ng_task_index": 0, "_ng_rollout_index": 4}, "0-4"),
        ({"_ng_task_index": 3}, None),
        ({}, None),
    ],
)
def test_rollout_id_rules(row, expected):
    assert rollout_id(row) == expected


@pytest.mark.parametrize(
    "row",
    [
        {"_ng_rollout_id": ".hidden"},
        {"_ng_rollout_id": "a/b"},
        {"_ng_rollout_id": "a b"},
        {"_ng_rollout_id": ""},
        {"_ng_rollout_id": 7},
        {"_ng_task_index": 1, "_ng_rollout_index": 1, "_ng_attempt_index": "x"},
    ],
)
def test_malformed_identity_is_rejected_and_falls_back_to_file_and_line(row):
    with pytest.raises(IdentityError):
        rollout_id(row)
    ident = identity({**row, "response": {}}, "run.jsonl", 9)
    assert (ident.rollout_id, ident.derived) == ("run.jsonl:9", False)


def test_task_id_precedence():
    assert task_id({"task_id": None, "problem_id": 12, "instance_id": "x", "_ng_task_index": 0}) == "12"
    assert task_id({"_ng_task_index": 4}) == "4"
    assert task_id({}) == "unknown"
    assert task_from_rollout_id("12-3-a1") == "12" and task_from_rollout_id("s7.eval-0") == "unknown"


def test_capture_file_names_name_their_rollout():
    assert capture_rollout_id("task-1_a.2.capture.jsonl") == "task-1_a.2"
    assert capture_rollout_id("4-2.capture.incomplete") == "4-2"
    assert capture_rollout_id(".capture.jsonl") is None
    assert capture_rollout_id("4-2.jsonl") is None


def _exchange(n: int, **extra) -> dict:
    return {"model_call_id": f"{n:032x}", "dialect": "chat", "model_ref": POLICY, "response": {"id": f"r{n}"}, **extra}


def test_tolerant_reader_keeps_indices_with_holes_and_skips_blank_lines(tmp_path):
    path = tmp_path / "4-2.capture.jsonl"
    lines = [
        json.dumps(_exchange(1, request={"t": "héllo ☃"})),
        "",
        "{broken",
        "[1]",
        json.dumps(_exchange(2, model_ref={"type": "x"})),
        json.dumps(_exchange(3)),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    found = []
    evidence = collect_capture("4-2", [CaptureFiles(str(tmp_path), str(path))], DiagnosticSink(found.append))
    assert [(call.record.call_index, call.record.response_id) for call in evidence.calls] == [(0, "r1"), (4, "r3")]
    assert evidence.calls[0].record.request == {"t": "héllo ☃"}
    assert evidence.invalid == 3
    assert [(d.line, d.code) for d in found] == [
        (3, "invalid_json"),
        (4, "not_an_object"),
        (5, "capture_record_invalid"),
    ]
    assert capture_from_evidence(evidence).gaps == [
        {"code": "model_call_capture_records_unreadable", "detail": "count=3"}
    ]


def test_empty_file_missing_file_and_marker_gaps(tmp_path):
    empty = tmp_path / "0-0.capture.jsonl"
    empty.write_text("\n")
    evidence = collect_capture("0-0", [CaptureFiles(str(tmp_path), str(empty))], DiagnosticSink())
    assert capture_from_evidence(evidence).gaps == [{"code": "model_call_capture_no_records"}]
    assert capture_from_evidence(None).gaps == [{"code": "model_call_capture_no_records"}]
    marker_only = collect_capture("0-1", [CaptureFiles(str(tmp_path), None, True)], DiagnosticSink())
    assert capture_from_evidence(marker_only).gaps == [{"code": "model_call_capture_incomplete"}]
    assert capture_from_evidence(None, error=True).gaps == [{"code": "model_call_capture_unreadable"}]


def test_an_empty_capture_file_is_one_warning_and_keeps_the_gap(tmp_path):
    found = []
    sink = DiagnosticSink(found.append)
    files = []
    for name, text in (("0-0", ""), ("0-1", "\n\n"), ("0-2", '{"model_call_id": "c", "request": {}}\n')):
        (tmp_path / f"{name}.capture.jsonl").write_text(text)
        files.append((name, CaptureFiles(str(tmp_path), str(tmp_path / f"{name}.capture.jsonl"))))
    evidence = [collect_capture(name, [entry], sink) for name, entry in files]
    assert [(d.severity, d.code, d.path, d.message) for d in found] == [
        ("warning", "empty_input", str(tmp_path / f"{name}.capture.jsonl"), "empty capture file: no call captured")
        for name in ("0-0", "0-1")
    ]
    assert capture_from_evidence(evidence[0]).gaps == [{"code": "model_call_capture_no_records"}]
    assert len(evidence[2].calls) == 1


def test_attachment_has_exact_keys_without_gaps_and_no_payloads(tmp_path):
    path = tmp_path / "0-0.capture.jsonl"
    path.write_text(json.dumps(_exchange(1, request={"big": 1}, latency_ms=5.0)) + "\n")
    state = capture_from_evidence(collect_capture("0-0", [CaptureFiles(str(tmp_path), str(path))], DiagnosticSink()))
    attachment = capture_attachment("0-0", state)
    assert list(attachment) == ["rollout_id", "metrics", "calls"]
    assert "request" not in attachment["calls"][0] and attachment["calls"][0]["response_id"] == "r1"


def test_aggregation_sums_known_values_and_counts_calls(tmp_path):
    path = tmp_path / "0-0.capture.jsonl"
    lines = [
        _exchange(1, latency_ms=10.0, response={"usage": {"prompt_tokens": 5, "completion_tokens": 1}}),
        _exchange(2, latency_ms=None, response={"usage": {"prompt_tokens": 7}}),
        _exchange(3, status_code=500, error_category="upstream_error"),
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    state = capture_from_evidence(collect_capture("0-0", [CaptureFiles(str(tmp_path), str(path))], DiagnosticSink()))
    assert aggregate(state) == {
        "tokens_in": 12,
        "tokens_out": 1,
        "tokens_reasoning": None,
        "tokens_total": 6,
        "cached_tokens": None,
        "latency_total_ms": 10.0,
        "num_calls": 3,
    }
    assert aggregate(capture_from_evidence(None)) == {
        "tokens_in": None,
        "tokens_out": None,
        "tokens_reasoning": None,
        "tokens_total": None,
        "cached_tokens": None,
        "latency_total_ms": None,
        "num_calls": 0,
    }


def test_several_stores_union_order_and_collapse_identical_duplicates(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    shared = _exchange(9, completed_at=5.0)
    (a / "0-0.capture.jsonl").write_text(json.dumps(_exchange(1, completed_at=3.0)) + "\n" + json.dumps(shared) + "\n")
    (b / "0-0.capture.jsonl").write_text(json.dumps(_exchange(2, completed_at=4.0)) + "\n" + json.dumps(shared) + "\n")
    found = []
    files = [
        CaptureFiles(str(b), str(b / "0-0.capture.jsonl")),
        CaptureFiles(str(a), str(a / "0-0.capture.jsonl")),
    ]
    evidence = collect_capture("0-0", files, DiagnosticSink(found.append))
    assert [(c.record.model_call_id[-1], c.store[-1], c.record.call_index) for c in evidence.calls] == [
        ("1", "a", 0),
        ("2", "b", 0),
        ("9", "a", 1),
    ]
    assert found == []


def test_lines_without_any_capture_key_are_invalid_records(tmp_path):
    path = tmp_path / "9-0.capture.jsonl"
    trajectory = {"schema_version": "1.0", "task_id": "0", "rollout_id": "0-0", "invocations": []}
    lines = [{"foo": 1}, trajectory, _exchange(1), {"response": None}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    found = []
    evidence = collect_capture("9-0", [CaptureFiles(str(tmp_path), str(path))], DiagnosticSink(found.append))
    assert [(call.record.call_index, call.record.response_id) for call in evidence.calls] == [(2, "r1"), (3, None)]
    assert evidence.invalid == 2
    assert [(d.path, d.line, d.code) for d in found] == [
        (str(path), 1, "capture_record_invalid"),
        (str(path), 2, "capture_record_invalid"),
    ]
    assert "none of the capture keys" in found[0].message


def test_rollout_rows_are_no_capture_lines(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    row = {"_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 1.0, "response": {"id": "resp_1", "output": []}}
    path.write_text(json.dumps(row) + "\n" + json.dumps({**row, "_ng_task_index": 1}) + "\n")
    found = []
    evidence = collect_capture("rollouts", [CaptureFiles(str(tmp_path), str(path))], DiagnosticSink(found.append))
    assert evidence.calls == [] and evidence.invalid == 2
    assert [(d.line, d.code, d.severity) for d in found] == [
        (1, "capture_record_invalid", "error"),
        (2, "capture_record_invalid", "error"),
        (None, "capture_file_unrecognised", "error"),
    ]
    assert found[0].message.startswith("not a model-call record: a rollout row (_ng_rollout_index, _ng_task_index,")
    assert found[2].message == (
        "not a capture file: none of its 2 lines is a capture line (a model-call record); no call read from it"
    )


def test_a_capture_line_with_only_a_response_is_still_read(tmp_path):
    path = tmp_path / "9-0.capture.jsonl"
    path.write_text(json.dumps({"response": {"id": "r1", "output": []}}) + "\n")
    found = []
    evidence = collect_capture("9-0", [CaptureFiles(str(tmp_path), str(path))], DiagnosticSink(found.append))
    assert [call.record.response_id for call in evidence.calls] == ["r1"] and found == []


def test_forcing_a_rollouts_file_as_capture_reads_no_call_and_says_so(tmp_path):
    from conftest import FIXTURES, run_json

    rows = (FIXTURES / "build" / "retained_run" / "input" / "rollouts.jsonl").read_bytes().splitlines()[:6]
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(b"\n".join(rows) + b"\n")
    result = run_json("build", "--as", "capture", path, "-o", tmp_path / "out.jsonl")
    codes = [d["code"] for d in result.diagnostics]
    assert codes.count("capture_record_invalid") == 6 and codes.count("capture_file_unrecognised") == 1
    assert "forced_kind_mismatch" in codes
    assert result.summary["model_calls"] == 0
