"""The Hermes rules one at a time: tool heuristics, reasoning spellings, status, compaction markers,
ShareGPT parsing and sniffing."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from ng_traj.sources.detect import claims
from ng_traj.sources.hermes.files import session_totals, utc_seconds
from ng_traj.sources.hermes.messages import (
    failed_result,
    invocation_status,
    is_compaction_summary,
    normalise,
    reasoning_items,
)
from ng_traj.sources.hermes.sharegpt import sharegpt_messages


@pytest.mark.parametrize(
    ("tool", "result", "failed"),
    [
        ("terminal", '{"output": "x", "exit_code": 1}', True),
        ("terminal", '{"output": "x", "exit_code": 0, "error": null}', False),
        ("read_file", '{"exit_code": 1}', False),  # exit codes count for terminal only
        ("todo", '{"status": "failed"}', True),
        ("todo", '{"status": "success", "error": ""}', False),
        ("web", '{"error": "quota"}', True),
        ("web", "Error: rate limited", True),
        ("web", "  Error at the start after blanks", True),
        ("web", 'upstream said {"error": 1', True),  # quoted "error" in the first 500 characters
        ("web", "an error happened", False),  # unquoted: not the reference's marker
        ("web", "x" * 500 + '"failed"', False),  # beyond the first 500 characters
        ("web", "[1, 2]", False),  # JSON but not an object
        ("web", None, False),
    ],
)
def test_reference_failure_heuristic(tool: str, result: object, failed: bool) -> None:
    assert failed_result(tool, result) is failed


def test_reasoning_spellings_in_precedence_order() -> None:
    codex = [{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"}]
    message = {"reasoning": "r", "reasoning_content": "rc", "codex_reasoning_items": codex}
    assert reasoning_items(message, "i")[0]["id"] == "rs_1"
    assert reasoning_items({"reasoning": "", "reasoning_content": "rc"}, "i")[0]["summary"][0]["text"] == "rc"
    details = [{"type": "thinking", "thinking": "t1"}, {"type": "reasoning.text", "text": "t2"}, {"signature": "s"}]
    assert reasoning_items({"reasoning_details": details}, "i")[0]["summary"][0]["text"] == "t1\nt2"
    assert reasoning_items({"content": "<think>x</think>"}, "i") == []  # inline think text stays content


def test_status_table() -> None:
    answer = {"role": "assistant", "content": "done"}
    asking = {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "function": {"name": "t"}}]}
    assert invocation_status([], None) == "unknown"
    assert invocation_status([answer], None) == "completed"
    assert invocation_status([asking], None) == "incomplete"
    assert invocation_status([{"role": "assistant", "content": ""}], None) == "incomplete"
    assert invocation_status([asking], True) == "completed"
    assert invocation_status([answer], False) == "incomplete"


@pytest.mark.parametrize(
    ("content", "summary"),
    [
        ("[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns ...", True),
        ("[CONTEXT SUMMARY]: legacy", True),
        (
            "[PRIOR CONTEXT — for reference only; not a new message]\nhi\n"
            "[END OF PRIOR CONTEXT — COMPACTION SUMMARY BELOW]\n[CONTEXT COMPACTION ...",
            True,
        ),
        ("please write a [CONTEXT COMPACTION] note", False),
    ],
)
def test_compaction_marker(content: str, summary: bool) -> None:
    assert is_compaction_summary({"role": "user", "content": content}) is summary


def test_normalise_matches_the_reference_item_order_and_ids() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {
            "role": "assistant",
            "content": None,
            "reasoning": "think",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "t", "arguments": {"x": 1}}},
                {"id": "c2", "type": "function", "function": {"name": "t", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "tool", "tool_call_id": "c1", "content": "again"},
        {"role": "tool", "tool_call_id": "zz", "content": "stray"},
    ]
    out = normalise(messages, "inv", system_prompt="sys")
    assert [(i["type"], i.get("role"), i.get("id")) for i in out.conversation] == [
        ("message", "system", None),
        ("message", "user", None),
        ("reasoning", None, "inv-reasoning-1"),
        ("message", "assistant", "inv-message-1"),
        ("function_call", None, "c1"),
        ("function_call", None, "c2"),
        ("function_call_output", None, None),
        ("function_call_output", None, None),
        ("function_call_output", None, None),
    ]
    assert out.conversation[1]["content"] == "ab"
    assert out.conversation[4]["arguments"] == '{"x":1}'
    assert [(t.tool_call_id, t.status) for t in out.tools] == [("c1", "unknown"), ("c2", "unknown")]
    assert [(g.code, g.detail) for g in out.gaps] == [
        ("tool_result_unowned", "zz"),
        ("ambiguous_tool_artifact", "c1"),
        ("tool_timing_unavailable", "c1"),
        ("tool_result_missing", "c2"),
        ("tool_timing_unavailable", "c2"),
    ]
    assert [sorted(call.tool_call_ids) for call in out.calls] == [["c1", "c2"]]


def test_sharegpt_text_that_only_looks_like_a_call_stays_text() -> None:
    turns = [{"from": "gpt", "value": "<think>\n</think>\nI will call <tool_call>\nnot json\n</tool_call>"}]
    messages, gaps, skipped = sharegpt_messages(turns, "inv")
    assert messages == [{"role": "assistant", "content": "I will call <tool_call>\nnot json\n</tool_call>"}]
    assert gaps == [] and skipped == []


def test_sharegpt_extra_responses_are_kept_as_outputs() -> None:
    turns = [
        {"from": "gpt", "value": '<think>\n</think>\n<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>'},
        {
            "from": "tool",
            "value": '<tool_response>\n{"tool_call_id": "c1", "name": "a", "content": "1"}\n</tool_response>\n'
            '<tool_response>\n{"tool_call_id": "c2", "name": "unknown", "content": "2"}\n</tool_response>',
        },
    ]
    messages, _, _ = sharegpt_messages(turns, "inv")
    assert [m.get("tool_call_id") for m in messages] == [None, "c1", "c2"]
    assert normalise(messages, "inv").gaps[0].code == "tool_result_unowned"


def test_local_times_are_never_converted() -> None:
    assert utc_seconds("2026-05-29T19:43:06.264834") == (None, True)
    assert utc_seconds("2026-05-29T19:43:06+00:00") == (1780083786.0, False)
    assert utc_seconds(1780083786.0) == (None, False)


def test_session_totals_convert_exclusive_counts_once() -> None:
    row = {"input_tokens": 4095, "output_tokens": 200, "cache_read_tokens": 17467, "cache_write_tokens": 0}
    assert session_totals(row, exclusive=True) == {
        "prompt_tokens": 21562,
        "completion_tokens": 200,
        "cached_tokens": 17467,
    }
    assert session_totals(row, exclusive=False) == {"completion_tokens": 200, "cached_tokens": 17467}
    assert session_totals({"input_tokens": None}, exclusive=True) == {}


def _kinds(path: Path) -> list[tuple[str, str]]:
    return [(c.kind, c.description) for c in claims(path)]


def test_sniffing(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    with sqlite3.connect(db) as connection:
        connection.execute("PRAGMA journal_mode=wal")
        connection.execute("CREATE TABLE sessions (id TEXT)")
        connection.execute("CREATE TABLE messages (session_id TEXT, role TEXT, content TEXT)")
        keep = sqlite3.connect(db)
        keep.execute("INSERT INTO sessions VALUES ('s')")
        keep.commit()
        assert _kinds(db) == [("hermes", "Hermes state.db")]
        assert _kinds(tmp_path / "state.db-wal") == [("hermes", "Hermes state.db sidecar")]
        keep.close()
    named = tmp_path / "profile.db"
    with sqlite3.connect(named) as connection:
        connection.execute("CREATE TABLE sessions (id TEXT)")
        connection.execute("CREATE TABLE messages (session_id TEXT, role TEXT, content TEXT)")
    assert _kinds(named) == [("hermes", "Hermes state.db")]  # by the tables on its first page
    openclaw_store = tmp_path / "sessions.json"
    openclaw_store.write_text(json.dumps({"agent:main:main": {"sessionId": "x", "updatedAt": 1}}))
    assert _kinds(openclaw_store) == [("openclaw", "OpenClaw session store")]  # not Hermes
    hermes_store = tmp_path / "store" / "sessions.json"
    hermes_store.parent.mkdir()
    hermes_store.write_text(json.dumps({"k": {"session_key": "k", "session_id": "s"}}))
    assert _kinds(hermes_store) == [("hermes", "Hermes gateway session store")]
    chat = tmp_path / "dataset.jsonl"
    chat.write_text(json.dumps({"role": "user", "content": "hi"}) + "\n")  # no timestamp: not a gateway line
    assert _kinds(chat) == []
