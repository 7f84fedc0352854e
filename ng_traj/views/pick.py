"""Finding rollouts in the records read back (``records.read_inputs``): the list, and one by id.

Rollout ids collide across runs and agents (NeMo Gym's examples share ``0-0`` between a dozen
files), so a rollout is named by its id and narrowed with the run and agent its input carries.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ng_traj.diagnostics import RunError
from ng_traj.records import ReadRecord
from ng_traj.views.tree import tool_call_count


@dataclass(frozen=True, slots=True)
class Entry:
    """One rollout in a list: where it is and what its input says of it."""

    rollout_id: str
    task_id: str
    run: str | None
    agent: str | None
    producer: str | None
    reward: float | None
    source: str
    position: int
    model_calls: int
    tool_calls: int
    gaps: int

    def where(self) -> str:
        """``source:position`` (line, or trajectory position in a dataset)."""
        return f"{self.source}:{self.position}"


def entry(read: ReadRecord) -> Entry:
    """The list entry of one record."""
    value = read.value
    return Entry(
        value["rollout_id"],
        value["task_id"],
        read.run,
        read.agent,
        read.producer,
        read.reward,
        read.source,
        read.position,
        len(value.get("model_calls", [])),
        tool_call_count(value),
        len(value.get("gaps", [])),
    )


def matches(read: ReadRecord, rollout: str | None, run: str | None, agent: str | None, line: int | None = None) -> bool:
    """Whether ``read`` is rollout ``rollout`` of ``run`` and ``agent`` at ``line`` (its position:
    the line of a JSONL file, 1-based, or the trajectory's position in a dataset); each ``None``
    matches any."""
    return (
        (rollout is None or read.value["rollout_id"] == rollout)
        and (run is None or read.run == run)
        and (agent is None or read.agent == agent)
        and (line is None or read.position == line)
    )


def _candidate(item: Entry) -> str:
    return f"{item.where()} (run {item.run or '?'}, agent {item.agent or '?'})"


def options_given(line: int | None) -> str:
    """How messages name the options that narrow the records: ``--run/--agent``, and ``--line`` when given."""
    return "--run/--agent/--line" if line is not None else "--run/--agent"


def pick(
    reads: Iterable[ReadRecord], rollout: str, run: str | None, agent: str | None, line: int | None = None
) -> ReadRecord:
    """The one record that is ``rollout`` of ``run`` and ``agent`` at ``line`` (:func:`matches`).

    Raises:
        RunError: None matches (the message says which ids exist, or which runs and agents do), or
            several do (the message lists each with its place, run and agent, and the option that
            picks it).
    """
    found: list[ReadRecord] = []
    others: list[Entry] = []
    for read in reads:
        if matches(read, rollout, run, agent, line):
            found.append(read)
        elif read.value["rollout_id"] == rollout:
            others.append(entry(read))
    if len(found) == 1:
        return found[0]
    if not found:
        if others:
            listed = "; ".join(_candidate(item) for item in others[:20])
            raise RunError(f"rollout {rollout!r} exists, but not for the {options_given(line)} given: {listed}")
        raise RunError(f"no rollout {rollout!r} in the input (ng-traj show INPUT lists the rollouts)")
    items = [entry(read) for read in found]
    listed = "; ".join(_candidate(item) for item in items[:20])
    more = f"; and {len(items) - 20} more" if len(items) > 20 else ""
    hint = _hint(items)
    raise RunError(f"{len(items)} rollouts are {rollout!r}: {listed}{more}; {hint}")


def _hint(items: list[Entry]) -> str:
    """What tells the colliding ``items`` apart: ``--run``, ``--agent``, both, their lines in one
    file (``--line``), or naming one of their files."""
    runs = {item.run for item in items}
    agents = {item.agent for item in items}
    if len(runs) == len(items) and None not in runs:
        return "pick one with --run"
    if len(agents) == len(items) and None not in agents:
        return "pick one with --agent"
    if len({(item.run, item.agent) for item in items}) == len(items) and None not in runs | agents:
        return "pick one with --run and --agent"
    sources = {item.source for item in items}
    if len(sources) == 1:
        return (
            f"the id repeats within {next(iter(sources))}, and no run or agent of their own tells these "
            f"records apart: pick one by its line with --line N (N as in {next(iter(sources))}:N above)"
        )
    if None in runs and None in agents:
        return "the input does not say which run or agent each came from: name one file, and --line N in it"
    return "pick one with --run and --agent, or name one file (and --line N in it)"


def listing(
    reads: Iterable[ReadRecord], run: str | None, agent: str | None, line: int | None = None
) -> Iterator[Entry]:
    """The entries of the records of ``run`` and ``agent`` at ``line`` (each any when ``None``), in input order."""
    for read in reads:
        if matches(read, None, run, agent, line):
            yield entry(read)


def entry_json(item: Entry) -> dict[str, Any]:
    """An entry as a JSON object."""
    return {name: getattr(item, name) for name in Entry.__slots__}
