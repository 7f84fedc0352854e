"""Observations of one Claude Code invocation: conversation, tool calls, compactions, native calls.

Facts follow NeMo Gym's own Claude Code producer (``claude_code_agent/observability.py``) where the
current format allows:

* conversation, in file order: user text as user messages; assistant ``text`` blocks as output
  messages and ``thinking`` blocks with text as reasoning items (the ``signature`` as
  ``encrypted_content``), each with the id ``<uuid>:<block type>:<block index>``; ``tool_use`` as
  function calls (``arguments`` = the input as JSON with sorted keys); ``tool_result`` as function
  call outputs (text blocks joined, other content as JSON). Thinking blocks without text (CLI 2.1
  keeps only the signature) are left out. A ``<persisted-output>`` stub is replaced by the file it
  names in the session's ``tool-results`` folder; a missing file keeps the stub and gives the gap
  ``tool_result_output_unavailable``.
* tool calls, paired by exact id: status ``failed`` for ``is_error``, ``incomplete`` when the
  structured result says ``interrupted``, its ``status`` when it is one of the contract's, else
  ``completed``. The completion time is the result line's ``timestamp``; the start is known only
  from a ``durationMs`` (or ``totalDurationMs``) in the structured result. Upstream takes the start
  from the assistant line's timestamp; ng-traj never infers a tool's start from a neighbouring line
  (that line is written when the block finished streaming, not when the tool started), so without a
  duration the call gets ``tool_timing_unavailable``.
* model calls: one per distinct ``message.id`` (one response written as several per-block lines);
  its usage is the line with the largest ``output_tokens`` (the final one), counted once. Token
  counts are normalised to the inclusive convention: prompt = ``input_tokens`` +
  ``cache_read_input_tokens`` + ``cache_creation_input_tokens``; completion = ``output_tokens``;
  reasoning = ``thinking_tokens`` (CLI 2.1); total = prompt + completion; cached =
  ``cache_read_input_tokens``. The call's ``completed_at`` is the timestamp of its last line.
* compactions: a ``system`` ``compact_boundary`` (``compactMetadata.trigger`` / ``preTokens``)
  merged with the ``isCompactSummary`` user line after it (the summary); their own model call is
  not in the transcript (``compaction_model_call_reference_unavailable``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from math import isfinite
from pathlib import Path
from typing import Any

from ng_traj.contract import ContextCompactionObservation, ObservationGap, ToolCallObservation, TrajectoryModelCall
from ng_traj.sources.claude_code.transcript import Line
from ng_traj.sources.native import NativeCall, timestamp_seconds

TOOL_STATUSES = frozenset({"completed", "failed", "timeout", "cancelled", "incomplete"})
PERSISTED = "<persisted-output>"
SAVED_TO = re.compile(r"Full output saved to: (\S+)")
OUTPUT_BYTES = 64 << 20


@dataclass
class Observed:
    """What one invocation's lines contribute."""

    items: list[dict[str, Any]] = field(default_factory=list)
    records: list[Any] = field(default_factory=list)
    gaps: list[ObservationGap] = field(default_factory=list)
    calls: list[NativeCall] = field(default_factory=list)


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def token_stats(usage: Any) -> dict[str, int | None]:
    """Inclusive token counts of one Anthropic ``usage`` object (module docstring)."""
    usage = usage if isinstance(usage, dict) else {}
    raw_input, output = _count(usage.get("input_tokens")), _count(usage.get("output_tokens"))
    read, write = _count(usage.get("cache_read_input_tokens")), _count(usage.get("cache_creation_input_tokens"))
    prompt = None if raw_input is None else raw_input + (read or 0) + (write or 0)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "reasoning_tokens": _count(usage.get("thinking_tokens")),
        "total_tokens": prompt + output if prompt is not None and output is not None else None,
        "cached_tokens": read,
    }


