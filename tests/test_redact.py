"""--redact: the credential shapes masked in text, the look-alikes left alone, keys, depth, --redact-pattern."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES, run_cli
from ng_traj.redact import MASK, SECRET_KEYS, Redactor, _normalise, check_keys, compile_patterns, unmaskable_keys

FAKE = "A1b2C3d4E5f6G7h8J9k0"
"""Twenty characters of a made-up token body."""

SECRETS = {
    "openai": ("key sk-" + FAKE + FAKE, "key " + MASK),
    "openai_project": ("sk-proj-" + FAKE + "_" + FAKE, MASK),
    "anthropic": ("sk-ant-api03-" + FAKE * 4 + "-AA", MASK),
    "nvidia": ("NVIDIA_KEY=nvapi-" + FAKE * 3, "NVIDIA_KEY=" + MASK),
    "github_classic": ("ghp_" + FAKE + "abcdefghijklmnop", MASK),
    "github_oauth": ("gho_" + FAKE + "abcdefghijklmnop", MASK),
    "github_fine_grained": ("github_pat_11" + FAKE + "_" + FAKE + FAKE, MASK),
    "gitlab": ("glpat-" + FAKE, MASK),
    "aws_key_id": ("id AKIAIOSFODNN7EXAMPLE here", f"id {MASK} here"),
    "aws_temporary_key_id": ("ASIAIOSFODNN7EXAMPLE", MASK),
    "aws_secret_assignment": (
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "aws_secret_access_key = " + MASK,
    ),
    "aws_secret_env": (
        "export AWS_SECRET_ACCESS_KEY='wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY'",
        f"export AWS_SECRET_ACCESS_KEY='{MASK}'",
    ),
    "google": ("AIza" + FAKE + "abcdefghijklmno", MASK),
    "google_oauth": ("ya29." + FAKE, MASK),
    "slack_bot": ("xoxb-1234567890-" + FAKE, MASK),
    "slack_user": ("xoxp-1234567890-" + FAKE, MASK),
    "huggingface": ("hf_" + FAKE + "abcdefghijklmn", MASK),
    "stripe_secret": ("sk_live_" + FAKE, MASK),
    "stripe_restricted": ("rk_test_" + FAKE, MASK),
    "jwt": (
        "token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U end",
        f"token {MASK} end",
    ),
    "jwt_unsigned": ("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.", MASK),
    "bearer": ("Bearer abc123.def456", MASK),
    "bearer_lowercase": ("use bearer abc123def456 now", f"use {MASK} now"),
    "bearer_uppercase": ("BEARER abc123def456", MASK),
    "basic": ("Basic dXNlcjpwYXNzd29yZA==", MASK),
    "authorization_header": ('curl -H "Authorization: Basic dXNlcjpwYXNz" x', f'curl -H "Authorization: {MASK}" x'),
    "authorization_json": ('{"Authorization": "Token abcdefgh"}', '{"Authorization": "' + MASK + '"}'),
    "url_credentials": (
        "clone https://user:s3cr3t@example.com/repo.git",
        f"clone https://user:{MASK}@example.com/repo.git",
    ),
    "url_credentials_postgres": ("postgresql://app:hunter2@db:5432/x", f"postgresql://app:{MASK}@db:5432/x"),
    "private_key": (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\nafter",
        MASK + "\nafter",
    ),
    "private_key_openssh": (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA==\n-----END OPENSSH PRIVATE KEY-----",
        MASK,
    ),
    "private_key_cut_short": ("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg", MASK),
}


@pytest.mark.parametrize("shape", sorted(SECRETS))
def test_secret_shapes_are_masked(shape):
    text, expected = SECRETS[shape]
    assert Redactor().text(text) == expected


NOT_SECRETS = [
    "sk-learn-compatible-estimators",
    "the bearer of bad news",
    "a bearer instrument is payable to whoever holds it",
    "Basic arithmetic and basic concepts",
    "authorization is required for this endpoint",
    "Authorization: required",
    "https://example.com:8080/path?q=a:b",
    "see https://docs.example.com/api/v1/keys#rotate",
    "git@github.com:org/repo.git",
    "mailto:someone@example.com",
    "max_output_tokens=512 prompt_tokens=10",
    "AKIA is a prefix of AWS key ids",
    "eyJ alone is not a token",
    "ghp_short",
    "hf_hub_download(repo_id)",
    "nvapi-",
    "BEGIN PRIVATE KEY without dashes",
    "user:pass@host without a scheme",
]


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_look_alikes_are_not_masked(text):
    assert Redactor().text(text) == text


def test_keys_are_exact_names_and_usage_fields_stay():
    value = {
        "api-key": "x",
        "NVIDIA_API_KEY": "y",
        "token": "Hello",
        "logprob": -0.5,
        "max_output_tokens": 512,
        "password": "",
        "secret": None,
        "tokens": [{"token": "a"}],
    }
    assert Redactor().value(value) == {
        "api-key": MASK,
        "NVIDIA_API_KEY": MASK,
        "token": "Hello",
        "logprob": -0.5,
        "max_output_tokens": 512,
        "password": "",
        "secret": None,
        "tokens": [{"token": "a"}],
    }


def test_values_nested_a_thousand_deep_are_masked_without_recursion():
    depth = 5000
    value: object = {"api_key": "k", "text": "sk-" + FAKE}
    for index in range(depth):
        value = [value] if index % 2 else {"next": value}
    masked = Redactor().value(value)
    for index in reversed(range(depth)):
        masked = masked[0] if index % 2 else masked["next"]
    assert masked == {"api_key": MASK, "text": MASK}


def test_key_order_is_kept():
    value = {"b": 1, "api_key": "x", "a": {"z": 1, "y": "Bearer abc12345"}}
    masked = Redactor().value(value)
    assert json.dumps(masked) == json.dumps({"b": 1, "api_key": MASK, "a": {"z": 1, "y": MASK}})


def test_extra_patterns_mask_the_whole_match_or_the_secret_group():
    patterns = compile_patterns([r"acme-[0-9]{6}", r"pin=(?P<secret>\d+)", r"\b"])
    redactor = Redactor(extra_patterns=patterns)
    assert redactor.text("id acme-123456, pin=0042; xyz") == f"id {MASK}, pin={MASK}; xyz"


def test_an_invalid_pattern_is_named():
    with pytest.raises(ValueError, match=r"--redact-pattern '\(unclosed' is not a regular expression"):
        compile_patterns(["(unclosed"])


@pytest.mark.parametrize("pattern", ["", "a*", "(x)?", "^", "x|"])
def test_a_pattern_that_matches_the_empty_string_is_refused(pattern):
    with pytest.raises(ValueError, match=r"matches the empty string, so it would match everywhere"):
        compile_patterns([pattern])


@pytest.mark.parametrize("command", ["build", "show", "report", "export"])
def test_an_empty_redact_pattern_is_a_usage_error_for_every_command(tmp_path, command):
    rollouts = _rollouts(tmp_path, "x")
    out = tmp_path / "out.jsonl"
    extra = {"build": ["-o", out], "show": [], "report": ["-o", out], "export": ["--format", "otlp", "-o", out]}
    result = run_cli(command, rollouts, *extra[command], "--redact-pattern", "")
    assert result.exit_code == 2, result.stderr
    assert "error: --redact-pattern '' matches the empty string" in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()


def _rollouts(tmp_path, content: str):
    row = {
        "_ng_task_index": 0,
        "_ng_rollout_index": 0,
        "responses_create_params": {"input": [{"role": "user", "content": content}]},
        "response": {"output": []},
    }
    path = tmp_path / "rollouts.jsonl"
    path.write_text(json.dumps(row) + "\n")
    return path


def test_build_redact_pattern_masks_the_output(tmp_path):
    rollouts = _rollouts(tmp_path, "ticket ACME-778899 with nvapi-" + FAKE * 2)
    out = tmp_path / "out.jsonl"
    result = run_cli("build", rollouts, "-o", out, "--redact-pattern", r"ACME-\d+")
    assert result.exit_code == 0, result.stderr
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["invocations"][0]["conversation"][0]["content"] == f"ticket {MASK} with {MASK}"
    assert "ACME-778899" in rollouts.read_text()


def test_build_invalid_redact_pattern_is_a_usage_error(tmp_path):
    rollouts = _rollouts(tmp_path, "x")
    out = tmp_path / "out.jsonl"
    result = run_cli("build", rollouts, "-o", out, "--redact-pattern", "[a-")
    assert result.exit_code == 2
    assert "--redact-pattern '[a-' is not a regular expression" in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()


@pytest.mark.parametrize("key", ["rollout_id", "Task-ID", "invocation_id", "call_id", "response_id"])
def test_a_mask_over_the_ids_records_are_joined_by_is_refused(tmp_path, key):
    """``--redact-key rollout_id`` gave every rollout the id ``[REDACTED]``, and the records still validated."""
    out = tmp_path / "out.jsonl"
    result = run_cli("build", _rollouts(tmp_path, "x"), "-o", out, "--redact-key", key)
    assert result.exit_code == 2 and not out.exists(), result.stderr
    assert result.stderr.startswith(f"error: --redact-key {key}: {key} is an id that names rollouts or their parts")
    assert run_cli("build", _rollouts(tmp_path, "x"), "-o", out, "--redact-key", "api_key").exit_code == 0


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_mask_over_a_value_the_contract_constrains_is_a_usage_error_naming_it(tmp_path, jobs):
    rollouts = _rollouts(tmp_path, "x")
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"previous\n")
    result = run_cli("build", rollouts, "-o", out, "--redact-key", "role", "--jobs", jobs)
    assert result.exit_code == 2, result.stderr
    assert (
        "error: --redact-key role: the trajectory contract constrains the values of role (in at least one place to a fixed set of"
        in result.stderr
    )
    assert "masking it would make the records invalid; to mask secrets in text, use --redact-pattern" in result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert out.read_bytes() == b"previous\n"


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_pattern_whose_masks_make_a_record_invalid_stops_the_build_naming_the_rollout(tmp_path, jobs):
    """Every string masked: two capture ids become one, which only the assembly of the rollout finds."""
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"previous\n")
    source = FIXTURES / "build" / "retained_run" / "input"
    result = run_cli("build", source, "-o", out, "--redact-pattern", ".+", "--jobs", jobs)
    assert result.exit_code == 2, result.stderr
    assert (
        "error: rollout 0-0: --redact masked a value the trajectory contract constrains (model_call_id "
        "'[REDACTED]' is not unique in the trajectory); give a narrower --redact-key or --redact-pattern"
    ) in result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert out.read_bytes() == b"previous\n"


@pytest.mark.parametrize("command", ["build", "show", "report", "export"])
@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("type", "in at least one place to a fixed set of"),
        ("Status", "in at least one place to a fixed set of"),
        ("schema-version", "in at least one place to a fixed set of"),
        # text in an input message, a list of parts in an output message: refused, as masking can break a record
        ("content", "in at least one place to numbers, lists or objects rather than text"),
        ("prompt_tokens", "in at least one place to numbers, lists or objects rather than text"),
    ],
)
def test_a_redact_key_the_contract_constrains_is_refused_before_any_input_is_read(tmp_path, command, key, why):
    missing = tmp_path / "missing.jsonl"  # never read: the refusal comes first
    out = tmp_path / "out.jsonl"
    extra = {"build": ["-o", out], "show": [], "report": ["-o", out], "export": ["--format", "otlp", "-o", out]}
    result = run_cli(command, missing, *extra[command], "--redact-key", key)
    assert result.exit_code == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: --redact-key {key}: the trajectory contract constrains the values of {key} ({why}")
    assert line.endswith("so masking it would make the records invalid; to mask secrets in text, use --redact-pattern")
    assert not out.exists()


@pytest.mark.parametrize("command", ["build", "show", "report", "export"])
@pytest.mark.parametrize("key", ["", "   "])
def test_an_empty_redact_key_is_refused_for_every_command(tmp_path, command, key):
    rollouts = _rollouts(tmp_path, "x")
    out = tmp_path / "out.jsonl"
    extra = {"build": ["-o", out], "show": [], "report": ["-o", out], "export": ["--format", "otlp", "-o", out]}
    result = run_cli(command, rollouts, *extra[command], "--redact-key", key)
    assert result.exit_code == 2, result.stderr
    assert f"error: --redact-key {key!r} is empty or only spaces, so it names no key to mask" in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()


@pytest.mark.parametrize("key", ["model", "id", "name", "text", "arguments", "my_secret"])
def test_a_redact_key_free_text_wherever_the_contract_has_it_is_accepted(key):
    check_keys([key])
    assert _normalise(key) not in unmaskable_keys()


def test_no_built_in_secret_key_is_one_the_contract_constrains():
    assert not SECRET_KEYS & unmaskable_keys()


def test_build_redact_key_text_masks_the_text_and_the_record_stays_valid(tmp_path):
    rollouts = _rollouts(tmp_path, "hello")
    out = tmp_path / "out.jsonl"
    result = run_cli("build", rollouts, "-o", out, "--redact-key", "text", "--redact-key", "id")
    assert result.exit_code == 0, result.stderr
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["invocations"][0]["conversation"][0]["role"] == "user"


def test_build_attach_redacts_a_row_nested_six_hundred_deep(tmp_path):
    nested = '"sk-' + FAKE + '"'
    for _ in range(600):
        nested = '{"n":' + nested + "}"
    row = (
        '{"_ng_task_index":0,"_ng_rollout_index":0,"responses_create_params":{"input":[],"metadata":'
        + nested
        + '},"response":{"output":[]}}\n'
    )
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text(row)
    out = tmp_path / "out.jsonl"
    result = run_cli("build", rollouts, "-o", out, "--attach", "--redact")
    assert result.exit_code == 0, result.stderr
    text = out.read_text()
    assert text.count(MASK) == 1 and "sk-" + FAKE not in text and text.count('{"n":') == 600


@pytest.mark.parametrize("pattern", ["output_text", "message", "user", "assistant", r"out\w+", "completed"])
def test_a_pattern_that_hits_a_type_tag_or_a_role_masks_the_text_and_keeps_the_tag(tmp_path, pattern):
    row = {
        "_ng_task_index": 0,
        "_ng_rollout_index": 0,
        "responses_create_params": {
            "input": [{"role": "user", "content": "user message, assistant completed output_text"}]
        },
        "response": {
            "output": [
                {
                    "type": "message",
                    "id": "msg_1",
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {
                            "type": "output_text",
                            "text": "user message, assistant completed output_text",
                            "annotations": [],
                        }
                    ],
                }
            ]
        },
    }
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text(json.dumps(row) + "\n")
    out = tmp_path / "out.jsonl"
    result = run_cli("build", rollouts, "-o", out, "--attach", "--redact-pattern", pattern)
    assert result.exit_code == 0, result.stderr
    written = json.loads(out.read_text())
    items = written["ng_trajectory"]["invocations"][0]["conversation"]
    assert [(item["type"], item["role"]) for item in items] == [("message", "user"), ("message", "assistant")]
    assert items[1]["status"] == "completed" and items[1]["content"][0]["type"] == "output_text"
    assert MASK in items[1]["content"][0]["text"] and MASK in items[0]["content"]
    assert written["response"]["output"][0]["content"][0]["type"] == "output_text"
    assert run_cli("validate", out).exit_code == 0


def test_a_type_tag_is_masked_where_it_is_no_value_the_contract_allows_there():
    redactor = Redactor(extra_patterns=compile_patterns(["output_text", "secretword"]))
    assert redactor.value({"type": "output_text", "role": "secretword", "text": "output_text"}) == {
        "type": "output_text",
        "role": MASK,
        "text": MASK,
    }
