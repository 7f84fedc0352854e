"""One rollout as the viewers show it: the invocation tree, the timeline bars, totals and gaps.

Built from the ``ng_trajectory`` JSON value (``records.ReadRecord.value``, already validated), so
that a redacted copy renders exactly like the original. Everything returned is plain JSON (the
report embeds it as is). Times are seconds relative to the rollout's first timed event; durations
are milliseconds; token counts are the records' own (``None`` where a call reports none).

A call's or tool's interval is taken only from what the record states: ``started_at`` and
``completed_at``, or one of them with ``duration_ms``. Anything else is *untimed* and listed as such,
never placed at a guessed time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from ng_traj.roles import ref_name, role_of
from ng_traj.views.meanings import gap_meaning

TOKENS = ("prompt_tokens", "completion_tokens", "total_tokens")
NO_SERVER = "(no model server)"
UNOWNED = "(calls of no invocation)"


def interval(item: Mapping[str, Any]) -> tuple[float, float] | None:
    """``(start, end)`` in Unix seconds from ``started_at``/``completed_at``/``duration_ms``, else ``None``."""
    start, end, duration = item.get("started_at"), item.get("completed_at"), item.get("duration_ms")
    if start is not None and end is not None:
        return (start, max(start, end))
    if duration is None:
        return None
    if start is not None:
        return (start, start + duration / 1000)
    return (end - duration / 1000, end) if end is not None else None


def _call_key(call: Mapping[str, Any]) -> tuple[str, str] | None:
    if call.get("model_call_id") is not None:
        return ("id", call["model_call_id"])
    response_id = (call.get("response_metadata") or {}).get("response_id")
    return ("response", response_id) if response_id is not None else None


def _ref_keys(ref: Mapping[str, Any]) -> list[tuple[str, str]]:
    keys = [("id", ref["model_call_id"])] if ref.get("model_call_id") is not None else []
    return keys + ([("response", ref["response_id"])] if ref.get("response_id") is not None else [])


def owned_calls(value: Mapping[str, Any]) -> dict[str | None, list[int]]:
    """``{invocation_id: [model call index, ...]}`` by each invocation's refs (first owner wins);
    calls no invocation refers to are under ``None``."""
    index: dict[tuple[str, str], int] = {}
    for position, call in enumerate(value.get("model_calls", [])):
        key = _call_key(call)
        if key is not None:
            index.setdefault(key, position)
    owned: dict[str | None, list[int]] = defaultdict(list)
    taken: set[int] = set()
    for invocation in value.get("invocations", []):
        for ref in invocation.get("model_calls", []):
            found = next((index[k] for k in _ref_keys(ref) if k in index), None)
            if found is not None and found not in taken:
                taken.add(found)
                owned[invocation["invocation_id"]].append(found)
    owned[None] = [i for i in range(len(value.get("model_calls", []))) if i not in taken]
    return owned


def _role(call: Mapping[str, Any], roles: Mapping[str, str]) -> str:
    name = ref_name((call.get("response_metadata") or {}).get("model_ref"))
    return role_of(name, roles) or name or NO_SERVER


def model_call_row(position: int, call: Mapping[str, Any], roles: Mapping[str, str]) -> dict[str, Any]:
    """One model call: index, label, role, status, tokens, latency (ms), time to first token (ms)."""
    meta = call.get("response_metadata") or {}
    stats = call.get("token_stats") or {}
    return {
        "index": position,
        "label": meta.get("model") or ref_name(meta.get("model_ref")) or "model call",
        "id": call.get("model_call_id") or meta.get("response_id"),
        "role": _role(call, roles),
        "status_code": meta.get("status_code"),
        "error": meta.get("error_category"),
        "finish_reason": meta.get("finish_reason"),
        **{name: stats.get(name) for name in (*TOKENS, "reasoning_tokens", "cached_tokens")},
        "duration_ms": call.get("duration_ms"),
        "ttft_ms": meta.get("latency_ttft_ms"),
        "interval": interval(call),
    }


def _conversation_tool_calls(value: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Function calls in conversations that have no tool record: shown, untimed, status unknown."""
    recorded = {(t["invocation_id"], t["tool_call_id"]) for t in value.get("tool_calls", [])}
    found = []
    for invocation in value.get("invocations", []):
        for item in invocation.get("conversation", []):
            key = (invocation["invocation_id"], item.get("call_id"))
            if item.get("type") == "function_call" and key not in recorded:
                recorded.add(key)
                found.append({"invocation_id": key[0], "tool_call_id": key[1], "tool_name": item.get("name")})
    return found


