"""Work the assembly of a slot leaves undone until a writer needs it, and the values it then makes."""

from __future__ import annotations

import pytest

import ng_traj.assemble.build as build
from conftest import FIXTURES
from ng_traj.assemble.build import BuildOptions, assemble_slot
from ng_traj.assemble.pipeline import prepare
from ng_traj.assemble.run import run_slots
from ng_traj.diagnostics import DiagnosticSink
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES
from ng_traj.writers.parquet_rows import extras_of

RETAINED = FIXTURES / "build" / "retained_run" / "input"


def _planned():
    inputs, slots, _ = prepare([RETAINED], DiagnosticSink(), max_line_bytes=DEFAULT_MAX_LINE_BYTES)
    return BuildOptions(capture_enabled=inputs.capture_enabled), slots


def test_a_jsonl_build_makes_no_parquet_extras(monkeypatch: pytest.MonkeyPatch):
    options, slots = _planned()
    made: list[object] = []
    monkeypatch.setattr(build, "extras_of", lambda *args, **kwargs: made.append(args))
    lines: list[bytes] = []
    run_slots(slots, options, DiagnosticSink(), lines.append)
    assert len(lines) == len(slots) > 0
    assert made == []


def test_the_extras_are_made_once_when_asked_for_and_as_before(monkeypatch: pytest.MonkeyPatch):
    options, slots = _planned()
    calls: list[object] = []

    def counted(*args, **kwargs):
        calls.append(args)
        return extras_of(*args, **kwargs)

    monkeypatch.setattr(build, "extras_of", counted)
    for slot in slots:
        calls.clear()
        built = assemble_slot(slot, options, DiagnosticSink())
        extras = built.extras
        assert built.extras is extras
        assert len(calls) == 1
        row, bundles = calls[0][:2]
        assert extras == extras_of(row, bundles, run=slot.run_label, source_file=slot.file_label)
    producers = {assemble_slot(slot, options, DiagnosticSink()).extras.producer for slot in slots}
    assert producers - {None}, "the fixture has bundles, so some slot has a producer"

