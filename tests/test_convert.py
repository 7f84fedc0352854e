"""``ng-traj convert``: directions, --attach rows, records that break the contract, usage errors."""

from __future__ import annotations

import orjson
import pyarrow.parquet as pq
import pytest

from conftest import FIXTURES, run_cli
from ng_traj.checks import TRAJECTORY_MISSING, check_line

RETAINED = FIXTURES / "build" / "retained_run"


def test_attach_rows_convert_their_trajectory_and_fill_the_parquet_only_columns(tmp_path):
    rows = tmp_path / "rows.jsonl"
    assert run_cli("build", RETAINED / "input", "-o", rows, "--attach").exit_code == 0
    dataset = tmp_path / "rows.parquet"
    result = run_cli("convert", rows, "-o", dataset)
    assert result.exit_code == 0, result.stderr
    assert "converted 13 trajectories" in result.stderr
    heads = pq.read_table(dataset / "trajectories").to_pylist()
    # Same agents and producers as a Parquet build: the rows' agent_ref and bundle sources.
    assert [(h["rollout_id"], h["agent"], h["producer"]) for h in heads][:3] == [
        ("0-0", "math_agent", None),
        ("0-1", "math_agent", "openclaw"),
        ("1-0", "math_agent", "claude_code"),
    ]
    # The rows' reward and identity indexes too; the run is the converted file (all the rows say of it).
    columns = ("run", "source_file", "reward", "task_index", "rollout_index", "attempt")
    by_id = {h["rollout_id"]: tuple(h[c] for c in columns) for h in heads}
    assert by_id["2-1-a1"] == ("rows.jsonl", "rows.jsonl", 1.0, 2, 1, 1)
    assert by_id["0-1"] == ("rows.jsonl", "rows.jsonl", 1.0, 0, 1, 0)
    back = run_cli("convert", dataset, "-o", "-")
    assert back.stdout.encode() == (RETAINED / "expected.jsonl").read_bytes()


def test_records_that_break_the_contract_are_reported_and_skipped(tmp_path):
    lines = (RETAINED / "expected.jsonl").read_bytes().splitlines()
    broken = orjson.loads(lines[0])
    broken["model_calls"][0]["duration_ms"] = -1.0
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"\n".join([orjson.dumps(broken), b"{not json", *lines[1:]]) + b"\n")
    result = run_cli("convert", source, "-o", tmp_path / "out.parquet")
    assert result.exit_code == 1
    assert f"{source}:1: error[negative_value] model_calls.0.duration_ms" in result.stderr
    assert f"{source}:2: error[invalid_json]" in result.stderr
    assert "converted 12 trajectories" in result.stderr and "1 record skipped" in result.stderr
    assert pq.read_metadata(tmp_path / "out.parquet" / "trajectories" / "part-00000.parquet").num_rows == 12


def test_usage_errors(tmp_path):
    missing = run_cli("convert", tmp_path / "nope.jsonl", "-o", tmp_path / "o.parquet")
    assert missing.exit_code == 2 and "no such file or directory" in missing.stderr
    plain_dir = run_cli("convert", tmp_path, "-o", tmp_path / "o.jsonl")
    assert plain_dir.exit_code == 2 and "not an ng-traj Parquet dataset" in plain_dir.stderr
    to_stdout = run_cli("convert", RETAINED / "expected.jsonl", "-o", "-")
    assert to_stdout.exit_code == 2 and "a Parquet dataset is a directory" in to_stdout.stderr
    same_format = run_cli("convert", RETAINED / "expected.jsonl", "-o", tmp_path / "o.jsonl")
    assert same_format.exit_code == 2 and "name it like out.parquet" in same_format.stderr
    file_there = tmp_path / "taken"
    file_there.write_text("x")
    taken = run_cli("convert", RETAINED / "expected.jsonl", "-o", file_there)
    assert taken.exit_code == 2 and "not replaced" in taken.stderr and file_there.read_text() == "x"
    assert "Traceback" not in missing.stderr + plain_dir.stderr + to_stdout.stderr + taken.stderr