def output_text(value: Any) -> str:
    """A tool result's ``content`` as text: a string as it is, text blocks joined, anything else as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in value):
        return "".join(b["text"] if isinstance(b.get("text"), str) else "" for b in value)
    return _json_text(value) or ""


MAX_TEXT_DEPTH = 500
"""Values nested deeper are not written as JSON text: the standard serialiser walks ~1,000 levels on
Python 3.11 and more on 3.12+, so a fixed bound keeps the output the same on every version."""


def _json_text(value: Any) -> str | None:
    """``value`` as JSON text with sorted keys, or ``None`` when it nests deeper than ``MAX_TEXT_DEPTH``
    (measured without recursion) or is not JSON."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if depth > MAX_TEXT_DEPTH:
            return None
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        pending.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (RecursionError, ValueError, TypeError):
        return None


def _blocks(message: dict[str, Any]) -> list[Any]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def response_id(line: Line) -> str | None:
    """The Anthropic response id (``message.id``) of an assistant line."""
    value = line.message.get("id")
    return value if isinstance(value, str) and value else None


def is_assistant(line: Line) -> bool:
    """True for an assistant line with a message."""
    return line.type == "assistant" and bool(line.message)


def native_calls(lines: list[Line], invocation_id: str) -> list[NativeCall]:
    """One native call per distinct ``message.id`` of the assistant lines (module docstring)."""
    groups: dict[str, list[Line]] = {}
    for line in lines:
        if is_assistant(line):
            groups.setdefault(response_id(line) or f"entry:{line.uuid}", []).append(line)
    calls = []
    for label, group in groups.items():
        final = max(reversed(group), key=lambda g: _output_tokens(g.message.get("usage")))
        rid = response_id(group[0])
        tool_ids = frozenset(
            b["id"]
            for g in group
            for b in _blocks(g.message)
            if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("id"), str) and b["id"]
        )
        model = final.message.get("model")
        call = TrajectoryModelCall(
            completed_at=timestamp_seconds(group[-1].raw.get("timestamp")),
            response_metadata={
                "response_id": rid,
                "model": model if isinstance(model, str) else None,
                "dialect": "messages",
            },
            token_stats=token_stats(final.message.get("usage")),
        )
        calls.append(NativeCall(invocation_id, rid, tool_ids, call, label))
    return calls


def _output_tokens(usage: Any) -> int:
    """A usage object's ``output_tokens`` (-1 when there is none), to pick a response's final usage."""
    count = _count(usage.get("output_tokens")) if isinstance(usage, dict) else None
    return -1 if count is None else count


def _arguments(block: dict[str, Any], gap: Any) -> str:
    """A ``tool_use`` input as JSON text with sorted keys; ``""`` (gap ``invalid_assistant_content``) for one
    nested too deep to write as text (``MAX_TEXT_DEPTH``)."""
    text = _json_text(block.get("input", {}))
    if text is None:
        gap("invalid_assistant_content", block.get("id"))
        return ""
    return text


def _assistant_items(line: Line, gap: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    content = line.message.get("content")
    if not isinstance(content, list | str):
        gap("unsupported_assistant_content_block", type(content).__name__)
    for index, block in enumerate(_blocks(line.message)):
        if not isinstance(block, dict):
            gap("invalid_assistant_content")
            continue
        kind = block.get("type")
        item_id = f"{line.uuid}:{kind if isinstance(kind, str) else 'content'}:{index}"
        if kind == "text":
            if isinstance(block.get("text"), str) and block["text"]:
                items.append(
                    {
                        "type": "message",
                        "id": item_id,
                        "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": block["text"], "annotations": []}],
                    }
                )
        elif kind == "thinking":
            if isinstance(block.get("thinking"), str) and block["thinking"]:
                signature = block.get("signature")
                items.append(
                    {
                        "type": "reasoning",
                        "id": item_id,
                        "summary": [{"type": "summary_text", "text": block["thinking"]}],
                        "encrypted_content": signature if isinstance(signature, str) else None,
                    }
                )
        elif kind == "redacted_thinking":
            continue
        elif kind == "tool_use":
            call_id = block.get("id")
            if not isinstance(call_id, str) or not call_id:
                gap("tool_call_id_missing")
                continue
            items.append(
                {
                    "type": "function_call",
                    "call_id": call_id,
                    "name": block.get("name") if isinstance(block.get("name"), str) else "",
                    "arguments": _arguments(block, gap),
                    "id": call_id,
                    "status": "completed",
                }
            )
        else:
            gap("unsupported_assistant_content_block", kind if isinstance(kind, str) else None)
    return items


