"""The Parquet dataset: lossless round trips, table contents, DuckDB questions, atomicity.

Expected values are derived by hand from the golden facts of ``test_build_golden.py`` (the retained
run's rollouts, their calls and gaps) and from the fixture inputs, as each test says.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from conftest import FIXTURES, ROOT, generated_corpus, rewrite_table, run_cli, table_file
from ng_traj.assemble.build import BuildOptions
from ng_traj.assemble.pipeline import build, prepare
from ng_traj.contract import TrajectoryRecord
from ng_traj.diagnostics import DiagnosticSink, RunError
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES
from ng_traj.writers.jsonl import record_json
from ng_traj.writers.parquet import open_dataset
from ng_traj.writers.parquet_layout import TABLES, file_schema

RETAINED = FIXTURES / "build" / "retained_run"
GOLDENS = sorted(FIXTURES.glob("build/*/expected.jsonl"))
HAND_WRITTEN = FIXTURES / "validate" / "valid" / "trajectories.jsonl"
ROLES = {"policy_model": "policy", "judge_model": "judge"}


def _table(path: Path, name: str) -> list[dict]:
    return pq.read_table(path / name).to_pylist()


@pytest.mark.parametrize("golden", GOLDENS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_jsonl_to_parquet_to_jsonl_is_byte_identical(tmp_path, golden):
    dataset, back = tmp_path / "d.parquet", tmp_path / "back.jsonl"
    assert run_cli("convert", golden, "-o", dataset).exit_code == 0
    result = run_cli("convert", dataset, "-o", back)
    assert result.exit_code == 0, result.stderr
    assert back.read_bytes() == golden.read_bytes()


def test_hand_written_trajectories_come_back_in_the_canonical_serialisation(tmp_path):
    canonical = b"".join(
        record_json(TrajectoryRecord.model_validate_json(line)) + b"\n"
        for line in HAND_WRITTEN.read_bytes().splitlines()
    )
    assert canonical != HAND_WRITTEN.read_bytes()  # spaces and key order of a hand-written file
    run_cli("convert", HAND_WRITTEN, "-o", tmp_path / "d.parquet")
    assert run_cli("convert", tmp_path / "d.parquet", "-o", "-").stdout.encode() == canonical


@pytest.mark.parametrize("name", ["retained_run", "legacy_attachments"])
def test_build_to_parquet_converts_back_to_the_jsonl_build(tmp_path, name):
    dataset = tmp_path / "out.parquet"
    assert run_cli("build", FIXTURES / "build" / name / "input", "-o", dataset).exit_code == 0
    result = run_cli("convert", dataset, "-o", "-")
    assert result.stdout.encode() == (FIXTURES / "build" / name / "expected.jsonl").read_bytes()


def test_record_json_is_pydantics_serialisation(small_corpus, tmp_path):
    for golden in GOLDENS:
        for line in golden.read_bytes().splitlines():
            record = TrajectoryRecord.model_validate_json(line)
            assert record_json(record) == record.model_dump_json().encode() == line
    for line in HAND_WRITTEN.read_bytes().splitlines():
        record = TrajectoryRecord.model_validate_json(line)
        assert record_json(record) == record.model_dump_json().encode()
    # A generated corpus: three dialects, streams, long histories, bundles with every record kind.
    out = tmp_path / "corpus.jsonl"
    assert run_cli("build", small_corpus, "-o", out, "-q").exit_code == 0
    for line in out.read_bytes().splitlines():
        assert TrajectoryRecord.model_validate_json(line).model_dump_json().encode() == line


def test_tables_of_the_retained_run(tmp_path):
    dataset = tmp_path / "out.parquet"
    run_cli("build", RETAINED / "input", "-o", dataset)
    assert sorted(p.name for p in dataset.iterdir()) == sorted([*TABLES, "ng_traj.json"])
    for name in TABLES:
        assert [p.name for p in (dataset / name).iterdir()] == ["part-00000.parquet"]
        assert pq.read_schema(table_file(dataset, name)).remove_metadata() == file_schema(name)
    heads = _table(dataset, "trajectories")
    # 13 trajectories in output order; 3-0 is the orphan capture file (no row: no agent); the three
    # rows with ng_agent_observations name their producers (rollouts.jsonl lines 5 and 6, failures line 1).
    assert [h["rollout_id"] for h in heads][:3] == ["0-0", "0-1", "1-0"] and len(heads) == 13
    assert [h["trajectory_index"] for h in heads] == list(range(13))
    assert {h["rollout_id"]: h["producer"] for h in heads if h["producer"]} == {
        "0-1": "openclaw",
        "1-0": "claude_code",
        "2-0": "pi",
    }
    assert {h["agent"] for h in heads} == {"math_agent", None}
    assert [h["rollout_id"] for h in heads if h["agent"] is None] == ["3-0"]
    # Every rollout but 3-0 has one invocation; 17 model calls, 2 tool calls, 33 gaps (golden facts).
    counts = {name: len(_table(dataset, name)) for name in ("invocations", "model_calls", "tool_calls", "gaps")}
    assert counts == {"invocations": 12, "model_calls": 17, "tool_calls": 2, "gaps": 33}
    assert _table(dataset, "compactions") == []
    second = _table(dataset, "model_calls")[1]
    # 0-0's second call (capture/0-0.capture.jsonl line 2): 35 in (20 cached), 4 out (2 reasoning), 250 ms.
    assert (second["rollout_id"], second["call_index"], second["response_id"]) == ("0-0", 1, "resp_a2")
    assert (second["prompt_tokens"], second["cached_tokens"], second["completion_tokens"]) == (35, 20, 4)
    assert (second["reasoning_tokens"], second["total_tokens"], second["duration_ms"]) == (2, 39, 250.0)
    assert (second["started_at"], second["completed_at"], second["model_ref_name"]) == (
        1786000001.0,
        1786000001.25,
        "policy_model",
    )
    assert orjson.loads(second["request"])["input"][2] == {
        "type": "function_call_output",
        "call_id": "call_calc",
        "output": "42",
    }
    items = [row for row in _table(dataset, "conversation_items") if row["rollout_id"] == "0-0"]
    assert [(i["type"], i["message_role"], i["call_id"]) for i in items] == [
        ("message", "user", None),
        ("function_call", None, "call_calc"),
        ("function_call_output", None, "call_calc"),
        ("message", "assistant", None),
    ]


def _rows_with_compaction(tmp_path: Path) -> Path:
    refs = [{"model_call_id": f"{n:032x}"} for n in (1, 2)]
    bundle = {
        "source": "openclaw",
        "records": [
            {
                "kind": "agent_invocation",
                "invocation_id": "s1",
                "conversation": [{"role": "user", "content": "hi", "type": "message"}],
            },
            {
                "kind": "context_compaction",
                "invocation_id": "s1",
                "observed_at": 1786000003.5,
                "trigger": "overflow",
                "tokens_before": 9000,
                "summary": "earlier steps used sk-proj-abcdefghijklmnopqrstuvwxyz0123456789",
                "before_model_call": refs[0],
                "after_model_call": refs[1],
            },
        ],
    }
    row = {"response": {"output": []}, "_ng_task_index": 7, "_ng_rollout_index": 0, "ng_agent_observations": bundle}
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(orjson.dumps(row) + b"\n")
    return path


def test_compactions_come_from_the_projected_bundles(tmp_path):
    rows = _rows_with_compaction(tmp_path)
    dataset = tmp_path / "out.parquet"
    assert run_cli("build", rows, "-o", dataset).exit_code == 0
    (compaction,) = _table(dataset, "compactions")
    assert (compaction["rollout_id"], compaction["source"], compaction["invocation_id"]) == ("7-0", "openclaw", "s1")
    assert (compaction["observed_at"], compaction["trigger"], compaction["tokens_before"]) == (
        1786000003.5,
        "overflow",
        9000,
    )
    assert (compaction["tokens_after"], compaction["outcome"]) == (None, "unknown")
    assert compaction["before_model_call"]["model_call_id"] == f"{1:032x}"
    assert compaction["after_model_call"]["model_call_id"] == f"{2:032x}"
    assert compaction["summary"].endswith("sk-proj-abcdefghijklmnopqrstuvwxyz0123456789")
    # --redact masks the compactions as it masks the record.
    assert run_cli("build", rows, "-o", tmp_path / "masked.parquet", "--redact").exit_code == 0
    (masked,) = _table(tmp_path / "masked.parquet", "compactions")
    assert masked["summary"] == "earlier steps used [REDACTED]"
    # ng_trajectory has no place for it: the JSONL written back is the plain build.
    jsonl = tmp_path / "out.jsonl"
    run_cli("build", rows, "-o", jsonl)
    assert run_cli("convert", dataset, "-o", "-").stdout.encode() == jsonl.read_bytes()


def _sql_blocks() -> list[str]:
    docs = (ROOT / "docs" / "parquet.md").read_text(encoding="utf-8")
    section = docs.split("## Questions answered with DuckDB", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sql\n(.*?)```", section, flags=re.S)


def test_docs_duckdb_questions(tmp_path):
    dataset = tmp_path / "out.parquet"
    sink = DiagnosticSink()
    inputs, slots, stats = prepare([RETAINED / "input"], sink, max_line_bytes=DEFAULT_MAX_LINE_BYTES)
    with open_dataset(dataset, roles=ROLES) as writer:
        build(inputs, slots, stats, BuildOptions(capture_enabled=True), sink, writer.add_rows, encode=writer.encoder())
    tokens, slowest, gaps = (
        duckdb.sql(query.replace("out.parquet", str(dataset))).fetchall() for query in _sql_blocks()[:3]
    )
    # policy-1: 0-0 x2, 0-1, 1-1 x2, 2-1, 2-1-a1, 3-0, 10-0 x2, s7.eval-0 = 11 calls; prompt
    # 20+35+40+60+10+10+10+12+15 = 212 and completion 8+4+15+3+256+2+2+2+9 = 301 (0-1's and one of
    # 10-0's calls report no usage: null, not 0). claude-x (Anthropic): 1-0 x2 and 4-0, 112+135+330,
    # 9+6+50. judge-1: the judge store's three calls, 30 in and 2 out each.
    assert tokens == [
        ("claude-x", "policy", 3, 577, 65),
        ("judge-1", "judge", 3, 90, 6),
        ("policy-1", "policy", 11, 212, 301),
    ]
    assert slowest == [("1-0", "calc", 150.0), ("0-0", "calc", 100.0)]
    assert gaps[:4] == [
        ("turns_unavailable", 9, 9),
        ("conversation_from_rollout_record", 7, 7),
        ("model_call_capture_no_records", 3, 3),
        ("model_calls_unavailable", 3, 3),
    ]
    assert sum(count for _, count, _ in gaps) == 33 and len(gaps) == 13


def test_validate_reads_a_dataset_and_reports_broken_rows(tmp_path):
    dataset = tmp_path / "out.parquet"
    run_cli("build", RETAINED / "input", "-o", dataset)
    result = run_cli("validate", dataset)
    assert result.exit_code == 0, result.stderr
    # The same single warning as the JSONL golden: rollout 2-0 (5th record) has an unmatched ref.
    assert f"{dataset}:5: warning[unresolved_model_call_ref] invocations.0.model_calls.0" in result.stderr
    assert "13 records, 0 invalid" in result.stderr
    calls = pq.read_table(table_file(dataset, "model_calls"))
    broken = calls.set_column(calls.schema.get_field_index("request"), "request", [["{not json"] * len(calls)])
    rewrite_table(dataset, "model_calls", broken)
    result = run_cli("validate", dataset)
    assert result.exit_code == 1
    assert (
        f"{dataset}:1: error[dataset_invalid]: rows do not form a trajectory: model_calls.request holds no JSON: "
        "unexpected character" in result.stderr
    ), result.stderr
    assert "JSONDecodeError" not in result.stderr
    rewrite_table(dataset, "model_calls", calls.drop_columns(["prompt_tokens"]))
    result = run_cli("validate", dataset)
    assert result.exit_code == 1 and "missing 1 column: prompt_tokens" in result.stderr
    assert "1 dataset not read to the end;" in result.stderr and "line skipped" not in result.stderr


def test_trajectory_indexes_that_repeat_or_skip_are_dataset_errors(tmp_path):
    dataset = tmp_path / "out.parquet"
    run_cli("build", RETAINED / "input", "-o", dataset)
    heads = pq.read_table(table_file(dataset, "trajectories"))
    rewrite_table(dataset, "trajectories", pa.concat_tables([heads, heads.slice(0, 1)]))
    result = run_cli("validate", dataset)
    assert result.exit_code == 1
    repeated = "row 14 of the trajectories table repeats trajectory_index 0 or is out of order (after 12); skipped"
    assert f"{dataset}:1: error[dataset_invalid]: {repeated}" in result.stderr
    assert "13 records, 0 invalid, 1 dataset trajectory skipped; 1 error" in result.stderr  # datasets have no lines
    back = run_cli("convert", dataset, "-o", tmp_path / "back.jsonl")
    assert back.exit_code == 1 and repeated in back.stderr and "1 record skipped" in back.stderr
    assert (tmp_path / "back.jsonl").read_bytes() == (RETAINED / "expected.jsonl").read_bytes()
    rewrite_table(dataset, "trajectories", heads.filter(pc.not_equal(heads["trajectory_index"], 5)))
    result = run_cli("validate", dataset)
    assert result.exit_code == 1
    assert f"{dataset}:7: error[dataset_invalid]: the trajectories table has no row for trajectory_index 5" in (
        result.stderr
    )
    # Trajectory 5's rows in the other tables now name no trajectory.
    assert f"{dataset}:7: error[dataset_invalid]: 5 rows before this trajectory name no trajectory" in result.stderr


def test_an_existing_directory_that_is_not_a_dataset_is_never_replaced(tmp_path):
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "notes.txt").write_text("mine")
    result = run_cli("build", RETAINED / "input", "-o", tmp_path / "keep", "--format", "parquet")
    assert result.exit_code == 2 and "not an ng-traj Parquet dataset; not replaced" in result.stderr
    assert (tmp_path / "keep" / "notes.txt").read_text() == "mine"
    (tmp_path / "empty").mkdir()  # an empty folder has nothing to lose: the dataset takes its place
    result = run_cli("build", RETAINED / "input", "-o", tmp_path / "empty", "--format", "parquet")
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "empty" / "ng_traj.json").is_file()


def test_a_dataset_holding_other_files_is_never_replaced(tmp_path):
    dataset = tmp_path / "ds.parquet"
    assert run_cli("build", RETAINED / "input", "-o", dataset).exit_code == 0
    (dataset / "notes.txt").write_text("mine")
    before = _snapshot(dataset)
    refused = "is a dataset that also holds notes.txt; not replaced"
    for command in (("build", RETAINED / "input"), ("convert", RETAINED / "expected.jsonl")):
        result = run_cli(*command, "-o", dataset)
        assert result.exit_code == 2 and refused in result.stderr and result.stderr.count("\n") == 1
        assert _snapshot(dataset) == before
    # A file that appears while the new dataset is written stops the replacement too.
    (dataset / "notes.txt").unlink()
    with pytest.raises(RunError, match=r"also holds late\.txt; not replaced"), open_dataset(dataset):
        (dataset / "late.txt").write_text("mine")
    tables = {name: data for name, data in before.items() if name != "notes.txt"}
    assert _snapshot(dataset) == {**tables, "late.txt": b"mine"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds.parquet"]


def test_a_table_file_is_not_read_as_jsonl(tmp_path):
    dataset = tmp_path / "ds.parquet"
    assert run_cli("build", RETAINED / "input", "-o", dataset).exit_code == 0
    table = table_file(dataset, "trajectories")
    pointer = f"error: {table} is a Parquet table file of a dataset, not JSONL: name the dataset folder {dataset}\n"
    for command in (("validate", table), ("convert", table, "-o", tmp_path / "x.parquet")):
        result = run_cli(*command)
        assert (result.exit_code, result.stderr) == (2, pointer)
    assert not (tmp_path / "x.parquet").exists()
    lone = tmp_path / "gaps.parquet"
    lone.write_bytes(table_file(dataset, "gaps").read_bytes())
    result = run_cli("validate", lone)
    assert result.exit_code == 2 and "is a Parquet file, not JSONL" in result.stderr


def test_parquet_refuses_standard_output_and_attach(tmp_path):
    assert (
        "standard output takes JSONL only"
        in run_cli("build", RETAINED / "input", "-o", "-", "--format", "parquet").stderr
    )
    result = run_cli("build", RETAINED / "input", "-o", tmp_path / "o.parquet", "--attach")
    assert result.exit_code == 2 and "--attach writes rollout rows" in result.stderr


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Large enough (about 150 MB) that a build is still running when it is killed."""
    return generated_corpus(tmp_path_factory.mktemp("corpus"), 400, 12, 3)