def test_rollout_rows_without_a_trajectory_are_reported_as_validate_does(tmp_path):
    attached = tmp_path / "rows.jsonl"
    assert run_cli("build", RETAINED / "input", "-o", attached, "--attach").exit_code == 0
    # A raw row without ng_trajectory, then one carrying the producer's trajectory, then an --attach row.
    raw = (RETAINED / "input" / "rollouts.jsonl").read_bytes().splitlines()[:2]
    source = tmp_path / "mixed.jsonl"
    source.write_bytes(b"\n".join([*raw, attached.read_bytes().splitlines()[0]]) + b"\n")
    result = run_cli("convert", source, "-o", tmp_path / "out.parquet")
    assert result.exit_code == 1
    missing = (
        "warning[trajectory_missing] ng_trajectory: the rollout row has no trajectory (ng-traj build assembles one)"
    )
    assert result.stderr.splitlines()[0] == f"{source}:1: {missing}"
    assert "converted 2 trajectories" in result.stderr
    assert "1 record skipped, 0 errors, 1 warning" in result.stderr
    assert check_line(orjson.loads(raw[0])) == ([TRAJECTORY_MISSING], False)


def test_rows_whose_observation_bundle_breaks_the_contract_are_reported_and_skipped(tmp_path):
    rows = tmp_path / "rows.jsonl"
    assert run_cli("build", RETAINED / "input", "-o", rows, "--attach").exit_code == 0
    lines = rows.read_bytes().splitlines()
    broken = orjson.loads(lines[1])  # 0-1 carries an OpenClaw bundle
    broken["ng_agent_observations"] = "not a bundle"
    rows.write_bytes(b"\n".join([lines[0], orjson.dumps(broken), *lines[2:]]) + b"\n")
    result = run_cli("convert", rows, "-o", tmp_path / "rows.parquet")
    assert result.exit_code == 1
    assert f"{rows}:2: error[invalid_type] ng_agent_observations" in result.stderr
    assert "converted 12 trajectories" in result.stderr and "1 record skipped" in result.stderr


def test_dataset_to_jsonl_writes_the_revision_gym_release_names(tmp_path):
    store = tmp_path / "capture"
    store.mkdir()
    line = {
        "model_call_id": "c1",
        "dialect": "responses",
        "model_ref": {"type": "responses_api_models", "name": "policy"},
        "status_code": 200,
        "response_source": "upstream",
    }
    (store / "0-0.capture.jsonl").write_text(orjson.dumps(line).decode() + "\n")
    built, earlier = tmp_path / "built.jsonl", tmp_path / "earlier.jsonl"
    assert run_cli("build", store, "-o", built).exit_code == 0
    assert run_cli("build", store, "-o", earlier, "--gym-release", "pre-0.7").exit_code == 0
    dataset = tmp_path / "built.parquet"
    assert run_cli("convert", built, "-o", dataset).exit_code == 0
    # The default is 0.7: the built file comes back as it was, with the four execution keys.
    assert run_cli("convert", dataset, "-o", "-").stdout.encode() == built.read_bytes()
    back = run_cli("convert", dataset, "-o", "-", "--gym-release", "pre-0.7")
    assert back.exit_code == 0, back.stderr
    # The same bytes as a pre-0.7 build, and the value left out is reported as the build reports it.
    assert back.stdout.encode() == earlier.read_bytes()
    assert b"upstream_attempted" not in earlier.read_bytes()
    assert f"{dataset}:1: warning[earlier_release_dropped]: rollout 0-0: values of response_source" in back.stderr
    to_parquet = run_cli("convert", built, "-o", tmp_path / "o.parquet", "--gym-release", "pre-0.7")
    assert to_parquet.exit_code == 2 and "converting it to JSONL" in to_parquet.stderr
    unknown = run_cli("convert", dataset, "-o", tmp_path / "o.jsonl", "--gym-release", "0.6")
    assert unknown.exit_code == 2 and "choose from 0.7, pre-0.7" in unknown.stderr
    assert not (tmp_path / "o.jsonl").exists() and not (tmp_path / "o.parquet").exists()


