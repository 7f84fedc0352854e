"""``ng-traj export --format atif``: documents the ATIF models accept, upstream's mapping, --strict."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import orjson
import pytest

from conftest import build_valid, run_cli, run_json, shared_dir
from export_samples import (
    ALL_EXPECTED,
    LONG_AND_DOT_IDS,
    RETAINED,
    SUBAGENTS,
    clean_rollout,
    with_rollout_id,
    write_jsonl,
)
from ng_traj.records import row_facts


def _export(tmp_path, *inputs, extra=()):
    out = tmp_path / "atif"
    result = run_json("export", *inputs, "--format", "atif", "-o", out, *extra)
    return result, out


def _documents(out):
    return {path.name: orjson.loads(path.read_bytes()) for path in sorted(out.glob("*.json"))}


def test_every_fixture_exports_documents_the_atif_package_accepts(tmp_path):
    from atif import Trajectory

    result, out = _export(tmp_path, *ALL_EXPECTED)
    assert result.exit_code in (0, 3), result.stderr
    documents = _documents(out)
    assert len(documents) == result.summary["written"] > 40
    for name, document in documents.items():
        Trajectory.model_validate(document)
        assert document["schema_version"] == "ATIF-v1.8", name


def test_harbor_validator_accepts_every_document(tmp_path):
    harbor = pytest.importorskip(
        "harbor.utils.trajectory_validator",
        reason="harbor needs Python >= 3.12 and pydantic >= 2.14 (installed with the interop extra)",
    )
    _, out = _export(tmp_path, *ALL_EXPECTED)
    for path in sorted(out.glob("*.json")):
        validator = harbor.TrajectoryValidator()
        assert validator.validate(orjson.loads(path.read_bytes())), (path.name, validator.get_errors())


def test_inspect_scout_reads_the_root_trajectory(tmp_path):
    pytest.importorskip(
        "harbor.models.trajectories", reason="Inspect Scout's ATIF source needs harbor (Python >= 3.12)"
    )
    scout = pytest.importorskip(
        "inspect_scout.sources._atif", reason="inspect-scout is installed with the interop extra"
    )
    _, out = _export(tmp_path, write_jsonl(tmp_path / "clean.jsonl", clean_rollout()))

    async def transcripts():
        return [t async for t in scout.atif(out)]

    found = asyncio.run(transcripts())
    assert len(found) == 1
    transcript = found[0]
    # user, the assistant's tool call, the tool's result, the answer
    assert transcript.message_count == 4
    assert [m.role for m in transcript.messages] == ["user", "assistant", "tool", "assistant"]
    assert sum(len(m.tool_calls or []) for m in transcript.messages if m.role == "assistant") == 1


def _upstream_document(session: str, agent: str, version: str) -> dict:
    """What NeMo Gym 0.7.0's exporter writes for ``clean_rollout()``, derived by hand from its rules."""
    metrics_1 = {
        "prompt_tokens": 20,
        "completion_tokens": 8,
        "cached_tokens": 0,
        "extra": {"reasoning_tokens": 0, "total_tokens": 28},
    }
    metrics_2 = {
        "prompt_tokens": 35,
        "completion_tokens": 5,
        "cached_tokens": 16,
        "extra": {"reasoning_tokens": 2, "total_tokens": 40},
    }
    return {
        "schema_version": "ATIF-v1.7",
        "session_id": session,
        "trajectory_id": f"{session}:7:0",
        "agent": {"name": agent, "version": version, "model_name": "policy-1"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "What is 6*7?"},
            {
                "step_id": 2,
                "timestamp": "2026-08-06T07:06:40.500000Z",
                "source": "agent",
                "model_name": "policy-1",
                "message": "",
                "tool_calls": [
                    {
                        "tool_call_id": "call_1",
                        "function_name": "calc",
                        "arguments": {"expr": "6*7"},
                        "extra": {"nemo_gym": {"source_item_id": "fc_1"}},
                    }
                ],
                "observation": {
                    "results": [
                        {
                            "source_call_id": "call_1",
                            "content": "42",
                            "extra": {
                                "nemo_gym": {
                                    "started_at": 1786000000.5,
                                    "completed_at": 1786000000.75,
                                    "duration_ms": 250.0,
                                    "timing_source": "executor",
                                    "source_item_id": "fco_1",
                                }
                            },
                        }
                    ]
                },
                "metrics": metrics_1,
                "llm_call_count": 1,
            },
            {
                "step_id": 3,
                "timestamp": "2026-08-06T07:06:42Z",
                "source": "agent",
                "model_name": "policy-1",
                "message": [{"type": "text", "text": "It is 42."}],
                "metrics": metrics_2,
                "llm_call_count": 1,
            },
        ],
        "final_metrics": {
            "total_prompt_tokens": 55,
            "total_completion_tokens": 13,
            "total_cached_tokens": 16,
            "total_steps": 3,
        },
    }


