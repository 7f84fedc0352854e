"""The rollout view both viewers share, ``ng-traj show`` (in-process) and the report's embedded data.

``fixtures/views/parallel_subagent.jsonl`` is one hand-written trajectory: invocation ``root`` calls
``policy_model`` at 1000.0–1000.8 and 1003.1–1003.5, runs ``call_a`` (1000.9–1002.0), ``call_b``
(1001.0–1001.6) and ``call_spawn`` (1001.1–1003.0) at once; ``call_spawn`` spawns ``root.child``,
which calls ``helper_model`` (1001.2–1001.9, 40 + 10 tokens) and runs ``call_c`` with no time
(gap ``tool_timing_unavailable``).
"""

from __future__ import annotations

import base64
import re
import zlib

import orjson
import pytest

from conftest import FIXTURES, ROOT, run_cli
from ng_traj.contract.gaps import KNOWN_GAPS, NG_TRAJ_GAPS
from ng_traj.views.html import request_deltas
from ng_traj.views.meanings import UNKNOWN_GAP, gap_meaning
from ng_traj.views.tree import interval, rollout_view

VIEWS = FIXTURES / "views"
PARALLEL = VIEWS / "parallel_subagent.jsonl"


def _value() -> dict:
    return orjson.loads(PARALLEL.read_bytes())


def test_every_gap_code_of_the_gaps_page_and_the_catalogue_has_a_meaning():
    page = (ROOT / "docs" / "gaps.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([a-z0-9_]+)` \|", page, flags=re.MULTILINE))
    assert documented and documented <= set(NG_TRAJ_GAPS)  # the page's table is the catalogue's own codes
    for code in documented | KNOWN_GAPS:
        assert gap_meaning(code) != UNKNOWN_GAP, code
    assert gap_meaning("not_a_code") == UNKNOWN_GAP


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ({"started_at": 10.0, "completed_at": 12.5, "duration_ms": 1.0}, (10.0, 12.5)),
        ({"started_at": 10.0, "completed_at": None, "duration_ms": 1500.0}, (10.0, 11.5)),
        ({"started_at": None, "completed_at": 12.0, "duration_ms": 500.0}, (11.5, 12.0)),
        ({"started_at": 10.0, "completed_at": None, "duration_ms": None}, None),
        ({"duration_ms": 500.0}, None),  # a duration alone places nothing
    ],
)
def test_an_interval_is_only_what_the_record_states(item, expected):
    assert interval(item) == expected


def test_sub_agents_sit_under_the_tool_call_that_spawned_them():
    (root,) = rollout_view(_value())["tree"]
    assert root["invocation_id"] == "root"
    assert [t["id"] for t in root["tool_calls"]] == ["call_a", "call_b", "call_spawn"]
    (child,) = root["tool_calls"][2]["children"]
    assert (child["invocation_id"], child["spawned_by"], root["children"]) == ("root.child", "call_spawn", [])
    assert [c["id"] for c in child["model_calls"]] == ["mc2"]
    assert child["tool_calls"][0]["interval"] is None


def test_parallel_tool_calls_get_lanes_and_untimed_calls_are_listed_not_placed():
    timeline = rollout_view(_value())["timeline"]
    assert (timeline["origin"], timeline["span"]) == (1000.0, 3.5)
    root, child = timeline["rows"]
    lanes = {bar["id"]: (bar["lane"], bar["start"], bar["end"]) for bar in root["bars"]}
    assert lanes == {
        "mc1": (0, 0.0, 0.8),
        "call_a": (0, 0.9, 2.0),
        "call_b": (1, 1.0, 1.6),
        "call_spawn": (2, 1.1, 3.0),
        "mc3": (0, 3.1, 3.5),
    }
    assert (child["depth"], child["spawned_by"]) == (1, "call_spawn")
    assert [(b["id"], b["lane"]) for b in child["bars"]] == [("mc2", 0)]
    assert child["untimed"] == [{"kind": "tool", "label": "read", "id": "call_c", "status": "completed"}]


def test_totals_per_role_follow_the_role_map():
    view = rollout_view(_value(), {"helper_model": "helper"})
    assert view["roles"] == [
        {"role": "helper", "calls": 1, "prompt_tokens": 40, "completion_tokens": 10, "total_tokens": 50,
         "latency_ms": 700.0, "missing": 0},
        {"role": "policy_model", "calls": 2, "prompt_tokens": 320, "completion_tokens": 50, "total_tokens": 370,
         "latency_ms": 1200.0, "missing": 0},
    ]  # fmt: skip
    assert view["totals"]["total_tokens"] == 420 and view["totals"]["tool_calls"] == 4
    assert view["gaps"] == [
        {
            "code": "tool_timing_unavailable",
            "meaning": gap_meaning("tool_timing_unavailable"),
            "items": [{"invocation_id": "root.child", "detail": "call_c"}],
        }
    ]


