"""``ng-traj matrix`` over fixtures, the shared gym examples and producer samples.

Every expected cell below was derived by hand from the README's matrix rules and the inputs (what
each row holds was read from the files), before the command was run.
"""

from __future__ import annotations

import os
import shutil

import orjson
import pytest

from conftest import FIXTURES, run_cli, shared_dir
from ng_traj.views.meanings import CRITERIA_MEANINGS, VALUE_MEANINGS

MATRIX = FIXTURES / "matrix"


def _matrix(*args):
    result = run_cli("matrix", *args, "--format", "json")
    assert result.exit_code == 0, result.stderr
    return orjson.loads(result.stdout)


def _cells(data):
    """``{group: {criterion: (cell text, main reason, records with it)}}``."""
    out = {}
    for group in data["groups"]:
        cells = {}
        for criterion, cell in group["cells"].items():
            text = "n/a" if cell["value"] == "NA" else f"{cell['value']} {cell['V']}/{cell['applicable']}"
            cells[criterion] = (text, cell["reason"], cell["reason_records"])
        out[group["group"]] = cells
    return out


# fixtures/matrix/rows.jsonl — five rows carrying ng_trajectory (see tests/test_matrix.py for the rules):
#   0-0 pi, complete; 0-1 pi: capture incomplete, no turns, transcript gap, tool b untimed (gap);
#   1-0 pi: no tool calls, second call without prompt/total counts, no turns;
#   2-0 simple agent producer trajectory: sequential tools, resolution unavailable;
#   2-1 legacy row rebuilt: fallback invocation with one function call, no model calls.
V = None
PI_RUN = {
    "C1": ("O 2/3", "gap:model_call_capture_incomplete", 1),
    "C2": (
        "O 2/3",
        "missing:model_calls[].token_stats.prompt_tokens",
        1,
    ),  # prompt and total missing: tie, alphabetical
    "C3": ("O 1/3", "gap:turns_unavailable", 2),
    "C4": ("O 2/3", "gap:agent_transcript_unavailable", 1),
    "C5": ("O 1/2", "gap:tool_timing_unavailable", 1),  # 1-0 has no tool calls: n/a, not counted
    "C6": ("O 1/2", "gap:tool_timing_unavailable", 1),  # pi runs tools concurrently; 0-1's tool b is untimed
    "C7": ("V 3/3", V, 0),
}
SIMPLE_RUN = {
    "C1": ("O 1/2", "gap:model_calls_unavailable", 1),
    "C2": ("O 1/2", "gap:model_calls_unavailable", 1),  # 2-1: no calls, but the row's response.usage reports counts
    "C3": ("O 0/2", "gap:resolution_unavailable", 1),  # tie with turns_unavailable, alphabetical
    "C4": ("O 1/2", "gap:conversation_from_rollout_record", 1),
    "C5": ("O 1/2", "gap:conversation_from_rollout_record", 1),
    "C6": ("X 0/2", "gap:conversation_from_rollout_record", 1),  # 2-0: missing:parallel_tool_calls (tie)
    "C7": ("O 1/2", "gap:conversation_from_rollout_record", 1),
}


def test_rows_by_agent():
    data = _matrix(MATRIX / "rows.jsonl")
    assert data["records"] == 5 and data["reference"] is None
    assert _cells(data) == {"pi_agent_run": PI_RUN, "simple_agent_run": SIMPLE_RUN}


