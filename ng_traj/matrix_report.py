"""The matrix report: groups of cells beside the documented upstream matrix.

The documented matrix is data, not code: ``ng_traj/data/reference_matrix.json`` holds the table of
``fern/versions/latest/pages/reference/trajectory-capabilities.mdx`` at NeMo Gym ``07d6b0d07``
(the page was last changed 2026-08-17), plus ng-traj's map from evidence
sources to rows and the producers documented as running tools concurrently (rule C6).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ng_traj.matrix import CRITERIA, Cell, Group


@dataclass(frozen=True)
class Reference:
    """The documented upstream matrix.

    Attributes:
        rows: ``{agent: {criterion: "V" | "O" | "X"}}``.
        producers: Evidence source (``pi``, ``ng_trajectory``, ...) -> documented row.
        concurrent: Producers documented as running tools concurrently.
        about: ``source``, ``commit``, ``commit_date``, ``last_changed``.
    """

    rows: Mapping[str, Mapping[str, str]]
    producers: Mapping[str, str]
    concurrent: frozenset[str]
    about: Mapping[str, str]


def load_reference() -> Reference:
    """Read the documented matrix shipped with the package."""
    text = resources.files("ng_traj").joinpath("data/reference_matrix.json").read_text(encoding="utf-8")
    data = json.loads(text)
    about = {key: data[key] for key in ("source", "commit", "commit_date", "last_changed")}
    return Reference(data["rows"], data["producers"], frozenset(data["concurrent_producers"]), about)


def reference_row(name: str, by: str, reference: Reference) -> str | None:
    """The documented row for a group, or ``None``.

    By producer: the data file's producer map. By agent: the row named exactly like the agent; else
    the longest row name the agent name ends with after a ``_`` (``math_with_judge_openclaw_agent`` ->
    ``openclaw_agent``); else the longest row whose name without ``_agent`` the agent name starts
    with before a ``_`` (``anyswe_pi`` -> ``anyswe_agent``). Agent instance names are free-form in the
    Gym config, so the row used is always shown by name.
    """
    if by == "producer":
        return reference.producers.get(name)
    if name in reference.rows:
        return name
    suffixes = [row for row in reference.rows if name.endswith("_" + row)]
    prefixes = [row for row in reference.rows if name.startswith(row.removesuffix("_agent") + "_")]
    for found in (suffixes, prefixes):
        if found:
            return max(found, key=len)
    return None


def _cell(cell: Cell, documented: str | None) -> dict[str, Any]:
    reason = cell.reason
    value = cell.value
    return {
        "value": value,
        "V": cell.counts["V"],
        "O": cell.counts["O"],
        "X": cell.counts["X"],
        "NA": cell.counts["NA"],
        "applicable": cell.applicable,
        "reason": reason[0] if reason else None,
        "reason_records": reason[1] if reason else 0,
        "reference": documented,
        "agrees": None if documented is None or value == "NA" else value == documented,
    }


def report(groups: Iterable[Group], by: str, reference: Reference | None) -> dict[str, Any]:
    """The matrix as one JSON object (what every output format renders).

    ``groups[].cells[C]`` holds the value, the count of records per value, the applicable count
    (``V`` + ``O`` + ``X``), the main reason of the cell and how many records had it, and with a
    reference the documented value and whether it agrees (``null`` when not comparable).
    """
    rendered = []
    for group in sorted(groups, key=lambda g: g.name):
        row = reference_row(group.name, by, reference) if reference is not None else None
        documented = reference.rows.get(row, {}) if reference is not None and row is not None else {}
        cells = {c: _cell(group.cells[c], documented.get(c)) for c in CRITERIA}
        rendered.append({"group": group.name, "records": group.records, "reference_row": row, "cells": cells})
    return {
        "by": by,
        "records": sum(g["records"] for g in rendered),
        "criteria": list(CRITERIA),
        "reference": dict(reference.about) if reference is not None else None,
        "groups": rendered,
    }
