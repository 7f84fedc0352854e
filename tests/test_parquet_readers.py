"""The dataset layout as DuckDB, Polars, pandas and pyarrow see it: one folder per table, chunk files,
the manifest, typed time, duration and JSON columns, the user examples of the docs, the first layout.

Expected values are the retained run's golden facts (``test_build_golden.py``, ``test_parquet.py``):
13 trajectories, 12 invocations, 17 model calls, 2 tool calls, 35 gaps; 0-0's second model call is
``capture/0-0.capture.jsonl`` line 2 (started 1786000001.0, 250 ms, 35 + 4 tokens).
"""

from __future__ import annotations

import io
import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import orjson
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

import ng_traj
from conftest import FIXTURES, ROOT, rewrite_table, run_cli, table_file
from ng_traj.assemble.build import BuildOptions
from ng_traj.assemble.pipeline import build, prepare
from ng_traj.diagnostics import DiagnosticSink
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES
from ng_traj.writers.dataset_paths import TABLE_NAMES
from ng_traj.writers.parquet import _typed, open_dataset
from ng_traj.writers.parquet_convert import dataset_to_jsonl, jsonl_to_dataset
from ng_traj.writers.parquet_layout import DERIVED, JSON_COLUMNS, TABLES

RETAINED = FIXTURES / "build" / "retained_run"
DOCS = (ROOT / "docs" / "parquet.md").read_text(encoding="utf-8")
ROLES = {"policy_model": "policy", "judge_model": "judge"}
ROWS = {
    "trajectories": 13,
    "invocations": 12,
    "conversation_items": 27,
    "turns": 6,  # 0-0: 2 and 5-1: 1 from producers; 0-1: 1 and 1-0: 2 made from captured calls
    "model_calls": 17,
    "tool_calls": 2,
    "gaps": 33,
    "compactions": 0,
}
"""Rows per table of the retained run (conversation items and turns checked against the counts below)."""
SECOND_CALL_START = datetime(2026, 8, 6, 7, 6, 41, tzinfo=UTC)
"""1786000001.0 as a UTC time."""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """The retained run built as a dataset with the docs' role map."""
    path = tmp_path_factory.mktemp("readers") / "out.parquet"
    result = run_cli(
        "build", RETAINED / "input", "-o", path, "--role", "policy_model=policy", "--role", "judge_model=judge"
    )
    assert result.exit_code == 0, result.stderr
    return path


def test_the_table_names_without_pyarrow_are_the_schemas_tables():
    assert TABLE_NAMES == TABLES


def test_one_folder_per_table_and_a_manifest(dataset):
    assert sorted(p.name for p in dataset.iterdir()) == sorted([*TABLES, "ng_traj.json"])
    manifest = orjson.loads((dataset / "ng_traj.json").read_bytes())
    assert manifest["format"] == "ng-traj-parquet" and manifest["layout"] == 2
    assert (manifest["ng_traj_version"], manifest["schema_version"]) == (ng_traj.__version__, "1.0")
    assert manifest["contract_revision"] == "nemo-gym-0.7.0"
    assert (manifest["trajectories"], manifest["chunk_size"]) == (13, 4096)
    assert list(manifest["tables"]) == list(TABLES)
    for name, entry in manifest["tables"].items():
        assert entry == {"path": name, "rows": ROWS[name], "files": [f"{name}/part-00000.parquet"]}
    heads = pq.read_table(dataset / "trajectories").to_pylist()
    assert sum(h["turn_count"] for h in heads) == ROWS["turns"]
    items = pq.read_table(dataset / "invocations", columns=["conversation_item_count"]).to_pylist()
    assert sum(i["conversation_item_count"] for i in items) == ROWS["conversation_items"]


@pytest.mark.parametrize("name", TABLES)
def test_every_reader_reads_every_table_folder(dataset, name):
    folder = dataset / name
    assert duckdb.sql(f"SELECT count(*) FROM '{folder}/*.parquet'").fetchall() == [(ROWS[name],)]
    assert pl.read_parquet(folder).height == pl.read_parquet(f"{folder}/*.parquet").height == ROWS[name]
    assert len(pd.read_parquet(folder)) == ROWS[name]
    assert pads.dataset(folder).count_rows() == ROWS[name]