def test_rows_by_producer_with_the_reference():
    data = _matrix(MATRIX / "rows.jsonl", "--by", "producer", "--reference")
    assert _cells(data) == {
        "(none)": {  # 2-1: only the fallback invocation
            "C1": ("X 0/1", "gap:model_calls_unavailable", 1),
            "C2": ("O 0/1", "gap:model_calls_unavailable", 1),
            "C3": ("X 0/1", "gap:turns_unavailable", 1),
            **{c: ("X 0/1", "gap:conversation_from_rollout_record", 1) for c in ("C4", "C5", "C6", "C7")},
        },
        "ng_trajectory": {  # 2-0
            **{c: ("V 1/1", V, 0) for c in ("C1", "C2", "C4", "C5", "C7")},
            "C3": ("O 0/1", "gap:resolution_unavailable", 1),
            "C6": ("X 0/1", "missing:parallel_tool_calls", 1),
        },
        "pi": PI_RUN,
    }
    rows = {g["group"]: g["reference_row"] for g in data["groups"]}
    assert rows == {"(none)": None, "ng_trajectory": "simple_agent", "pi": "pi_agent"}
    simple = next(g for g in data["groups"] if g["group"] == "ng_trajectory")["cells"]
    # simple_agent is documented V V O V O X V: only C5 disagrees (V computed here)
    assert {c: cell["agrees"] for c, cell in simple.items()} == {**{c: True for c in simple}, "C5": False}


def test_plain_trajectories_form_one_group_without_row_context():
    data = _matrix(MATRIX / "trajectories.jsonl")
    assert _cells(data) == {
        "(unknown)": {
            "C1": ("O 3/5", "gap:model_call_capture_incomplete", 1),  # tie with model_calls_unavailable
            "C2": ("O 3/5", "gap:model_calls_unavailable", 1),  # 2-1 is X now: no response.usage without the row
            "C3": ("O 1/5", "gap:turns_unavailable", 3),
            "C4": ("O 3/5", "gap:agent_transcript_unavailable", 1),
            "C5": ("O 2/4", "gap:conversation_from_rollout_record", 1),
            # producer unknown: 0-0's overlapping intervals show parallel tools; 0-1 and 2-0 show none
            "C6": ("O 1/4", "missing:parallel_tool_calls", 2),
            "C7": ("O 4/5", "gap:conversation_from_rollout_record", 1),
        }
    }
    (unknown,) = data["groups"]
    c2 = unknown["cells"]["C2"]
    assert (c2["V"], c2["O"], c2["X"], c2["NA"]) == (3, 1, 1, 0)


def test_markdown_with_the_reference_is_pinned():
    result = run_cli("matrix", MATRIX / "rows.jsonl", "--reference", "--format", "markdown")
    assert result.exit_code == 0
    expected = MATRIX / "expected.md"
    if os.environ.get("NG_TRAJ_UPDATE_GOLDEN") == "1":
        expected.write_text(result.stdout, encoding="utf-8")
    assert result.stdout == expected.read_text(encoding="utf-8")
    assert "| ↳ documented: `pi_agent` |  | V ≠ | V ≠ | X ≠ | V ≠ | V ≠ | V ≠ | V |" in result.stdout


def test_csv_and_table_formats():
    result = run_cli("matrix", MATRIX / "rows.jsonl", "--format", "csv")
    lines = result.stdout.splitlines()
    assert lines[0] == "group,records,criterion,value,V,O,X,NA,applicable,reason,reason_records"
    assert lines[5] == "pi_agent_run,3,C5,O,1,1,0,1,2,gap:tool_timing_unavailable,1"
    assert len(lines) == 1 + 2 * 7
    table = run_cli("matrix", MATRIX / "rows.jsonl", "--reference")
    assert "O 2/3" in table.stdout and "documented: simple_agent" in table.stdout
    assert (
        "  gap:conversation_from_rollout_record:\n    simple_agent_run: C4 O 1/2 (1 of 2 records), "
        "C5 O 1/2 (1 of 2 records), C6 X 0/2 (1 of 2 records), C7 O 1/2 (1 of 2 records)\n"
    ) in table.stdout
    assert table.stdout.count("gap:conversation_from_rollout_record") == 1  # one line per reason
    legend = table.stdout[table.stdout.index("Criteria:") :].splitlines()
    assert legend[1] == "  C1  " + CRITERIA_MEANINGS["C1"]
    assert legend[-1] == "  n/a " + VALUE_MEANINGS["n/a"]
    assert len(legend) == 1 + 7 + 1 + 4
    assert table.stderr.strip().endswith(
        "evaluated 5 records in 2 groups; 0 errors, 0 warnings; fits both revisions (nemo-gym 0.7.0 and earlier)"
    )


