"""Control characters in record values (ESC sequences, newlines) are shown escaped, never sent raw.

Session transcripts are untrusted: a rollout id, a model or tool name or a message text holding
``\\x1b[31m`` or a newline must not colour the terminal or forge a line of ``show`` or of
``export``'s per-rollout summary. One record of ``fixtures/views/parallel_subagent.jsonl`` is
changed so.
"""

from __future__ import annotations

import json

from conftest import FIXTURES, run_cli

PARALLEL = FIXTURES / "views" / "parallel_subagent.jsonl"
EVIL = "\x1b[31m\nforged [bold]line[/bold]"
SHOWN = "\\x1b[31m\\nforged [bold]line[/bold]"


def _hostile(tmp_path):
    """The fixture's first record with EVIL in its rollout id, a model name, a tool name and a message."""
    lines = PARALLEL.read_text().splitlines()
    record = json.loads(lines[0])
    record["rollout_id"] = "r" + EVIL
    for turn in record["turns"]:
        turn["rollout_id"] = record["rollout_id"]
    for call in record["model_calls"]:
        if call.get("request"):
            call["request"]["model"] = "m" + EVIL
        if call.get("response_metadata"):
            call["response_metadata"]["model"] = "m" + EVIL
    for tool in record["tool_calls"]:
        tool["tool_name"] = "t" + EVIL
    record["invocations"][0]["conversation"][1]["content"] = "u" + EVIL
    path = tmp_path / "hostile.jsonl"
    path.write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")
    return path, record["rollout_id"]


def _clean(text: str) -> None:
    assert "\x1b" not in text
    assert not any(line.lstrip(" │├└─┃┏┗┡┣╇╰╭┌|").startswith("forged") for line in text.splitlines()), text


def test_the_rollout_list_escapes_control_characters(tmp_path):
    path, _ = _hostile(tmp_path)
    result = run_cli("show", path)
    assert result.exit_code == 0, result.output
    _clean(result.stdout)
    _clean(result.stderr)
    assert "r\\x1b[31m" in result.stdout


def test_the_rollout_view_escapes_ids_model_and_tool_names(tmp_path):
    path, rollout = _hostile(tmp_path)
    result = run_cli("show", path, rollout)
    assert result.exit_code == 0, result.output
    _clean(result.stdout)
    _clean(result.stderr)
    assert f"rollout r{SHOWN}" in result.stdout
    assert f"m{SHOWN}" in result.stdout
    assert f"t{SHOWN}" in result.stdout


def test_an_unknown_rollout_error_escapes_the_id(tmp_path):
    path, _ = _hostile(tmp_path)
    result = run_cli("show", path, "x" + EVIL)
    assert result.exit_code == 2
    _clean(result.stdout)
    _clean(result.stderr)


def test_the_export_summary_lines_escape_rollout_ids(tmp_path):
    path, _ = _hostile(tmp_path)
    for format_ in ("atif", "otlp"):
        result = run_cli("export", path, "--format", format_, "-o", tmp_path / format_)
        _clean(result.stdout)
        _clean(result.stderr)
        assert f"r{SHOWN}" in result.stderr, result.stderr
