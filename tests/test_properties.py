"""Properties checked over generated inputs (Hypothesis): Parquet round trips, the join, input order.

Example counts are kept small so that the suite stays fast; ``deadline=None`` because a build or a
dataset write takes tens of milliseconds on a loaded machine.
"""

from __future__ import annotations

import io
import shutil

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from conftest import FIXTURES, run_cli
from ng_traj.assemble.join import join_model_call_observations
from ng_traj.contract import AgentObservationBundle, ModelCallRecord
from ng_traj.contract.trajectory import TrajectoryRecord
from ng_traj.diagnostics import DiagnosticSink
from ng_traj.writers.jsonl import record_json
from ng_traj.writers.parquet_convert import dataset_to_jsonl, jsonl_to_dataset

SETTINGS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,  # the same examples in every run: CI is not a search for new counterexamples
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)

GOLDEN_RECORDS = [
    orjson.loads(line)
    for golden in sorted(FIXTURES.glob("*/*/expected.jsonl"))
    for line in golden.read_bytes().splitlines()
]

# Keys whose values are free text or open JSON in the contract: any value of the kind there is valid.
FREE_TEXT = {
    "content",
    "text",
    "arguments",
    "output",
    "summary",
    "detail",
    "reasoning_content",
    "rollout_id",
    "task_id",
}
OPEN_JSON = {"request", "response"}
COUNTS = {"input_tokens", "output_tokens", "total_tokens", "prompt_tokens", "completion_tokens", "cached_tokens"}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


def _leaves(value, path=()):
    if isinstance(value, dict):
        for key, item in value.items():
            if key in OPEN_JSON or not isinstance(item, dict | list):
                yield (*path, key), key
            yield from () if key in OPEN_JSON else _leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))


def _replace(value, path, new):
    target = value
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new


@st.composite
def trajectory_records(draw) -> TrajectoryRecord:
    """A golden record with some free-text, open-JSON and token-count values replaced by generated ones."""
    value = orjson.loads(orjson.dumps(draw(st.sampled_from(GOLDEN_RECORDS))))
    leaves = [(path, key) for path, key in _leaves(value) if key in FREE_TEXT | OPEN_JSON | COUNTS]
    for path, key in draw(st.lists(st.sampled_from(leaves), max_size=6)) if leaves else ():
        if key in OPEN_JSON:
            new = draw(st.dictionaries(st.text(max_size=8), json_values, max_size=4))
        elif key in COUNTS:
            new = draw(st.integers(0, 2**53))
        else:
            new = draw(st.text())
        _replace(value, path, new)
    try:
        return TrajectoryRecord.model_validate(value)
    except ValidationError:
        assume(False)
        raise


@SETTINGS
@given(records=st.lists(trajectory_records(), min_size=1, max_size=5), chunk_size=st.integers(1, 3))
def test_jsonl_to_parquet_and_back_is_byte_identical(tmp_path_factory, records, chunk_size):
    folder = tmp_path_factory.mktemp("roundtrip")
    source = folder / "in.jsonl"
    source.write_bytes(b"".join(record_json(record) + b"\n" for record in records))
    sink, back = DiagnosticSink(), io.BytesIO()
    assert jsonl_to_dataset(source, folder / "d.parquet", sink, chunk_size=chunk_size).written == len(records)
    assert dataset_to_jsonl(folder / "d.parquet", back.write, sink).written == len(records)
    assert back.getvalue() == source.read_bytes()
    assert sink.errors == 0


POLICY = {"type": "responses_api_models", "name": "policy"}
JUDGE = {"type": "responses_api_models", "name": "judge"}
small_ids = st.sampled_from(["c1", "c2", "c3", "c4"])
response_ids = st.none() | st.sampled_from(["r1", "r2", "r3"])
model_refs = st.sampled_from([POLICY, JUDGE])


@st.composite
def model_call_refs(draw) -> dict:
    ref: dict = {}
    if draw(st.booleans()):
        ref["model_call_id"] = draw(small_ids)
    if draw(st.booleans()) or not ref:
        ref["model_ref"], ref["response_id"] = draw(model_refs), draw(st.sampled_from(["r1", "r2", "r3", "r9"]))
    return ref


