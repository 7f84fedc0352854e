"""One Hermes session tree as an observation bundle: invocations, lineage, compactions, chosen forms.

Each Hermes session is one invocation whose id is the session id. Its conversation comes from one
form: the ``state.db`` rows when they hold any message (the database is authoritative), else the
form with the most messages (a snapshot before a gateway transcript on a tie). Every other form with
messages that differs from the chosen one is reported (``hermes_session_forms_differ``); the
session's metadata (lineage, times, system prompt) comes from ``state.db`` where it has the session.

``parent_session_id`` means either a delegating parent or a predecessor:

* ``source = 'subagent'``: a sub-agent; ``parent_invocation_id`` is the parent session, which
  records no spawning tool call (``subagent_spawn_tool_unavailable``; ``subagent_hierarchy_incomplete``
  when the parent is not among the inputs).
* the predecessor ended with ``end_reason = 'compression'``, or (unless it ended ``branched``) the
  session holds the compressor's summary message: a context-compression continuation. The
  predecessor gets a context-compaction observation (``observed_at`` = its ``ended_at`` when it ended
  by compression, ``summary`` = the successor's first summary message, outcome ``completed``; a
  predecessor ended by compression with no successor among the inputs: outcome ``unknown``) and the
  continuation sits at its predecessor's place in the tree.
* the predecessor ended with ``end_reason = 'branched'``: a ``/branch`` copy, placed like a
  continuation, with ``agent_conversation_branching_unavailable``.
* anything else: the kind of link is not stated; placed like a continuation, with
  ``session_lineage_unresolved`` (detail: the parent session id).

A compression continuation starts with copies of its predecessor's messages, a ``/branch`` child with
its source's history (``_copied_head``): those copies are left out of its conversation, tool calls
and model calls, each being counted in the session that made it, with ``copied_context``.

Compactions inside one session (a summary message after the first one, in-place compaction in
schema v15+, the gateway rewriting its transcript) are observations of that session. Hermes keeps no
token counts or model calls for a compaction: every one gets ``compaction_tokens_before_unavailable``,
``compaction_tokens_after_unavailable`` and ``compaction_model_call_boundary_unavailable``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ng_traj.contract import AgentInvocation, AgentObservationBundle, ContextCompactionObservation, ObservationGap
from ng_traj.contract.observations import dedupe_gaps
from ng_traj.diagnostics import Diagnostic, DiagnosticSink, plural, quoted
from ng_traj.sources.hermes.files import SessionForm, utc_seconds
from ng_traj.sources.hermes.messages import call_id_of, is_compaction_summary, normalise, text_of, tool_calls_of
from ng_traj.sources.native import NativeObservations, scalar_text
from ng_traj.sources.pi.copies import id_list

SOURCE = "hermes"
_FORM_RANK = {"state.db": 0, "snapshot": 1, "gateway": 2, "sharegpt": 3}
_COMPACTION_GAPS = (
    "compaction_tokens_before_unavailable",
    "compaction_tokens_after_unavailable",
    "compaction_model_call_boundary_unavailable",
)


@dataclass
class Tree:
    """The sessions of one unit: their forms (``state.db`` first) and ``state.db`` rows, in id order."""

    forms: dict[str, list[SessionForm]]
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    compacted_rows: dict[str, int] = field(default_factory=dict)
    gaps: list[ObservationGap] = field(default_factory=list)


@dataclass
class _Built:
    records: list[Any] = field(default_factory=list)
    gaps: list[ObservationGap] = field(default_factory=list)
    observations: NativeObservations | None = None


def _signature(messages: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (
            m.get("role"),
            text_of(m.get("content")),
            tuple(call_id_of(c) for c in tool_calls_of(m)),
            scalar_text(m.get("tool_call_id")),
        )
        for m in messages
    ]


def _first_difference(a: Sequence[tuple[Any, ...]], b: Sequence[tuple[Any, ...]]) -> int | None:
    for index, (left, right) in enumerate(zip(a, b, strict=False)):
        if left != right:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def choose_form(session: str, forms: Sequence[SessionForm], sink: DiagnosticSink) -> SessionForm | None:
    """The form whose messages become the conversation; every differing other form is reported."""
    with_messages = [form for form in forms if form.messages]
    if not with_messages:
        return forms[0] if forms else None
    ranked = sorted(with_messages, key=lambda f: (f.form != "state.db", -len(f.messages), _FORM_RANK[f.form], f.path))
    chosen = ranked[0]
    expected = _signature(chosen.messages)
    for other in ranked[1:]:
        index = _first_difference(expected, _signature(other.messages))
        if index is not None:
            message = (
                f"session {session}: {chosen.form} ({plural(len(chosen.messages), 'message')}) and {other.form} "
                f"({plural(len(other.messages), 'message')}) differ from message {index + 1}; {chosen.form} used"
            )
            sink.add(Diagnostic("warning", "hermes_session_forms_differ", message, path=other.path))
    return chosen


def _time(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return utc_seconds(value)[0]


def _duration(row: Mapping[str, Any] | None) -> float | None:
    if row is None:
        return None
    started, ended = _time(row.get("started_at")), _time(row.get("ended_at"))
    return (ended - started) * 1000 if started is not None and ended is not None and ended >= started else None


def _compaction(
    invocation: str, *, observed_at: float | None, summary: str | None, outcome: str, built: _Built
) -> None:
    built.records.append(
        ContextCompactionObservation(
            invocation_id=invocation,
            observed_at=observed_at,
            summary=summary,
            outcome=outcome,  # type: ignore[arg-type]
        )
    )
    codes = [*_COMPACTION_GAPS, *(["compaction_summary_unavailable"] if summary is None else [])]
    codes += ["compaction_outcome_unavailable"] if outcome == "unknown" else []
    built.gaps.extend(ObservationGap(code=code, invocation_id=invocation) for code in codes)


def _link(session: str, tree: Tree, chosen: dict[str, SessionForm | None]) -> str | None:
    """The kind of a session's parent link: ``subagent``, ``compression``, ``branch``, ``unresolved``."""
    row = tree.rows.get(session) or {}
    parent = row.get("parent_session_id")
    if not parent:
        return None
    if row.get("source") == "subagent":
        return "subagent"
    end_reason = (tree.rows.get(parent) or {}).get("end_reason")
    if end_reason == "compression" or (end_reason != "branched" and _summaries(chosen.get(session))):
        return "compression"
    return "branch" if end_reason == "branched" else "unresolved"