def test_raw_inputs_are_built_first():
    # fixtures/judge/stores: five legacy rows of one agent, each with captured calls (policy, and judge for 0-1, 1-0)
    data = _matrix(FIXTURES / "judge" / "stores" / "input", "--role", "judge_model=judge", "--reference")
    (group,) = data["groups"]
    assert (group["group"], group["records"], group["reference_row"]) == (
        "math_with_judge_simple_agent",
        5,
        "simple_agent",
    )
    assert _cells(data)["math_with_judge_simple_agent"] == {
        "C1": ("V 5/5", V, 0),  # captured calls carry model_ref, dialect, status; row-only judge calls not considered
        "C2": ("V 5/5", V, 0),
        "C3": ("X 0/5", "gap:turns_unavailable", 5),
        "C4": ("V 5/5", V, 0),  # the fallback does not count, but every considered call carries both payloads
        "C5": ("n/a", V, 0),  # no function_call in any row
        "C6": ("n/a", V, 0),
        "C7": ("X 0/5", "gap:conversation_from_rollout_record", 5),
    }


def test_rows_with_a_capture_store_of_their_run_are_built_together(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    stores = FIXTURES / "judge" / "stores" / "input"
    assert run_cli("build", stores, "-o", run / "rollouts.jsonl", "--attach").exit_code == 0
    alone = _matrix(run / "rollouts.jsonl")
    shutil.copytree(stores / "capture", run / "capture")
    together = _matrix(run)  # the capture files attach to their rows: no capture-only records
    assert alone["records"] == together["records"] == 5
    assert _cells(alone) == _cells(together) == _cells(_matrix(stores))


def test_mixed_inputs_and_skipped_lines(tmp_path):
    rows = (MATRIX / "rows.jsonl").read_bytes().splitlines()
    bad = tmp_path / "mixed.jsonl"
    row_without = orjson.dumps({**orjson.loads(rows[0]), "ng_trajectory": None})
    invalid = orjson.dumps({**orjson.loads(rows[1]), "ng_trajectory": {"schema_version": "1.0", "task_id": "0"}})
    bad.write_bytes(b"\n".join([rows[0], b"{not json", row_without, invalid, rows[2]]) + b"\n")
    result = run_cli("matrix", bad, "--format", "json")
    assert result.exit_code == 0
    assert orjson.loads(result.stdout)["records"] == 2
    assert f"{bad}:2: error[invalid_json]" in result.stderr
    assert f"{bad}:3: warning[trajectory_missing]" in result.stderr
    assert f"{bad}:4: error[missing_field] ng_trajectory.rollout_id" in result.stderr


def test_output_does_not_depend_on_input_order():
    first = run_cli("matrix", MATRIX / "rows.jsonl", MATRIX / "trajectories.jsonl", "--format", "json").stdout
    second = run_cli("matrix", MATRIX / "trajectories.jsonl", MATRIX / "rows.jsonl", "--format", "json").stdout
    assert first == second


@pytest.mark.parametrize("table_format", ["table", "markdown", "json", "csv"])
def test_no_record_is_nothing_to_measure(tmp_path, table_format):
    """Zero records printed a whole legend and claimed the records fit both contract revisions."""
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    result = run_cli("matrix", empty, "--format", table_format)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == "no records: nothing to measure; 0 errors, 1 warning"
    assert "revision" not in result.stderr
    if table_format == "json":
        data = orjson.loads(result.stdout)
        assert data["records"] == 0 and data["groups"] == []
    elif table_format == "csv":
        assert result.stdout.splitlines()[0].startswith("group,records,criterion")
        assert len(result.stdout.splitlines()) == 1
    else:
        assert result.stdout == ""
    as_json = run_cli("matrix", empty, "--format", table_format, "--output-format", "json")
    summary = orjson.loads(as_json.stderr.splitlines()[-1])
    assert (summary["records"], summary["exit_code"]) == (0, 1)
    assert summary["revision"] == "no records: nothing to measure"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--format", "html"), "--format 'html'"),
        (("--by", "model"), "--by 'model'"),
        (("--role", "x"), "--role 'x'"),
    ],
)
def test_usage_errors(args, message):
    result = run_cli("matrix", MATRIX / "rows.jsonl", *args)
    assert result.exit_code == 2 and message in result.stderr
    assert run_cli("matrix", MATRIX / "nope.jsonl").exit_code == 2


