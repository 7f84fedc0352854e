"""The mutation fuzzer (``tests/fuzzing.py``) over the fixtures: a fixed, seeded set by default.

``NG_TRAJ_FUZZ_MUTANTS=10000`` (and ``NG_TRAJ_FUZZ_SEED``) run a long campaign instead;
``NG_TRAJ_FUZZ_ONLY=INDEX`` runs one mutant of the seed, to reproduce a failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from fuzzing import (
    OPERATORS,
    UNITS,
    Mutation,
    campaign,
    entity_counts,
    explains,
    losses,
    prepare_units,
    report,
    run,
    split_lines,
)

SEED = int(os.environ.get("NG_TRAJ_FUZZ_SEED", "20261201"))
MUTANTS = int(os.environ.get("NG_TRAJ_FUZZ_MUTANTS", "240"))
ONLY = os.environ.get("NG_TRAJ_FUZZ_ONLY")


def test_seeded_mutants_of_every_fixture_hold(tmp_path: Path) -> None:
    indexes = [int(ONLY)] if ONLY else range(MUTANTS)
    result = campaign(tmp_path, SEED, indexes)
    print(report(result, limit=0))
    assert result.totals()["mutants"] >= 0.8 * len(indexes)  # nearly every draw gave a mutant
    assert not result.failures, report(result)


def test_every_unit_builds_something_unmutated(tmp_path: Path) -> None:
    """A unit whose unmutated build is empty would let every loss pass unnoticed."""
    for unit in prepare_units(tmp_path):
        built = run(unit.args(()), tmp_path / f"{unit.name}.jsonl")
        counts = entity_counts(built.output)
        assert built.exit_code == 0 and built.crash is None, (unit.name, built.diagnostics)
        assert sum(c["records"] for c in counts.values()) >= 1, unit.name
        assert sum(c["conversation_items"] + c["model_calls"] for c in counts.values()) >= 1, unit.name


def test_loss_is_counted_per_rollout_and_offset_only_by_new_ids() -> None:
    before = {"t/a": {"records": 1, "model_calls": 3}, "t/b": {"records": 1, "model_calls": 2}}
    moved = {"t/a": {"records": 1, "model_calls": 3}, "t/b2": {"records": 1, "model_calls": 2}}
    fewer = {"t/a": {"records": 1, "model_calls": 1}, "t/b": {"records": 1, "model_calls": 4}}
    assert losses(_counters(before), _counters(moved)) == {}
    assert losses(_counters(before), _counters(fewer)) == {"model_calls": 2}  # b's gain does not offset a's loss
    assert losses(_counters(before), {}) == {"records": 2, "model_calls": 5}


def _counters(value: dict) -> dict:
    from collections import Counter

    return {key: Counter(counts) for key, counts in value.items()}


def test_an_explaining_diagnostic_names_the_file_and_a_nearby_line(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    near = {"severity": "error", "code": "invalid_json", "path": str(path), "line": 7}
    assert explains(near, path, (5,))
    assert not explains({**near, "line": 8}, path, (5,))
    assert not explains({**near, "line": None}, path, (5,))
    assert not explains({**near, "severity": "info"}, path, (5,))
    assert not explains({**near, "path": str(tmp_path / "other.jsonl")}, path, (5,))
    assert explains({**near, "line": None}, path, ())


def test_operators_change_the_line_they_name() -> None:
    import random

    data = b"".join(orjson.dumps({"id": n, "text": f"line {n}", "list": [n, {"k": "v"}]}) + b"\n" for n in range(6))
    for name, operator in OPERATORS.items():
        for seed in range(5):
            mutation = operator(random.Random(seed), data)
            assert isinstance(mutation, Mutation), name
            assert mutation.data != data, name
            lines, mutated = split_lines(data), split_lines(mutation.data)
            if name in ("truncate_file", "delete_line", "fuse_lines", "repeat_line", "swap_lines"):
                continue  # these move lines: checked by the line counts below
            changed = [i + 1 for i, (a, b) in enumerate(zip(lines, mutated, strict=True)) if a != b]
            assert changed == [mutation.lines[0]], (name, seed, changed, mutation.lines)
        assert len(split_lines(OPERATORS["delete_line"](random.Random(1), data).data)) == 5
        assert len(split_lines(OPERATORS["fuse_lines"](random.Random(1), data).data)) == 5
        assert len(split_lines(OPERATORS["repeat_line"](random.Random(1), data).data)) == 7


def test_deep_nesting_straddles_the_decoder_depth_limit() -> None:
    import random

    data = orjson.dumps({"a": 1}) + b"\n"
    depths = set()
    for seed in range(40):
        text = OPERATORS["deep_nesting"](random.Random(seed), data).data
        depths.add(text.count(b"[") + text.count(b"{") - 1)
    assert min(depths) < 1024 < max(depths)


@pytest.mark.parametrize("unit", ["pi", "retained_run", "hermes_v6"])
def test_a_subprocess_build_of_a_mutant_ends_within_its_time_bound(tmp_path: Path, unit: str) -> None:
    """A few mutants built in a child process under ``timeout``: a hang the in-process bound could
    not interrupt (a blocking read in C code, a worker process) shows as exit 124."""
    from fuzzing import choose, is_binary

    units = prepare_units(tmp_path, [unit])
    for index in range(3):
        target, path, name, rng = choose(SEED, index, units)
        from fuzzing import BINARY_OPERATORS

        mutation = (BINARY_OPERATORS if is_binary(path) else OPERATORS)[name](rng, path.read_bytes())
        if mutation is not None:
            path.write_bytes(mutation.data)
        out = tmp_path / f"out{index}.jsonl"
        command = ["timeout", "60", sys.executable, "-m", "ng_traj", *target.args(()), "-o", str(out), "--jobs", "2"]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        assert done.returncode in (0, 1), (unit, index, name, done.returncode, done.stderr[-2000:])
        assert "internal error" not in done.stderr and "Traceback" not in done.stderr


def test_units_cover_every_fixture_kind() -> None:
    kinds = {source.split("/")[0] for source, _ in UNITS.values()}
    assert kinds == {"build", "judge", "native_e2e", "pi", "openclaw", "hermes"}