def _parents(tree: Tree, chosen: dict[str, SessionForm | None], built: _Built) -> dict[str, str | None]:
    """``parent_invocation_id`` per session (continuations take their predecessor's place)."""
    parents: dict[str, str | None] = {}

    def parent_of(session: str, seen: frozenset[str]) -> str | None:
        if session in parents:
            return parents[session]
        row = tree.rows.get(session) or {}
        parent, kind = row.get("parent_session_id"), _link(session, tree, chosen)
        if kind is None or kind == "subagent" or parent in seen:
            result = parent if kind == "subagent" else None
        else:
            result = parent_of(parent, seen | {session}) if parent in tree.forms else None
        parents[session] = result
        return result

    for session in tree.forms:
        parent_of(session, frozenset())
        kind, parent = _link(session, tree, chosen), (tree.rows.get(session) or {}).get("parent_session_id")
        if kind == "subagent":
            built.gaps.append(
                ObservationGap(code="subagent_spawn_tool_unavailable", invocation_id=session, detail=parent)
            )
            if parent not in tree.forms:
                built.gaps.append(
                    ObservationGap(code="subagent_hierarchy_incomplete", invocation_id=session, detail=parent)
                )
        elif kind == "branch":
            code = "agent_conversation_branching_unavailable"
            built.gaps.append(ObservationGap(code=code, invocation_id=session, detail=parent))
        elif kind == "unresolved":
            built.gaps.append(ObservationGap(code="session_lineage_unresolved", invocation_id=session, detail=parent))
    return parents


def _summaries(form: SessionForm | None) -> list[dict[str, Any]]:
    return [m for m in form.messages if is_compaction_summary(m)] if form is not None else []


def _compactions(tree: Tree, chosen: dict[str, SessionForm | None], built: _Built) -> None:
    successors: dict[str, str] = {}
    for session in tree.forms:
        parent = (tree.rows.get(session) or {}).get("parent_session_id")
        if _link(session, tree, chosen) == "compression" and parent not in successors:
            successors[parent] = session
    for session in tree.forms:
        summaries = _summaries(chosen[session])
        successor = successors.get(session)
        row = tree.rows.get(session) or {}
        if successor is not None or row.get("end_reason") == "compression":
            heads = _summaries(chosen[successor])[:1] if successor is not None else []
            summary = text_of(heads[0].get("content")) if heads else None
            outcome = "completed" if successor is not None else "unknown"
            ended = _time(row.get("ended_at")) if row.get("end_reason") == "compression" else None
            _compaction(session, observed_at=ended, summary=summary, outcome=outcome, built=built)
        parent = row.get("parent_session_id")
        if parent in successors and successors[parent] == session and parent in tree.forms:
            summaries = summaries[1:]
        for message in summaries:
            time = _time(message.get("timestamp"))
            _compaction(
                session, observed_at=time, summary=text_of(message.get("content")), outcome="completed", built=built
            )
        if tree.compacted_rows.get(session) and not summaries and successor is None:
            _compaction(session, observed_at=None, summary=None, outcome="completed", built=built)


def _copied_head(session: str, tree: Tree, chosen: dict[str, SessionForm | None]) -> int:
    """How many of a continuation's first messages copy its predecessor's (``context_copied``).

    A compression continuation starts with the predecessor's protected first messages, the compressor's
    summary and the predecessor's kept tail; a ``/branch`` child starts with the whole history. From
    the first message on, system messages and compressor summaries are passed, and each message equal
    to one of the predecessor's not yet matched (role, text, tool call ids, ``tool_call_id``) is a
    copy; the first message that is neither ends the copied head. Returns the index where it ends, 0
    for a session that continues none.
    """
    kind = _link(session, tree, chosen)
    parent = (tree.rows.get(session) or {}).get("parent_session_id")
    form, before = chosen.get(session), chosen.get(parent) if kind in ("compression", "branch") else None
    if form is None or before is None:
        return 0
    remaining = Counter(_signature(before.messages))
    end = 0
    for index, (message, signature) in enumerate(zip(form.messages, _signature(form.messages), strict=True)):
        if remaining[signature] > 0:
            remaining[signature] -= 1
            end = index + 1
        elif not (message.get("role") == "system" or is_compaction_summary(message)):
            break
    return end