def tool_call_count(value: Mapping[str, Any]) -> int:
    """Tool records plus the function calls of conversations that have none (what the viewers list)."""
    return len(value.get("tool_calls", [])) + len(_conversation_tool_calls(value))


def tool_call_row(tool: Mapping[str, Any], recorded: bool = True) -> dict[str, Any]:
    """One tool call: id, name, status, duration (ms), the times the record states (``started_at``,
    ``completed_at``: Unix seconds or ``None``), interval, and whether a tool record exists."""
    return {
        "id": tool["tool_call_id"],
        "label": tool.get("tool_name") or "tool call",
        "status": tool.get("status", "unknown"),
        "error": tool.get("error_type"),
        "duration_ms": tool.get("duration_ms"),
        "timing_source": tool.get("timing_source"),
        "started_at": tool.get("started_at"),
        "completed_at": tool.get("completed_at"),
        "interval": interval(tool),
        "recorded": recorded,
        "children": [],
    }


def _turn_row(turn: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "turn_no": turn["turn_no"],
        "timestamp": turn["timestamp"],
        "step_count": turn["step_count"],
        "resolved": turn.get("resolved"),
        "model_calls": len(turn.get("model_calls", [])),
    }


def _node(invocation: Mapping[str, Any], calls: list[dict], tools: list[dict], turns: list[dict]) -> dict[str, Any]:
    return {
        "invocation_id": invocation["invocation_id"],
        "status": invocation.get("status", "unknown"),
        "error": invocation.get("error_type"),
        "duration_ms": invocation.get("duration_ms"),
        "spawned_by": invocation.get("spawned_by_tool_call_id"),
        "parent": invocation.get("parent_invocation_id"),
        "turns": turns,
        "model_calls": calls,
        "tool_calls": tools,
        "children": [],
    }


def invocation_tree(value: Mapping[str, Any], roles: Mapping[str, str]) -> list[dict[str, Any]]:
    """The invocations as a forest: a sub-agent sits in ``children`` of the tool call that spawned it
    (``spawned_by_tool_call_id``), else of its parent invocation; an invocation whose parent is not in
    the record is a root. Calls no invocation refers to form a last root named :data:`UNOWNED`."""
    calls = value.get("model_calls", [])
    owned = owned_calls(value)
    tools: dict[str, list[dict]] = defaultdict(list)
    for tool in value.get("tool_calls", []):
        tools[tool["invocation_id"]].append(tool_call_row(tool))
    for tool in _conversation_tool_calls(value):
        tools[tool["invocation_id"]].append(tool_call_row(tool, recorded=False))
    turns: dict[str, list[dict]] = defaultdict(list)
    for turn in value.get("turns", []):
        turns[turn["invocation_id"]].append(_turn_row(turn))
    nodes = {
        inv["invocation_id"]: _node(
            inv,
            [model_call_row(i, calls[i], roles) for i in owned.get(inv["invocation_id"], [])],
            tools.get(inv["invocation_id"], []),
            turns.get(inv["invocation_id"], []),
        )
        for inv in value.get("invocations", [])
    }
    roots = []
    for node in nodes.values():
        parent = nodes.get(node["parent"]) if node["parent"] is not None else None
        if parent is None or parent is node:
            roots.append(node)
            continue
        spawner = next((t for t in parent["tool_calls"] if t["id"] == node["spawned_by"]), None)
        (spawner or parent)["children"].append(node)
    if owned[None]:
        loose = {"invocation_id": UNOWNED, "status": "unknown"}
        roots.append(_node(loose, [model_call_row(i, calls[i], roles) for i in owned[None]], [], []))
    return roots


def walk(roots: Iterable[dict[str, Any]], depth: int = 0) -> Iterable[tuple[int, dict[str, Any]]]:
    """``(depth, invocation node)`` in display order: each invocation, then the sub-agents under its
    tool calls in tool-call order, then those directly under it."""
    for node in roots:
        yield depth, node
        nested = [child for tool in node["tool_calls"] for child in tool["children"]] + node["children"]
        yield from walk(nested, depth + 1)


def _lanes(bars: list[dict[str, Any]]) -> None:
    """Give each timed bar the first lane free at its start, so that overlapping bars stack."""
    ends: list[float] = []
    for bar in sorted(bars, key=lambda b: (b["start"], b["end"])):
        lane = next((i for i, end in enumerate(ends) if end <= bar["start"]), None)
        if lane is None:
            lane = len(ends)
            ends.append(bar["end"])
        ends[lane] = bar["end"]
        bar["lane"] = lane


