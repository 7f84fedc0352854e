"""Codex rollout files as thread trees: one unit per root thread with every sub-agent thread below it.

Lineage comes from each rollout's ``session_meta`` (``source.subagent.thread_spawn.parent_thread_id``,
else ``forked_from_id``); a thread is a child invocation of its parent thread. A tree whose root
thread's rollout is not among the inputs is keyed by that root's id and gets an invocation without a
conversation (``agent_transcript_unavailable``) and ``subagent_hierarchy_incomplete``. A child's
``spawned_by_tool_call_id`` is the parent's ``spawn_agent`` call whose output names the child's
thread id; none gives ``subagent_spawn_tool_unavailable``, several ``subagent_spawn_ambiguous``, and a
``spawn_agent`` call naming no thread of the tree gives ``subagent_transcript_missing``.

Two files with one thread id (a reverted thread keeps a ``_<suffix>`` copy): the first in path order
is read (``codex_thread_repeated``). Parent links that form a cycle are broken at the smallest
member, which becomes a root (``parent_cycle``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ng_traj.contract import AgentInvocation, AgentObservationBundle, ObservationGap
from ng_traj.diagnostics import Diagnostic, DiagnosticSink
from ng_traj.sources.codex.observe import ThreadObservation, observe
from ng_traj.sources.codex.rollout import ThreadMeta, is_envelope, is_legacy_head, read_head, read_rollout
from ng_traj.sources.lineage import cycle_text, parent_cycles
from ng_traj.sources.native import NativeObservations, NativeUnit, as_paths, folders_of, register, scalar_text
from ng_traj.sources.sniff import Claim, Sniffed

NEWEST_READ = (0, 151)
"""The newest release whose format the reader follows; a 1.x rollout is reported, not guessed at."""

VERSION = re.compile(r"^(\d+)\.(\d+)")


def _unsupported_version(first: Any) -> str | None:
    payload = first.get("payload") if first.get("type") == "session_meta" else None
    version = scalar_text(payload.get("cli_version")) if isinstance(payload, dict) else ""
    match = VERSION.match(version)
    return version if match and int(match.group(1)) > NEWEST_READ[0] else None


def _threads(files: Sequence[Path], sink: DiagnosticSink) -> dict[str, tuple[str, ThreadMeta]]:
    """Thread id -> (file, meta), the first file in path order winning a repeated id."""
    threads: dict[str, tuple[str, ThreadMeta]] = {}
    for path in sorted(files, key=str):
        meta = read_head(path)
        if meta.thread_id in threads:
            message = (
                f"thread {meta.thread_id} is also in {threads[meta.thread_id][0]}, which is read; this file is not"
            )
            sink.add(Diagnostic("warning", "codex_thread_repeated", message, path=str(path)))
            continue
        threads[meta.thread_id] = (str(path), meta)
    return threads


def lineage(threads: dict[str, ThreadMeta], sink: DiagnosticSink | None = None) -> dict[str, str | None]:
    """Thread -> parent thread, each cycle broken at its smallest member (reported to ``sink``)."""
    parents = {thread: meta.parent_id for thread, meta in threads.items()}
    for cycle in parent_cycles(parents):
        parents[cycle[0]] = None
        if sink is not None:
            message = f"Codex threads name each other as parents ({cycle_text(cycle)}); {cycle[0]} is read as a root"
            sink.add(Diagnostic("warning", "parent_cycle", message))
    return parents


def _root(thread: str, parents: dict[str, str | None]) -> str:
    while (parent := parents.get(thread)) is not None:
        thread = parent
        if thread not in parents:
            break
    return thread


class CodexReader:
    """The Codex rollout reader (``sources/native.py`` contract)."""

    name = "codex"
    source = "codex"

    def sniff(self, sniffed: Sniffed) -> Claim | None:
        """Claim envelope rollouts (any known record type first) and pre-envelope ``rollout-*.jsonl``."""
        first = sniffed.first
        if is_envelope(first):
            version = _unsupported_version(first)
            if version is not None:
                return Claim("unsupported", f"Codex rollout of cli_version {version}, newer than the versions read")
            return Claim(self.name, "Codex rollout")
        if is_legacy_head(first) and sniffed.path.name.startswith("rollout-"):
            return Claim(self.name, "Codex rollout (pre-envelope)")
        return None

    def index(self, files: Sequence[str | Path], sink: DiagnosticSink) -> list[NativeUnit]:
        """One unit per tree of threads, keyed by its root thread id."""
        files = as_paths(files)  # a build gives text
        threads = _threads(files, sink)
        parents = lineage({thread: meta for thread, (_, meta) in threads.items()}, sink)
        trees: dict[str, list[str]] = {}
        for thread in sorted(threads):
            trees.setdefault(_root(thread, parents), []).append(threads[thread][0])
        units = []
        for root, paths in sorted(trees.items()):
            names = tuple(sorted(paths))
            anchor = threads[root][0] if root in threads else names[0]
            units.append(NativeUnit(self.name, root, names, folders=folders_of(names), anchor=anchor))
        return units

    def load(self, unit: NativeUnit, sink: DiagnosticSink) -> NativeObservations:
        """Read the tree's rollouts and observe each thread, in lineage order."""
        rollouts = {r.meta.thread_id: r for r in (read_rollout(path, sink) for path in unit.paths)}
        parents = lineage({thread: rollout.meta for thread, rollout in rollouts.items()})
        observed = {thread: observe(rollout, parents[thread]) for thread, rollout in rollouts.items()}
        for thread, rollout in rollouts.items():
            if rollout.own() and not observed[thread].invocation.conversation:
                message = f"thread {thread} has records but no turns the reader can find; no conversation is made up"
                sink.add(Diagnostic("warning", "codex_turns_unavailable", message, path=rollout.path))
        gaps: list[ObservationGap] = []
        if unit.key not in rollouts:
            placeholder = AgentInvocation(invocation_id=unit.key)
            observed[unit.key] = ThreadObservation(placeholder)
            gaps.append(ObservationGap(code="agent_transcript_unavailable", invocation_id=unit.key, detail=unit.key))
            gaps.append(ObservationGap(code="subagent_hierarchy_incomplete"))
        order = _order(unit.key, parents)
        _spawns(order, parents, observed)
        return _bundle([observed[thread] for thread in order], gaps, self.source)


