"""Pi coding-agent session files (``~/.pi/agent/sessions/--<cwd>--/<time>_<id>.jsonl``).

Format and versions: ``sources/pi/session.py`` (producer-formats.md §2). One session file is one
invocation whose id is the header's session id; its status comes from the last assistant message on
the active path, with NeMo Gym's pi table (gym-reference.md §7.6): ``stop`` completed, ``error``
failed, ``aborted`` / ``length`` incomplete, anything else unknown with
``invocation_outcome_unavailable``. Core pi has no sub-agents, so every invocation carries
``subagent_hierarchy_unavailable``, as in the reference. Transcripts that belong to OpenClaw are
left to ``sources/openclaw/reader.py``.

Forks: ``/fork`` (and ``createBranchedSession``) writes a new file holding the parent's root-to-leaf
path, its header's ``parentSession`` naming the parent's file. A file whose ``parentSession`` names
another input (by path, else by file name) is a child invocation of that session, in the parent's
unit (one trajectory); the entries it copies from its ancestors are left out of its counts
(``sources/pi/copies.py``). A ``parentSession`` naming no input gives ``subagent_parent_unavailable``
(detail: the file name it names) and the file is a unit of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ng_traj.contract import AgentObservationBundle, ObservationGap
from ng_traj.diagnostics import DiagnosticSink
from ng_traj.sources.lineage import parent_cycles
from ng_traj.sources.native import NativeObservations, NativeUnit, folders_of, register
from ng_traj.sources.openclaw.reader import is_openclaw_transcript, is_pi_family
from ng_traj.sources.pi.copies import CopyIndex, mark_copies
from ng_traj.sources.pi.observe import observe, response_ids
from ng_traj.sources.pi.session import Session, read_session
from ng_traj.sources.sniff import Claim, Sniffed


def parent_session(session: Session) -> str | None:
    """The header's ``parentSession`` (the path of the file a fork was made from), else ``None``."""
    value = (session.header or {}).get("parentSession")
    return value if isinstance(value, str) and value else None


def fork_parents(sessions: dict[str, Session]) -> dict[str, str | None]:
    """Each file's parent file among ``sessions`` (keyed by path): by path, else by unique file name.

    A cycle of ``parentSession`` links is cut at its lexically smallest file, which becomes a root.
    """
    by_path = {str(Path(name).resolve()): name for name in sessions}
    by_name: dict[str, list[str]] = {}
    for name in sessions:
        by_name.setdefault(Path(name).name, []).append(name)
    parents: dict[str, str | None] = {}
    for name, session in sessions.items():
        named = parent_session(session)
        if named is None:
            parents[name] = None
            continue
        found = by_path.get(str((Path(name).parent / named).resolve()))
        if found is None:
            candidates = by_name.get(Path(named.replace("\\", "/")).name, [])
            found = candidates[0] if len(candidates) == 1 else None
        parents[name] = found if found != name else None
    for cycle in parent_cycles(parents):
        parents[cycle[0]] = None
    return parents


def _tree(root: str, parents: dict[str, str | None]) -> list[str]:
    """``root`` and its descendants, parents before children (children in path order)."""
    order, pending = [], [root]
    while pending:
        name = pending.pop(0)
        order.append(name)
        pending.extend(sorted(child for child, parent in parents.items() if parent == name))
    return order


class PiReader:
    """The pi session reader (``sources/native.py`` contract)."""

    name = "pi"
    source = "pi"

    def sniff(self, sniffed: Sniffed) -> Claim | None:
        """Claim pi-family session files that are not OpenClaw's."""
        if is_pi_family(sniffed.first) and not is_openclaw_transcript(sniffed.path):
            return Claim(self.name, "pi session")
        return None

    def index(self, files: Sequence[Path], sink: DiagnosticSink) -> list[NativeUnit]:
        """One unit per session file without a parent among the inputs, with its forks; keyed by its id."""
        sessions = {str(path): read_session(path, DiagnosticSink()) for path in files}
        parents = fork_parents(sessions)
        units = []
        for root in (name for name in sessions if parents[name] is None):
            names = _tree(root, parents)
            ids = frozenset(rid for name in names for rid in response_ids(sessions[name]))
            paths = tuple(sorted(names))
            hints = (("root", root),)
            units.append(
                NativeUnit(
                    self.name, sessions[root].session_id, paths, ids, folders_of(paths), hints=hints, anchor=root
                )
            )
        return units

    def load(self, unit: NativeUnit, sink: DiagnosticSink) -> NativeObservations:
        """Read the unit's session files (the root, then its forks) and observe them."""
        sessions = {name: read_session(name, sink) for name in unit.paths}
        parents = fork_parents(sessions)
        root = dict(unit.hints).get("root", unit.paths[0])
        records, gaps, calls = [], [], []
        earlier = CopyIndex()
        for name in _tree(root, parents):
            session, parent = sessions[name], parents[name]
            where = f"entries of the session it was forked from ({Path(parent).name})" if parent else "earlier sessions"
            mark_copies(session, earlier, where, sink)
            parent_id = sessions[parent].session_id if parent is not None else None
            observed = observe(session, session.session_id, parent_id=parent_id)
            gaps.append(ObservationGap(code="subagent_hierarchy_unavailable", invocation_id=session.session_id))
            named = parent_session(session)
            if parent is None and named is not None:
                detail = Path(named.replace("\\", "/")).name
                gaps.append(
                    ObservationGap(code="subagent_parent_unavailable", invocation_id=session.session_id, detail=detail)
                )
            gaps.extend(observed.gaps)
            records.extend([observed.invocation, *observed.records])
            calls.extend(observed.calls)
        bundle = AgentObservationBundle(source=self.source, records=records, gaps=gaps)
        return NativeObservations(bundle, calls)


READER = register(PiReader())