# ../shared/gym-examples/: 70 legacy rows, no attachment, no capture, judge records all null. Per row
# the build gives the fallback invocation only, no model calls, no turns. From the rules, per agent:
#   C1 X (gap model_calls_unavailable); C3 X (turns_unavailable); C4 and C7 X (conversation_from_rollout_record);
#   C2 O when the row's response.usage reports counts (zeros included: anyswe openclaw/hermes, math hermes/
#   openclaw report 0), X when usage is null (anyterminal_hermes, gdpval, tau2);
#   C5 and C6 X for rows whose request input or response output holds a function_call, n/a otherwise:
#   anyswe_openclaw none, math hermes 1 of 5, math pi 2 of 5, pinchbench (no agent_ref) 4 of 5, all others 5 of 5.
def _legacy(c2, tools):
    cells = {
        "C1": ("X 0/5", "gap:model_calls_unavailable", 5),
        "C2": (f"{c2} 0/5", "gap:model_calls_unavailable", 5),
        "C3": ("X 0/5", "gap:turns_unavailable", 5),
        "C4": ("X 0/5", "gap:conversation_from_rollout_record", 5),
        "C7": ("X 0/5", "gap:conversation_from_rollout_record", 5),
    }
    tool = ("n/a", V, 0) if tools == 0 else (f"X 0/{tools}", "gap:conversation_from_rollout_record", tools)
    return {**cells, "C5": tool, "C6": tool}


# "(unknown)": five legacy rows of no known agent (4 tool calls) and the OpenCode export's own session
# (2 calls with transcript usage, 1 timed tool call, 2 producer turns without a question)
_UNKNOWN = {
    "C1": ("O 0/6", "gap:model_calls_unavailable", 5),
    "C2": ("O 1/6", "gap:model_calls_unavailable", 5),
    "C3": ("O 0/6", "gap:turns_unavailable", 5),
    "C4": ("O 1/6", "gap:conversation_from_rollout_record", 5),
    "C5": ("O 1/5", "gap:conversation_from_rollout_record", 4),
    "C6": ("O 1/5", "gap:conversation_from_rollout_record", 4),
    "C7": ("O 1/6", "gap:conversation_from_rollout_record", 5),
}
GYM_EXAMPLES = {
    "(unknown)": (_UNKNOWN, None),
    "anyswe_claude_code": (_legacy("O", 5), "anyswe_agent"),
    "anyswe_hermes": (_legacy("O", 5), "anyswe_agent"),
    "anyswe_openclaw": (_legacy("O", 0), "anyswe_agent"),
    "anyswe_opencode": (_legacy("O", 5), "anyswe_agent"),
    "anyswe_pi": (_legacy("O", 5), "anyswe_agent"),
    "anyterminal_hermes": (_legacy("X", 5), "anyterminal_agent"),
    "gdpval_stirrup_agent": (_legacy("X", 5), "stirrup_agent"),
    "math_with_judge_claude_code_agent": (_legacy("O", 5), "claude_code_agent"),
    "math_with_judge_hermes_agent": (_legacy("O", 1), "hermes_agent"),
    "math_with_judge_openclaw_agent": (_legacy("O", 5), "openclaw_agent"),
    "math_with_judge_opencode_agent": (_legacy("O", 5), "opencode_agent"),
    "math_with_judge_pi_agent": (_legacy("O", 2), "pi_agent"),
    "tau2_benchmark_agent": (_legacy("X", 5), "tau2"),
}


