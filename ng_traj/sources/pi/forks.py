"""Forked pi-family sessions: a file whose header's ``parentSession`` names the file it was forked from.

pi's ``/fork`` (and ``createBranchedSession``) writes a new file holding the parent's root-to-leaf
path, with ``parentSession`` = the parent file's path on the producing host; OpenClaw thread forks carry the same header field. A fork is a child invocation of its
parent; what it copies from its ancestors is recognised (``sources/pi/copies.py``) and not counted
again.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from ng_traj.contract import ObservationGap
from ng_traj.diagnostics import DiagnosticSink
from ng_traj.io.compression import logical_name
from ng_traj.sources.lineage import parent_cycles
from ng_traj.sources.pi.copies import CopyIndex, mark_copies
from ng_traj.sources.pi.observe import SessionObservation, observe
from ng_traj.sources.pi.session import Session, read_session


def parent_session(session: Session) -> str | None:
    """The header's ``parentSession`` (the path of the file a fork was made from), else ``None``."""
    value = (session.header or {}).get("parentSession")
    return value if isinstance(value, str) and value else None


def _file_name(path: str) -> str:
    return logical_name(Path(path.replace("\\", "/")).name)


def fork_parents(sessions: dict[str, Session]) -> dict[str, str | None]:
    """Each file's parent file among ``sessions`` (keyed by path): by path, else by unique file name.

    Names are compared without a compression suffix (``x.jsonl.gz`` is the ``x.jsonl`` a fork names).
    A cycle of ``parentSession`` links is cut at its lexically smallest file, which becomes a root.
    """
    by_path = {os.path.abspath(logical_name(name)): name for name in sessions}  # text only: no file is touched
    by_name: dict[str, list[str]] = {}
    for name in sessions:
        by_name.setdefault(logical_name(os.path.basename(name)), []).append(name)  # files: no trailing separator
    parents: dict[str, str | None] = {}
    for name, session in sessions.items():
        named = parent_session(session)
        found = None
        if named is not None:
            found = by_path.get(os.path.abspath(os.path.join(os.path.dirname(name), named)))
            candidates = by_name.get(_file_name(named), [])
            found = found or (candidates[0] if len(candidates) == 1 else None)
        parents[name] = found if found != name else None
    for cycle in parent_cycles(parents):
        parents[cycle[0]] = None
    return parents


def fork_trees(parents: dict[str, str | None]) -> dict[str, list[str]]:
    """Each root (a file without a parent) with itself and its descendants, parents before children
    (children in path order); roots in the order of ``parents``."""
    children: dict[str, list[str]] = {}
    for child, parent in parents.items():
        if parent is not None:
            children.setdefault(parent, []).append(child)
    trees = {}
    for root in (name for name, parent in parents.items() if parent is None):
        order, pending = [], deque([root])
        while pending:
            name = pending.popleft()
            order.append(name)
            pending.extend(sorted(children.get(name, [])))
        trees[root] = order
    return trees


def header_only(session: Session) -> Session:
    """The session without its entries (what :func:`fork_parents` and unit keys need), so an index of
    many files holds no transcript."""
    return Session(session.path, session.session_id, header=session.header)


def fork_header(session: Session) -> Session:
    """The session with only what :func:`fork_parents` and unit keys need of it: its path, session id
    and header ``parentSession`` (an index of many files holds no other header field)."""
    parent = parent_session(session)
    return Session(session.path, session.session_id, header=None if parent is None else {"parentSession": parent})


def observe_forks(
    names: Sequence[str], root: str, sink: DiagnosticSink, *, derive_status: bool, positional_ids: bool = False
) -> list[SessionObservation]:
    """Observe ``root`` and its forks among ``names`` (invocation ids: session ids), parents first.

    Each session's entries that copy an earlier session's are marked before it is observed. A root
    whose ``parentSession`` names no file among ``names`` gets ``subagent_parent_unavailable`` (detail:
    the file name it names).

    A unit of one file is its own tree (a file is never its own parent, and with no earlier session
    it copies nothing), observed without the fork family's parents, trees and copy index.
    """
    if len(names) == 1 and names[0] == root:
        session = read_session(root, sink)
        one = observe(session, session.session_id, derive_status=derive_status, positional_ids=positional_ids)
        _unavailable_parent(one, session)
        return [one]
    sessions = {name: read_session(name, sink) for name in names}
    parents = fork_parents(sessions)
    earlier = CopyIndex()
    observed = []
    tree = fork_trees(parents)[root]
    for position, name in enumerate(tree):
        session, parent = sessions[name], parents[name]
        where = f"entries of the session it was forked from ({Path(parent).name})" if parent else "earlier sessions"
        mark_copies(session, earlier, where, sink, keep=position < len(tree) - 1)
        parent_id = sessions[parent].session_id if parent is not None else None
        one = observe(
            session, session.session_id, parent_id=parent_id, derive_status=derive_status, positional_ids=positional_ids
        )
        if parent is None:
            _unavailable_parent(one, session)
        observed.append(one)
    return observed


def _unavailable_parent(one: SessionObservation, session: Session) -> None:
    """Give a root whose header names a ``parentSession`` (none of the unit's files) the gap
    ``subagent_parent_unavailable`` first (detail: the file name it names)."""
    named = parent_session(session)
    if named is not None:
        gap = ObservationGap(
            code="subagent_parent_unavailable", invocation_id=session.session_id, detail=_file_name(named)
        )
        one.gaps.insert(0, gap)
