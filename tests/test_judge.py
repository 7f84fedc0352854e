"""Judge records in rows, in capture, and in both: one model call per judge call, with its role.

Fixtures (``fixtures/judge/``), all rows of agent ``math_with_judge_simple_agent`` without agent-side
observations (so every trajectory has the fallback invocation ``rollout_record``):

* ``stores``: five rows and two capture stores (``capture`` = policy server, which also captured one
  judge call; ``judge_capture`` = judge server). Per rollout: 0-0 judge calls in the row only (two
  ``judge_evaluations``); 0-1 in capture only (same file as the policy call); 1-0 in both (row entry and
  judge store, same response ``resp_j10``); 1-1 a ``judge_response`` in the row only; 2-0 a gdpval-style
  result summary as ``judge_response`` and an entry without response (both skipped, reported).
* ``attachments`` (no stores): 0-0 a v0.5.0-era row whose ``ng_model_call_capture`` holds the judge call
  without payloads or ``response_status``; 0-1 a collector row whose ``ng_trajectory`` already holds it.

The facts below were derived from the rules (``assemble/judge.py``) and the
fixture values before the output was generated; the golden then pins the bytes.
"""

from __future__ import annotations

import os
import shutil

import orjson

from conftest import FIXTURES, run_cli, run_json, without_null_0_7_keys

JUDGE = FIXTURES / "judge"
ROLES = ("--role", "judge_model=judge", "--role", "policy_model=policy")
N = None
POLICY = (40, 12, 0, 52, 0)  # every policy call: usage 40 in (0 cached), 12 out (0 reasoning), total 52


def _facts(path):
    facts = []
    for line in path.read_bytes().splitlines():
        record = orjson.loads(line)
        calls = []
        for call in record["model_calls"]:
            metadata, tokens = call["response_metadata"], call["token_stats"]
            server = (metadata["model_ref"] or {}).get("name")
            counts = tuple(
                tokens[k]
                for k in ("prompt_tokens", "completion_tokens", "reasoning_tokens", "total_tokens", "cached_tokens")
            )
            calls.append(((call["model_call_id"] or "")[-2:] or N, metadata["response_id"], counts, server))
        gaps = [(gap["code"], gap["detail"]) for gap in record["gaps"]]
        facts.append((record["rollout_id"], [i["invocation_id"] for i in record["invocations"]], calls, gaps))
    return facts


FALLBACK = [("conversation_from_rollout_record", N), ("turns_unavailable", N)]
STORES = [
    (
        "0-0",
        ["rollout_record"],
        [
            ("01", "resp_p00", POLICY, "policy_model"),
            # row only: usage 120 in (64 cached), 9 out (4 reasoning), total 129; 118/7/0/125/0.
            # model_ref is the one server --role names judge; no model_call_id, no capture to merge with.
            (N, "resp_j00a", (120, 9, 4, 129, 64), "judge_model"),
            (N, "resp_j00b", (118, 7, 0, 125, 0), "judge_model"),
        ],
        [
            ("model_call_from_judge_record", "judge_evaluations.0:resp_j00a"),
            ("model_call_from_judge_record", "judge_evaluations.1:resp_j00b"),
            *FALLBACK,
        ],
    ),
    # capture only: usage without details -> reasoning and cached not reported (null).
    (
        "0-1",
        ["rollout_record"],
        [("11", "resp_p01", POLICY, "policy_model"), ("12", "resp_j01", (110, 8, N, 118, N), "judge_model")],
        FALLBACK,
    ),
    # both: the judge store's call 22 is the row's judge_evaluations[0]; one call, no judge-record gap.
    (
        "1-0",
        ["rollout_record"],
        [("21", "resp_p10", POLICY, "policy_model"), ("22", "resp_j10", (130, 10, 3, 140, 32), "judge_model")],
        FALLBACK,
    ),
    (
        "1-1",
        ["rollout_record"],
        [("31", "resp_p11", POLICY, "policy_model"), (N, "resp_j11", (90, 5, 0, 95, 0), "judge_model")],
        [("model_call_from_judge_record", "judge_response:resp_j11"), *FALLBACK],
    ),
    ("2-0", ["rollout_record"], [("41", "resp_p20", POLICY, "policy_model")], FALLBACK),
]


def test_stores_give_one_model_call_per_judge_call_with_its_role(tmp_path):
    folder = JUDGE / "stores"
    out = tmp_path / "out.jsonl"
    result = run_json("build", folder / "input", "-o", out, *ROLES)
    assert result.exit_code == 0, result.stderr
    assert _facts(out) == STORES
    if os.environ.get("NG_TRAJ_UPDATE_GOLDEN") == "1":
        (folder / "expected.jsonl").write_bytes(out.read_bytes())
    assert out.read_bytes() == (folder / "expected.jsonl").read_bytes()
    summary = result.summary
    # judge: 5 calls (0-0 x2, 0-1, 1-0, 1-1); prompt 120+118+110+130+90, completion 9+7+8+10+5, total 129+125+118+140+95
    assert summary["roles"] == {
        "judge": {"calls": 5, "prompt_tokens": 568, "completion_tokens": 39, "total_tokens": 607},
        "policy": {"calls": 5, "prompt_tokens": 200, "completion_tokens": 60, "total_tokens": 260},
    }
    skipped = [line for line in result.stderr.splitlines() if "judge_record_skipped" in line]
    assert skipped == [
        f"{folder / 'input' / 'rollouts.jsonl'}:5: warning[judge_record_skipped]: rollout 2-0: judge_evaluations.0: "
        "no Responses-API response; not read as a model call",
        f"{folder / 'input' / 'rollouts.jsonl'}:5: info[judge_record_skipped]: rollout 2-0: judge_response: "
        "not a Responses-API response; not read as a model call",
    ]