def _without_extensions(value):
    """``value`` without the ``extra`` objects of the document, steps, tool calls and results."""
    if isinstance(value, dict):
        return {k: _without_extensions(v) for k, v in value.items() if k != "extra" or "total_tokens" in v}
    if isinstance(value, list):
        return [_without_extensions(v) for v in value]
    return value


def test_a_clean_rollout_matches_upstream_field_by_field_except_the_listed_differences(tmp_path):
    source = write_jsonl(tmp_path / "clean.jsonl", clean_rollout())
    options = ("--session-id", "s1", "--agent-version", "1.2")
    result, out = _export(tmp_path, source, extra=(*options, "--strict"))
    assert result.exit_code == 0, result.stderr  # nothing lost (the agent name is unfilled, not lost)
    mine = _documents(out)["7-0.json"]
    upstream = _upstream_document("s1", "unknown", "1.2")
    # The differences docs/deviations.md lists: the ATIF version, the trajectory id (ours names the
    # rollout id, upstream the task and rollout indexes), a text-only message as a string, and the
    # extension objects (ours under ng_traj, upstream's under nemo_gym).
    assert mine["schema_version"] == "ATIF-v1.8"
    assert mine["trajectory_id"] == "7:7-0"
    assert mine["steps"][2]["message"] == "It is 42."
    mine = {**mine, "schema_version": "ATIF-v1.7", "trajectory_id": "s1:7:0"}
    mine["steps"][2]["message"] = [{"type": "text", "text": "It is 42."}]
    assert _without_extensions(mine) == _without_extensions(upstream)
    # what upstream keeps under nemo_gym is kept under ng_traj
    step = mine["steps"][1]
    assert step["tool_calls"][0]["extra"] == {"ng_traj": {"source_item_id": "fc_1"}}
    tool = step["observation"]["results"][0]["extra"]["ng_traj"]["tool_call"]
    assert (tool["started_at"], tool["completed_at"], tool["duration_ms"]) == (1786000000.5, 1786000000.75, 250.0)
    assert [c["model_call_id"] for c in step["extra"]["ng_traj"]["model_calls"]] == ["mc1"]
    assert step["extra"]["ng_traj"]["turn"] == {"turn_no": 1, "step_count": 1}


def test_a_clean_rollout_with_an_agent_name_is_complete_exit_0(tmp_path):
    row = {
        "agent_ref": {"type": "responses_api_agents", "name": "simple_agent"},
        "reward": 1.0,
        "ng_trajectory": clean_rollout(),
    }
    result, out = _export(tmp_path, write_jsonl(tmp_path / "rows.jsonl", row), extra=("--agent-version", "1"))
    assert result.exit_code == 0  # the reward is kept under extra: not a loss
    report = orjson.loads((tmp_path / "atif.completeness.json").read_bytes())
    entry = report["rollouts"][0]
    assert entry["lost"] == [] and entry["status"] == "complete"
    assert [e["what"] for e in entry["kept_in_extension"]] == ["tool timing", "reward"]
    document = _documents(out)["7-0.json"]
    assert document["agent"]["name"] == "simple_agent"
    assert document["extra"]["ng_traj"]["source"]["reward"] == 1.0


