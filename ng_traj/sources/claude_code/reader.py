"""Claude Code sessions: the registered native reader (``sources/native.py`` contract).

A unit is one session: its root transcript and every sub-agent transcript, ``.meta.json`` and
``tool-results`` file of its session folder (``layout``), found on disk next to the files named
(so naming the root transcript alone reads its sub-agents too). Invocation ids are the session id
(the root) and the agent ids of the ``agent-<id>.jsonl`` names; older files' in-file sidechain lines
(``isSidechain`` with an ``agentId``) form invocations of their own.

Lineage of a sub-agent, strongest evidence first: the parent's tool result whose structured result
(``toolUseResult.agentId``) names it, which also gives ``spawned_by_tool_call_id`` and the child's
status; the ``toolUseId`` of its ``.meta.json``; its ``parentAgentId``; the agent folder it sits in;
else the root session (then ``subagent_spawn_tool_unavailable``). A child named by a tool result
but with no transcript is kept as an empty invocation (``subagent_transcript_missing``). Links that
would form a cycle are cut at the cycle's smallest agent id (``cyclic_subagent_parent``).

Copied context: a forked sub-agent (``agentType`` ``fork``, on by default since CLI 2.1.232) starts
with the parent's history. The leading lines of a child that repeat its parent's lines — the same
``uuid``, the same assistant ``message.id``, or else the same message and structured result — are
kept out of the child (no conversation items, model calls or tool calls there: they are counted
once, in the parent) and named by the gap ``copied_context`` and the diagnostic
``context_copied``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ng_traj.contract import AgentInvocation, AgentObservationBundle, ObservationGap
from ng_traj.diagnostics import Diagnostic, DiagnosticSink, plural
from ng_traj.sources.claude_code.layout import Session, discover, is_companion, read_meta, session_folder
from ng_traj.sources.claude_code.observe import Outputs, is_assistant, observe_lines, response_id, tool_status
from ng_traj.sources.claude_code.transcript import (
    Line,
    Transcript,
    is_transcript_record,
    read_transcript,
    version_supported,
)
from ng_traj.sources.lineage import cycle_text, parent_cycles
from ng_traj.sources.native import (
    NativeCall,
    NativeObservations,
    NativeUnit,
    as_paths,
    folders_of,
    register,
    scalar_text,
)
from ng_traj.sources.sniff import Claim, Sniffed

NAME = "claude_code"


@dataclass
class _Node:
    """One invocation being assembled."""

    invocation_id: str
    path: str
    lines: list[Line]
    meta: dict[str, Any] = field(default_factory=dict)
    path_parent: str | None = None
    parent: str | None = None
    spawned_by: str | None = None
    spawn_status: str | None = None
    copied: list[Line] = field(default_factory=list)


def _root_path(folder: Path) -> Path:
    return folder.with_name(f"{folder.name}.jsonl")


def _is_root(path: Path, folder: Path) -> bool:
    """True for a transcript beside its session folder (not a sub-agent or companion file)."""
    return path.parent == folder.parent and ".jsonl" in path.name and not is_companion(path)


class ClaudeCodeReader:
    """The Claude Code session reader (module docstring)."""

    name = NAME
    source = "claude_code"

    def sniff(self, sniffed: Sniffed) -> Claim | None:
        """Claim session transcripts (a first record with text ``type`` and ``sessionId``) and the
        companion files of a session folder; a transcript of a CLI major version other than 1 or 2 is
        recognised, not read."""
        path, first = sniffed.path, sniffed.first
        if ".jsonl" in path.name and is_transcript_record(first) and "responses_create_params" not in first:
            version = scalar_text(first.get("version"))
            if version and not version_supported(version):
                description = f"Claude Code session transcript of CLI version {version} (1.x and 2.x are read)"
                return Claim("unsupported", description)
            return Claim(self.name, "Claude Code session transcript")
        if is_companion(path):
            return Claim(self.name, "Claude Code session companion file")
        return None

    def index(self, files: Sequence[str | Path], sink: DiagnosticSink) -> list[NativeUnit]:
        """One unit per root transcript named (a renamed or archived copy, ``<session>.jsonl.bak`` say,
        is a root of its own), else per session folder, with every file of the session."""
        files = as_paths(files)  # a build gives text
        groups: dict[Path, set[str]] = {}
        for path in files:
            groups.setdefault(session_folder(path), set()).add(str(path))
        units = []
        for folder in sorted(groups):
            roots = sorted(p for p in groups[folder] if _is_root(Path(p), folder)) or [str(_root_path(folder))]
            for root in roots:
                session = discover(folder, Path(root))
                others = {p for p in groups[folder] if p not in roots}
                for stray in sorted(others - set(session.paths)):
                    message = "a Claude Code file in a session folder's layout no version writes (sub-agents are "
                    message += "subagents/agent-<id>.jsonl); not read"
                    sink.add(Diagnostic("warning", "input_unsupported", message, path=stray))
                paths = session.paths
                if not paths:
                    continue
                transcripts = _transcripts(session, DiagnosticSink())
                ids = tuple(
                    sorted(
                        {
                            rid
                            for transcript in transcripts
                            for line in transcript.lines
                            if is_assistant(line) and (rid := response_id(line)) is not None
                        }
                    )
                )
                key = _session_id(session, transcripts)
                anchor = session.root or paths[0]
                hints = (("root", root),)
                units.append(NativeUnit(self.name, key, paths, ids, folders_of(paths), hints=hints, anchor=anchor))
        return units

    def load(self, unit: NativeUnit, sink: DiagnosticSink) -> NativeObservations:
        """Read the session's transcripts and observe them (module docstring)."""
        root = Path(dict(unit.hints)["root"])
        session = discover(session_folder(root), root)
        gaps: list[ObservationGap] = []
        nodes = _nodes(session, unit.key, sink, gaps)
        _lineage(nodes, unit.key, gaps, sink)
        outputs = Outputs(session.tool_results)
        invocations, records, calls = [], [], []
        for node in _ordered(nodes, unit.key):
            invocation, observed_records, observed_calls = _observe(node, unit.key, outputs, gaps)
            invocations.append(invocation)
            records.extend(observed_records)
            calls.extend(observed_calls)
        tools = [r for r in records if r.kind == "tool_call"]
        compactions = [r for r in records if r.kind == "context_compaction"]
        bundle = AgentObservationBundle(source=self.source, records=[*invocations, *tools, *compactions], gaps=gaps)
        return NativeObservations(bundle, calls)