def _snapshot(path: Path) -> dict[str, bytes]:
    if path.is_file():
        return {path.name: path.read_bytes()}
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", ["out.parquet", "out.jsonl"])
@pytest.mark.parametrize("previous", [True, False], ids=["replacing", "fresh"])
def test_sigkill_mid_build_leaves_the_previous_output_or_none(tmp_path, corpus, name, previous):
    target = tmp_path / name
    if previous:
        assert run_cli("build", RETAINED / "input", "-o", target).exit_code == 0
    before = _snapshot(target) if previous else None
    command = [sys.executable, "-m", "ng_traj", "build", str(corpus), "-o", str(target), "-q"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(f".{name}.tmp-*")) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)
    assert process.poll() is None, "the build finished before it could be killed; make the corpus larger"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    if previous:
        assert _snapshot(target) == before
    else:
        assert not target.exists()


def test_an_integer_beyond_int64_is_null_in_parquet_and_reported(tmp_path):
    huge = 2**63 + 5
    (tmp_path / "rollouts.jsonl").write_bytes(
        orjson.dumps({"_ng_task_index": 0, "_ng_rollout_index": 0, "response": {"output": []}}) + b"\n"
    )
    (tmp_path / "cap").mkdir()
    call = {"model_call_id": "c1", "dialect": "responses", "request": {"input": "hi"}}
    call["response"] = {"id": "r1", "output": [], "usage": {"input_tokens": huge, "output_tokens": 3}}
    (tmp_path / "cap" / "0-0.capture.jsonl").write_bytes(orjson.dumps(call) + b"\n")
    for command in (("build", tmp_path / "rollouts.jsonl", tmp_path / "cap"), ("convert", tmp_path / "out.jsonl")):
        if command[0] == "convert":
            assert (
                run_cli("build", tmp_path / "rollouts.jsonl", tmp_path / "cap", "-o", tmp_path / "out.jsonl").exit_code
                == 0
            )
        result = run_cli(*command, "-o", tmp_path / f"{command[0]}.parquet")
        assert result.exit_code == 0, result.stderr
        assert "warning[value_out_of_range]" in result.stderr and str(huge) in result.stderr
        (row,) = _table(tmp_path / f"{command[0]}.parquet", "model_calls")
        assert row["prompt_tokens"] is None and row["completion_tokens"] == 3
    assert orjson.loads((tmp_path / "out.jsonl").read_bytes())["model_calls"][0]["token_stats"]["prompt_tokens"] == huge