def test_strict_refuses_what_upstream_refuses_with_the_reason(tmp_path):
    result, out = _export(tmp_path, RETAINED, extra=("--strict",))
    assert result.exit_code == 1
    refused = [d for d in result.diagnostics if d["code"] == "export_refused"]
    assert len(refused) == 13 and result.summary["written"] == 0
    assert not out.exists()  # nothing exported: nothing written (an earlier export there would stay)
    by_line = {d["line"]: d["message"] for d in refused}
    assert (
        by_line[1]
        == "rollout 0-0: model call 00000000000000000000000000000001 (turn 1) has no finish reason; upstream refuses it"
    )
    assert by_line[2].startswith("rollout 0-1: the trajectory has 2 gaps (model_call_ownership_unavailable, ")
    assert (
        by_line[8]
        == "rollout 3-0: the trajectory has 3 gaps (conversation_unavailable, rollout_record_unavailable, turns_unavailable); upstream exports none with a gap"
    )
    assert all(d["path"] == str(RETAINED) for d in refused)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            lambda v: v["invocations"].append(
                {**v["invocations"][0], "invocation_id": "sub", "parent_invocation_id": "root"}
            ),
            "2 invocations; upstream exports exactly one",
        ),
        (
            lambda v: v["model_calls"][0]["response_metadata"].update(finish_reason="length"),
            "model call mc1 (turn 1) stopped early (finish reason 'length'); upstream refuses it",
        ),
        (
            lambda v: v["turns"][1]["answer"].append(v["turns"][0]["answer"][0]),
            "turn 2: the response mixes text with tool calls; upstream refuses it",
        ),
        (
            lambda v: v["turns"][1].update(step_count=2),
            "turn 2: step_count 2 is not the 1 tool call made up to and including it; upstream refuses it",
        ),
        (
            lambda v: v["model_calls"][1]["response_metadata"].update(finish_reason="tool_calls"),
            "model call mc2 (turn 2) has finish reason 'tool_calls', which contradicts no tool calls; upstream refuses it",
        ),
        (
            lambda v: v["model_calls"][1]["token_stats"].update(cached_tokens=36),
            "model call mc2 (turn 2) has more cached than prompt tokens; upstream refuses it",
        ),
        (
            lambda v: v["invocations"][0]["conversation"][3].update(phase="final_answer"),
            "conversation item 3 has a phase; upstream refuses it",
        ),
        (
            lambda v: v["invocations"][0].update(status="failed"),
            "invocation status 'failed'; upstream needs 'completed'",
        ),
        (
            lambda v: v["tool_calls"][0].update(status="failed"),
            "tool call call_1 has status 'failed'; upstream needs 'completed'",
        ),
    ],
)
def test_strict_refusal_reasons(tmp_path, change, reason):
    value = clean_rollout()
    change(value)
    result, _ = _export(tmp_path, write_jsonl(tmp_path / "one.jsonl", value), extra=("--strict",))
    assert result.exit_code == 1
    assert [d["message"] for d in result.diagnostics if d["code"] == "export_refused"] == [f"rollout 7-0: {reason}"]


def test_subagents_are_embedded_and_linked_from_the_spawning_tool_call(tmp_path):
    _, out = _export(tmp_path, SUBAGENTS)
    (document,) = _documents(out).values()
    (sub,) = document["subagent_trajectories"]
    assert sub["trajectory_id"].startswith(document["trajectory_id"] + "/")
    refs = [
        (result["source_call_id"], ref["trajectory_id"])
        for step in document["steps"]
        for result in (step.get("observation") or {}).get("results", [])
        for ref in result.get("subagent_trajectory_ref", [])
    ]
    record = orjson.loads(SUBAGENTS.read_bytes().splitlines()[0])
    (child,) = [i for i in record["invocations"] if i.get("spawned_by_tool_call_id")]
    assert refs == [(child["spawned_by_tool_call_id"], sub["trajectory_id"])]


