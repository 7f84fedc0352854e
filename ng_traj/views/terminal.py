"""``ng-traj show`` in the terminal: the rollout list, and one rollout as a rich tree.

Input is what ``views.tree.rollout_view`` and ``views.pick`` return; nothing here reads files.
Text from the records (ids, model and tool names, gap details, errors) is printed as text, never as
rich markup, and with its control characters escaped (``\\x1b``, ``\\n``: ``diagnostics.printable``), so
that an untrusted transcript cannot drive the terminal or forge lines of the display.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from ng_traj.diagnostics import plural, printable
from ng_traj.views.pick import Entry
from ng_traj.views.tree import walk

STATUS_STYLES = {
    "completed": "green",
    "failed": "red",
    "timeout": "red",
    "cancelled": "yellow",
    "incomplete": "yellow",
    "unknown": "dim",
}


def _escaped(value: Any) -> Any:
    """``value`` with every string in it (in mappings, lists, tuples) passed through ``printable``."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, Mapping):
        return {key: _escaped(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_escaped(item) for item in value]
    return value


def _shown(value: str) -> Text:
    """A table cell of record text, its control characters escaped."""
    return Text(printable(value))


def _ms(value: float | None) -> str:
    return "—" if value is None else (f"{value:.0f} ms" if value < 10_000 else f"{value / 1000:.1f} s")


def _count(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def _reward(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


def rollout_list(entries: Iterable[Entry]) -> Table:
    """A table of rollouts: id, task, run, agent, reward, model calls, function calls (tool-call
    records plus the conversation's function calls without one: :func:`tree.tool_call_count`), gaps,
    where."""
    grid = Table(title="Rollouts (ng-traj show INPUT ROLLOUT shows one)", title_justify="left")
    for name in ("rollout", "task", "run", "agent", "reward", "model calls", "function calls", "gaps", "where"):
        grid.add_column(
            name, justify="right" if name in ("reward", "model calls", "function calls", "gaps") else "left"
        )
    for item in entries:
        grid.add_row(
            _shown(item.rollout_id),
            _shown(item.task_id),
            _shown(item.run or "—"),
            _shown(item.agent or "—"),
            _reward(item.reward),
            str(item.model_calls),
            str(item.tool_calls),
            str(item.gaps),
            _shown(item.where()),
        )
    return grid


def _status(value: str) -> Text:
    return Text(value, style=STATUS_STYLES.get(value, ""))


def _call_line(call: Mapping[str, Any]) -> Text:
    line = Text("model call ", style="cyan")
    line.append(call["label"])
    line.append(f"  [{call['role']}]", style="dim")
    tokens = f"  tokens {_count(call['prompt_tokens'])} in / {_count(call['completion_tokens'])} out"
    line.append(tokens + f" / {_count(call['total_tokens'])} total")
    line.append(f"  latency {_ms(call['duration_ms'])}")
    if call["status_code"] is not None:
        line.append(f"  HTTP {call['status_code']}", style="red" if call["status_code"] >= 400 else "dim")
    if call["error"]:
        line.append(f"  {call['error']}", style="red")
    return line


def _tool_line(tool: Mapping[str, Any]) -> Text:
    line = Text("tool call ", style="magenta")
    line.append(tool["label"])
    line.append(f"  {tool['id']}  ", style="dim")
    line.append_text(_status(tool["status"]))
    line.append(f"  {_ms(tool['duration_ms'])}")
    if tool["interval"] is None:
        line.append(f"  {_untimed(tool)}", style="yellow")
    if not tool["recorded"]:
        line.append("  (in the conversation only: no tool record)", style="dim")
    return line


def _untimed(tool: Mapping[str, Any]) -> str:
    """What a tool call with no interval states of its time: the one end it has (a Claude Code
    tool result's time is its completion, its start unknown), else that it has none."""
    if tool["completed_at"] is not None:
        return f"(completed {_moment(tool['completed_at'])}; no start recorded)"
    if tool["started_at"] is not None:
        return f"(started {_moment(tool['started_at'])}; no completion recorded)"
    return "(no time recorded)"


def _moment(seconds: float) -> str:
    """Unix seconds as ``YYYY-MM-DD HH:MM:SS.mmm UTC`` (as the number when no date holds them)."""
    try:
        moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return f"at {seconds:g} s"
    return f"{moment:%Y-%m-%d %H:%M:%S}.{moment.microsecond // 1000:03d} UTC"


def _invocation_label(node: Mapping[str, Any]) -> Text:
    label = Text("invocation ", style="bold")
    label.append(node["invocation_id"], style="bold")
    label.append("  ")
    label.append_text(_status(node["status"]))
    label.append(f"  {_ms(node['duration_ms'])}" if node["duration_ms"] is not None else "")
    if node["spawned_by"]:
        label.append(f"  spawned by {node['spawned_by']}", style="dim")
    return label


def _add_invocation(parent: Tree, node: Mapping[str, Any]) -> None:
    branch = parent.add(_invocation_label(node))
    for turn in node["turns"]:
        resolved = {True: ", resolved", False: ", not resolved", None: ""}[turn["resolved"]]
        branch.add(
            Text(
                f"turn {turn['turn_no']}: {plural(turn['step_count'], 'step')}, {plural(turn['model_calls'], 'model call')}{resolved}",
                style="blue",
            )
        )
    for call in node["model_calls"]:
        branch.add(_call_line(call))
    for tool in node["tool_calls"]:
        leaf = branch.add(_tool_line(tool))
        for child in tool["children"]:
            _add_invocation(leaf, child)
    for child in node["children"]:
        _add_invocation(branch, child)


def _totals(view: Mapping[str, Any]) -> Table | Text:
    if not view["roles"]:
        return Text("No model calls: no tokens or latency to total per role.", style="dim")
    grid = Table(title="Tokens and latency per role (model server)", title_justify="left")
    for name in ("role", "calls", "prompt", "completion", "total", "latency", "calls without counts"):
        grid.add_column(name, justify="left" if name == "role" else "right")
    for row in view["roles"]:
        grid.add_row(
            Text(row["role"]),
            str(row["calls"]),
            _count(row["prompt_tokens"]),
            _count(row["completion_tokens"]),
            _count(row["total_tokens"]),
            _ms(row["latency_ms"]),
            str(row["missing"]),
        )
    return grid


def _gaps(view: Mapping[str, Any]) -> Group | Text:
    if not view["gaps"]:
        return Text("No gaps: nothing was recorded as unobservable.", style="green")
    parts: list[Any] = [Text("Gaps (what could not be observed), by code:", style="bold")]
    for group in view["gaps"]:
        head = Text(f"  {group['code']}", style="yellow")
        head.append(f" ×{len(group['items'])}: {group['meaning']}")
        parts.append(head)
        for item in group["items"][:10]:
            where = f"{item['invocation_id']}: " if item["invocation_id"] else ""
            parts.append(Text(f"      {where}{item['detail'] or '(no detail)'}", style="dim"))
        if len(group["items"]) > 10:
            parts.append(Text(f"      and {len(group['items']) - 10} more", style="dim"))
    return Group(*parts)


def _header(view: Mapping[str, Any], about: Mapping[str, Any]) -> Text:
    totals = view["totals"]
    text = Text(f"rollout {view['rollout_id']}", style="bold")
    text.append(f"  task {view['task_id']}  status ")
    text.append_text(_status(view["status"]))
    facts = [f"{key} {about[key]}" for key in ("run", "agent", "producer", "reward") if about.get(key) is not None]
    text.append(("\n" + "  ".join(facts)) if facts else "")
    text.append(f"\nfrom {about['where']}", style="dim")
    text.append(
        f"\n{plural(totals['invocations'], 'invocation')}, {plural(totals['turns'], 'turn')}, "
        f"{plural(totals['model_calls'], 'model call')}, {plural(totals['tool_calls'], 'function call')} "
        f"({_recorded(view)} with a tool-call record)"
    )
    if totals["model_calls"]:  # no calls: no tokens or latency to speak of (not "0 tokens")
        latency = "unknown" if totals["latency_ms"] is None else _ms(totals["latency_ms"])
        text.append(f", {_count(totals['total_tokens'])} tokens, {latency} model latency")
    return text


def _recorded(view: Mapping[str, Any]) -> int:
    """How many of the view's function calls have a tool-call record (the build summary's count)."""
    return sum(tool["recorded"] for _, node in walk(view["tree"]) for tool in node["tool_calls"])


def render_rollout(view: Mapping[str, Any], about: Mapping[str, Any], console: Console) -> None:
    """Print one rollout: header, invocation tree, per-role totals, gaps by code (the strings of
    ``view`` and ``about`` with their control characters escaped)."""
    view, about = _escaped(view), _escaped(about)
    console.print(_header(view, about))
    tree = Tree(Text("Invocations (sub-agents under the tool call that spawned them)", style="bold"))
    for node in view["tree"]:
        _add_invocation(tree, node)
    console.print(tree)
    console.print(_totals(view))
    console.print(_gaps(view))