def _session_id(session: Session, transcripts: list[Transcript]) -> str:
    """The root transcript's ``sessionId`` (a renamed file keeps it), else the session folder's name."""
    if session.root is not None and transcripts and transcripts[0].session_id:
        return transcripts[0].session_id
    return session.session_id


def _transcripts(session: Session, sink: DiagnosticSink) -> list[Transcript]:
    paths = ([session.root] if session.root else []) + [agent.path for agent in session.agents]
    return [read_transcript(path, sink) for path in paths]


def _report_file(transcript: Transcript, gaps: list[ObservationGap], sink: DiagnosticSink) -> None:
    gaps.extend(ObservationGap(code="malformed_transcript_line", detail=where) for where in transcript.unparseable)
    unknown = [v for v in transcript.versions if not version_supported(v)]
    if unknown:
        message = f"CLI version {unknown[0]} is not one ng-traj knows (1.x, 2.x); read as the current format"
        sink.add(Diagnostic("warning", "claude_code_version_unknown", message, path=transcript.path))
    if not transcript.unreadable and not any(line.message for line in transcript.lines):
        message = "no user or assistant message in the file; the invocation has no conversation"
        sink.add(Diagnostic("warning", "claude_code_no_messages", message, path=transcript.path))


def _nodes(session: Session, root_id: str, sink: DiagnosticSink, gaps: list[ObservationGap]) -> dict[str, _Node]:
    nodes: dict[str, _Node] = {}
    if session.root is not None:
        transcript = read_transcript(session.root, sink)
        _report_file(transcript, gaps, sink)
        nodes[root_id] = _Node(root_id, session.root, [])
        for line in transcript.lines:
            agent = line.raw.get("agentId")
            owner = agent if isinstance(agent, str) and agent and line.raw.get("isSidechain") is True else root_id
            if owner not in nodes:
                nodes[owner] = _Node(owner, session.root, [])
            nodes[owner].lines.append(line)
    for agent in session.agents:
        transcript = read_transcript(agent.path, sink)
        _report_file(transcript, gaps, sink)
        meta = read_meta(agent.meta)
        if meta is None:
            message = "sub-agent metadata that is not a JSON object; lineage taken from the path"
            sink.add(Diagnostic("warning", "claude_code_meta_invalid", message, path=agent.meta))
        if agent.agent_id == root_id or (agent.agent_id in nodes and nodes[agent.agent_id].path != session.root):
            message = f"a second transcript of agent {agent.agent_id} in the session; the first (in path order) is read"
            sink.add(Diagnostic("warning", "claude_code_entry_repeated", message, path=agent.path))
            continue
        nodes[agent.agent_id] = _Node(agent.agent_id, agent.path, transcript.lines, meta or {}, agent.path_parent)
    return nodes