def test_copied_context_is_a_marked_step(tmp_path):
    source = RETAINED.parents[2] / "opencode" / "db_v2_fork" / "expected.jsonl"
    _, out = _export(tmp_path, source)
    (document,) = _documents(out).values()
    marked = [
        s
        for t in [document, *document.get("subagent_trajectories", [])]
        for s in t["steps"]
        if s.get("is_copied_context")
    ]
    assert len(marked) == 1
    assert marked[0]["source"] == "system" and marked[0]["extra"]["ng_traj"]["gap"]["code"] == "copied_context"


def test_output_is_byte_identical_and_names_do_not_depend_on_input_order(tmp_path):
    clean = clean_rollout()
    other = clean_rollout()  # the same rollout id in another task
    other["task_id"] = "8"
    for turn in other["turns"]:
        turn["task_id"] = "8"
    source = write_jsonl(tmp_path / "a.jsonl", clean, other)
    run_json("export", source, "--format", "atif", "-o", tmp_path / "one")
    run_json("export", source, "--format", "atif", "-o", tmp_path / "two")
    write_jsonl(source, other, clean)
    run_json("export", source, "--format", "atif", "-o", tmp_path / "three")
    one, two, three = (
        {p.name: p.read_bytes() for p in (tmp_path / name).iterdir()} for name in ("one", "two", "three")
    )
    assert one == two == three
    assert len(one) == 2 and all(name.startswith("7-0-") for name in one)
    report_one = (tmp_path / "one.completeness.json").read_bytes()
    assert report_one.replace(b"/one", b"/two") == (tmp_path / "two.completeness.json").read_bytes()


def test_bad_lines_are_reported_with_file_and_line_and_skipped(tmp_path):
    source = tmp_path / "mixed.jsonl"
    source.write_bytes(orjson.dumps(clean_rollout()) + b"\n{not json\n" + b'{"schema_version": "1.0"}\n')
    result, out = _export(tmp_path, source)
    assert result.exit_code == 1
    assert sorted((d["line"], d["severity"]) for d in result.diagnostics) == [(2, "error"), (3, "error")]
    assert all(d["path"] == str(source) for d in result.diagnostics)
    assert list(_documents(out)) == ["7-0.json"]


def test_text_summary_has_a_line_per_rollout(tmp_path):
    result = run_cli("export", RETAINED, "--format", "atif", "-o", tmp_path / "out")
    assert result.exit_code == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("  ")]
    assert len(lines) == 13
    assert (
        lines[7]
        == f"  3-0 -> {tmp_path / 'out' / '3-0.json'}: complete: kept in extension gaps (3), model calls no step holds (1); unfilled agent.name, agent.version, invocations"
    )


def test_quiet_leaves_out_the_per_rollout_lines(tmp_path):
    result = run_cli("export", RETAINED, "--format", "atif", "-o", tmp_path / "out", "-q")
    assert result.exit_code == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("  ")] == []
    assert result.stderr.splitlines()[-1].startswith("exported 13 of 13 records read as atif (13 complete")