def test_times_durations_and_json_have_their_types_in_each_reader(dataset):
    calls = f"{dataset}/model_calls/*.parquet"
    types = dict(duckdb.sql(f"SELECT column_name, column_type FROM (DESCRIBE FROM '{calls}')").fetchall())
    assert types["started_at_utc"] == types["completed_at_utc"] == "TIMESTAMP WITH TIME ZONE"
    assert (types["started_at"], types["duration_ms"], types["duration"]) == ("DOUBLE", "DOUBLE", "BIGINT")
    assert types["request"] == types["response"] == "JSON"
    second = duckdb.sql(
        f"SELECT started_at_utc, duration, request->>'$.model' FROM '{calls}' WHERE rollout_id = '0-0' AND call_index = 1"
    )
    assert second.fetchall() == [(SECOND_CALL_START, 250_000, "policy-1")]
    schema = pl.read_parquet(dataset / "model_calls").schema
    assert schema["started_at_utc"] == pl.Datetime("us", "UTC") and schema["duration"] == pl.Duration("us")
    assert schema["latency_ttft"] == pl.Duration("us") and schema["started_at"] == pl.Float64
    frame = pl.read_parquet(dataset / "model_calls").filter(pl.col("rollout_id") == "0-0", pl.col("call_index") == 1)
    assert frame["duration"].to_list() == [timedelta(milliseconds=250)]
    assert frame.select(pl.col("request").ext.storage().str.json_path_match("$.model")).item() == "policy-1"
    frame = pd.read_parquet(dataset / "model_calls")
    assert (str(frame["started_at_utc"].dtype), str(frame["duration"].dtype)) == (
        "datetime64[us, UTC]",
        "timedelta64[us]",
    )
    assert frame["started_at_utc"][1] == pd.Timestamp(SECOND_CALL_START) and frame["duration"][1] == pd.Timedelta(
        "250ms"
    )
    assert orjson.loads(frame["request"][1])["model"] == "policy-1"
    arrow = pq.read_schema(table_file(dataset, "turns"))
    assert arrow.field("timestamp_utc").type == pa.timestamp("us", tz="UTC")
    assert arrow.field("question").type == pa.json_() and arrow.field("question").metadata == {
        b"ng_traj.content": b"json"
    }


TWINS = [(name, column, kind) for name, twins in DERIVED.items() for column, _, kind in twins]


@pytest.mark.parametrize(("name", "column", "kind"), TWINS, ids=[f"{n}.{c}" for n, c, _ in TWINS])
def test_every_time_and_duration_twin_has_its_type_in_each_reader(dataset, name, column, kind):
    folder = dataset / name
    duck = dict(duckdb.sql(f"SELECT column_name, column_type FROM (DESCRIBE FROM '{folder}/*.parquet')").fetchall())
    frame = pd.read_parquet(folder)
    if kind == pa.timestamp("us", tz="UTC"):
        expected = ("TIMESTAMP WITH TIME ZONE", pl.Datetime("us", "UTC"), "datetime64[us, UTC]")
    else:
        expected = ("BIGINT", pl.Duration("us"), "timedelta64[us]")
    assert (duck[column], pl.read_parquet(folder).schema[column], str(frame[column].dtype)) == expected


JSON_FIELDS = [(name, column) for name, columns in JSON_COLUMNS.items() for column in columns]


@pytest.mark.parametrize(("name", "column"), JSON_FIELDS, ids=[f"{n}.{c}" for n, c in JSON_FIELDS])
def test_every_json_column_reads_as_json_or_text(dataset, name, column):
    folder = dataset / name
    duck = dict(duckdb.sql(f"SELECT column_name, column_type FROM (DESCRIBE FROM '{folder}/*.parquet')").fetchall())
    assert duck[column] == "JSON"
    texts = pl.read_parquet(folder).select(pl.col(column).ext.storage())[column].to_list()
    assert texts == pd.read_parquet(folder)[column].tolist() == pq.read_table(folder)[column].to_pylist()
    values = [orjson.loads(text) for text in texts if text is not None]  # every text is JSON
    assert len(texts) == ROWS[name]
    assert duckdb.sql(f"SELECT count({column}) FROM '{folder}/*.parquet'").fetchall() == [(len(values),)]