def test_requests_are_stored_against_the_one_before_and_rebuild_exactly():
    first = {"model": "m", "input": [{"role": "user", "content": "a"}], "tools": []}
    second = {"model": "m", "input": [*first["input"], {"role": "assistant", "content": "b"}], "tools": []}
    other = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    deltas = request_deltas([first, second, other, "raw text"])
    assert deltas == [
        {"same": 0, "body": first},
        {"same": 1, "body": {"model": "m", "input": [{"role": "assistant", "content": "b"}], "tools": []}},
        {"same": 0, "body": other},
        {"same": 0, "body": "raw text"},
    ]
    assert list(deltas[1]["body"]) == list(second)  # key order kept: the page rebuilds the same JSON


def test_show_lists_and_shows_one_rollout_plainly_when_piped():
    listed = run_cli("show", PARALLEL)
    assert listed.exit_code == 0, listed.stderr
    assert "1-0" in listed.stdout and "task-1" in listed.stdout and "\x1b[" not in listed.stdout
    one = run_cli("show", PARALLEL, "1-0", "--role", "helper_model=helper")
    assert one.exit_code == 0, one.stderr
    out = one.stdout
    assert "turn 1: 2 steps, 2 model calls, resolved" in out
    assert "tool call delegate  call_spawn  completed  1900 ms" in out
    assert "invocation root.child  completed  1800 ms  spawned by call_spawn" in out
    assert out.index("call_spawn  completed") < out.index("invocation root.child")
    assert "tool call read  call_c  completed  —  (no time recorded)" in out
    assert "model call helper-1  [helper]  tokens 40 in / 10 out / 50 total  latency 700 ms  HTTP 200" in out
    assert f"tool_timing_unavailable ×1: {gap_meaning('tool_timing_unavailable')}" in out
    assert "\x1b[" not in out


@pytest.mark.parametrize(
    ("times", "said"),
    [
        ({"completed_at": 1781335608.376}, "(completed 2026-06-13 07:26:48.376 UTC; no start recorded)"),
        ({"started_at": 1781335608.0}, "(started 2026-06-13 07:26:48.000 UTC; no completion recorded)"),
    ],
)
def test_show_says_the_one_time_an_untimed_tool_call_has(tmp_path, times, said):
    """A tool call with one end of its interval (a Claude Code tool result's time) said 'no time recorded'."""
    value = _value()
    (tool,) = [t for t in value["tool_calls"] if t["tool_call_id"] == "call_c"]
    tool.update(times)
    source = tmp_path / "one_end.jsonl"
    source.write_bytes(orjson.dumps(value) + b"\n")
    out = run_cli("show", source, "1-0").stdout
    assert f"tool call read  call_c  completed  —  {said}" in out and "no time recorded" not in out


def test_show_gives_claude_code_tool_calls_their_completion_time(tmp_path):
    from conftest import shared_dir

    session = tmp_path / "session"
    session.mkdir()
    for source in shared_dir("producer-samples", "claude-code").glob("*.jsonl"):
        (session / source.name).write_bytes(source.read_bytes())
    built = tmp_path / "built.jsonl"
    assert run_cli("build", session, "-o", built).exit_code == 0
    (record,) = [orjson.loads(line) for line in built.read_bytes().splitlines()]
    out = run_cli("show", built, record["rollout_id"]).stdout
    timed = [t for t in record["tool_calls"] if t["completed_at"] is not None and t["started_at"] is None]
    assert timed and "no time recorded" not in out
    for tool in timed:
        assert f"{tool['tool_call_id']}  completed  —  (completed " in out


def _gym_rows(tmp_path):
    from conftest import shared_dir

    out = tmp_path / "gym.jsonl"
    result = run_cli("build", shared_dir("gym-examples"), "--attach", "-o", out)
    assert result.exit_code == 0, result.stderr
    return out


