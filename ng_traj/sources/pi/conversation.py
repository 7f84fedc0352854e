"""The model-visible conversation of a pi-family session, as Responses input items.

Per entry on the active path (item shapes as Gym's OpenClaw
conversation):

* user / system / developer messages: an easy message; text blocks joined by ``\\n``; images kept as
  ``input_image`` parts (data URLs) next to ``input_text`` parts.
* assistant: a reasoning item ``rs_<entry id>`` (thinking blocks and the ``reasoning*`` fields joined
  by ``\\n``), an output message ``msg_<entry id>`` (text blocks joined by ``\\n``; OpenClaw's ids are
  positions, as NeMo Gym's OpenClaw agent writes them: ``msg-<n>``), then one function
  call per ``toolCall`` block (``arguments`` = JSON of ``arguments``, else of ``partialJson`` /
  ``partialArgs``; a block without id gets ``call-<entry id>-<n>`` and the gap
  ``tool_call_id_missing``).
* toolResult: a function call output (text blocks concatenated; ``details`` as JSON when there is no
  text).
* bashExecution, custom messages and ``custom_message`` entries: the user text pi sends the model
  (``Ran `cmd` …`` for shell runs; ``excludeFromContext`` runs are left out).
* compaction and branch_summary entries: the summary message pi puts in the context, with pi's
  own wording. A compaction's summary stands before its first kept entry (where the model's context
  restarted); the earlier entries stay in the history, so nothing is lost.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ng_traj.contract import ObservationGap
from ng_traj.io.lines import deep_dumps
from ng_traj.sources.native import scalar_text
from ng_traj.sources.pi.session import Entry

COMPACTION_PREFIX = (
    "The conversation history before this point was compacted into the following summary:\n\n<summary>\n"
)
COMPACTION_SUFFIX = "\n</summary>"
BRANCH_PREFIX = "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
BRANCH_SUFFIX = "</summary>"
REASONING_KEYS = ("reasoning_content", "reasoning_text", "thinking")


def _text_blocks(content: Any, joiner: str = "\n") -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return joiner.join(
        block["text"]
        for block in content
        if isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
        and block["text"]
    )


def _user_item(role: str, content: Any) -> dict[str, Any] | None:
    images = (
        [
            {
                "type": "input_image",
                "detail": "auto",
                "image_url": f"data:{block.get('mimeType', 'image/png')};base64,{block['data']}",
            }
            for block in content
            if isinstance(block, dict) and block.get("type") == "image" and isinstance(block.get("data"), str)
        ]
        if isinstance(content, list)
        else []
    )
    text = _text_blocks(content)
    if images:
        parts = ([{"type": "input_text", "text": text}] if text else []) + images
        return {"type": "message", "role": role, "content": parts}
    return {"type": "message", "role": role, "content": text} if text else None


def _reasoning(message: dict[str, Any]) -> str:
    texts = [message[key] for key in REASONING_KEYS if isinstance(message.get(key), str) and message[key]]
    extra = message.get("reasoning")
    if isinstance(extra, str) and extra:
        texts.append(extra)
    elif isinstance(extra, dict):
        texts.extend(
            extra[key] for key in ("content", "text", "summary") if isinstance(extra.get(key), str) and extra[key]
        )
    for block in message.get("content") if isinstance(message.get("content"), list) else []:
        if isinstance(block, dict) and block.get("type") in ("thinking", "reasoning"):
            text = block.get("thinking") or block.get("text") or block.get("reasoning")
            if isinstance(text, str) and text:
                texts.append(text)
    return "\n".join(texts)


def _arguments(block: dict[str, Any]) -> str:
    value = block.get("arguments")
    if value is None:
        value = block.get("partialJson", block.get("partialArgs"))
    return _dumps(value) if isinstance(value, dict | list) else str(value or "")


def _dumps(value: dict[str, Any] | list[Any]) -> str:
    """``json.dumps(value)``: at once for a value the interpreter's recursion limit allows, else by
    ``deep_dumps`` (which raises the limit while it writes)."""
    try:
        return json.dumps(value)
    except RecursionError:
        return deep_dumps(value)


def tool_call_id(block: dict[str, Any], entry: Entry, position: int) -> str:
    """The block's call id, or the deterministic fallback ``call-<entry id>-<position>``."""
    value = block.get("id")
    return value if isinstance(value, str) and value else f"call-{entry.id}-{position}"


def _assistant_items(
    entry: Entry, invocation_id: str, gaps: list[ObservationGap], start: int | None = None
) -> list[dict[str, Any]]:
    """The items of an assistant entry whose first item is at ``start`` in the conversation.

    Ids: ``rs_<entry id>`` and ``msg_<entry id>``; with a ``start`` (OpenClaw, as NeMo Gym's OpenClaw
    agent names them) ``rs_<the entry's own id, else its position>`` and ``msg-<the message's
    position>``: its index among the session's items that agent writes (``_positions``).
    """
    message = entry.message
    content = message.get("content")
    items: list[dict[str, Any]] = []
    reasoning = _reasoning(message)
    own = entry.raw.get("id") if isinstance(entry.raw.get("id"), str) and entry.raw["id"] else start
    reasoning_id = f"rs_{entry.id}" if start is None else f"rs_{own}"
    if reasoning:
        items.append(
            {"type": "reasoning", "id": reasoning_id, "summary": [{"type": "summary_text", "text": reasoning}]}
        )
    blocks = content if isinstance(content, list) else []
    texts = [
        block["text"]
        for block in blocks
        if isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
        and block["text"].strip()
    ]
    if isinstance(content, str) and content.strip():
        texts = [content]
    if texts:
        items.append(
            {
                "type": "message",
                "id": f"msg_{entry.id}" if start is None else f"msg-{start + len(items)}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "\n".join(texts), "annotations": []}],
            }
        )
    calls = [block for block in blocks if isinstance(block, dict) and block.get("type") == "toolCall"]
    for position, block in enumerate(calls):
        call_id = tool_call_id(block, entry, position)
        if call_id != block.get("id"):
            gaps.append(ObservationGap(code="tool_call_id_missing", invocation_id=invocation_id, detail=call_id))
        name = block.get("name") if isinstance(block.get("name"), str) else ""
        items.append(
            {
                "type": "function_call",
                "call_id": call_id,
                "name": name,
                "arguments": _arguments(block),
                "id": call_id,
                "status": "completed",
            }
        )
    return items


