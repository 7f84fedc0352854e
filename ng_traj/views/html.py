"""``ng-traj report``: one self-contained HTML file of many rollouts.

The page holds everything it shows and fetches nothing: the rollout list as one JSON array, and
each rollout's detail (``tree.rollout_view``, its conversations, the requests of its model calls)
as JSON compressed with zlib (RFC 1950) and base64-encoded, which the page decodes only when the
rollout is opened, with the browser's own ``DecompressionStream("deflate")``. So a report of
thousands of rollouts parses one small list before it is interactive. The template
(``templates/report.html.j2``, Jinja2, autoescaped) carries the page's own CSS and JS; no
third-party script is used.

Output is deterministic: the same records give the same bytes (no clock, no random ids; zlib at a
fixed level).
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from ng_traj.diagnostics import safe_text
from ng_traj.records import ReadRecord
from ng_traj.views.meanings import CRITERIA_MEANINGS, VALUE_MEANINGS, gap_meaning
from ng_traj.views.tree import rollout_view

LEVEL = 6
"""zlib compression level of the embedded details."""


HISTORY_KEYS = ("input", "messages")
"""Request keys holding the conversation so far, which each request of an agent repeats and extends."""


def _history(request: Any) -> tuple[str, list[Any]] | None:
    if isinstance(request, Mapping):
        for key in HISTORY_KEYS:
            if isinstance(request.get(key), list):
                return key, request[key]
    return None


def request_deltas(requests: list[Any]) -> list[dict[str, Any]]:
    """The requests of one rollout, each stored against the one before it: ``{"same": n, "body": ...}``
    where ``body`` is the request with its history list (``input`` or ``messages``) cut to the items
    after the first ``n``, which equal the previous request's first ``n``. The page rebuilds the exact
    body; the report grows with the conversation instead of with its square."""
    out: list[dict[str, Any]] = []
    previous: tuple[str, list[Any]] | None = None
    for request in requests:
        history = _history(request)
        same = 0
        if history is not None and previous is not None and previous[0] == history[0]:
            limit = min(len(history[1]), len(previous[1]))
            while same < limit and history[1][same] == previous[1][same]:
                same += 1
        body = {**request, history[0]: history[1][same:]} if history is not None and same else request
        out.append({"same": same, "body": body})
        previous = history
    return out


def detail(value: Mapping[str, Any], view: Mapping[str, Any]) -> dict[str, Any]:
    """What the page shows of one opened rollout: the view, each invocation's conversation, and the
    request body of every model call that kept one (``request_deltas``; ``calls`` gives their indices)."""
    calls = [
        (i, call["request"]) for i, call in enumerate(value.get("model_calls", [])) if call.get("request") is not None
    ]
    conversations = [
        {"invocation_id": inv["invocation_id"], "items": inv.get("conversation", [])}
        for inv in value.get("invocations", [])
    ]
    return {
        "view": view,
        "conversations": conversations,
        "calls": [i for i, _ in calls],
        "requests": request_deltas([request for _, request in calls]),
    }


def pack(data: Any) -> str:
    """``data`` as JSON, zlib-compressed, base64 text (what the page's ``unpack`` decodes)."""
    return base64.b64encode(zlib.compress(orjson.dumps(data), LEVEL)).decode("ascii")


def summary(index: int, read: ReadRecord, view: Mapping[str, Any]) -> dict[str, Any]:
    """The list entry of one rollout (what filters and search work on)."""
    totals = view["totals"]
    return {
        "i": index,
        "rollout_id": view["rollout_id"],
        "task_id": view["task_id"],
        "run": read.run,
        "agent": read.agent,
        "producer": read.producer,
        "reward": read.reward,
        "status": view["status"],
        "where": safe_text(f"{read.source}:{read.position}"),  # a non-UTF-8 file name's bytes as U+FFFD
        "turns": totals["turns"],
        "model_calls": totals["model_calls"],
        "tool_calls": totals["tool_calls"],
        "tokens": totals["total_tokens"],
        "gap_codes": [group["code"] for group in view["gaps"]],
        "gaps": totals["gaps"],
    }


@dataclass
class Collected:
    """The rollouts of one side of a report: list entries and packed details, in input order."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    details: list[str] = field(default_factory=list)

    def add(self, read: ReadRecord, value: Mapping[str, Any], roles: Mapping[str, str], keep_detail: bool) -> None:
        """Add one record; ``value`` is the (possibly redacted) trajectory to show."""
        view = rollout_view(value, roles)
        self.entries.append(summary(len(self.entries), read, view))
        if keep_detail:
            self.details.append(pack(detail(value, view)))

    def ordered(self) -> Collected:
        """The same rollouts sorted by agent, task, rollout id, run and place (so the report does not
        depend on the order inputs were named in), renumbered."""
        order = sorted(range(len(self.entries)), key=lambda i: _order_key(self.entries[i]))
        entries = [{**self.entries[old], "i": new} for new, old in enumerate(order)]
        return Collected(entries, [self.details[old] for old in order] if self.details else [])


def _order_key(entry: Mapping[str, Any]) -> tuple[Any, ...]:
    return (entry["agent"] or "", entry["task_id"], entry["rollout_id"], entry["run"] or "", entry["where"])


def compare_key(entry: Mapping[str, Any]) -> tuple[str, str, str]:
    """Rollouts of two builds are the same task attempt when agent, task and rollout id agree."""
    return (entry["agent"] or "", entry["task_id"], entry["rollout_id"])


COMPARED = ("reward", "status", "turns", "model_calls", "tool_calls", "tokens", "gaps")


def compare(base: Iterable[Mapping[str, Any]], other: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Side by side: per compare key (sorted), each build's values of :data:`COMPARED` (``None`` for a
    build without the rollout) and the gap codes only one build has."""
    left = {compare_key(e): e for e in base}
    right = {compare_key(e): e for e in other}
    rows = []
    for key in sorted(left.keys() | right.keys()):
        a, b = left.get(key), right.get(key)
        codes_a, codes_b = set(a["gap_codes"]) if a else set(), set(b["gap_codes"]) if b else set()
        rows.append(
            {
                "agent": key[0],
                "task_id": key[1],
                "rollout_id": key[2],
                "i": a["i"] if a else None,
                "a": {name: a[name] for name in COMPARED} if a else None,
                "b": {name: b[name] for name in COMPARED} if b else None,
                "only_a": sorted(codes_a - codes_b),
                "only_b": sorted(codes_b - codes_a),
            }
        )
    return rows


def matrix_page(data: Mapping[str, Any]) -> dict[str, Any]:
    """The matrix report (``matrix_report.report``) with the legend and the gap meanings of its reasons."""
    reasons = {cell["reason"] for group in data["groups"] for cell in group["cells"].values() if cell["reason"]}
    meanings = {r: gap_meaning(r[4:]) for r in sorted(reasons) if r.startswith("gap:")}
    return {**data, "criteria_meanings": CRITERIA_MEANINGS, "value_meanings": VALUE_MEANINGS, "reasons": meanings}


def script_json(data: Any) -> str:
    """JSON safe inside a ``<script>`` element (``</`` and ``<!--`` cannot end or open anything)."""
    return orjson.dumps(data).decode("utf-8").replace("</", "<\\/").replace("<!--", "<\\!--")


def render(title: str, side: Collected, matrix: Mapping[str, Any], compared: list[dict[str, Any]] | None) -> str:
    """The whole page."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    environment = Environment(
        loader=PackageLoader("ng_traj.views", "templates"),
        autoescape=select_autoescape(default=True),
        keep_trailing_newline=True,
    )
    template = environment.get_template("report.html.j2")
    return template.render(
        title=title,
        rollouts=script_json(side.entries),
        details=side.details,
        matrix=script_json(matrix_page(matrix)),
        compare=script_json(compared),
        gap_meanings=script_json({code: gap_meaning(code) for code in _codes(side.entries)}),
    )


def _codes(entries: Iterable[Mapping[str, Any]]) -> list[str]:
    return sorted({code for entry in entries for code in entry["gap_codes"]})