def test_row_only_judge_calls_carry_the_recorded_exchange(tmp_path):
    out = tmp_path / "out.jsonl"
    assert run_cli("build", JUDGE / "stores" / "input", "-o", out, *ROLES).exit_code == 0
    rows = [orjson.loads(line) for line in (JUDGE / "stores" / "input" / "rollouts.jsonl").read_bytes().splitlines()]
    first = orjson.loads(out.read_bytes().splitlines()[0])
    judge = first["model_calls"][1]
    evaluation = rows[0]["judge_evaluations"][0]
    assert judge["request"] == evaluation["responses_create_params"]
    assert judge["response"] == evaluation["response"]
    assert judge["response_metadata"] == {
        "response_id": "resp_j00a",
        "model_ref": {"type": "responses_api_models", "name": "judge_model"},
        "model": "judge-1",
        "dialect": "responses",
        "status_code": None,  # the row records no HTTP status, times or latency
        "response_status": "completed",
        "finish_reason": None,
        "upstream_attempted": None,
        "response_source": None,
        "upstream_status_code": None,
        "local_response_reason": None,
        "error_category": None,
        "latency_ttft_ms": None,
    }
    assert (judge["started_at"], judge["completed_at"], judge["duration_ms"]) == (None, None, None)
    # resp_j00b's response has status null; the judge_response of 1-1 has no request
    assert first["model_calls"][2]["response_metadata"]["response_status"] is None
    fourth = orjson.loads(out.read_bytes().splitlines()[3])
    assert fourth["model_calls"][1]["request"] is None


def test_without_roles_the_merge_uses_the_response_id_and_row_calls_have_no_server(tmp_path):
    out = tmp_path / "out.jsonl"
    result = run_json("build", JUDGE / "stores" / "input", "-o", out)
    assert result.exit_code == 0
    expected = [
        (rollout, invocations, [(c[0], c[1], c[2], c[3] if c[0] else N) for c in calls], gaps)
        for rollout, invocations, calls, gaps in STORES
    ]
    assert _facts(out) == expected
    roles = result.summary["roles"]
    assert roles == {"unmapped": {"calls": 10, "prompt_tokens": 768, "completion_tokens": 99, "total_tokens": 867}}


def test_payload_options_apply_to_judge_calls(tmp_path):
    out = tmp_path / "out.jsonl"
    assert run_cli("build", JUDGE / "stores" / "input", "-o", out, "--no-payloads").exit_code == 0
    judge = orjson.loads(out.read_bytes().splitlines()[0])["model_calls"][1]
    assert judge["request"] is None and judge["response"] is None
    assert judge["token_stats"]["prompt_tokens"] == 120


def test_attachments_fill_what_capture_left_out_and_a_projected_call_is_not_added_again(tmp_path):
    out = tmp_path / "out.jsonl"
    assert run_cli("build", JUDGE / "attachments" / "input", "-o", out).exit_code == 0
    assert _facts(out) == [
        (
            "0-0",
            ["rollout_record"],
            [("a1", "resp_pa", POLICY, "policy_model"), ("a2", "resp_ja", (100, 6, 2, 106, 50), "judge_model")],
            [("model_call_payload_from_judge_record", "judge_evaluations.0:resp_ja"), *FALLBACK],
        ),
        (
            "0-1",
            ["root"],
            [("b1", "resp_pb", POLICY, "policy_model"), ("b2", "resp_jb", (104, 6, 0, 110, 0), "judge_model")],
            [],
        ),
    ]
    rows = [
        orjson.loads(line) for line in (JUDGE / "attachments" / "input" / "rollouts.jsonl").read_bytes().splitlines()
    ]
    built = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    policy, judge = built[0]["model_calls"]
    # the v0.5.0 attachment has no payloads and no response_status: the row's judge record fills them
    assert (policy["request"], policy["response"], policy["response_metadata"]["response_status"]) == (None, None, None)
    assert judge["request"] == rows[0]["judge_evaluations"][0]["responses_create_params"]
    assert judge["response"] == rows[0]["judge_evaluations"][0]["response"]
    assert judge["response_metadata"]["response_status"] == "completed"
    assert judge["duration_ms"] == 500.0  # capture's own values stay
    assert without_null_0_7_keys(built[1]) == rows[1]["ng_trajectory"]