def _tool_result_item(message: dict[str, Any]) -> dict[str, Any]:
    call_id = message.get("toolCallId") or message.get("tool_call_id") or ""
    output = _text_blocks(message.get("content"), joiner="")
    if not output and message.get("details") is not None:
        output = deep_dumps(message["details"], ensure_ascii=False)
    return {"type": "function_call_output", "call_id": scalar_text(call_id), "output": output, "status": "completed"}


def bash_execution_text(message: dict[str, Any]) -> str:
    """The user text pi sends the model for a ``!command`` shell run (pi's ``bashExecutionToText``)."""
    text = f"Ran `{message.get('command', '')}`\n"
    output = message.get("output")
    text += f"```\n{output}\n```" if output else "(no output)"
    exit_code = message.get("exitCode")
    if message.get("cancelled"):
        text += "\n\n(command cancelled)"
    elif isinstance(exit_code, int) and exit_code != 0:
        text += f"\n\nCommand exited with code {exit_code}"
    if message.get("truncated") and message.get("fullOutputPath"):
        text += f"\n\n[Output truncated. Full output: {message['fullOutputPath']}]"
    return text


def _message_items(
    entry: Entry, invocation_id: str, gaps: list[ObservationGap], start: int | None
) -> list[dict[str, Any]]:
    message = entry.message
    role = message.get("role")
    if role == "assistant":
        return _assistant_items(entry, invocation_id, gaps, start)
    if role == "toolResult":
        return [_tool_result_item(message)]
    if role in ("user", "system", "developer", "custom"):
        item = _user_item("user" if role == "custom" else role, message.get("content"))
        return [item] if item else []
    if role == "bashExecution" and not message.get("excludeFromContext"):
        return [{"type": "message", "role": "user", "content": bash_execution_text(message)}]
    return []


def _summary_item(prefix: str, summary: Any, suffix: str) -> dict[str, Any] | None:
    if not isinstance(summary, str) or not summary:
        return None
    return {"type": "message", "role": "user", "content": f"{prefix}{summary}{suffix}"}


def _early_summaries(path: Sequence[Entry]) -> tuple[dict[str, list[dict[str, Any]]], set[str]]:
    """Compaction summaries to place before their first kept entry, and the compactions placed so."""
    on_path = {entry.id for entry in path}
    before: dict[str, list[dict[str, Any]]] = {}
    placed: set[str] = set()
    for entry in path:
        kept = entry.raw.get("firstKeptEntryId")
        summary = _summary_item(COMPACTION_PREFIX, entry.raw.get("summary"), COMPACTION_SUFFIX)
        if entry.type == "compaction" and summary and isinstance(kept, str) and kept in on_path and kept != entry.id:
            before.setdefault(kept, []).append(summary)
            placed.add(entry.id)
    return before, placed


def _entry_items(
    entry: Entry, invocation_id: str, gaps: list[ObservationGap], start: int | None
) -> list[dict[str, Any]]:
    if entry.type == "message":
        return _message_items(entry, invocation_id, gaps, start)
    if entry.type == "custom_message":
        item = _user_item("user", entry.raw.get("content"))
    elif entry.type == "branch_summary":
        item = _summary_item(BRANCH_PREFIX, entry.raw.get("summary"), BRANCH_SUFFIX)
    elif entry.type == "compaction":
        item = _summary_item(COMPACTION_PREFIX, entry.raw.get("summary"), COMPACTION_SUFFIX)
    else:
        item = None
    return [item] if item else []


def conversation(
    path: Sequence[Entry], invocation_id: str, gaps: list[ObservationGap], *, positional_ids: bool = False
) -> list[dict[str, Any]]:
    """Conversation item values (validated later) for the entries of an active path; assistant items
    named by their entry's id, or (``positional_ids``) by their position (``_assistant_items``)."""
    before, placed = _early_summaries(path)
    items: list[dict[str, Any]] = []
    position = 0
    for entry in path:
        items.extend(before.get(entry.id, []))
        if entry.id not in placed:
            added = _entry_items(entry, invocation_id, gaps, position if positional_ids else None)
            items.extend(added)
            position += _positions(entry, added)
    return items


def _positions(entry: Entry, added: list[dict[str, Any]]) -> int:
    """How many of ``added`` NeMo Gym's OpenClaw reader also writes: the items of user, system, developer
    (with text), assistant and tool-result messages; not the summaries, custom messages and shell runs
    ng-traj adds, so that positional ids stay the reader's."""
    role = entry.message.get("role") if entry.type == "message" else None
    if role in ("assistant", "toolResult"):
        return len(added)
    if role in ("user", "system", "developer"):
        return 1 if added and _text_blocks(entry.message.get("content")) else 0
    return 0