def test_child_rows_missing_or_out_of_order_make_their_trajectory_invalid_not_silently_smaller(tmp_path):
    dataset = tmp_path / "out.parquet"
    run_cli("build", RETAINED / "input", "-o", dataset)
    gaps, items = pq.read_table(table_file(dataset, "gaps")), pq.read_table(table_file(dataset, "conversation_items"))
    expected = {
        # the first gap row (of trajectory 1, which has two) deleted
        "deleted": (gaps.slice(1), None, "gaps has 1 row where the trajectory records 2"),
        # two gap rows of one trajectory swapped
        "swapped": (pa.concat_tables([gaps.slice(1, 1), gaps.slice(0, 1), gaps.slice(2)]), None, "gaps: gap_index"),
        # a conversation item row deleted
        "item": (None, items.slice(1), "conversation_items of invocation 0 has"),
    }
    for name, (new_gaps, new_items, problem) in expected.items():
        rewrite_table(dataset, "gaps", new_gaps if new_gaps is not None else gaps)
        rewrite_table(dataset, "conversation_items", new_items if new_items is not None else items)
        result = run_cli("convert", dataset, "-o", tmp_path / f"{name}.jsonl")
        assert result.exit_code == 1, name
        assert f"error[dataset_invalid]: rows do not form the trajectory ({problem}" in result.stderr, name
        assert "1 record skipped" in result.stderr, name
        assert len((tmp_path / f"{name}.jsonl").read_bytes().splitlines()) == 12, name
    reversed_gaps = gaps.take(list(reversed(range(len(gaps)))))
    rewrite_table(dataset, "gaps", reversed_gaps)
    rewrite_table(dataset, "conversation_items", items)
    result = run_cli("validate", dataset)
    assert result.exit_code == 1 and "13 records" not in result.stderr