def test_colliding_rollout_ids_are_an_error_listing_the_candidates_and_agent_picks_one(tmp_path):
    rows = _gym_rows(tmp_path)
    result = run_cli("show", rows, "0-0")
    assert result.exit_code == 2
    message = " ".join(result.stderr.split())
    assert message.startswith("error: 12 rollouts are '0-0': ")
    assert "(run gym.jsonl, agent anyswe_pi)" in message and message.endswith("pick one with --agent")
    assert "Traceback" not in result.stderr
    picked = run_cli("show", rows, "0-0", "--agent", "anyswe_pi")
    assert picked.exit_code == 0, picked.stderr
    assert "agent anyswe_pi" in picked.stdout and "conversation_from_rollout_record ×1" in picked.stdout
    none = run_cli("show", rows, "0-0", "--agent", "no_such_agent")
    assert none.exit_code == 2 and "exists, but not for the --run/--agent given" in none.stderr
    missing = run_cli("show", rows, "9-9")
    assert missing.exit_code == 2 and "no rollout '9-9' in the input" in missing.stderr
    listed = run_cli("show", rows, "--agent", "anyswe_pi")
    assert listed.exit_code == 0 and listed.stdout.count("anyswe_pi") == 5


def test_records_of_one_file_sharing_an_id_are_picked_by_their_line(tmp_path):
    """A build of several runs writes rollout 0-0 once per run into bare trajectory JSONL, which
    keeps no run or agent: the error says so truthfully and --line picks one."""
    from conftest import shared_dir

    out = tmp_path / "gym.jsonl"
    assert run_cli("build", shared_dir("gym-examples"), "-o", out).exit_code == 0
    result = run_cli("show", out, "0-0")
    assert result.exit_code == 2
    message = " ".join(result.stderr.split())
    assert message.startswith("error: 12 rollouts are '0-0': ") and f"{out}:3 (run ?, agent ?)" in message
    assert "writes each rollout id once" not in message
    assert message.endswith(f"pick one by its line with --line N (N as in {out}:N above)")
    picked = run_cli("show", out, "0-0", "--line", "3")
    assert picked.exit_code == 0, picked.stderr
    assert "rollout 0-0" in picked.stdout and f"from {out}:3" in " ".join(picked.stdout.split())
    wrong = run_cli("show", out, "0-0", "--line", "40")
    assert wrong.exit_code == 2 and "exists, but not for the --run/--agent/--line given" in wrong.stderr
    listed = run_cli("show", out, "--line", "3")
    assert listed.exit_code == 0 and f"{out}:3" in listed.stdout and f"{out}:4" not in listed.stdout


def _details(page: str) -> list[dict]:
    packed = re.findall(r'<script type="application/octet-stream" id="d-\d+">([^<]*)</script>', page)
    return [orjson.loads(zlib.decompress(base64.b64decode(text))) for text in packed]


def _rollouts(page: str) -> list[dict]:
    return orjson.loads(re.search(r'<script type="application/json" id="data-rollouts">(.*?)</script>', page).group(1))


def test_report_is_deterministic_whatever_the_input_order(tmp_path):
    trajectories = FIXTURES / "matrix" / "trajectories.jsonl"
    one, two = tmp_path / "one.html", tmp_path / "two.html"
    assert run_cli("report", PARALLEL, trajectories, "-o", one).exit_code == 0
    assert run_cli("report", trajectories, PARALLEL, "-o", two).exit_code == 0
    assert one.read_bytes() == two.read_bytes()
    page = one.read_text(encoding="utf-8")
    entries = _rollouts(page)
    assert [e["i"] for e in entries] == list(range(6))
    (mine,) = [e for e in entries if e["task_id"] == "task-1"]
    detail = _details(page)[mine["i"]]
    assert detail["view"] == orjson.loads(orjson.dumps(rollout_view(_value())))
    assert detail["calls"] == [0] and detail["requests"][0]["body"]["instructions"] == "You are a careful agent."


def test_report_redacts_and_leaves_the_input_alone(tmp_path):
    value = _value()
    value["model_calls"][0]["request"]["api_key"] = "sk-live-0123456789abcdefghijklmnop"
    source = tmp_path / "secret.jsonl"
    source.write_bytes(orjson.dumps(value) + b"\n")
    before = source.read_bytes()
    plain, masked = tmp_path / "plain.html", tmp_path / "masked.html"
    assert run_cli("report", source, "-o", plain).exit_code == 0
    assert run_cli("report", source, "-o", masked, "--redact").exit_code == 0
    assert _details(plain.read_text())[0]["requests"][0]["body"]["api_key"] == "sk-live-0123456789abcdefghijklmnop"
    assert _details(masked.read_text())[0]["requests"][0]["body"]["api_key"] == "[REDACTED]"
    assert "sk-live" not in masked.read_text()
    assert source.read_bytes() == before