@dataclass(frozen=True, slots=True)
class Result:
    """One tool result block: its call id, status, completion time, duration and line."""

    call_id: str
    status: str
    completed_at: float | None
    duration_ms: float | None


def tool_status(block: dict[str, Any], structured: Any) -> str:
    """A tool result's status (module docstring)."""
    if block.get("is_error") is True:
        return "failed"
    if isinstance(structured, dict):
        if structured.get("interrupted") is True:
            return "incomplete"
        if structured.get("status") in TOOL_STATUSES:
            return structured["status"]
    return "completed"


def _duration(structured: Any) -> float | None:
    if not isinstance(structured, dict):
        return None
    for key in ("durationMs", "totalDurationMs"):
        value = structured.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and isfinite(value) and value >= 0:
            return float(value)
    return None


class Outputs:
    """The files of a session's ``tool-results`` folder, by name, and how stubs are resolved."""

    def __init__(self, files: list[str]) -> None:
        self.by_name = {Path(path).name: path for path in files}

    def resolve(self, call_id: str, text: str) -> tuple[str, bool]:
        """``(output, resolved)``: the named file's text for a ``<persisted-output>`` stub, else ``text``;
        ``resolved`` is false for a stub whose file is not there."""
        if PERSISTED not in text:
            return text, True
        named = SAVED_TO.search(text)
        candidates = [Path(named.group(1)).name] if named else []
        candidates += [f"{call_id}.txt", f"{call_id}.json"]
        for name in candidates:
            path = self.by_name.get(name)
            if path is not None:
                try:
                    with open(path, "rb") as handle:
                        return handle.read(OUTPUT_BYTES).decode("utf-8", errors="replace"), True
                except OSError:
                    break
        return text, False


def _user_items(line: Line, outputs: Outputs, results: list[Result], gap: Any) -> list[dict[str, Any]]:
    role = line.message.get("role") if line.message.get("role") in ("user", "system", "developer") else "user"
    content = line.message.get("content")
    if isinstance(content, str):
        return [{"type": "message", "role": role, "content": content}] if content else []
    if not isinstance(content, list):
        if content is not None:
            gap("unsupported_user_content_block", type(content).__name__)
        return []
    items: list[dict[str, Any]] = []
    structured = line.raw.get("toolUseResult")
    when = timestamp_seconds(line.raw.get("timestamp"))
    for block in content:
        if not isinstance(block, dict):
            gap("invalid_user_content")
        elif block.get("type") == "tool_result":
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str) or not call_id:
                gap("tool_result_id_missing")
                continue
            status = tool_status(block, structured)
            output, resolved = outputs.resolve(call_id, output_text(block.get("content")))
            if not resolved:
                gap("tool_result_output_unavailable", call_id)
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": call_id,
                    "output": output,
                    "status": "completed" if status == "completed" else "incomplete",
                }
            )
            results.append(Result(call_id, status, when, _duration(structured)))
        elif block.get("type") == "text":
            if isinstance(block.get("text"), str):
                items.append({"type": "message", "role": role, "content": block["text"]})
            else:
                gap("unsupported_user_content_block", "text")
        else:
            kind = block.get("type")
            gap("unsupported_user_content_block", kind if isinstance(kind, str) else None)
    return items