def test_the_column_kinds_of_the_rows_are_the_schemas():
    from ng_traj.writers.parquet_layout import SCHEMAS
    from ng_traj.writers.parquet_rows import COLUMN_KINDS

    def kind(field: pa.Field) -> str:
        if field.type == pa.string():
            return "t"
        return "n" if field.type in (pa.int64(), pa.float64()) else "-"

    assert {name: "".join(kind(f) for f in schema) for name, schema in SCHEMAS.items()} == COLUMN_KINDS


def test_weights_and_the_int64_check_look_at_the_right_columns():
    from ng_traj.writers.parquet_rows import COLUMN_KINDS, Encoded, weight

    huge = 2**63
    kinds = COLUMN_KINDS["model_calls"]
    plain = tuple(7 if kind == "n" else "abc" if kind == "t" else None for kind in kinds)
    rows = [plain, (*plain[:-1], b"{}")]
    for n in (i for i, kind in enumerate(kinds) if kind == "n"):
        rows.append((*plain[:n], huge, *plain[n + 1 :]))
    encoded = Encoded.of({"model_calls": list(rows)})
    every_value = sum(64 + sum(len(value) for value in row if type(value) in (str, bytes)) for row in rows)
    assert encoded.weights["model_calls"] == every_value == weight(rows, "model_calls")
    assert [row for _, row, _ in encoded.nulled] == list(range(2, len(rows)))
    assert all(huge not in row for row in encoded.rows["model_calls"])
    assert encoded.rows["model_calls"][:2] == rows[:2]


