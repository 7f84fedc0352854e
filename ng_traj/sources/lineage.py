"""Cycles in the parent links native producers record (Hermes ``parent_session_id``, OpenClaw
``spawnedBy`` / ``parentSessionKey``, pi entry ``parentId``).

Each node names at most one parent, so the links form a functional graph: every cycle is disjoint
from the others, and every node leads to at most one of them. A producer never writes a cycle on
purpose (a session cannot descend from itself), so ng-traj reports each one (``parent_cycle``) and
breaks it at one link that the caller chooses deterministically.
"""

from __future__ import annotations

from collections.abc import Mapping


def parent_cycles(parents: Mapping[str, str | None]) -> list[list[str]]:
    """The cycles of a parent map, each from its lexically smallest member along the parent links.

    Args:
        parents: Node -> its parent (``None``, or a node that is not a key, ends a chain).

    Returns:
        One list per cycle, ``[m, parent(m), parent(parent(m)), ...]`` with ``m`` the smallest member
        (a self-parent is ``[m]``), ordered by ``m``.
    """
    done: set[str] = set()
    cycles = []
    for start in sorted(parents):
        walk: dict[str, int] = {}
        node: str | None = start
        while node is not None and node in parents and node not in done and node not in walk:
            walk[node] = len(walk)
            node = parents[node]
        if node is not None and node in walk:
            members = list(walk)[walk[node] :]
            first = members.index(min(members))
            cycles.append(members[first:] + members[:first])
        done.update(walk)
    return sorted(cycles)


def cycle_text(cycle: list[str]) -> str:
    """``a -> b -> c -> a``: a cycle as its parent links."""
    return " -> ".join([*cycle, cycle[0]])