def _tools(
    items: list[dict[str, Any]], results: list[Result], invocation_id: str, gaps: list[ObservationGap]
) -> list[ToolCallObservation]:
    def gap(code: str, call_id: str) -> None:
        gaps.append(ObservationGap(code=code, invocation_id=invocation_id, detail=call_id))

    calls = [(item["call_id"], item["name"]) for item in items if item.get("type") == "function_call"]
    starts = Counter(call_id for call_id, _ in calls)
    finishes = Counter(result.call_id for result in results)
    by_id = {result.call_id: result for result in results}
    records = []
    ambiguous: set[str] = set()
    for call_id, name in calls:
        if starts[call_id] > 1 or finishes[call_id] > 1:
            if call_id not in ambiguous:
                ambiguous.add(call_id)
                gap("ambiguous_tool_artifact", call_id)
            continue
        result = by_id.get(call_id)
        if result is None:
            gap("tool_result_missing", call_id)
            gap("tool_timing_unavailable", call_id)
            records.append(
                ToolCallObservation(
                    invocation_id=invocation_id, tool_call_id=call_id, tool_name=name or None, status="incomplete"
                )
            )
            continue
        timing: dict[str, Any] = {}
        if result.completed_at is not None:
            timing = {"completed_at": result.completed_at, "timing_source": "artifact"}
            if result.duration_ms is not None:
                timing.update(
                    started_at=result.completed_at - result.duration_ms / 1000, duration_ms=result.duration_ms
                )
        else:
            gap("tool_result_timestamp_missing", call_id)
        if "started_at" not in timing:
            gap("tool_timing_unavailable", call_id)
        records.append(
            ToolCallObservation(
                invocation_id=invocation_id,
                tool_call_id=call_id,
                tool_name=name or None,
                status=result.status,
                **timing,
            )
        )
    for result in results:
        if result.call_id not in starts:
            gap("tool_start_missing", result.call_id)
    return records


def _compaction_metadata(line: Line) -> dict[str, Any]:
    for owner in (line.raw, line.message):
        for key in ("compactMetadata", "compact_metadata"):
            if isinstance(owner.get(key), dict):
                return owner[key]
    return {}


def _is_summary(line: Line) -> bool:
    return line.raw.get("isCompactSummary") is True or line.message.get("isCompactSummary") is True


def _compactions(
    lines: list[Line], invocation_id: str, gaps: list[ObservationGap]
) -> list[ContextCompactionObservation]:
    records: list[ContextCompactionObservation] = []
    previous_boundary = False
    for line in lines:
        boundary = line.type == "system" and line.raw.get("subtype") == "compact_boundary"
        if boundary:
            metadata = _compaction_metadata(line)
            trigger = metadata.get("trigger")
            records.append(
                ContextCompactionObservation(
                    invocation_id=invocation_id,
                    observed_at=timestamp_seconds(line.raw.get("timestamp")),
                    trigger=trigger if isinstance(trigger, str) else None,
                    tokens_before=_count(metadata.get("preTokens", metadata.get("tokensBefore"))),
                    tokens_after=_count(metadata.get("postTokens", metadata.get("tokensAfter"))),
                    outcome="completed",
                )
            )
        elif _is_summary(line):
            summary = output_text(line.message.get("content")) or None
            if previous_boundary and records[-1].summary is None:
                records[-1].summary = summary
            else:
                records.append(
                    ContextCompactionObservation(
                        invocation_id=invocation_id,
                        observed_at=timestamp_seconds(line.raw.get("timestamp")),
                        outcome="completed",
                        summary=summary,
                    )
                )
        previous_boundary = boundary
    for record in records:
        gaps.append(ObservationGap(code="compaction_model_call_reference_unavailable", invocation_id=invocation_id))
        if record.summary is None:
            gaps.append(ObservationGap(code="compaction_summary_unavailable", invocation_id=invocation_id))
        if record.tokens_after is None:
            gaps.append(ObservationGap(code="compaction_tokens_after_unavailable", invocation_id=invocation_id))
    return records


def observe_lines(lines: list[Line], invocation_id: str, outputs: Outputs) -> Observed:
    """Conversation items, tool and compaction records, gaps and native calls of one invocation's lines."""
    observed = Observed()

    def gap(code: str, detail: str | None = None) -> None:
        observed.gaps.append(ObservationGap(code=code, invocation_id=invocation_id, detail=detail))

    results: list[Result] = []
    for line in lines:
        if not line.message or line.type not in ("user", "assistant"):
            continue
        if line.type == "assistant":
            if response_id(line) is None:
                gap("model_response_id_missing")
            observed.items.extend(_assistant_items(line, gap))
        else:
            observed.items.extend(_user_items(line, outputs, results, gap))
    observed.records.extend(_tools(observed.items, results, invocation_id, observed.gaps))
    observed.records.extend(_compactions(lines, invocation_id, observed.gaps))
    observed.calls = native_calls(lines, invocation_id)
    return observed