def test_chunk_files_written_through_the_write_buffer_hold_the_bytes_written_directly(tmp_path, monkeypatch):
    from ng_traj.writers import parquet

    assert run_cli("build", RETAINED / "input", "-o", tmp_path / "buffered.parquet", "-q").exit_code == 0
    monkeypatch.setattr(parquet.pa, "BufferedOutputStream", lambda raw, size: raw)
    assert run_cli("build", RETAINED / "input", "-o", tmp_path / "direct.parquet", "-q").exit_code == 0
    buffered, direct = _snapshot(tmp_path / "buffered.parquet"), _snapshot(tmp_path / "direct.parquet")
    assert buffered == direct and len(buffered) == 9


def test_row_groups_are_written_in_the_writing_thread_one_at_a_time_with_the_bytes_written_in_line(
    tmp_path, monkeypatch
):
    import threading

    from ng_traj.writers import parquet

    monkeypatch.setattr(parquet, "ROW_GROUP_ROWS", 2)  # several row groups per table
    writing, seen = [], []
    write_table, lock = pq.ParquetWriter.write_table, threading.Lock()

    def watched(self, table, row_group_size=None):
        with lock:
            writing.append(table)
            seen.append((threading.current_thread().name, len(writing)))
        time.sleep(0.002)  # long enough for the caller to make its next row group meanwhile
        write_table(self, table, row_group_size=row_group_size)
        with lock:
            writing.remove(table)

    def written(name):
        sink = DiagnosticSink()
        inputs, slots, stats = prepare([RETAINED / "input"], sink, max_line_bytes=DEFAULT_MAX_LINE_BYTES)
        with open_dataset(tmp_path / name, roles=ROLES, chunk_size=4) as writer:  # several chunk files
            build(
                inputs, slots, stats, BuildOptions(capture_enabled=True), sink, writer.add_rows, encode=writer.encoder()
            )
        return _snapshot(tmp_path / name)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", watched)
    threaded = written("threaded.parquet")
    assert len(seen) > 20 and all(name.startswith("ng-traj-parquet") and busy == 1 for name, busy in seen)
    monkeypatch.setattr(parquet.DatasetWriter, "_write", lambda self, task, *args: task(*args))  # in line
    in_line = written("in_line.parquet")
    assert threaded == in_line and len(threaded) > 9