def test_the_summary_counts_the_records_read_and_those_skipped_as_invalid_in_both_modes(tmp_path):
    """Invalid records are skipped by reading, with an error each: the summary counts them among
    the records read and says how many; --strict counts its refusals among the same records."""
    good = RETAINED
    lines = good.read_bytes().splitlines()
    values = [orjson.loads(line) for line in lines]
    for value in values[1::2]:
        value["task_id"] = 123  # not a string: the record is invalid
    mixed = tmp_path / "inv.jsonl"
    mixed.write_bytes(b"".join(orjson.dumps(value) + b"\n" for value in values))
    result = run_cli("export", mixed, "--format", "atif", "-o", tmp_path / "a", "-q")
    assert result.exit_code == 1
    last = result.stderr.splitlines()[-1]
    assert last.startswith(
        "exported 7 of 13 records read as atif (7 complete, 0 lossy, 0 refused, 0 not written, 6 skipped as invalid)"
    ), last
    strict = run_cli("export", good, "--format", "atif", "-o", tmp_path / "s", "--strict", "-q")
    assert strict.stderr.splitlines()[-1].startswith(
        "exported 0 of 13 records read as atif (0 complete, 0 lossy, 13 refused, 0 not written, 0 skipped as invalid)"
    )
    both = run_json("export", mixed, "--format", "atif", "-o", tmp_path / "b", "--strict")
    assert (both.summary["read"], both.summary["skipped_invalid"], both.summary["written"]) == (13, 6, 0)
    assert len(both.summary["rollouts"]) == 7 and {r["status"] for r in both.summary["rollouts"]} == {"refused"}