def test_show_redacts_what_it_shows(tmp_path):
    value = _value()
    value["gaps"][0]["detail"] = "token sk-live-0123456789abcdefghijklmnop"
    source = tmp_path / "secret.jsonl"
    source.write_bytes(orjson.dumps(value) + b"\n")
    assert "sk-live-0123456789abcdefghijklmnop" in run_cli("show", source, "1-0").stdout
    masked = run_cli("show", source, "1-0", "--redact")
    assert masked.exit_code == 0, masked.stderr
    assert "sk-live" not in masked.stdout and "token [REDACTED]" in masked.stdout
    bad = run_cli("show", source, "1-0", "--redact-pattern", "(")
    assert bad.exit_code == 2 and "--redact-pattern" in bad.stderr


@pytest.mark.parametrize("output_format", ["text", "json", "github"])
def test_report_to_standard_output_writes_the_html_alone(tmp_path, output_format):
    """-o - writes the page to standard output and every diagnostic and summary to standard error
    (the json summary line followed the page on standard output)."""
    trajectories = FIXTURES / "matrix" / "trajectories.jsonl"
    page = tmp_path / "page.html"
    assert run_cli("report", PARALLEL, trajectories, "-o", page).exit_code == 0
    result = run_cli("report", PARALLEL, trajectories, "-o", "-", "--output-format", output_format)
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes == page.read_bytes()
    last = result.stderr.splitlines()[-1]
    if output_format == "json":
        assert orjson.loads(last)["rollouts"] == 6 and orjson.loads(last)["output"] == "-"
    else:
        assert last.startswith("wrote 6 rollouts to standard output;")
    assert "'-' for standard output" in " ".join(run_cli("report", "--help").stdout.replace("│", " ").split())