def test_rows_made_into_arrow_pieces_before_their_row_group_give_the_same_files(tmp_path, monkeypatch):
    from ng_traj.writers import parquet

    made = []
    table = parquet._table
    monkeypatch.setattr(parquet, "_table", lambda name, rows: made.append(len(rows)) or table(name, rows))
    assert run_cli("build", RETAINED / "input", "-o", tmp_path / "whole.parquet", "-q").exit_code == 0
    whole = len(made)
    monkeypatch.setattr(parquet, "PIECE_ROWS", 2)  # row groups made of pieces of a trajectory or two
    assert run_cli("build", RETAINED / "input", "-o", tmp_path / "pieces.parquet", "-q").exit_code == 0
    assert len(made) - whole > 3 * whole
    assert _snapshot(tmp_path / "whole.parquet") == _snapshot(tmp_path / "pieces.parquet")


def test_a_chunk_file_that_cannot_be_closed_stops_the_build_and_leaves_no_dataset(tmp_path, monkeypatch):
    from ng_traj.writers import parquet

    def full(handles):
        raise OSError(28, "No space left on device")

    sinks, abort = [], parquet.DatasetWriter.abort

    def aborted(self):
        abort(self)
        sinks.extend(self._sinks.values())

    monkeypatch.setattr(parquet, "_close_all", full)
    monkeypatch.setattr(parquet.DatasetWriter, "abort", aborted)
    result = run_cli("build", RETAINED / "input", "-o", tmp_path / "out.parquet", "-q")
    assert result.exit_code == 2 and "No space left" in result.output
    assert list(tmp_path.iterdir()) == []
    # closed by the abort, not left to be collected (Arrow would print its failure to flush then)
    assert len(sinks) == len(parquet.TABLES) and all(sink.closed for sink in sinks)


