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


def test_summary_lines_escape_the_paths_they_name(tmp_path):
    source = FIXTURES / "build" / "retained_run" / "input"
    name = EVIL.replace("\n", "").replace("/", "")  # a file name may hold ESC, not "/"
    built = tmp_path / ("b" + name + ".jsonl")
    result = run_cli("build", source, "-o", built)
    assert built.is_file(), result.stderr
    _clean(result.stderr)
    assert "b\\x1b[31m" in result.stderr
    converted = run_cli("convert", built, "-o", tmp_path / "out.parquet")
    _clean(converted.stderr)
    report = run_cli("report", built, "-o", tmp_path / ("r" + name + ".html"))
    _clean(report.stderr)
    assert "r\\x1b[31m" in report.stderr


def test_matrix_group_names_from_rows_are_escaped(tmp_path):
    rows = [
        json.loads(line) for line in (FIXTURES / "build" / "retained_run" / "expected.jsonl").read_text().splitlines()
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text(
        "".join(json.dumps({"agent_ref": {"name": "a" + EVIL + "|x"}, "ng_trajectory": row}) + "\n" for row in rows)
    )
    for args in ((), ("--format", "markdown")):
        result = run_cli("matrix", path, "--by", "agent", *args)
        assert result.exit_code in (0, 1), result.output
        _clean(result.stdout)
        assert "a\\x1b[31m\\nforged" in result.stdout
    assert (
        "a\\x1b[31m\\nforged [bold]line[/bold]\\|x"
        in run_cli("matrix", path, "--by", "agent", "--format", "markdown").stdout
    )


def test_export_refuses_outputs_without_a_name_and_a_report_path_taken_by_a_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = FIXTURES / "build" / "retained_run" / "expected.jsonl"
    for output in (".", "..", "x/.."):
        result = run_cli("export", source, "--format", "atif", "-o", output)
        assert result.exit_code == 2 and "has no name to put the completeness report beside" in result.stderr, (
            result.output
        )
    (tmp_path / "out.completeness.json").mkdir()
    result = run_cli("export", source, "--format", "atif", "-o", tmp_path / "out")
    assert result.exit_code == 2 and "is a directory: the completeness report" in result.stderr
    assert not (tmp_path / "out").exists()