def _order(root: str, parents: dict[str, str | None]) -> list[str]:
    """Threads depth first from ``root``, siblings by thread id (UUID v7 ids sort by creation time)."""
    children: dict[str | None, list[str]] = {}
    for thread, parent in parents.items():
        children.setdefault(parent, []).append(thread)
    order, stack = [], [root]
    while stack:
        thread = stack.pop()
        order.append(thread)
        stack.extend(sorted(children.get(thread, []), reverse=True))
    return order


def _spawns(order: list[str], parents: dict[str, str | None], observed: dict[str, ThreadObservation]) -> None:
    """Name each child's spawning call in its parent, with the reader's lineage gaps (module docstring)."""
    named: set[str] = set()
    for thread in order:
        parent = parents.get(thread)
        if parent is None or parent not in observed:
            continue
        calls = [call for call, text in observed[parent].spawn_calls.items() if thread in text]
        child = observed[thread]
        named.update(calls)
        if len(calls) == 1:
            child.invocation = child.invocation.model_copy(update={"spawned_by_tool_call_id": calls[0]})
            continue
        code = "subagent_spawn_ambiguous" if calls else "subagent_spawn_tool_unavailable"
        child.gaps.append(ObservationGap(code=code, invocation_id=thread))
    for thread in order:
        for call in observed[thread].spawn_calls:
            if call not in named:
                gap = ObservationGap(code="subagent_transcript_missing", invocation_id=thread, detail=call)
                observed[thread].gaps.append(gap)


def _bundle(observed: list[ThreadObservation], gaps: list[ObservationGap], source: str) -> NativeObservations:
    records: list[Any] = []
    all_gaps = list(gaps)
    for thread in observed:
        records.append(thread.invocation)
        records.extend(thread.records)
        all_gaps.extend(thread.gaps)
    bundle = AgentObservationBundle(source=source, records=records, gaps=all_gaps)
    return NativeObservations(bundle, [call for thread in observed for call in thread.calls])


READER = register(CodexReader())