@pytest.mark.parametrize("failing", [1, 3], ids=["first write", "a later write"])
def test_a_row_group_that_cannot_be_written_stops_the_build_and_leaves_no_dataset(tmp_path, monkeypatch, failing):
    from ng_traj.writers import parquet

    calls = []
    write_table = pq.ParquetWriter.write_table

    def flaky(self, table, row_group_size=None):
        calls.append(table.num_rows)
        if len(calls) == failing:
            raise OSError(28, "No space left on device")
        write_table(self, table, row_group_size=row_group_size)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", flaky)
    monkeypatch.setattr(parquet, "ROW_GROUP_ROWS", 2)  # several row groups per table
    dataset, sink = tmp_path / "out.parquet", DiagnosticSink()
    inputs, slots, stats = prepare([RETAINED / "input"], sink, max_line_bytes=DEFAULT_MAX_LINE_BYTES)
    with pytest.raises(RunError, match=r"cannot write .*: No space left"), open_dataset(dataset, roles=ROLES) as writer:
        build(inputs, slots, stats, BuildOptions(capture_enabled=True), sink, writer.add_rows, encode=writer.encoder())
    assert len(calls) == failing
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "values",
    [
        (),
        (None,),
        (b"",),
        (None, None),
        (b'"a"', None, b"", b'{"\xc3\xa9":[1,2]}', None),
        tuple(b"%d" % n for n in range(70)),
    ],
    ids=["empty", "one null", "one empty text", "nulls", "mixed", "no nulls"],
)
def test_json_arrays_from_buffers_are_the_arrays_arrow_converts(values):
    from ng_traj.writers.parquet import _json_array
    from ng_traj.writers.parquet_layout import JSON_TYPE

    made = _json_array(values)
    made.validate(full=True)
    converted = pa.ExtensionArray.from_storage(JSON_TYPE, pa.array(values, type=pa.binary()).view(pa.string()))
    assert made.equals(converted) and made.null_count == converted.null_count == values.count(None)
    assert made.to_pylist() == converted.to_pylist()


def test_json_texts_beyond_int32_offsets_are_converted_by_arrow(monkeypatch):
    from ng_traj.writers import parquet, parquet_arrays

    monkeypatch.setattr(parquet_arrays, "OFFSET_LIMIT", 3)
    made = parquet._json_array((b'"ab"', None))
    assert made.to_pylist() == ['"ab"', None] and made.type == parquet.JSON_TYPE


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def _record_sharing(question: list) -> TrajectoryRecord:
    """The retained run's rollout ``0-1`` (one turn made from a chat call), with ``question`` as that
    call's ``messages`` and the turn's question, the same list (as turn synthesis leaves them)."""
    line = (RETAINED / "expected.jsonl").read_bytes().splitlines()[1]
    record = TrajectoryRecord.model_validate_json(line)
    turn = record.turns[0]
    n = next(n for n, c in enumerate(record.model_calls) if c.model_call_id == turn.model_calls[0].model_call_id)
    call = record.model_calls[n]
    calls = list(record.model_calls)
    calls[n] = call.model_copy(update={"request": {**call.request, "messages": question}})
    return record.model_copy(update={"model_calls": calls, "turns": [turn.model_copy(update={"question": question})]})


def test_a_question_shared_with_its_request_is_serialised_once_with_the_same_bytes_and_depth_limit(monkeypatch):
    from ng_traj.writers import parquet_rows

    limit = next(d for d in range(200, 400) if not _dumps_ok(_nested(d))) - 1  # orjson's deepest list
    outcomes = []
    for depth in range(limit - 6, limit + 1):
        question = [{"role": "user", "content": _nested(depth)}]
        record = _record_sharing(question)
        shared = _rows_or_error(record)
        with monkeypatch.context() as patch:  # every value serialised on its own, as before
            patch.setattr(parquet_rows, "_shared_questions", lambda record: ({}, {}))
            alone = _rows_or_error(record)
        assert shared == alone, depth
        outcomes.append((_dumps_ok(question), isinstance(shared, str)))
    # shallow: shared; deepest: the question alone is too deep; between: the question alone fits, the
    # request holding it (one level deeper) does not, and the rows fail as they did
    assert outcomes[0] == (True, False) and outcomes[-1] == (False, True) and (True, True) in outcomes
    record = _record_sharing([{"role": "user", "content": "hi"}])
    questions, requests = parquet_rows._shared_questions(record)
    assert list(questions) == [0] and len(requests) == 1
    assert orjson.loads(_rows_or_error(record)["turns"][0][8]) == [{"role": "user", "content": "hi"}]


