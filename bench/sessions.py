"""Native session files for the corpus: pi v3 sessions and OpenClaw transcripts with their store.

Formats: pi ( a ``type:"session"`` header with ``version:3``, then entries
with 8-hex ``id``/``parentId`` and ISO ``timestamp``; ``message`` entries whose ``message`` carries
``role``, content blocks (``text``, ``thinking``, ``toolCall``), ``usage {input, output, cacheRead,
cacheWrite, totalTokens, cost}``, ``stopReason``, ``responseId`` and a millisecond ``timestamp``;
``toolResult`` messages; ``compaction`` entries with ``summary``, ``firstKeptEntryId``,
``tokensBefore``) and OpenClaw ( the same pi v3 transcript plus ``custom`` ``model-snapshot``
entries and ``exec`` tool details with ``durationMs``, under ``agents/<id>/sessions/`` beside the
``sessions.json`` store).
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

import orjson
from dialects import Conversation, Usage


def _iso(seconds: float) -> str:
    moment = dt.datetime.fromtimestamp(seconds, dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class _Entries:
    """Appends pi entries, each the child of the previous one."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.lines: list[dict[str, Any]] = []
        self.parent: str | None = None

    def add(self, kind: str, at: float, **fields: Any) -> str:
        entry_id = f"{self.rng.getrandbits(32):08x}"
        self.lines.append({"type": kind, "id": entry_id, "parentId": self.parent, "timestamp": _iso(at), **fields})
        self.parent = entry_id
        return entry_id


def _usage(usage: Usage) -> dict[str, Any]:
    fresh = usage.prompt - usage.cached
    total = fresh + usage.completion + usage.cached
    cost = {"input": 0.0, "output": 0.0, "cacheRead": 0.0, "cacheWrite": 0.0, "total": 0.0}
    return {
        "input": fresh,
        "output": usage.completion,
        "cacheRead": usage.cached,
        "cacheWrite": 0,
        "totalTokens": total,
        "cost": cost,
    }


def _assistant(conv: Conversation, index: int, usage: Usage, started: float, api: str, provider: str) -> dict:
    step = conv.steps[index]
    content: list[dict[str, Any]] = []
    if step.reasoning:
        content.append({"type": "thinking", "thinking": step.reasoning})
    if step.tool is not None:
        call_id, name, arguments = step.tool
        content.append({"type": "toolCall", "id": call_id, "name": name, "arguments": arguments})
    else:
        content.append({"type": "text", "text": step.text})
    return {
        "role": "assistant",
        "content": content,
        "api": api,
        "provider": provider,
        "model": conv.model,
        "usage": _usage(usage),
        "stopReason": "toolUse" if step.tool else "stop",
        "timestamp": int(started * 1000),
        "responseId": step.response_id,
    }


def session_lines(
    conv: Conversation,
    timings: list[tuple[float, float]],
    usages: list[Usage],
    rng: random.Random,
    *,
    openclaw: bool,
) -> tuple[str, list[dict[str, Any]]]:
    """The session id and the lines of one session transcript for a finished conversation.

    Args:
        timings: ``(started_at, completed_at)`` seconds per step.
        openclaw: Write OpenClaw's habits (model snapshot, exec details) instead of plain pi.
    """
    session_id = "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}".format(
        *tuple(rng.getrandbits(b) for b in (32, 16, 12, 12, 48))
    )
    start = timings[0][0] - 1.0
    header = {"type": "session", "version": 3, "id": session_id, "timestamp": _iso(start), "cwd": "/workspace/task"}
    entries = _Entries(rng)
    provider, api = ("custom-gym", "openai-completions") if openclaw else ("anthropic", "anthropic-messages")
    entries.add("model_change", start, provider=provider, modelId=conv.model)
    entries.add("thinking_level_change", start, thinkingLevel="low")
    if openclaw:
        snapshot = {"timestamp": int(start * 1000), "provider": provider, "modelApi": api, "modelId": conv.model}
        entries.add("custom", start, customType="model-snapshot", data=snapshot)
    user = {"role": "user", "content": [{"type": "text", "text": conv.task}], "timestamp": int(start * 1000)}
    first_kept = entries.add("message", start, message=user)
    for index, step in enumerate(conv.steps):
        started, completed = timings[index]
        entries.add("message", completed, message=_assistant(conv, index, usages[index], started, api, provider))
        if step.tool is None or step.result is None:
            continue
        done = completed + 0.2 + rng.random()
        details = (
            {
                "status": "completed",
                "exitCode": 0,
                "durationMs": int((done - completed) * 1000),
                "cwd": "/workspace/task",
            }
            if openclaw and step.tool[1] == "exec"
            else None
        )
        result = {
            "role": "toolResult",
            "toolCallId": step.tool[0],
            "toolName": step.tool[1],
            "content": [{"type": "text", "text": step.result}],
            "details": details,
            "isError": False,
            "timestamp": int(done * 1000),
        }
        kept = entries.add("message", done, message=result)
        if index == 10:
            entries.add(
                "compaction",
                done,
                summary="Earlier steps explored the workspace.",
                firstKeptEntryId=first_kept,
                tokensBefore=usages[index].prompt,
                details={"readFiles": [], "modifiedFiles": []},
            )
            first_kept = kept
    return session_id, [header, *entries.lines]


def write_session(folder: Path, session_id: str, lines: list[dict[str, Any]], *, openclaw: bool, at: float) -> int:
    """Write one transcript (and, for OpenClaw, its ``sessions.json``); return the bytes written."""
    if openclaw:
        folder = folder / "agents" / "main" / "sessions"
        name = f"{session_id}.jsonl"
    else:
        name = _iso(at).replace(":", "-").replace(".", "-") + f"_{session_id}.jsonl"
    folder.mkdir(parents=True, exist_ok=True)
    data = b"".join(orjson.dumps(line) + b"\n" for line in lines)
    (folder / name).write_bytes(data)
    if not openclaw:
        return len(data)
    store = {
        "agent:main:main": {
            "sessionId": session_id,
            "updatedAt": int(at * 1000),
            "sessionFile": f"/home/user/.openclaw/{name}",
            "model": lines[1]["modelId"],
            "modelProvider": lines[1]["provider"],
            "status": "done",
            "startedAt": int(at * 1000) - 60_000,
            "endedAt": int(at * 1000),
            "runtimeMs": 60_000,
            "compactionCount": sum(1 for line in lines if line["type"] == "compaction"),
        }
    }
    text = orjson.dumps(store, option=orjson.OPT_INDENT_2)
    (folder / "sessions.json").write_bytes(text)
    return len(data) + len(text)