def test_typed_twins_round_to_microseconds_and_null_what_does_not_fit():
    seconds = _typed(pa.array([1786000001.25, 2.0000004, 1e20, None]), pa.timestamp("us", tz="UTC"))
    assert seconds.to_pylist() == [
        datetime(2026, 8, 6, 7, 6, 41, 250000, tzinfo=UTC),
        datetime(1970, 1, 1, 0, 0, 2, tzinfo=UTC),  # 2000000.4 µs, rounded to the nearest
        None,
        None,
    ]
    assert _typed(pa.array([250.0, 0.0015]), pa.duration("us")).to_pylist() == [
        timedelta(milliseconds=250),
        timedelta(microseconds=2),
    ]


def test_the_trajectories_table_has_the_grouping_columns(dataset):
    heads = {h["rollout_id"]: h for h in pq.read_table(dataset / "trajectories").to_pylist()}
    columns = ("run", "source_file", "agent", "reward", "task_index", "rollout_index", "attempt")
    assert tuple(heads["0-1"][c] for c in columns) == ("rollouts.jsonl", "rollouts.jsonl", "math_agent", 1.0, 0, 1, 0)
    # 2-0 and 2-1 are rows of the failures sidecar, which belongs to the run of rollouts.jsonl.
    assert tuple(heads["2-0"][c] for c in columns[:2]) == ("rollouts.jsonl", "rollouts_failures.jsonl")
    assert tuple(heads["2-1-a1"][c] for c in columns[4:]) == (2, 1, 1)
    # 3-0 is the orphan capture file: no row, no run.
    assert tuple(heads["3-0"][c] for c in columns) == ("", None, None, None, None, None, None)
    child = pq.read_table(dataset / "gaps", columns=["run", "rollout_id"]).to_pylist()
    assert {(row["run"], row["rollout_id"]) for row in child} <= {(h["run"], h["rollout_id"]) for h in heads.values()}


@pytest.mark.parametrize(
    ("reader", "error"),
    [
        (
            lambda p: duckdb.sql(f"FROM '{p}'").fetchall(),
            "schema mismatch|No files found",
        ),  # DuckDB before 1.2: no files for the folder
        (lambda p: duckdb.sql(f"FROM '{p}/**/*.parquet'").fetchall(), "schema mismatch"),
        (lambda p: pd.read_parquet(p), "ng_traj.json"),
        (lambda p: pl.read_parquet(p), "different file extensions"),
        (lambda p: pl.read_parquet(f"{p}/**/*.parquet"), "extra column"),
        (lambda p: pads.dataset(p).to_table(), "ng_traj.json"),
        (lambda p: pq.read_table(p), "ng_traj.json"),
    ],
    ids=["duckdb-folder", "duckdb-glob", "pandas", "polars-folder", "polars-glob", "pyarrow-dataset", "pyarrow-table"],
)
def test_no_reader_mixes_the_tables_of_the_top_level_folder(dataset, reader, error):
    # pyarrow's scanner (and pandas, which reads through it) now and then hands back part of the rows
    # instead of the error of a file it cannot read: 1 to 4 reads in 6,000 on a busy machine, seen with
    # pyarrow 19 to 23. So a read is tried up to three times and must fail at least once; a reader
    # that takes the folder as one table (a manifest it skips, say) still fails the test.
    for _ in range(3):
        try:
            reader(dataset)
        except Exception as failure:
            assert re.search(error, str(failure)), failure
            return
    pytest.fail(f"three reads of {dataset.name} did not fail")


DUCKDB_JOIN = """SELECT t.run, t.rollout_id, t.reward, count(c.call_index) AS calls, sum(c.total_tokens) AS tokens,
       max(c.completed_at_utc) AS last_call
FROM 'out.parquet/trajectories/*.parquet' AS t
LEFT JOIN 'out.parquet/model_calls/*.parquet' AS c USING (run, rollout_id)
GROUP BY t.run, t.rollout_id, t.reward
ORDER BY calls DESC, t.rollout_id
LIMIT 3"""