@st.composite
def bundles_and_calls(draw) -> tuple[AgentObservationBundle, list[ModelCallRecord]]:
    """Invocations (some nested sessions named like calls' session ids) with refs over a small id space,
    an optional compaction, and captured calls that repeat ids and response ids."""
    names = draw(st.lists(st.sampled_from(["root", "a", "b", "s1"]), min_size=1, max_size=3, unique=True))
    records: list[dict] = [
        {
            "kind": "agent_invocation",
            "invocation_id": name,
            "model_calls": draw(st.lists(model_call_refs(), max_size=4)),
        }
        for name in names
    ]
    if draw(st.booleans()):
        records.append(
            {
                "kind": "context_compaction",
                "invocation_id": draw(st.sampled_from(names)),
                "before_model_call": draw(st.none() | model_call_refs()),
                "model_calls": draw(st.lists(model_call_refs(), max_size=2)),
                "after_model_call": draw(st.none() | model_call_refs()),
            }
        )
    gaps = draw(
        st.lists(
            st.sampled_from(
                [
                    {"code": "model_call_ownership_unavailable", "detail": "capture:old:call_index=9"},
                    {"code": "model_call_reference_unmatched", "invocation_id": "root", "detail": "x"},
                    {"code": "no_sandbox_runtime"},
                ]
            ),
            max_size=3,
        )
    )
    calls = [
        ModelCallRecord(
            model_call_id=draw(st.none() | small_ids),
            response_id=draw(response_ids),
            call_index=index,
            model_ref=draw(model_refs),
            client_session_id=draw(st.none() | st.sampled_from(names)),
        )
        for index in range(draw(st.integers(0, 5)))
    ]
    return AgentObservationBundle(source="pi", records=records, gaps=gaps), calls


@settings(max_examples=150, deadline=None, derandomize=True)
@given(case=bundles_and_calls())
def test_joining_twice_equals_joining_once(case):
    bundle, calls = case
    before = bundle.model_dump()
    once = join_model_call_observations(bundle, calls)
    twice = join_model_call_observations(once, calls)
    assert twice.model_dump() == once.model_dump()
    assert bundle.model_dump() == before  # the input is not modified


RETAINED = FIXTURES / "build" / "retained_run" / "input"
OTHER_INPUTS = [FIXTURES / "pi" / "compaction.jsonl", FIXTURES / "openclaw" / "tree", FIXTURES / "native_e2e"]


@pytest.fixture(scope="module")
def order_baseline(tmp_path_factory) -> bytes:
    """The build of a copy beside the shuffled ones: where two stores hold one call id, the lexically
    first store path wins, so every copy must sit at the same place relative to the other inputs."""
    folder = tmp_path_factory.mktemp("shuffled")
    shutil.copytree(RETAINED, folder / "input")
    out = folder / "out.jsonl"
    inputs = [*sorted((folder / "input").iterdir()), *OTHER_INPUTS]
    assert run_cli("build", *inputs, "-o", out).exit_code == 0
    return out.read_bytes()


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_build_output_does_not_depend_on_input_order(tmp_path_factory, order_baseline, data):
    folder = tmp_path_factory.mktemp("shuffled")
    shutil.copytree(RETAINED, folder / "input")
    rows = folder / "input" / "rollouts.jsonl"
    lines = rows.read_bytes().splitlines(keepends=True)
    rows.write_bytes(b"".join(data.draw(st.permutations(lines), label="rollout rows")))
    inputs = data.draw(st.permutations([*sorted((folder / "input").iterdir()), *OTHER_INPUTS]), label="inputs")
    out = folder / "out.jsonl"
    assert run_cli("build", *inputs, "-o", out).exit_code == 0
    assert out.read_bytes() == order_baseline


def test_the_order_property_has_something_to_order(order_baseline):
    records = [orjson.loads(line) for line in order_baseline.splitlines()]
    assert len(records) >= 8 and len(RETAINED.joinpath("rollouts.jsonl").read_bytes().splitlines()) >= 5
    assert sum(len(r["model_calls"]) for r in records) >= 10