def test_gym_examples_matrix_is_pinned():
    data = _matrix(shared_dir("gym-examples"), "--reference")
    assert data["records"] == 71
    assert _cells(data) == {name: cells for name, (cells, _) in GYM_EXAMPLES.items()}
    assert {g["group"]: g["reference_row"] for g in data["groups"]} == {n: row for n, (_, row) in GYM_EXAMPLES.items()}
    openclaw = next(g for g in data["groups"] if g["group"] == "math_with_judge_openclaw_agent")["cells"]
    # documented openclaw_agent V V X O V V V: only C3 (X) agrees with these legacy rows
    assert [c for c, cell in openclaw.items() if cell["agrees"]] == ["C3"]
    by_producer = _cells(_matrix(shared_dir("gym-examples"), "--by", "producer"))
    assert list(by_producer) == ["(none)", "opencode"]  # no row carries agent-side evidence; the export does


# Derived by hand from the rules over what the readers build from ../shared/producer-samples/ (no rows,
# no capture): openclaw = 2 store trees whose transcripts are not beside their flat-named stores (no calls,
# no conversation), the 9-turn Bedrock transcript (failed turns only: no calls, a conversation) and 5
# transcripts with calls (transcript usage only: no model_ref or status, so C1 O, C2 V); tools: only
# exec results carry durationMs (done_exec: 1 of 6, the .deleted archive: 35 of 55), so C5/C6 O for those
# two and X for the other three with tool calls. pi = 3 v1 files: usage on every call, no durationMs.
# hermes = 3 session logs + 2 gateway transcripts + 13 ShareGPT lines: no per-call usage and no tool times;
# tool calls in the cron log, one gateway transcript and the compaction transcript. opencode = the 1.17.11
# export: 2 step-finish calls with usage (no capture), 1 tool with start and end, producer turns whose
# question is null (as upstream's OpenCode turns). C3: no capture, so every producer but OpenCode has its
# turns read from the transcript (one per assistant model call); with no rollout row, none is resolved.
PRODUCER_SAMPLES = {
    "claude_code": {
        "C1": ("O 0/1", "gap:model_call_usage_from_transcript", 1),
        "C2": ("V 1/1", None, 0),
        "C3": ("O 0/1", "missing:turns[].resolved", 1),
        "C4": ("V 1/1", None, 0),
        "C5": ("X 0/1", "gap:tool_timing_unavailable", 1),
        "C6": ("X 0/1", "gap:tool_timing_unavailable", 1),
        "C7": ("V 1/1", None, 0),
    },
    "codex": {  # one tree; its root thread's own rollout is not among the samples
        "C1": ("O 0/1", "gap:model_call_usage_from_transcript", 1),
        "C2": ("V 1/1", None, 0),
        "C3": ("O 0/1", "missing:turns[].resolved", 1),  # the sub-agent threads' turns
        "C4": ("O 0/1", "gap:agent_transcript_unavailable", 1),
        "C5": ("V 1/1", None, 0),
        "C6": ("X 0/1", "missing:parallel_tool_calls", 1),
        "C7": ("V 1/1", None, 0),
    },
    "hermes": {
        "C1": ("X 0/18", "gap:model_calls_unavailable", 18),
        "C2": ("X 0/18", "gap:model_calls_unavailable", 18),
        "C3": ("O 0/18", "missing:turns[].resolved", 18),
        "C4": ("V 18/18", None, 0),
        "C5": ("X 0/3", "gap:tool_timing_unavailable", 3),
        "C6": ("X 0/3", "gap:tool_timing_unavailable", 3),
        "C7": ("V 18/18", None, 0),
    },
    # Two store trees that read their renamed transcripts, and one rotated transcript of its own.
    "openclaw": {
        "C1": ("O 0/3", "gap:model_call_usage_from_transcript", 3),
        "C2": ("V 3/3", None, 0),
        "C3": ("O 0/3", "missing:turns[].resolved", 3),
        "C4": ("O 2/3", "gap:agent_transcript_unavailable", 1),
        "C5": ("O 0/3", "gap:tool_timing_unavailable", 3),
        "C6": ("O 0/3", "gap:tool_timing_unavailable", 3),
        "C7": ("V 3/3", None, 0),
    },
    "opencode": {
        "C1": ("O 0/1", "gap:model_call_usage_from_transcript", 1),
        "C2": ("V 1/1", None, 0),
        "C3": ("O 0/1", "missing:turns[].question", 1),
        "C4": ("V 1/1", None, 0),
        "C5": ("V 1/1", None, 0),
        "C6": ("V 1/1", None, 0),
        "C7": ("V 1/1", None, 0),
    },
    "pi": {
        "C1": ("O 0/3", "gap:model_call_usage_from_transcript", 3),
        "C2": ("V 3/3", None, 0),
        "C3": ("O 0/3", "missing:turns[].resolved", 3),
        "C4": ("V 3/3", None, 0),
        "C5": ("X 0/3", "gap:tool_timing_unavailable", 3),
        "C6": ("X 0/3", "gap:tool_timing_unavailable", 3),
        "C7": ("V 3/3", None, 0),
    },
}