def test_only_an_earlier_export_or_an_empty_folder_is_replaced(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    result = run_cli("export", RETAINED, "--format", "atif", "-o", out)
    assert result.exit_code == 2
    assert (
        "holds notes.txt, which no earlier export wrote (its completeness report out.completeness.json beside it is not there)"
        in result.stderr
    )
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    (out / "notes.txt").unlink()
    (out / "important.json").write_text("{}")  # the user's own JSON, named like a document: kept too
    assert run_cli("export", RETAINED, "--format", "atif", "-o", out).exit_code == 2
    assert [p.name for p in out.iterdir()] == ["important.json"]
    (out / "important.json").unlink()
    assert run_cli("export", RETAINED, "--format", "atif", "-o", out).exit_code == 0  # an empty folder
    first = sorted(p.name for p in out.iterdir())
    assert "0-0.json" in first
    assert run_cli("export", RETAINED, "--format", "atif", "-o", out).exit_code == 0  # its own export, again
    assert sorted(p.name for p in out.iterdir()) == first
    (out / "later.json").write_text("{}")  # added after the export: its report does not list it
    later = run_cli("export", RETAINED, "--format", "atif", "-o", out)
    assert later.exit_code == 2 and "beside it does not list them)" in later.stderr, later.stderr
    assert (out / "later.json").exists()
    (out / "later.json").unlink()
    (tmp_path / "out.completeness.json").unlink()  # without its report, the folder is no known export
    assert run_cli("export", RETAINED, "--format", "atif", "-o", out).exit_code == 2
    assert sorted(p.name for p in out.iterdir()) == first


@pytest.mark.parametrize(("fmt", "name"), [("atif", "atif"), ("otlp", "traces.jsonl")])
def test_a_file_of_the_users_own_at_the_report_path_is_refused_not_overwritten(tmp_path, fmt, name):
    out = tmp_path / name
    own = tmp_path / f"{name}.completeness.json"
    own.write_text('{"mine": true}\n')
    result = run_cli("export", RETAINED, "--format", fmt, "-o", out)
    assert result.exit_code == 2, result.stderr
    assert (
        f"error: {own} exists and is not the completeness report of an earlier export; not replaced: move it, "
        f"or name another output than {out} (its report is written beside it, as {own.name})"
    ) in result.stderr
    assert own.read_text() == '{"mine": true}\n' and not out.exists()
    own.write_text("not JSON at all\n")
    assert run_cli("export", RETAINED, "--format", fmt, "-o", out).exit_code == 2
    own.unlink()
    assert run_cli("export", RETAINED, "--format", fmt, "-o", out).exit_code != 2  # 1 for OTLP: untimed rollouts
    assert "ng_traj_completeness" in orjson.loads(own.read_bytes())
    assert run_cli("export", RETAINED, "--format", fmt, "-o", out).exit_code != 2  # its own report: replaced


def test_usage_errors_exit_2(tmp_path):
    assert run_cli("export", RETAINED, "--format", "csv", "-o", tmp_path / "x").exit_code == 2
    assert run_cli("export", RETAINED, "--format", "atif", "--split", "-o", tmp_path / "x").exit_code == 2
    assert run_cli("export", tmp_path / "missing.jsonl", "--format", "atif", "-o", tmp_path / "x").exit_code == 2


def test_models_used_on_this_python():
    from ng_traj.exports.atif import trajectory_model

    _, library = trajectory_model()
    try:
        import harbor.models.trajectories  # noqa: F401

        expected = "harbor"
    except ImportError:
        expected = "atif"
    assert library == expected
    assert sys.version_info >= (3, 12) or library == "atif"


def test_real_samples_export_valid_documents_with_the_rows_agent_and_reward(tmp_path):
    from atif import Trajectory

    rows = tmp_path / "rows.jsonl"
    assert run_cli("build", shared_dir("gym-examples"), "--attach", "-o", rows).exit_code == 0
    natives = tmp_path / "natives.jsonl"
    natives.write_bytes(
        b"".join(orjson.dumps(r) + b"\n" for r in build_valid(tmp_path, shared_dir("producer-samples")))
    )
    result, out = _export(tmp_path, rows, natives)
    assert result.exit_code == 0, result.stderr
    documents = _documents(out)
    row_values = [orjson.loads(line) for line in rows.read_bytes().splitlines()]
    assert len(documents) == result.summary["written"] == len(row_values) + len(natives.read_bytes().splitlines())
    for document in documents.values():
        Trajectory.model_validate(document)
    by_id = {d["trajectory_id"]: d for d in documents.values()}
    # rows name their run (the file) and agent; bare trajectories name neither
    assert {d.get("session_id") for d in documents.values()} == {"rows.jsonl", None}
    report = orjson.loads((tmp_path / "atif.completeness.json").read_bytes())
    for entry in report["rollouts"]:
        if entry["source"] != str(rows):
            continue
        row = row_values[entry["line"] - 1]
        document = orjson.loads(Path(entry["output"]).read_bytes())
        assert document["trajectory_id"] == f"rows.jsonl:{entry['task_id']}:{entry['rollout_id']}"
        agent, producer, _ = row_facts(row)
        assert document["agent"]["name"] == (agent or producer or "unknown")
        if type(row.get("reward")) in (int, float):
            assert document["extra"]["ng_traj"]["source"]["reward"] == row["reward"]
    natives_ids = {f"{r['task_id']}:{r['rollout_id']}" for r in map(orjson.loads, natives.read_bytes().splitlines())}
    assert natives_ids <= set(by_id)


def test_files_in_a_named_folder_not_named_as_json_are_skipped_once_each(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "trajectories.jsonl").write_bytes(RETAINED.read_bytes())
    (folder / "README.md").write_text("# notes\n\nnot JSON\n")
    (folder / "page.html").write_text("<html></html>\n")
    result = run_cli("export", folder, "--format", "atif", "-o", tmp_path / "out", "-v")
    assert result.exit_code == 0, result.stderr
    assert "invalid_json" not in result.stderr
    assert sorted(line.split(":")[0] for line in result.stderr.splitlines() if "info[input_unclaimed]" in line) == [
        str(folder / "README.md"),
        str(folder / "page.html"),
    ]
    named = tmp_path / "notes.md"  # named on its own, a file is read whatever its name
    named.write_text("not JSON\n")
    assert "invalid_json" in run_cli("export", named, "--format", "atif", "-o", tmp_path / "out2").stderr


def test_long_and_dot_rollout_ids_get_short_visible_distinct_names(tmp_path):
    source = write_jsonl(tmp_path / "ids.jsonl", *map(with_rollout_id, LONG_AND_DOT_IDS))
    result, out = _export(tmp_path, source)
    assert result.exit_code == 0, result.stderr
    names = sorted(path.name for path in out.iterdir())
    assert len(names) == len(LONG_AND_DOT_IDS)
    assert all(len(name.encode()) <= 200 and not name.startswith(".") for name in names), names
    ids = {document["trajectory_id"].rsplit(":", 1)[1] for document in _documents(out).values()}
    assert ids == set(LONG_AND_DOT_IDS)
    run_json("export", source, "--format", "atif", "-o", tmp_path / "again")
    assert sorted(path.name for path in (tmp_path / "again").iterdir()) == names  # deterministic


@pytest.mark.parametrize("fmt", ["atif", "otlp"])
def test_standard_output_is_refused_saying_why_not_asking_for_the_o_given(fmt):
    """``-o -`` was answered "name an output path with -o", though -o was given."""
    result = run_cli("export", RETAINED, "--format", fmt, "-o", "-")
    assert result.exit_code == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: -o -: export cannot write to standard output: it writes several files")
    assert "completeness report" in line and "name an output path with -o" not in line


@pytest.mark.parametrize("special", ["/dev/null", "/dev/stdout", "fifo"])
def test_a_device_a_stream_or_a_pipe_is_refused_as_output_and_nothing_is_made_beside_it(tmp_path, special):
    """``-o /dev/null`` made ``/dev/null.completeness.json``; ``-o /dev/stdout`` wrote the traces there too."""
    if special == "fifo":
        special = tmp_path / "pipe"
        os.mkfifo(special)
    before = set(Path(special).parent.iterdir())
    result = run_cli("export", RETAINED, "--format", "otlp", "-o", special)
    assert result.exit_code == 2 and result.stdout == "", result.stderr
    assert f"error: -o {special} is not a regular file or folder" in result.stderr
    assert set(Path(special).parent.iterdir()) == before


def _split_rollouts(tmp_path: Path) -> tuple[Path, Path]:
    """Two trajectory files of different rollouts (the retained run's first and second record)."""
    lines = RETAINED.read_bytes().splitlines(keepends=True)
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_bytes(lines[0])
    second.write_bytes(lines[1])
    return first, second


@pytest.mark.parametrize(("fmt", "flags"), [("atif", ()), ("otlp", ("--split",))])
def test_a_folder_an_export_wrote_is_replaced_by_an_export_of_other_rollouts(tmp_path, fmt, flags):
    """The report was committed first, so the folder's last check read the new report, which does
    not list the earlier documents: the export stopped with the new report beside the old documents."""
    first, second = _split_rollouts(tmp_path)
    out = tmp_path / "out"
    assert run_cli("export", first, "--format", fmt, *flags, "-o", out).exit_code in (0, 3)
    before = sorted(p.name for p in out.iterdir())
    result = run_cli("export", second, "--format", fmt, *flags, "-o", out)
    assert result.exit_code in (0, 3), result.stderr
    after = sorted(p.name for p in out.iterdir())
    assert after and not set(before) & set(after)
    report = orjson.loads((tmp_path / "out.completeness.json").read_bytes())
    assert sorted(Path(item["output"]).name for item in report["rollouts"]) == after


@pytest.mark.parametrize(("fmt", "flags"), [("atif", ()), ("otlp", ()), ("otlp", ("--split",))])
def test_a_documents_commit_that_fails_leaves_the_earlier_report_too(tmp_path, monkeypatch, fmt, flags):
    """The last check before the documents replace their target refuses (a file appeared in the
    folder meanwhile), or the rename fails: the earlier documents and the earlier report stay."""
    import os

    from ng_traj.diagnostics import RunError
    from ng_traj.exports import run as export_run
    from ng_traj.io import atomic

    first, second = _split_rollouts(tmp_path)
    out = tmp_path / ("out" if flags or fmt == "atif" else "out.jsonl")
    report = tmp_path / f"{out.name}.completeness.json"
    assert run_cli("export", first, "--format", fmt, *flags, "-o", out).exit_code in (0, 3)
    documents = {p.name: p.read_bytes() for p in out.iterdir()} if out.is_dir() else out.read_bytes()
    earlier = report.read_bytes()
    if out.is_dir():
        checks = []

        def refusing(path, suffix):
            checks.append(path)
            if len(checks) > 1:  # the last check, just before the swap
                raise RunError(f"output {path} changed")

        monkeypatch.setattr(export_run, "check_folder", refusing)
    else:
        replace = os.replace

        def failing(source, target):
            if Path(target) == out:
                raise RunError(f"cannot rename over {out}")
            replace(source, target)

        monkeypatch.setattr(atomic.os, "replace", failing)
    result = run_cli("export", second, "--format", fmt, *flags, "-o", out)
    assert result.exit_code == 2, result.stderr
    monkeypatch.undo()
    assert report.read_bytes() == earlier
    now = {p.name: p.read_bytes() for p in out.iterdir()} if out.is_dir() else out.read_bytes()
    assert now == documents
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["first.jsonl", "second.jsonl", out.name, report.name])


