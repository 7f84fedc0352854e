"""``assemble_chunk``: one chunk of the plan assembled where any engine runs it, equal to one process."""

from __future__ import annotations

from pathlib import Path

import orjson

from conftest import FIXTURES
from ng_traj.assemble.build import BuildOptions, encode_line
from ng_traj.assemble.chunks import assemble_chunk
from ng_traj.assemble.pipeline import prepare
from ng_traj.assemble.run import run_slots
from ng_traj.diagnostics import Diagnostic, DiagnosticSink
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES
from ng_traj.writers.spool import SpooledPayloads, SpoolLines, read_payloads

RETAINED = FIXTURES / "build" / "retained_run" / "input"


def _planned():
    inputs, slots, _ = prepare([RETAINED], DiagnosticSink(), max_line_bytes=DEFAULT_MAX_LINE_BYTES)
    return BuildOptions(capture_enabled=inputs.capture_enabled), slots


def _one_process(options, slots) -> tuple[list[bytes], list[Diagnostic]]:
    lines: list[bytes] = []
    diagnostics: list[Diagnostic] = []
    run_slots(slots, options, DiagnosticSink(diagnostics.append), lines.append)
    return lines, diagnostics


def test_chunks_with_segments_join_to_the_one_process_output(tmp_path: Path):
    options, slots = _planned()
    lines, diagnostics = _one_process(options, slots)
    spool = SpoolLines(str(tmp_path))
    results = [
        assemble_chunk(options, slots[start : start + 5], n, start=start, encode=spool, segment=spool.segment(n))
        for n, start in enumerate(range(0, len(slots), 5))
    ]
    assert [result.index for result in results] == [0, 1, 2]
    assert [result.segment.path for result in results] == [str(tmp_path / f"{n}.jsonl") for n in range(3)]
    joined = b"".join(Path(result.segment.path).read_bytes() for result in results)
    assert joined == b"".join(lines) == (FIXTURES / "build" / "retained_run" / "expected.jsonl").read_bytes()
    assert [result.segment.size for result in results] == [len(b"".join(lines[s : s + 5])) for s in (0, 5, 10)]
    outcomes = [done for result in results for done in result.outcomes]
    assert [done.payload for done in outcomes] == [None] * len(slots)
    replayed = [diagnostic for done in outcomes for diagnostic in done.diagnostics]
    # Planning's diagnostics are raised before any chunk; the chunks' ones follow in rollout order.
    assert [d.code for d in replayed] == [d.code for d in diagnostics] == ["capture_duplicate_conflict", "invalid_json"]
    assert replayed == diagnostics


def test_a_chunk_without_a_segment_returns_each_payload(tmp_path: Path):
    options, slots = _planned()
    lines, _ = _one_process(options, slots)
    result = assemble_chunk(options, slots[3:7], 1, start=3, encode=encode_line)
    assert result.segment is None
    assert [done.payload for done in result.outcomes] == lines[3:7]
    records = [orjson.loads(line) for line in lines[3:7]]
    expected = [(len(r["invocations"]), len(r["model_calls"]), len(r["tool_calls"])) for r in records]
    assert [done.counts for done in result.outcomes] == expected
    assert [done.gap_codes for done in result.outcomes] == [tuple(g["code"] for g in r["gaps"]) for r in records]
    assert list(tmp_path.iterdir()) == []


def test_a_chunk_with_pickled_payloads_gives_them_back_in_order(tmp_path: Path):
    options, slots = _planned()
    lines, _ = _one_process(options, slots)
    path = str(tmp_path / "1.pickle")
    result = assemble_chunk(options, slots[3:7], 1, start=3, encode=encode_line, segment=path, pickled=True)
    assert result.segment == SpooledPayloads(path, 4)
    assert [done.payload for done in result.outcomes] == [None] * 4
    assert list(read_payloads(result.segment)) == lines[3:7]
    assert list(tmp_path.iterdir()) == []  # read, then deleted