def test_a_question_not_made_of_its_requests_items_is_serialised_on_its_own():
    from ng_traj.writers import parquet_rows

    record = _record_sharing([{"role": "user", "content": "hi"}])
    copied = record.model_copy(
        update={"turns": [record.turns[0].model_copy(update={"question": [{"role": "user", "content": "hi"}]})]}
    )
    assert parquet_rows._shared_questions(copied) == ({}, {})
    assert _rows_or_error(copied) == _rows_or_error(record)


def _dumps_ok(value: object) -> bool:
    try:
        orjson.dumps(value)
    except TypeError:
        return False
    return True


def _rows_or_error(record: TrajectoryRecord) -> dict | str:
    from ng_traj.writers.parquet_rows import Extras, record_rows

    try:
        return record_rows(0, record, Extras(), {})
    except TypeError as exc:
        return f"TypeError: {exc}"


class _Text(str):
    pass


REF_TYPE = file_schema("compactions").field("before_model_call").type
_REF_VALUE = {
    "model_call_id": "c1",
    "model_ref_type": "responses_api_models",
    "model_ref_name": "p",
    "response_id": None,
}


@pytest.mark.parametrize(
    ("kind", "values"),
    [
        (pa.int64(), [1, None, -(2**63), 2**63 - 1, 0]),
        (pa.int64(), [None, None]),
        (pa.int64(), []),
        (pa.float64(), [1.5, None, float("nan"), -0.0, float("inf"), 1e308]),
        (pa.string(), ["a", None, "", "é\u2028\U0001f600", "x" * 70]),
        (pa.bool_(), [True, None, False, True, False, False, True, True, True, None]),
        (pa.bool_(), [False]),
        (pa.string(), [None if n % 3 == 0 else str(n) for n in range(70)]),  # bitmaps of several bytes
        (pa.int64(), [None if n % 7 == 2 else n for n in range(70)]),
        (pa.string(), ["a\x00b", None, "c"]),  # a text holding the separator
        (REF_TYPE, [_REF_VALUE, None, {}]),
        (pa.list_(REF_TYPE), [[_REF_VALUE, None], [], None, [{"model_call_id": "c2"}], [_REF_VALUE] * 3]),
        # handed to pa.array: values not exactly of the column's Python type
        (pa.string(), ["a", _Text("b")]),
        (pa.float64(), [1.0, 2]),
        (pa.list_(REF_TYPE), [(_REF_VALUE,)]),
    ],
)
def test_columns_assembled_from_buffers_are_the_arrays_arrow_converts(kind, values):
    from ng_traj.writers.parquet_arrays import column

    made = column(values, kind)
    made.validate(full=True)
    converted = pa.array(values, type=kind)
    assert made.type == converted.type and made.null_count == converted.null_count
    if kind == pa.float64():  # NaN equals NaN by its bits
        made, converted = made.view(pa.int64()), converted.view(pa.int64())
    assert made.equals(converted) and made.to_pylist() == converted.to_pylist()


@pytest.mark.parametrize(
    ("kind", "values"),
    [
        (pa.int64(), [2**63]),
        (pa.string(), ["\ud800"]),
        (pa.float64(), [2**60 + 1]),
        (pa.int64(), ["1"]),
        (pa.int64(), [1, True]),
    ],
    ids=["beyond int64", "lone surrogate", "inexact float", "text in a number column", "a boolean as a number"],
)
def test_columns_arrow_refuses_are_refused_as_arrow_refuses_them(kind, values):
    from ng_traj.writers.parquet_arrays import column

    with pytest.raises(Exception) as converted:
        pa.array(values, type=kind)
    with pytest.raises(type(converted.value), match=re.escape(str(converted.value))):
        column(values, kind)


def test_a_parquet_build_does_not_import_pandas(tmp_path):
    pytest.importorskip("pandas")
    script = (
        "import sys; from ng_traj.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('pandas' in sys.modules, 'pyarrow' in sys.modules)"
    )
    args = [sys.executable, "-c", script, "build", str(RETAINED / "input"), "-o", str(tmp_path / "out.parquet"), "-q"]
    done = subprocess.run(args, capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.stdout.split() == ["False", "True"] and len(_snapshot(tmp_path / "out.parquet")) == 9