@pytest.mark.parametrize("fmt", ["atif", "otlp"])
def test_a_record_leaving_out_the_fields_the_contract_defaults_exports_as_if_it_had_them(tmp_path, fmt):
    bare = {"task_id": "1", "rollout_id": "0"}  # valid: the earlier revision may leave the rest out
    full = {"schema_version": "1.0", **bare, **{name: [] for name in ("invocations", "turns", "model_calls")}}
    full |= {"tool_calls": [], "gaps": []}
    outputs = []
    for name, record in (("bare", bare), ("full", full)):
        (tmp_path / name).mkdir()
        source = write_jsonl(tmp_path / name / "in.jsonl", record)
        out = source.parent / ("atif" if fmt == "atif" else "traces.jsonl")
        result = run_cli("export", source, "--format", fmt, "-o", out)
        assert "internal error" not in result.stderr and result.exit_code in (0, 1), result.stderr
        written = sorted(out.iterdir()) if out.is_dir() else [out] if out.exists() else []
        outputs.append((result.exit_code, result.stderr.replace(name, "-"), [path.read_bytes() for path in written]))
    assert outputs[0] == outputs[1]
    assert "exported" in outputs[0][1] and "skipped as invalid" not in outputs[0][1].replace("0 skipped as invalid", "")


def test_a_time_outside_the_years_iso_8601_holds_is_reported_lost_and_the_others_exported(tmp_path):
    """A turn's ``timestamp`` or a model call's ``started_at`` in milliseconds (year 58566) cannot be
    ISO-8601 text: the step has no timestamp and the loss is reported (exit 3), where the export
    stopped with nothing written."""
    late = with_rollout_id("7-0")
    for entry in [*late["turns"], *late["model_calls"]]:
        entry["timestamp" if "timestamp" in entry else "started_at"] *= 1000
    records = [late, with_rollout_id("7-1")]
    result, out = _export(tmp_path, write_jsonl(tmp_path / "t.jsonl", *records))
    assert result.exit_code == 3
    documents = _documents(out)
    assert sorted(documents) == ["7-0.json", "7-1.json"]
    assert not any("timestamp" in step for step in documents["7-0.json"]["steps"] if step["source"] == "agent")
    assert any("timestamp" in step for step in documents["7-1.json"]["steps"] if step["source"] == "agent")
    report = orjson.loads((tmp_path / "atif.completeness.json").read_bytes())
    lost = {entry["rollout_id"]: [e["what"] for e in entry["lost"]] for entry in report["rollouts"]}
    assert lost["7-0"] == ["times outside the years 1-9999"] and lost["7-1"] == []