def test_rebuilding_attached_rows_adds_no_judge_call_twice(tmp_path):
    first, attached, again = tmp_path / "a.jsonl", tmp_path / "rows" / "rollouts.jsonl", tmp_path / "b.jsonl"
    attached.parent.mkdir()
    assert run_cli("build", JUDGE / "stores" / "input", "-o", first, *ROLES).exit_code == 0
    assert run_cli("build", JUDGE / "stores" / "input", "-o", attached, "--attach", *ROLES).exit_code == 0
    assert run_cli("build", attached.parent, "-o", again).exit_code == 0
    assert again.read_bytes() == first.read_bytes()


def test_input_order_does_not_change_the_result(tmp_path):
    folder = JUDGE / "stores" / "input"
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    out = tmp_path / "out.jsonl"
    parts = ["judge_capture", "rollouts.jsonl", "capture"]
    assert run_cli("build", *[copy / p for p in parts], "-o", out, *ROLES).exit_code == 0
    assert out.read_bytes() == (JUDGE / "stores" / "expected.jsonl").read_bytes()


def test_bad_role_values_are_usage_errors(tmp_path):
    for value in ("judge_model", "=judge", "judge_model=", "a=b c"):
        result = run_cli("build", JUDGE / "stores" / "input", "-o", tmp_path / "x.jsonl", "--role", value)
        assert result.exit_code == 2, value
        assert len(result.stderr.strip().splitlines()) == 1 and "--role" in result.stderr
    result = run_cli("build", JUDGE / "stores" / "input", "-o", tmp_path / "x.jsonl", "--role", "a=b", "--role", "a=c")
    assert result.exit_code == 2 and "two roles" in result.stderr


def test_a_role_naming_no_model_server_of_the_build_is_a_warning_with_the_close_match(tmp_path):
    """A misspelt --role labels nothing; the build says so once per name, with what it saw (the
    finding's own example: retained_run's judge calls are all captured, by judge_model)."""
    out = tmp_path / "x.jsonl"
    retained = FIXTURES / "build" / "retained_run" / "input"
    result = run_json("build", retained, "-o", out, "--role", "judge_modle=judge", "--role", "policy_model=policy")
    assert result.exit_code == 0, result.stderr
    warnings = [d for d in result.diagnostics if d["code"] == "role_unmatched"]
    assert [(d["severity"], d["message"]) for d in warnings] == [
        (
            "warning",
            "--role judge_modle=judge: no model call of this build is served by 'judge_modle', so the role "
            "labels nothing; did you mean 'judge_model'? the model servers seen are 'judge_model', 'policy_model'",
        )
    ]
    assert result.summary["roles"]["unmapped"]["calls"] > 0
    clean = run_json("build", JUDGE / "stores" / "input", "-o", out, *ROLES)
    assert clean.exit_code == 0 and not [d for d in clean.diagnostics if d["code"] == "role_unmatched"]
    far = run_json(
        "build", JUDGE / "stores" / "input", "-o", out, "--role", "zzz=policy", "--role", "polcy_model=policy"
    )
    messages = [d["message"] for d in far.diagnostics if d["code"] == "role_unmatched"]
    assert len(messages) == 2 and "did you mean" not in messages[0] and "did you mean 'policy_model'?" in messages[1]
    assert messages[0].endswith("nothing; the model servers seen are 'judge_model', 'policy_model'")


def test_matrix_and_report_warn_of_a_role_naming_no_model_server_of_their_records_without_a_path(tmp_path):
    """As the build does: the matrix's records (built ones, or the build's raw inputs) are what the
    --role map labels; the warning is about the run, so its text line starts at its severity."""
    out = tmp_path / "x.jsonl"
    assert run_cli("build", FIXTURES / "build" / "retained_run" / "input", "-o", out).exit_code == 0
    for source in (out, FIXTURES / "build" / "retained_run" / "input"):
        result = run_cli("matrix", source, "--role", "judge_modle=judge", "--role", "policy_model=policy")
        assert result.exit_code == 0, result.stderr
        assert (
            "\nwarning[role_unmatched]: --role judge_modle=judge: no model call of these records is served by "
            "'judge_modle', so the role labels nothing; did you mean 'judge_model'? the model servers seen are "
            "'judge_model', 'policy_model'\n"
        ) in "\n" + result.stderr, result.stderr
        assert result.stderr.count("role_unmatched") == 1
    assert "role_unmatched" not in run_cli("matrix", out, "--role", "judge_model=judge").stderr
    report = run_cli("report", out, "--role", "judge_modle=judge", "-o", tmp_path / "r.html")
    assert report.exit_code == 0, report.stderr
    assert (
        "warning[role_unmatched]: --role judge_modle=judge: no model call of these rollouts is served by "
        "'judge_modle', so the role labels nothing; did you mean 'judge_model'?"
    ) in report.stderr
    assert (
        "role_unmatched" not in run_cli("report", out, "--role", "judge_model=judge", "-o", tmp_path / "r.html").stderr
    )