POLARS_EXAMPLE = """import polars as pl

trajectories = pl.read_parquet("out.parquet/trajectories")
calls = pl.read_parquet("out.parquet/model_calls")
per_rollout = (
    trajectories.join(calls, on=["run", "rollout_id"], how="left")
    .group_by("run", "rollout_id", "reward")
    .agg(pl.col("call_index").count().alias("calls"), pl.col("duration").sum().alias("model_time"))
    .sort(["calls", "rollout_id"], descending=[True, False])
)
"""

PANDAS_EXAMPLE = """import pandas as pd

trajectories = pd.read_parquet("out.parquet/trajectories")
calls = pd.read_parquet("out.parquet/model_calls")
joined = trajectories.merge(calls, on=["run", "rollout_id"], suffixes=("", "_call"))
tokens_per_agent = joined.groupby("agent")["total_tokens"].sum()
"""


def _run_example(code: str, dataset: Path) -> dict:
    assert f"```python\n{code}```" in DOCS
    scope: dict = {}
    exec(code.replace("out.parquet", str(dataset)), scope)
    return scope


def test_docs_duckdb_join(dataset):
    assert f"```sql\n{DUCKDB_JOIN}\n```" in DOCS
    rows = duckdb.sql(DUCKDB_JOIN.replace("out.parquet", str(dataset))).fetchall()
    # 0-0: two policy calls (20+8, 35+4 tokens) and one judge call (30+2); 0-1 and 1-0 two calls each.
    assert [row[:5] for row in rows] == [
        ("rollouts.jsonl", "0-0", 1.0, 3, 28 + 39 + 32),
        ("rollouts.jsonl", "0-1", 1.0, 2, 32),
        ("rollouts.jsonl", "1-0", 1.0, 2, 262),
    ]
    assert rows[0][5] == datetime(2026, 8, 6, 7, 6, 42, 400000, tzinfo=UTC)


def test_docs_polars_example(dataset):
    per_rollout = _run_example(POLARS_EXAMPLE, dataset)["per_rollout"]
    assert per_rollout.height == 13
    first = per_rollout.row(0, named=True)
    assert (first["run"], first["rollout_id"], first["calls"]) == ("rollouts.jsonl", "0-0", 3)
    assert first["model_time"] == timedelta(milliseconds=500 + 250 + 400)
    # Trajectories without model calls stay (a left join): 2-0, 5-0 and 5-1.
    assert sorted(per_rollout.filter(pl.col("calls") == 0)["rollout_id"].to_list()) == ["2-0", "5-0", "5-1"]


def test_docs_pandas_example(dataset):
    tokens = _run_example(PANDAS_EXAMPLE, dataset)["tokens_per_agent"]
    # Every call of a row's trajectory (the orphan 3-0 has no agent and drops out of the group by).
    everything = pd.read_parquet(dataset / "model_calls")
    orphan = everything[everything["rollout_id"] == "3-0"]["total_tokens"].sum()
    assert tokens.to_dict() == {"math_agent": everything["total_tokens"].sum() - orphan}


def _build_chunked(target: Path, jobs: int, chunk_size: int) -> None:
    sink = DiagnosticSink()
    inputs, slots, stats = prepare([RETAINED / "input"], sink, max_line_bytes=DEFAULT_MAX_LINE_BYTES)
    options = BuildOptions(capture_enabled=True, roles=ROLES)
    with open_dataset(target, roles=ROLES, chunk_size=chunk_size) as writer:
        build(inputs, slots, stats, options, sink, writer.add_rows, encode=writer.encoder(), jobs=jobs)