def _lineage(nodes: dict[str, _Node], root_id: str, gaps: list[ObservationGap], sink: DiagnosticSink) -> None:
    """Link the sub-agents and set their copied context aside.

    A fork's copy of its parent's history repeats the parent's spawning results, which would make
    every sub-agent spawned before the fork look claimed twice. So the links are made twice: first
    over every line (only to find each fork's parent and its copies), then over the lines that are
    not copies, after which the copies are found again against the final parents. A session with
    no sub-agent (and no tool result naming one) has nothing to link.
    """
    if not _names_agents(nodes, root_id):
        return
    _link(nodes, root_id, [], DiagnosticSink())
    _mark_copies(nodes, root_id, DiagnosticSink(), [])
    for node in nodes.values():
        node.parent = node.spawned_by = node.spawn_status = None
    _link(nodes, root_id, gaps, sink)
    for node in nodes.values():
        node.lines, node.copied = [*node.copied, *node.lines], []
    _mark_copies(nodes, root_id, sink, gaps)


def _names_agents(nodes: dict[str, _Node], root_id: str) -> bool:
    if any(node_id != root_id for node_id in nodes):
        return True
    return any(
        isinstance(line.raw.get("toolUseResult"), dict) and "agentId" in line.raw["toolUseResult"]
        for node in nodes.values()
        for line in node.lines
    )