def test_a_conversion_that_converts_nothing_leaves_the_dataset_there_as_it_was(tmp_path):
    dataset = tmp_path / "keep.parquet"
    assert run_cli("build", FIXTURES / "build" / "retained_run" / "input", "-o", dataset).exit_code == 0
    before = {p: p.read_bytes() for p in dataset.rglob("*") if p.is_file()}
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"\x00\xff not json\n{\n")
    result = run_cli("convert", garbage, "-o", dataset)
    assert result.exit_code == 1 and "was left as it was" in result.stderr
    assert {p: p.read_bytes() for p in dataset.rglob("*") if p.is_file()} == before
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert run_cli("convert", empty, "-o", tmp_path / "new.parquet").exit_code == 1
    assert not (tmp_path / "new.parquet").exists()


def _interrupted_at(monkeypatch, where: str) -> None:
    """Make a SIGTERM arrive (the handler run, as the signal would run it) at ``where``: before the
    output is renamed over its target (``commit``), or before or after the summary is printed."""
    import signal

    from ng_traj.cli.output import Reporter
    from ng_traj.io import atomic

    monkeypatch.setattr(atomic, "_interrupts", [])
    if where == "commit":
        kept_mode = atomic._kept_mode

        def signalled(*args):
            atomic.interrupt(signal.SIGTERM, None)
            return kept_mode(*args)

        monkeypatch.setattr(atomic, "_kept_mode", signalled)
        return
    summary = Reporter.summary

    def signalled_summary(self, *args, **kwargs):
        if where == "before summary":
            atomic.interrupt(signal.SIGTERM, None)
        summary(self, *args, **kwargs)
        if where == "after summary":
            atomic.interrupt(signal.SIGTERM, None)

    monkeypatch.setattr(Reporter, "summary", signalled_summary)


@pytest.mark.parametrize("direction", ["to parquet", "to jsonl"])
@pytest.mark.parametrize("where", ["commit", "before summary", "after summary"])
def test_a_signal_at_the_end_gives_one_outcome(tmp_path, monkeypatch, direction, where):
    """A SIGTERM right at the end printed the success line and exited 143: a signal before the
    output is committed leaves no output and no success line; one after it changes nothing."""
    from ng_traj.io import atomic

    dataset = tmp_path / "in.parquet"
    assert run_cli("convert", RETAINED / "expected.jsonl", "-o", dataset).exit_code == 0
    source, out = (RETAINED / "expected.jsonl", tmp_path / "out.parquet")
    if direction == "to jsonl":
        source, out = dataset, tmp_path / "out.jsonl"
    _interrupted_at(monkeypatch, where)
    result = run_cli("convert", source, "-o", out)
    if where == "commit":
        assert result.exit_code == 130 and not out.exists()
        assert "converted" not in result.stderr
        assert [p.name for p in tmp_path.iterdir()] == ["in.parquet"]
    else:
        assert result.exit_code == 0, result.stderr
        assert result.stderr.splitlines()[-1].startswith("converted 13 trajectories")
        assert out.exists()
        assert not atomic.was_interrupted()  # the signal after the commit is forgotten with the command
    monkeypatch.undo()
    monkeypatch.setattr(atomic, "_interrupts", [])
    with pytest.raises(KeyboardInterrupt):  # outside a command a signal raises at once again
        atomic.interrupt(15, None)


@pytest.mark.parametrize("committed", [True, False])
def test_the_exit_after_a_committed_output_ignores_signals(tmp_path, monkeypatch, committed):
    """The interpreter's shutdown puts the default handlers back: a SIGTERM then killed a convert
    that had said its success (143). Once an output is committed, the entry point ignores signals."""
    import signal
    import sys

    from ng_traj import cli
    from ng_traj.io import atomic

    monkeypatch.setattr(atomic, "_interrupts", [])
    out = tmp_path / "out.parquet"
    source = RETAINED / ("expected.jsonl" if committed else "missing.jsonl")
    monkeypatch.setattr(sys, "argv", ["ng-traj", "convert", str(source), "-o", str(out)])
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(SystemExit) as done:
            cli.main()
        assert done.value.code == (0 if committed else 2) and out.exists() == committed
        ignored = signal.SIG_IGN if committed else atomic.interrupt
        assert signal.getsignal(signal.SIGTERM) == ignored and signal.getsignal(signal.SIGINT) == ignored
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