def test_report_of_nothing_writes_nothing(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    out = tmp_path / "r.html"
    result = run_cli("report", empty, "-o", out)
    assert result.exit_code == 1 and not out.exists()
    assert "no rollouts: nothing written" in result.stderr


def test_report_compares_two_builds_of_the_same_tasks(tmp_path):
    other = _value()
    other["gaps"] = [{"code": "turns_unavailable"}]
    other["turns"] = []
    second = tmp_path / "second.jsonl"
    second.write_bytes(orjson.dumps(other) + b"\n")
    out = tmp_path / "r.html"
    assert run_cli("report", PARALLEL, "-o", out, "--compare", second).exit_code == 0
    page = out.read_text()
    compared = orjson.loads(re.search(r'id="data-compare">(.*?)</script>', page).group(1))
    assert compared == [
        {
            "agent": "", "task_id": "task-1", "rollout_id": "1-0", "i": 0,
            "a": {"reward": None, "status": "completed", "turns": 1, "model_calls": 3, "tool_calls": 4,
                  "tokens": 420, "gaps": 1},
            "b": {"reward": None, "status": "completed", "turns": 0, "model_calls": 3, "tool_calls": 4,
                  "tokens": 420, "gaps": 1},
            "only_a": ["tool_timing_unavailable"], "only_b": ["turns_unavailable"],
        }
    ]  # fmt: skip


def test_show_reads_a_dataset_with_its_run_and_agent_columns(tmp_path):
    from conftest import shared_dir

    dataset = tmp_path / "gym.parquet"
    assert run_cli("build", shared_dir("gym-examples"), "-o", dataset).exit_code == 0
    listed = run_cli("show", dataset, "--agent", "anyswe_pi")
    assert listed.exit_code == 0, listed.stderr
    rows = [line for line in listed.stdout.splitlines() if "anyswe_pi" in line]
    assert len(rows) == 5 and all("anyswe_agent__example_rollouts_pi.jsonl" in row for row in rows)
    one = run_cli("show", dataset, "0-0", "--agent", "anyswe_pi")
    assert one.exit_code == 0, one.stderr
    assert "run anyswe_agent__example_rollouts_pi.jsonl  agent anyswe_pi  reward 1.0" in one.stdout
    assert "3 function calls (0 with a tool-call record)" in one.stdout
    tools = [line for line in one.stdout.splitlines() if "tool call" in line and "no tool record" in line]
    assert len(tools) == 3  # function calls of the rebuilt conversation, which has no tool records


def test_show_says_the_latency_is_unknown_when_no_call_states_one(tmp_path):
    value = _value()
    for call in value["model_calls"]:
        call["duration_ms"] = None
    untimed = tmp_path / "untimed.jsonl"
    untimed.write_bytes(orjson.dumps(value) + b"\n")
    view = rollout_view(value)
    assert view["totals"]["latency_ms"] is None and {row["latency_ms"] for row in view["roles"]} == {None}
    out = run_cli("show", untimed, value["rollout_id"]).stdout
    assert (
        f"{len(value['model_calls'])} model calls, 4 function calls (4 with a tool-call record), 420 tokens, unknown model latency"
        in out
    )
    assert "0 ms model latency" not in out
    value["model_calls"] = []
    assert rollout_view(value)["totals"]["latency_ms"] == 0


def test_show_of_a_rollout_without_model_calls_totals_no_tokens_or_latency(tmp_path):
    value = _value()
    value["model_calls"], value["turns"] = [], []
    bare = tmp_path / "bare.jsonl"
    bare.write_bytes(orjson.dumps(value) + b"\n")
    out = run_cli("show", bare, value["rollout_id"]).stdout
    assert "0 model calls, 4 function calls (4 with a tool-call record)\n" in out
    assert "No model calls: no tokens or latency to total per role." in out
    assert "tokens," not in out and "model latency" not in out and "Tokens and latency per role" not in out


def test_show_names_the_first_file_of_an_info_code_it_summarises_not_an_option_it_lacks(tmp_path):
    (tmp_path / "a.jsonl").write_bytes(PARALLEL.read_bytes())
    (tmp_path / "README").write_text("notes\n")
    (tmp_path / "notes.txt").write_text("notes\n")
    result = run_cli("show", tmp_path)
    assert result.exit_code == 0, result.stderr
    assert "--verbose" not in result.stderr
    assert (
        f"info[input_unclaimed]: 2 times: no reader recognises the input; skipped (the first: {tmp_path / 'README'})"
    ) in result.stderr


def test_show_warns_of_a_role_naming_no_model_server_of_the_rollout():
    result = run_cli("show", PARALLEL, "1-0", "--role", "helper_modle=tool_model")
    assert result.exit_code == 0, result.stderr
    assert (
        "warning[role_unmatched]: --role helper_modle=tool_model: no model call of this rollout is served by "
        "'helper_modle', so the role labels nothing; did you mean 'helper_model'?" in result.stderr
    )
    assert "role_unmatched" not in run_cli("show", PARALLEL, "1-0", "--role", "helper_model=tool_model").stderr


def test_show_refuses_a_role_for_the_list_of_rollouts_which_has_no_totals_by_role():
    result = run_cli("show", PARALLEL, "--role", "helper_model=helper")
    assert result.exit_code == 2, result.stderr
    assert "--role labels the totals of one rollout, and the list has none: name a ROLLOUT too" in result.stderr
    assert result.stdout == ""


def test_build_counts_tool_call_records_and_show_function_calls_and_each_says_which(tmp_path):
    """The build summary's count is the tool-call records; show's is the function calls (records
    plus the conversation's calls without one), and says how many of them have a record."""
    from conftest import shared_dir

    out = tmp_path / "gym.jsonl"
    built = run_cli("build", shared_dir("gym-examples"), "-o", out)
    assert built.exit_code == 0, built.stderr
    assert "(2 model calls, 1 tool-call record, 219 gaps)" in built.stderr + built.stdout
    listed = run_cli("show", out)
    assert "function calls" in listed.stdout and "tool calls" not in listed.stdout
    one = run_cli("show", out, "0-0", "--line", "1")
    assert "0 model calls, 7 function calls (0 with a tool-call record)" in one.stdout


def test_show_through_a_pipe_prints_long_paths_and_lines_whole(tmp_path):
    """Piped, rich's default 80 columns (160 before) cut the where column with an ellipsis and
    wrapped the header: each path is printed whole, on its row's one line."""
    folder = tmp_path / ("a-folder-name-long-enough-" * 4) / ("to-push-the-where-column-" * 4)
    folder.mkdir(parents=True)
    copy = folder / "parallel_subagent.jsonl"
    copy.write_bytes(PARALLEL.read_bytes())
    assert len(str(copy)) > 200
    listed = run_cli("show", copy)
    assert listed.exit_code == 0, listed.stderr
    assert "…" not in listed.stdout
    row = next(line for line in listed.stdout.splitlines() if line.startswith("│ 1-0 "))
    assert row.rstrip(" │").endswith(f"│ {copy}:1")
    one = run_cli("show", copy, "1-0")
    assert one.exit_code == 0, one.stderr
    assert f"\nfrom {copy}:1\n" in one.stdout