def timeline(roots: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows of bars on one time axis: one row per invocation (depth for nesting, the spawning tool call
    of a sub-agent), its model and tool calls as bars in lanes (``start``/``end`` seconds from the
    first timed event), and ``untimed``: the calls of the row that state no interval."""
    timed = [
        item["interval"]
        for _, node in walk(roots)
        for item in node["model_calls"] + node["tool_calls"]
        if item["interval"] is not None
    ]
    origin = min((start for start, _ in timed), default=None)
    rows = []
    for depth, node in walk(roots):
        bars, untimed = [], []
        for kind, items in (("model", node["model_calls"]), ("tool", node["tool_calls"])):
            for item in items:
                mark = {"kind": kind, "label": item["label"], "id": item["id"], "status": _bar_status(kind, item)}
                if item["interval"] is None:
                    untimed.append(mark)
                    continue
                start, end = item["interval"]
                bars.append({**mark, "start": round(start - origin, 6), "end": round(end - origin, 6)})
        _lanes(bars)
        rows.append(
            {
                "invocation_id": node["invocation_id"],
                "depth": depth,
                "spawned_by": node["spawned_by"],
                "status": node["status"],
                "bars": bars,
                "untimed": untimed,
            }
        )
    span = max((end for _, end in timed), default=None)
    return {"origin": origin, "span": round(span - origin, 6) if span is not None else 0, "rows": rows}


def _bar_status(kind: str, item: Mapping[str, Any]) -> str:
    if kind == "tool":
        return item["status"]
    code = item["status_code"]
    return "failed" if item["error"] is not None or (code is not None and code >= 400) else "completed"


def role_totals(value: Mapping[str, Any], roles: Mapping[str, str]) -> list[dict[str, Any]]:
    """Per role (``--role`` name, else model server name): calls, token sums and latency sum (ms; of
    the calls that state a ``duration_ms``, ``None`` when none does); ``missing`` counts calls that
    report no total."""
    totals: dict[str, dict[str, Any]] = {}
    for call in value.get("model_calls", []):
        role = _role(call, roles)
        entry = totals.setdefault(
            role, {"role": role, "calls": 0, **dict.fromkeys(TOKENS, 0), "latency_ms": None, "missing": 0}
        )
        stats = call.get("token_stats") or {}
        entry["calls"] += 1
        for name in TOKENS:
            entry[name] += stats.get(name) or 0
        entry["missing"] += stats.get("total_tokens") is None
        if (duration := call.get("duration_ms")) is not None:
            entry["latency_ms"] = (entry["latency_ms"] or 0.0) + duration
    return [totals[role] for role in sorted(totals)]


def grouped_gaps(value: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The gaps by code (sorted), each with its meaning and the ``(invocation_id, detail)`` of each."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for gap in value.get("gaps", []):
        groups[gap["code"]].append({"invocation_id": gap.get("invocation_id"), "detail": gap.get("detail")})
    return [{"code": code, "meaning": gap_meaning(code), "items": groups[code]} for code in sorted(groups)]


def status(value: Mapping[str, Any]) -> str:
    """The rollout's status: its first root invocation's, else ``unknown``."""
    for invocation in value.get("invocations", []):
        if invocation.get("parent_invocation_id") is None:
            return invocation.get("status", "unknown")
    return "unknown"


def _known_sum(values: Iterable[float | None]) -> float | None:
    """The sum of the values that are known; ``None`` when there are values and none is known (no
    call states its latency), 0 when there are none (no call)."""
    values = list(values)
    known = [value for value in values if value is not None]
    return None if values and not known else sum(known)


def rollout_view(value: Mapping[str, Any], roles: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Everything the viewers show of one trajectory (plain JSON; see the module docstring for units)."""
    roles = roles or {}
    roots = invocation_tree(value, roles)
    calls = value.get("model_calls", [])
    turns = value.get("turns", [])
    by_role = role_totals(value, roles)
    return {
        "rollout_id": value["rollout_id"],
        "task_id": value["task_id"],
        "status": status(value),
        "resolved": turns[-1].get("resolved") if turns else None,
        "totals": {
            "invocations": len(value.get("invocations", [])),
            "turns": len(turns),
            "model_calls": len(calls),
            "tool_calls": sum(len(node["tool_calls"]) for _, node in walk(roots)),
            **{name: sum(r[name] for r in by_role) for name in TOKENS},
            "latency_ms": _known_sum(r["latency_ms"] for r in by_role),
            "gaps": len(value.get("gaps", [])),
        },
        "roles": by_role,
        "tree": roots,
        "timeline": timeline(roots),
        "gaps": grouped_gaps(value),
    }