def _files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_chunks_are_numbered_in_build_order_and_identical_whatever_the_jobs(tmp_path):
    one, two = tmp_path / "one.parquet", tmp_path / "two.parquet"
    _build_chunked(one, 1, 5)
    _build_chunked(two, 2, 5)
    assert _files(one) == _files(two)
    # 13 trajectories in chunks of 5: 0-4, 5-9, 10-12, in every table.
    for name in TABLES:
        assert sorted(p.name for p in (one / name).iterdir()) == [f"part-0000{n}.parquet" for n in range(3)]
    indexes = [pq.read_table(table_file(one, "trajectories", n))["trajectory_index"].to_pylist() for n in range(3)]
    assert indexes == [list(range(5)), list(range(5, 10)), list(range(10, 13))]
    # Chunk files without rows (tool calls are in two trajectories, compactions in none) read as well.
    for name in TABLES:
        folder = one / name
        assert duckdb.sql(f"SELECT count(*) FROM '{folder}/*.parquet'").fetchall() == [(ROWS[name],)]
        assert pl.read_parquet(folder).height == len(pd.read_parquet(folder)) == ROWS[name]
    back = run_cli("convert", one, "-o", "-")
    assert back.exit_code == 0 and back.stdout.encode() == (RETAINED / "expected.jsonl").read_bytes()


GOLDENS = sorted(FIXTURES.glob("*/*/expected.jsonl"))


