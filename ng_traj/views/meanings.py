"""What each gap code and each matrix letter means, in words for people reading a viewer.

Gap meanings come from the one gap-code catalogue (``contract/gaps.py``: NeMo Gym's codes with their
upstream meaning, the codes its NOOA agent makes at run time, ng-traj's own codes as
``docs/gaps.md`` lists them). The matrix legend is written here once and used by ``ng-traj matrix``
(under its table) and by the report's matrix page.
"""

from __future__ import annotations

from ng_traj.contract.gaps import DYNAMIC_GAPS, NG_TRAJ_GAPS, UPSTREAM_GAPS

UNKNOWN_GAP = "not a code NeMo Gym or ng-traj defines (ng-traj validate warns about it)"

CRITERIA_MEANINGS: dict[str, str] = {
    "C1": "per-call metadata: every model call names its model server, dialect and HTTP status, no capture lost",
    "C2": "token counts: every answered model call has prompt, completion and total tokens",
    "C3": "turns: each turn has its question and answer, the last says whether the task was resolved",
    "C4": "model-visible history: every agent invocation has its conversation, or every call its request and response",
    "C5": "tool calls: every tool call has its output, a known status, start, completion and duration",
    "C6": "parallel tool timing: tool calls are timed well enough to show those that ran at the same time",
    "C7": "agent-side evidence: the agent itself was observed (not only rebuilt from the rollout row)",
}
"""One line per criterion (the full rules are in docs/matrix.md)."""

VALUE_MEANINGS: dict[str, str] = {
    "V": "complete: every record of the group meets the criterion",
    "O": "partial: some records meet it, or records meet it in part; `O 37/50` is 37 of the 50 records it applies to",
    "X": "unavailable: no record of the group meets it",
    "n/a": "the criterion applies to no record of the group (C5 and C6 without tool calls, C2 when every call failed)",
}
"""What a cell's letter means; the counts are records that are V / records the criterion applies to."""


def gap_meaning(code: str) -> str:
    """What gap ``code`` means: ng-traj's own meaning, else NeMo Gym's, else :data:`UNKNOWN_GAP`."""
    return NG_TRAJ_GAPS.get(code) or UPSTREAM_GAPS.get(code) or DYNAMIC_GAPS.get(code) or UNKNOWN_GAP


def legend_lines() -> list[str]:
    """The matrix legend as plain lines: the criteria, then the letters."""
    lines = ["Criteria:"]
    lines += [f"  {name}  {text}" for name, text in CRITERIA_MEANINGS.items()]
    lines.append("Cells:")
    lines += [f"  {value:<3} {text}" for value, text in VALUE_MEANINGS.items()]
    return lines
