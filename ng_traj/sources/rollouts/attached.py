"""Telling an earlier ``build --attach`` output from the rollout rows it was built from.

``--attach`` writes each rollout row again with ``ng_trajectory`` (and ``ng_perf``, the joined
``ng_agent_observations``, the recomputed ``ng_model_call_capture``) attached, as the collector
attaches them, so such a file is rollout rows like any other. Left in the input folder beside its
rows, it would be built as a second run holding the same rollouts. A rollouts file is taken for an
earlier ``--attach`` output when its first row carries ``ng_trajectory`` and that row, without the
keys ``--attach`` writes, equals a row of another rollouts file of the build whose first row carries
no ``ng_trajectory`` (rows a collector wrote with observability on carry one in every file, and are
not compared: their files are built as they are).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ng_traj.io.lines import iter_json_lines
from ng_traj.sources.rollouts.rows import IdentityError, rollout_id
from ng_traj.sources.sniff import first_record

ATTACHED_KEYS = frozenset({"ng_trajectory", "ng_perf", "ng_agent_observations", "ng_model_call_capture"})
"""The keys ``--attach`` adds to or replaces in a row; the rest of the row is as read."""

ATTACH_OUTPUT = "rollout rows an earlier build --attach wrote from {source} (already built; use validate or matrix)"
"""What such a file is (``source``: the file its rows were built from), as the build's diagnostic names it."""


def _bare(row: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in row.items() if key not in ATTACHED_KEYS}


def _id(row: dict[str, Any]) -> str | None:
    try:
        return rollout_id(row)
    except IdentityError:
        return None


def earlier_attach_outputs(files: Iterable[Path]) -> dict[Path, Path]:
    """The rollouts files among ``files`` that are an earlier ``--attach`` output, each with the file
    holding the row its first row was built from (``{}`` when none is).

    Reads one first line per file; the files compared against are read whole, only when some file's
    first row carries ``ng_trajectory`` and another's does not. A file that cannot be read, or a row
    that is no JSON object, matches nothing (its reader reports it).
    """
    candidates: dict[Path, dict[str, Any]] = {}
    plain: list[Path] = []
    for path in files:
        first = first_record(path)
        if not isinstance(first, dict):
            continue
        if "ng_trajectory" in first:
            candidates[path] = first
        else:
            plain.append(path)
    if not candidates or not plain:
        return {}
    wanted: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for path, first in candidates.items():
        key = _id(first)
        if key is not None:
            wanted.setdefault(key, []).append((path, _bare(first)))
    found: dict[Path, Path] = {}
    for source in plain:
        if len(found) == len(candidates):
            break
        try:
            for line in iter_json_lines(source):
                row = line.value
                if not isinstance(row, dict) or (key := _id(row)) not in wanted:
                    continue
                bare = _bare(row)
                for path, first in wanted[key]:
                    if path not in found and first == bare:
                        found[path] = source
        except OSError:
            continue
    return dict(sorted(found.items()))
