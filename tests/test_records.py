"""The shared reader of finished outputs (``ng_traj/records.py``): the same trajectories from
trajectory JSONL, ``--attach`` rows and a Parquet dataset of one build, with what each input knows."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from conftest import FIXTURES, run_cli
from ng_traj.diagnostics import DiagnosticSink
from ng_traj.records import input_files, read_inputs

RUN = FIXTURES / "build" / "retained_run" / "input"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("records")
    made = {"jsonl": root / "out.jsonl", "rows": root / "rows.jsonl", "dataset": root / "out.parquet"}
    for args in (("-o", made["jsonl"]), ("-o", made["rows"], "--attach"), ("-o", made["dataset"])):
        assert run_cli("build", RUN, *args, "--quiet").exit_code == 0
    return made


def _read(*paths: Path) -> tuple[list, list]:
    found: list = []
    return list(read_inputs(list(paths), DiagnosticSink(found.append))), found


def test_three_kinds_give_the_same_trajectories(outputs):
    plain, _ = _read(outputs["jsonl"])
    rows, _ = _read(outputs["rows"])
    dataset, _ = _read(outputs["dataset"])
    expected = [orjson.loads(line) for line in outputs["jsonl"].read_bytes().splitlines()]
    assert [r.value for r in plain] == expected
    assert [r.record.rollout_id for r in rows] == [r["rollout_id"] for r in expected]
    assert [r.value for r in dataset] == expected
    assert {r.kind for r in plain} == {"trajectories"} and {r.kind for r in dataset} == {"dataset"}
    assert all(r.run is r.agent is r.reward is None for r in plain)
    assert [r.position for r in dataset] == list(range(1, len(expected) + 1))


def test_rows_and_dataset_carry_agent_and_reward(outputs):
    rows, _ = _read(outputs["rows"])
    dataset, _ = _read(outputs["dataset"])
    source_rows = [orjson.loads(line) for line in outputs["rows"].read_bytes().splitlines()]
    rewards = [row.get("reward") for row in source_rows]
    agents = [row.get("agent_ref", {}).get("name") for row in source_rows]
    assert [r.reward for r in rows] == [float(v) if isinstance(v, (int, float)) else None for v in rewards]
    assert [r.agent for r in rows] == agents
    assert any(a is not None for a in agents) and any(v is not None for v in rewards)
    assert {r.run for r in rows} == {"rows.jsonl"}
    assert [r.agent for r in dataset] == agents
    assert [r.reward for r in dataset] == [r.reward for r in rows]
    # the build's run label; the capture-only trajectory (no rollout row) has none
    assert [r.run for r in dataset] == [None if r.agent is None else "rollouts.jsonl" for r in dataset]
    assert [r.producer for r in dataset] == [r.producer for r in rows]


def test_bad_lines_are_reported_and_skipped(tmp_path, outputs):
    lines = outputs["jsonl"].read_bytes().splitlines()
    damaged = tmp_path / "damaged.jsonl"
    row_without = orjson.dumps({"responses_create_params": {}, "reward": 1.0})
    invalid = orjson.loads(lines[1])
    invalid["schema_version"] = 3
    damaged.write_bytes(b"\n".join([lines[0], b"{not json", row_without, orjson.dumps(invalid), lines[2]]) + b"\n")
    records, sink = _read(damaged)
    assert [r.position for r in records] == [1, 5]
    found = sorted((d.line, d.severity) for d in sink)
    assert [line for line, _ in found] == [2, 3, 4]
    assert dict(found)[3] == "warning"


def test_folders_are_walked_and_datasets_kept_whole(tmp_path, outputs):
    folder = tmp_path / "mixed"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.jsonl").write_bytes(outputs["jsonl"].read_bytes())
    run_cli("convert", outputs["jsonl"], "-o", folder / "z.parquet", "--quiet")
    assert input_files([folder]) == [folder / "sub" / "a.jsonl", folder / "z.parquet"]
    records, _ = _read(folder)
    assert len(records) == 2 * len(outputs["jsonl"].read_bytes().splitlines())