def _copies(session: str, form: SessionForm, end: int, sink: DiagnosticSink, built: _Built) -> None:
    """Record the copied head of a continuation: gap ``copied_context``, diagnostic ``context_copied``."""
    copied = [m for m in form.messages[:end] if m.get("role") != "system" and not is_compaction_summary(m)]
    if not copied:
        return
    calls = [call_id_of(call) for m in copied for call in tool_calls_of(m)]
    calls += [scalar_text(m.get("tool_call_id")) for m in copied if m.get("role") == "tool"]
    ids = id_list(call for call in calls if call)
    detail = f"messages={len(copied)}" + (f";tool_calls={ids}" if ids else "")
    built.gaps.append(ObservationGap(code="copied_context", invocation_id=session, detail=detail))
    noun = "message copies" if len(copied) == 1 else "messages copy"
    message = (
        f"session {session}: {len(copied)} {noun} messages of the session it continues"
        + (f" (tool calls {ids})" if ids else "")
        + "; left out of calls, tools and conversation, counted once"
    )
    sink.add(Diagnostic("warning", "context_copied", message, path=form.path))


def _invocation(
    session: str, form: SessionForm | None, parent: str | None, tree: Tree, built: _Built, copied: int = 0
) -> Any:
    row = tree.rows.get(session)
    system_prompt = row.get("system_prompt") if row is not None else None
    if not isinstance(system_prompt, str) or not system_prompt:
        snapshot = next((f for f in tree.forms[session] if f.system_prompt), None)
        system_prompt = snapshot.system_prompt if snapshot is not None else None
    messages = form.messages if form is not None else []
    if copied:  # the copied head: system messages and summaries stay, copies go
        head = [m for m in messages[:copied] if m.get("role") == "system" or is_compaction_summary(m)]
        messages = [*head, *messages[copied:]]
    normalised = normalise(messages, session, system_prompt=system_prompt, completed=form.completed if form else None)
    if not messages:
        detail = ",".join(sorted({f.form for f in tree.forms[session]}))
        built.gaps.append(ObservationGap(code="agent_transcript_unavailable", invocation_id=session, detail=detail))
    if row is None and form is not None and form.local_times:
        detail = ",".join(form.local_times)
        built.gaps.append(ObservationGap(code="local_timestamp_unconverted", invocation_id=session, detail=detail))
    for other in tree.forms[session]:
        built.gaps.extend(other.gaps)
    built.gaps.extend(normalised.gaps)
    built.records.extend(normalised.tools)
    assert built.observations is not None
    built.observations.calls.extend(normalised.calls)
    return AgentInvocation(
        invocation_id=session,
        parent_invocation_id=parent,
        status=normalised.status,  # type: ignore[arg-type]
        duration_ms=_duration(row),
        conversation=normalised.conversation,  # type: ignore[arg-type]
    )


def _report_times(tree: Tree, sink: DiagnosticSink) -> None:
    """Warn of ``sessions`` times that are not times (their invocation gets no duration)."""
    for session, row in sorted(tree.rows.items()):
        bad = [
            f"{key} {quoted(row[key])}"
            for key in ("started_at", "ended_at")
            if row.get(key) is not None and _time(row[key]) is None
        ]
        if bad:
            path = next((form.path for form in tree.forms.get(session, []) if form.form == "state.db"), None)
            message = f"session {session}: {' and '.join(bad)} not a time; its duration is unknown"
            sink.add(Diagnostic("warning", "hermes_time_invalid", message, path=path))


def build_tree(tree: Tree, sink: DiagnosticSink) -> NativeObservations:
    """The observations of one session tree (module docstring gives the rules)."""
    _report_times(tree, sink)
    chosen = {session: choose_form(session, forms, sink) for session, forms in tree.forms.items()}
    built = _Built(observations=NativeObservations(AgentObservationBundle(source=SOURCE)))
    parents = _parents(tree, chosen, built)
    heads = {s: _copied_head(s, tree, chosen) for s in tree.forms}
    for session, end in heads.items():
        form = chosen[session]
        if end and form is not None:
            _copies(session, form, end, sink, built)
    invocations = [_invocation(s, chosen[s], parents[s], tree, built, heads[s]) for s in tree.forms]
    _compactions(tree, chosen, built)
    assert built.observations is not None
    gaps = dedupe_gaps([*tree.gaps, *built.gaps])
    built.observations.bundle = AgentObservationBundle(source=SOURCE, records=[*invocations, *built.records], gaps=gaps)
    return built.observations