def _link(nodes: dict[str, _Node], root_id: str, gaps: list[ObservationGap], sink: DiagnosticSink) -> None:
    """Set each sub-agent's parent and spawning call (module docstring)."""
    spawns: dict[str, tuple[str, str, str]] = {}
    conflicting: set[str] = set()
    holders: dict[str, str] = {}
    statuses: dict[str, str] = {}
    for node in list(nodes.values()):
        for line in node.lines:
            for block in line.message.get("content") if isinstance(line.message.get("content"), list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                    holders.setdefault(block["id"], node.invocation_id)
            structured = line.raw.get("toolUseResult")
            content = line.message.get("content")
            results = (
                [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
                if isinstance(content, list)
                else []
            )
            for block in results:
                if isinstance(block.get("tool_use_id"), str):
                    statuses.setdefault(block["tool_use_id"], tool_status(block, structured))
            child = structured.get("agentId") if isinstance(structured, dict) else None
            if not isinstance(child, str) or not child or child == root_id:
                continue
            if len(results) != 1 or not isinstance(results[0].get("tool_use_id"), str):
                gaps.append(ObservationGap(code="ambiguous_subagent_relation", invocation_id=node.invocation_id))
                continue
            link = (node.invocation_id, results[0]["tool_use_id"], tool_status(results[0], structured))
            if child in spawns and spawns[child][:2] != link[:2]:
                conflicting.add(child)
                gaps.append(ObservationGap(code="conflicting_subagent_parent", invocation_id=child))
            spawns.setdefault(child, link)
    for child in sorted(set(spawns) - set(nodes) - conflicting):
        nodes[child] = _Node(child, "", [])
        gaps.append(ObservationGap(code="subagent_transcript_missing", invocation_id=child))
    for node in nodes.values():
        if node.invocation_id == root_id:
            continue
        if node.invocation_id in spawns and node.invocation_id not in conflicting:
            node.parent, node.spawned_by, node.spawn_status = spawns[node.invocation_id]
            continue
        tool = node.meta.get("toolUseId")
        declared = node.meta.get("parentAgentId")
        if isinstance(tool, str) and tool in holders:
            node.parent, node.spawned_by, node.spawn_status = holders[tool], tool, statuses.get(tool)
        elif isinstance(declared, str) and declared:
            node.parent = declared
        else:
            node.parent = node.path_parent or root_id
        if node.spawned_by is None:
            gaps.append(ObservationGap(code="subagent_spawn_tool_unavailable", invocation_id=node.invocation_id))
    for parent in sorted({n.parent for n in nodes.values() if n.parent and n.parent not in nodes}):
        gaps.append(ObservationGap(code="subagent_transcript_missing", invocation_id=parent))
    for cycle in parent_cycles({n.invocation_id: n.parent for n in nodes.values()}):
        cut = nodes[cycle[0]]
        message = (
            f"sub-agent parent links form a cycle ({cycle_text(cycle)}); {cut.invocation_id} is put under the session"
        )
        sink.add(Diagnostic("warning", "parent_cycle", message, path=cut.path or None))
        gaps.append(ObservationGap(code="cyclic_subagent_parent", invocation_id=cut.invocation_id, detail=cut.parent))
        cut.parent, cut.spawned_by, cut.spawn_status = root_id, None, None


def _ordered(nodes: dict[str, _Node], root_id: str) -> list[_Node]:
    """Root first, then each parent before its children, siblings by file path and id."""
    children: dict[str | None, list[_Node]] = {}
    for node in nodes.values():
        if node.invocation_id != root_id:
            children.setdefault(node.parent, []).append(node)
    order: list[_Node] = []
    stack = [nodes[root_id]] if root_id in nodes else []
    placed: set[str] = set()
    while stack:
        node = stack.pop()
        if node.invocation_id in placed:
            continue
        placed.add(node.invocation_id)
        order.append(node)
        stack.extend(
            sorted(children.get(node.invocation_id, []), key=lambda n: (n.path, n.invocation_id), reverse=True)
        )
    rest = sorted((n for n in nodes.values() if n.invocation_id not in placed), key=lambda n: (n.path, n.invocation_id))
    for node in rest:  # under a parent that has no transcript
        if node.invocation_id not in placed:
            placed.add(node.invocation_id)
            order.append(node)
    return order


def _content_key(line: Line) -> bytes | None:
    try:
        return orjson.dumps([line.type, line.message, line.raw.get("toolUseResult")], option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None


def _mark_copies(nodes: dict[str, _Node], root_id: str, sink: DiagnosticSink, gaps: list[ObservationGap]) -> None:
    """Move the leading lines a child repeats from its parent into ``copied`` (module docstring)."""
    for node in _ordered(nodes, root_id):
        parent = nodes.get(node.parent) if node.parent else None
        if parent is None or not node.lines:
            continue
        history = [*parent.copied, *parent.lines]
        uuids = {line.uuid for line in history}
        responses = {rid for line in history if is_assistant(line) and (rid := response_id(line))}
        contents = {key for line in history if line.message and (key := _content_key(line)) is not None}
        kept = 0
        for index, line in enumerate(node.lines):
            copy = line.uuid in uuids or (
                bool(line.message)
                and ((is_assistant(line) and response_id(line) in responses) or _content_key(line) in contents)
            )
            if copy:
                kept = index + 1
            elif line.message:
                break
        if not kept:
            continue
        node.copied, node.lines = node.lines[:kept], node.lines[kept:]
        copied = [line for line in node.copied if line.message]
        detail = f"parent={parent.invocation_id};entries={len(copied)};first={copied[0].uuid};last={copied[-1].uuid}"
        gaps.append(ObservationGap(code="copied_context", invocation_id=node.invocation_id, detail=detail))
        message = (
            f"the first {plural(len(copied), 'entry', 'entries')} {'repeats' if len(copied) == 1 else 'repeat'} the history of {parent.invocation_id} (a forked sub-agent); "
            "counted once, in the parent"
        )
        sink.add(Diagnostic("info", "context_copied", message, path=node.path, line=copied[0].line))


def _observe(
    node: _Node, root_id: str, outputs: Outputs, gaps: list[ObservationGap]
) -> tuple[AgentInvocation, list[Any], list[NativeCall]]:
    invocation_id = node.invocation_id
    observed = observe_lines(node.lines, invocation_id, outputs)
    from ng_traj.contract.conversation import validate_items  # the openai SDK's models: imported when needed

    items, dropped = validate_items(observed.items)
    gaps.extend(observed.gaps)
    if dropped:
        gaps.append(
            ObservationGap(
                code="agent_artifact_record_unparseable", invocation_id=invocation_id, detail=f"items={dropped}"
            )
        )
    if node.path and not any(line.message for line in [*node.copied, *node.lines]):
        gaps.append(ObservationGap(code="agent_transcript_unavailable", invocation_id=invocation_id))
    status, error_type = "unknown", None
    if node.spawn_status is not None:
        status = "incomplete" if node.spawn_status in ("timeout", "cancelled") else node.spawn_status
        error_type = node.spawn_status if node.spawn_status in ("failed", "timeout", "cancelled") else None
    else:
        gaps.append(ObservationGap(code="invocation_outcome_unavailable", invocation_id=invocation_id))
    invocation = AgentInvocation(
        invocation_id=invocation_id,
        parent_invocation_id=node.parent if invocation_id != root_id else None,
        spawned_by_tool_call_id=node.spawned_by,
        status=status,
        error_type=error_type,
        conversation=items,
    )
    return invocation, observed.records, observed.calls


READER = register(ClaudeCodeReader())