def test_producer_samples_matrix_is_pinned():
    data = _matrix(shared_dir("producer-samples"), "--by", "producer")
    assert data["records"] == 27
    assert _cells(data) == PRODUCER_SAMPLES
    by_agent = _cells(_matrix(shared_dir("producer-samples")))
    # no rows: one group, the sums of the producer rows above: 9 of 27 records report counts (openclaw 3 +
    # pi 3 + claude_code, codex and opencode 1 each), 25 have a history (not openclaw's flat-store tree nor
    # codex's missing root), 12 have tool calls (2 with every duration: codex, opencode; 1 overlapping: opencode)
    assert by_agent == {
        "(unknown)": {
            "C1": ("O 0/27", "gap:model_calls_unavailable", 18),
            "C2": ("O 9/27", "gap:model_calls_unavailable", 18),
            "C3": ("O 0/27", "missing:turns[].resolved", 26),
            "C4": ("O 25/27", "gap:agent_transcript_unavailable", 2),
            "C5": ("O 2/12", "gap:tool_timing_unavailable", 10),
            "C6": ("O 1/12", "gap:tool_timing_unavailable", 10),
            "C7": ("V 27/27", None, 0),
        }
    }


def test_a_parquet_dataset_gives_the_matrix_of_its_jsonl(tmp_path):
    built = FIXTURES / "build" / "retained_run" / "input"
    dataset, rows = tmp_path / "out.parquet", tmp_path / "rows.jsonl"
    assert run_cli("build", built, "-o", dataset).exit_code == 0
    assert run_cli("build", built, "-o", rows, "--attach").exit_code == 0
    from_dataset = run_cli("matrix", dataset, "--format", "json")
    from_rows = run_cli("matrix", rows, "--format", "json")
    assert from_dataset.exit_code == 0, from_dataset.stderr
    groups = orjson.loads(from_dataset.stdout)["groups"]
    assert [group["group"] for group in groups] == ["(unknown)", "math_agent"]
    # the dataset keeps the rows' agents; rollout-level usage is not in a dataset, so only C2 may differ
    by_rows = {group["group"]: group for group in orjson.loads(from_rows.stdout)["groups"]}
    for group in groups:
        for criterion in ("C1", "C3", "C4", "C5", "C6", "C7"):
            assert group["cells"][criterion] == by_rows[group["group"]]["cells"][criterion]
    # found in a named folder, the dataset is read as itself (its table files were each skipped)
    in_folder = run_cli("matrix", tmp_path, "--format", "json")
    assert in_folder.exit_code == 0, in_folder.stderr
    assert orjson.loads(in_folder.stdout)["records"] == 13 + 13  # the dataset's, then the rows'
    assert "input_unsupported" not in in_folder.stderr, in_folder.stderr


def test_a_piped_table_keeps_long_group_names_whole(tmp_path):
    """Piped, the table was 200 columns wide and cut a long agent name with an ellipsis."""
    name = "an_agent_whose_name_is_long_" * 8
    rows = [orjson.loads(line) for line in (MATRIX / "rows.jsonl").read_bytes().splitlines()]
    for row in rows:
        row["agent_ref"] = {"name": name}
    (tmp_path / "rows.jsonl").write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    result = run_cli("matrix", tmp_path / "rows.jsonl")
    assert result.exit_code == 0, result.stderr
    assert "…" not in result.stdout
    assert f"│ {name} │       5 │" in result.stdout  # records right-justified under its header
