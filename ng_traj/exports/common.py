"""What the ATIF and OTLP exports share: identities, derived ids, times, model calls, completeness.

Everything here works on the trajectory's JSON value (``records.ReadRecord.value``), already
checked against the contract, so keys are present and typed as the contract says.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import orjson

# Finish reasons that say a model response stopped before it was complete (case-insensitive).
INCOMPLETE_FINISH_REASONS = frozenset(
    {
        "aborted",
        "canceled",
        "cancelled",
        "content_filter",
        "failed",
        "incomplete",
        "length",
        "max_output_tokens",
        "max_tokens",
        "model_context_window_exceeded",
        "pause_turn",
        "refusal",
        "timed_out",
        "timeout",
    }
)

TEXT_PART_TYPES = frozenset({"input_text", "output_text", "text", "summary_text", "reasoning_text"})


@dataclass(frozen=True, slots=True)
class Rollout:
    """One trajectory to export and what its input says about it.

    Attributes:
        value: The ``ng_trajectory`` JSON value.
        source: The input file or dataset it was read from; ``position`` its 1-based line or row.
        run, agent, producer, reward: As ``records.ReadRecord`` gives them (``None``: unknown).
        agent_ref: The row's ``agent_ref`` object (rows only), for the strict rules.
    """

    value: Mapping[str, Any]
    source: str
    position: int
    run: str | None = None
    agent: str | None = None
    producer: str | None = None
    reward: float | None = None
    agent_ref: Mapping[str, Any] | None = None

    @property
    def task_id(self) -> str:
        return self.value["task_id"]

    @property
    def rollout_id(self) -> str:
        return self.value["rollout_id"]

    @property
    def seed(self) -> bytes:
        """The bytes every derived id starts from: the run (else the input file or dataset as named:
        trajectory JSONL names no run), the agent (rows of several agents may share a run label),
        task and rollout ids (NUL-separated)."""
        return "\0".join((self.run or self.source, self.agent or "", self.task_id, self.rollout_id)).encode(
            "utf-8", "surrogatepass"
        )


def hex_id(seed: bytes, *parts: str, length: int = 32) -> str:
    """A lowercase hex id of ``length`` digits: SHA-256 of ``seed`` and ``parts`` (NUL-separated).

    The same inputs give the same id in every run; an all-zero id (invalid in OTLP) is never returned.
    """
    digest = hashlib.sha256(seed + b"".join(b"\0" + part.encode("utf-8", "surrogatepass") for part in parts))
    text = digest.hexdigest()[:length]
    return text if text.strip("0") else "1".rjust(length, "0")


@dataclass(slots=True)
class Completeness:
    """What one rollout's export could not hold in the target format's own fields.

    ``lost`` entries are not in the output at all; ``kept`` entries are kept, but only under the
    format's free-form place (ATIF ``extra``, OTLP ``ng_traj.*`` attributes); ``unfilled`` names
    fields the format asks for that the input could not fill. Each entry is
    ``{"what": <name>, "count": <n>, "detail": <text>}``, one per name (counts add up).
    """

    lost: dict[str, dict[str, Any]] = field(default_factory=dict)
    kept: dict[str, dict[str, Any]] = field(default_factory=dict)
    unfilled: dict[str, str] = field(default_factory=dict)

    def lose(self, what: str, count: int, detail: str) -> None:
        _add(self.lost, what, count, detail)

    def keep(self, what: str, count: int, detail: str) -> None:
        _add(self.kept, what, count, detail)

    def unfill(self, name: str, detail: str) -> None:
        self.unfilled.setdefault(name, detail)

    def to_json(self) -> dict[str, Any]:
        return {
            "lost": list(self.lost.values()),
            "kept_in_extension": list(self.kept.values()),
            "unfilled": [{"field": name, "detail": detail} for name, detail in self.unfilled.items()],
        }

    def summary(self) -> str:
        """One short line: what was lost, kept aside and left unfilled, with counts."""
        parts = []
        if self.lost:
            parts.append("lost " + ", ".join(f"{e['what']} ({e['count']})" for e in self.lost.values()))
        if self.kept:
            parts.append("kept in extension " + ", ".join(f"{e['what']} ({e['count']})" for e in self.kept.values()))
        if self.unfilled:
            parts.append("unfilled " + ", ".join(self.unfilled))
        return "; ".join(parts) or "complete"


def _add(entries: dict[str, dict[str, Any]], what: str, count: int, detail: str) -> None:
    if count <= 0:
        return
    entry = entries.setdefault(what, {"what": what, "count": 0, "detail": detail})
    entry["count"] += count


def without_nulls(value: Any) -> Any:
    """A copy of a JSON value with every ``None`` object member left out (list items kept)."""
    if isinstance(value, Mapping):
        return {key: without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [without_nulls(item) for item in value]
    return value


def iso_time(seconds: float) -> str | None:
    """A UTC epoch time in seconds as ISO-8601 with ``Z``; microseconds only when non-zero.

    ``None`` when the time is outside the years 1 to 9999, which ISO-8601 text of this form cannot
    hold (a time in milliseconds where seconds are expected, say): the caller reports the loss.
    """
    try:
        moment = datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError):
        return None
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:
        text += f".{moment.microsecond:06d}"
    return text + "Z"


def nanos(seconds: float) -> int:
    """A UTC epoch time in seconds as integer nanoseconds (exact for the float's shortest decimal form)."""
    return int((Decimal(repr(seconds)) * 1_000_000_000).to_integral_value())


def span_times(item: Mapping[str, Any]) -> tuple[int, int, str | None] | None:
    """``(start, end, unknown)`` in nanoseconds from ``started_at``/``completed_at``/``duration_ms``.

    With a start, the end is ``completed_at``, else the start plus ``duration_ms``; with neither, the
    span has no length and ``unknown`` is ``"end"``. Without a start, the end alone (``completed_at``)
    gives a span of no length at it, ``unknown`` ``"start"`` (a duration is not subtracted: the end
    of a call a producer dates by its completion need not be exact to the millisecond). No time at
    all, or an end before the start: ``None`` (the item is untimed).
    """
    started, completed, duration = item.get("started_at"), item.get("completed_at"), item.get("duration_ms")
    if started is None:
        if completed is None:
            return None
        end = nanos(completed)
        return end, end, "start"
    start = nanos(started)
    if completed is not None:
        end = nanos(completed)
    elif duration is not None:
        end = start + int((Decimal(repr(float(duration))) * 1_000_000).to_integral_value())
    else:
        return start, start, "end"
    return (start, end, None) if end >= start else None


class ModelCalls:
    """The record's model calls and how references resolve to them.

    A reference resolves by ``model_call_id``, else by ``response_id`` (with the model server when the
    reference names one); a reference that matches nothing, or more than one call, resolves to ``None``.
    """

    def __init__(self, calls: list[Mapping[str, Any]]) -> None:
        self.calls = calls
        self._by_id: dict[str, list[int]] = {}
        self._by_response: dict[str, list[int]] = {}
        for index, call in enumerate(calls):
            if call.get("model_call_id"):
                self._by_id.setdefault(call["model_call_id"], []).append(index)
            response_id = (call.get("response_metadata") or {}).get("response_id")
            if response_id:
                self._by_response.setdefault(response_id, []).append(index)

    def resolve(self, ref: Mapping[str, Any]) -> int | None:
        """The index of the call ``ref`` names, or ``None``."""
        if ref.get("model_call_id"):
            found = self._by_id.get(ref["model_call_id"], [])
            return found[0] if len(found) == 1 else None
        found = self._by_response.get(ref.get("response_id") or "", [])
        if ref.get("model_ref"):
            found = [
                i
                for i in found
                if (self.calls[i].get("response_metadata") or {}).get("model_ref") in (None, ref["model_ref"])
            ]
        return found[0] if len(found) == 1 else None

    def resolve_all(self, refs: Iterable[Mapping[str, Any]]) -> list[int]:
        return [index for index in (self.resolve(ref) for ref in refs) if index is not None]

    def key(self, index: int) -> str:
        """A stable name for call ``index``: its ``model_call_id``, else ``#<index>``."""
        return self.calls[index].get("model_call_id") or f"#{index}"

    def owners(self, invocations: list[Mapping[str, Any]], turns: list[Mapping[str, Any]]) -> dict[int, str]:
        """``{call index: invocation_id}`` from the invocations' own references, then the turns'.

        A call no reference names belongs to the only invocation when there is one; else to none.
        """
        owner: dict[int, str] = {}
        for invocation in invocations:
            for index in self.resolve_all(invocation.get("model_calls") or ()):
                owner.setdefault(index, invocation["invocation_id"])
        for turn in turns:
            for index in self.resolve_all(turn.get("model_calls") or ()):
                owner.setdefault(index, turn["invocation_id"])
        if len(invocations) == 1:
            for index in range(len(self.calls)):
                owner.setdefault(index, invocations[0]["invocation_id"])
        return owner


def root_invocations(invocations: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Invocations without a parent the record holds, in record order."""
    ids = {invocation["invocation_id"] for invocation in invocations}
    return [inv for inv in invocations if not inv.get("parent_invocation_id") or inv["parent_invocation_id"] not in ids]


def children_of(invocations: list[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """``{invocation_id: [child invocations in record order]}``."""
    children: dict[str, list[Mapping[str, Any]]] = {}
    ids = {invocation["invocation_id"] for invocation in invocations}
    for invocation in invocations:
        parent = invocation.get("parent_invocation_id")
        if parent and parent in ids and parent != invocation["invocation_id"]:
            children.setdefault(parent, []).append(invocation)
    return children


def token_totals(calls: Iterable[Mapping[str, Any]]) -> dict[str, int | None]:
    """Sums of the calls' token counts, per kind; a kind is ``None`` when any call lacks it (or no call)."""
    names = ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens", "total_tokens")
    stats = [call.get("token_stats") or {} for call in calls]
    totals: dict[str, int | None] = {}
    for name in names:
        values = [s.get(name) for s in stats]
        totals[name] = sum(values) if values and all(isinstance(v, int) for v in values) else None
    return totals


def text_of(content: Any) -> str | None:
    """The text of a message's content: a string as is, a list of text parts joined by newlines;
    ``None`` when a list holds a part that is not text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") not in TEXT_PART_TYPES:
                return None
            texts.append(part.get("text") or "")
        return "\n".join(texts)
    return None if content is not None else ""


def reasoning_text(items: Iterable[Mapping[str, Any]]) -> str | None:
    """The text of reasoning items (their ``content`` parts, else their ``summary`` parts), joined by
    newlines. Only text parts count: a turn's ``reasoning_content`` is any JSON in the contract, so an
    item that is not an object, parts that are not a list and a ``text`` that is not a string are passed over."""
    texts = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        parts = item.get("content") or item.get("summary")
        if isinstance(parts, list):
            texts.extend(
                text
                for part in parts
                if isinstance(part, Mapping) and isinstance(text := part.get("text"), str) and text
            )
    return "\n".join(texts) if texts else None


def json_text(value: Any) -> str:
    """A JSON value as text: a string as is, anything else as compact JSON with sorted keys."""
    return value if isinstance(value, str) else orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def message_role(item: Mapping[str, Any]) -> str | None:
    """The role of a ``message`` item (an item without ``type`` but with a role is a message)."""
    if item.get("type") in (None, "message"):
        role = item.get("role")
        return role if isinstance(role, str) else None
    return None