@pytest.mark.parametrize("golden", GOLDENS, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_every_golden_comes_back_byte_identical_from_chunks_of_two(tmp_path, golden):
    dataset, out = tmp_path / "d.parquet", io.BytesIO()
    sink = DiagnosticSink()
    converted = jsonl_to_dataset(golden, dataset, sink, chunk_size=2)
    chunks = -(-converted.written // 2)
    assert [p.name for p in sorted((dataset / "gaps").iterdir())] == [f"part-{n:05d}.parquet" for n in range(chunks)]
    assert dataset_to_jsonl(dataset, out.write, sink).written == converted.written
    assert out.getvalue() == golden.read_bytes() and sink.errors == 0


def _old_layout(dataset: Path, target: Path) -> Path:
    target.mkdir()
    for name in TABLES:
        shutil.copyfile(table_file(dataset, name), target / f"{name}.parquet")
    return target


def test_a_dataset_of_the_first_layout_is_reported_and_can_be_replaced(dataset, tmp_path):
    old = _old_layout(dataset, tmp_path / "old.parquet")
    result = run_cli("validate", old)
    assert result.exit_code == 1
    assert f"{old}: error[dataset_invalid]: {old} is a Parquet dataset in the first layout" in result.stderr
    assert "build it again, or convert its JSONL again" in result.stderr
    result = run_cli("convert", old, "-o", tmp_path / "back.jsonl")
    assert result.exit_code == 2 and "in the first layout (one loose file per table)" in result.stderr
    assert not (tmp_path / "back.jsonl").exists()
    matrix = run_cli("matrix", old)
    assert matrix.exit_code == 2 and "in the first layout" in matrix.stderr
    table = run_cli("validate", old / "trajectories.parquet")
    assert table.exit_code == 2 and f"name the dataset folder {old}" in table.stderr
    assert run_cli("build", RETAINED / "input", "-o", old).exit_code == 0
    assert (old / "ng_traj.json").is_file() and not (old / "trajectories.parquet").exists()


def test_a_table_folder_or_chunk_file_named_instead_of_the_dataset_is_refused(dataset):
    for command in (("validate",), ("convert", "-o", "-")):
        result = run_cli(command[0], dataset / "model_calls", *command[1:])
        assert (
            result.exit_code == 2
            and f"is a table folder of a Parquet dataset: name the dataset folder {dataset}" in (result.stderr)
        )
        result = run_cli(command[0], table_file(dataset, "model_calls"), *command[1:])
        assert result.exit_code == 2 and f"name the dataset folder {dataset}" in result.stderr


def test_a_file_of_yours_inside_a_table_folder_keeps_the_dataset_from_being_replaced(tmp_path):
    target = tmp_path / "out.parquet"
    assert run_cli("build", RETAINED / "input", "-o", target).exit_code == 0
    (target / "gaps" / "notes.txt").write_text("mine")
    result = run_cli("convert", RETAINED / "expected.jsonl", "-o", target)
    assert result.exit_code == 2 and "is a dataset that also holds gaps/notes.txt; not replaced" in result.stderr
    assert (target / "gaps" / "notes.txt").read_text() == "mine"
    # A loose table file belongs to a dataset of the first layout only; beside table folders it is not ours.
    (target / "gaps" / "notes.txt").unlink()
    (target / "gaps.parquet").write_bytes(table_file(target, "gaps").read_bytes())
    result = run_cli("convert", RETAINED / "expected.jsonl", "-o", target)
    assert result.exit_code == 2 and "is a dataset that also holds gaps.parquet; not replaced" in result.stderr


def test_files_that_disagree_with_the_manifest_are_dataset_errors(dataset, tmp_path):
    copy = tmp_path / "copy.parquet"
    shutil.copytree(dataset, copy)
    calls = pq.read_table(table_file(copy, "model_calls"))
    pq.write_table(calls.slice(1), table_file(copy, "model_calls"))
    result = run_cli("validate", copy)
    assert result.exit_code == 1
    assert f"{copy}: error[dataset_invalid]: {copy}: table model_calls holds 16 rows where ng_traj.json records 17" in (
        result.stderr
    )
    rewrite_table(copy, "model_calls", calls)
    table_file(copy, "gaps").unlink()
    result = run_cli("validate", copy)
    assert result.exit_code == 1 and f"{table_file(copy, 'gaps')}" in result.stderr
    # A manifest naming a file outside the table folders is refused, not followed.
    manifest = orjson.loads((copy / "ng_traj.json").read_bytes())
    manifest["tables"]["gaps"]["files"] = ["../../elsewhere.parquet"]
    (copy / "ng_traj.json").write_bytes(orjson.dumps(manifest))
    result = run_cli("validate", copy)
    assert result.exit_code == 1 and "table gaps does not list its 1 chunk file" in result.stderr
    (copy / "ng_traj.json").write_bytes(b'{"format": "ng-traj-parquet", "layout": 3}')
    result = run_cli("validate", copy)
    assert result.exit_code == 1 and "layout 3, this version reads layout 2" in result.stderr


def test_convert_names_the_run_after_the_converted_file(tmp_path):
    target = tmp_path / "out.parquet"
    assert run_cli("convert", RETAINED / "expected.jsonl", "-o", target).exit_code == 0
    heads = pq.read_table(target / "trajectories", columns=["run", "source_file", "reward"]).to_pylist()
    assert {(h["run"], h["source_file"], h["reward"]) for h in heads} == {("expected.jsonl", None, None)}
    calls = pq.read_table(target / "model_calls", columns=["run"]).to_pylist()
    assert {row["run"] for row in calls} == {"expected.jsonl"}


DUCKDB_RUNS = """SELECT t.run, count(*) AS calls, sum(c.total_tokens) AS tokens
FROM 'runs/*.parquet/trajectories/*.parquet' AS t
JOIN 'runs/*.parquet/model_calls/*.parquet' AS c USING (run, rollout_id)
GROUP BY t.run
ORDER BY t.run"""


def test_datasets_of_several_runs_read_together_and_join_on_the_key(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    assert run_cli("build", RETAINED / "input", "-o", runs / "built.parquet").exit_code == 0
    assert run_cli("convert", RETAINED / "expected.jsonl", "-o", runs / "converted.parquet").exit_code == 0
    assert f"```sql\n{DUCKDB_RUNS}\n```" in DOCS
    rows = duckdb.sql(DUCKDB_RUNS.replace("runs/", f"{runs}/")).fetchall()
    # The same 17 calls in each dataset, each joined to its own run's trajectory only.
    calls = pq.read_table(runs / "built.parquet" / "model_calls").to_pylist()
    tokens = sum(call["total_tokens"] or 0 for call in calls)
    orphan = sum(call["total_tokens"] or 0 for call in calls if call["rollout_id"] == "3-0")
    # The orphan capture file 3-0 has no run in the build; converted, every trajectory has the file's.
    assert rows == [("", 1, orphan), ("expected.jsonl", 17, tokens), ("rollouts.jsonl", 16, tokens - orphan)]
