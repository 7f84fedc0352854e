"""The OpenCode reader: ``opencode export`` JSON files and the SQLite ``opencode.db`` of 1.x and 2.x.

A *unit* is a session tree: the sessions linked by ``parent_id`` (sub-agents) and, in 2.x, by
``fork_session_id`` (forks), across every input given (an export holds one session, so a sub-agent
exported separately joins its parent's tree). A session found in several inputs is read from the
first (sorted by path; reported as ``opencode_session_duplicate``). Links that form a cycle are cut
at the cycle's smallest session id (``parent_cycle``; gap ``cyclic_subagent_parent``).

OpenCode keeps no provider response id, so units attribute to rollouts through the manifest or a
folder named by the rollout id, and native calls join captured calls through their tool-call ids.

A fork (2.x ``fork_session_id``) starts from its source session's history up to ``fork_boundary``
without copying it: the inherited history is counted once, in the source, and the fork's invocation
(child of the source) holds only its own messages, with the gap ``copied_context`` (detail
``<source session id>:<boundary message id>``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ng_traj.contract import AgentInvocation, AgentObservationBundle, ObservationGap
from ng_traj.diagnostics import Diagnostic, DiagnosticSink, plural, quoted
from ng_traj.io.lines import read_json_file
from ng_traj.sources import sqlite_copy
from ng_traj.sources.lineage import cycle_text, parent_cycles
from ng_traj.sources.native import FunctionReader, NativeObservations, NativeUnit, as_paths, folders_of, register
from ng_traj.sources.opencode import store as stores
from ng_traj.sources.opencode.observe import SessionObservation, observe, token_stats
from ng_traj.sources.sniff import Claim, Sniffed

NAME = "opencode"
SOURCE = "opencode"
DB_NAME = "opencode.db"


def _is_opencode_db(path: Path, head: bytes) -> bool:
    return path.name == DB_NAME or stores.database_form(head) is not None


sqlite_copy.register_kind(NAME, _is_opencode_db, names=(DB_NAME,))


def _is_legacy_storage(value: Any) -> bool:
    """A ≤1.1 JSON storage session file (``storage/session/<project>/<id>.json``)."""
    return (
        isinstance(value, dict) and {"id", "projectID", "version", "time"} <= value.keys() and "messages" not in value
    )


def sniff(sniffed: Sniffed) -> Claim | None:
    """Claim exports by their first value and databases by name or schema text; never raises."""
    path, first = sniffed.path, sniffed.first
    database = sqlite_copy.sidecar_of(path)
    if sqlite_copy.database_kind(database if database is not None else path) == NAME:
        return Claim(NAME, "OpenCode database" + (" sidecar" if database is not None else ""))
    if path.suffix != ".json":
        return None
    if stores.is_export(first):
        version = first["info"].get("version")
        if version is not None and stores.major(version) not in stores.READ_MAJORS:
            return Claim("unsupported", f"OpenCode export of version {quoted(version)} (versions 1.x and 2.x are read)")
        return Claim(NAME, "OpenCode export")
    if isinstance(first, dict) and {"info", "messages"} <= first.keys():
        return Claim("unsupported", "OpenCode export without a session id (layout not read)")
    if _is_legacy_storage(first) and _text_id(first).startswith("ses"):
        return Claim("unsupported", f"OpenCode {quoted(first.get('version'))} JSON storage file (not read)")
    if _is_legacy_record(first):
        return Claim("unsupported", "OpenCode JSON storage message or part of 1.1 and earlier (not read)")
    return None


def _is_legacy_record(value: Any) -> bool:
    """A ≤1.1 storage ``message/<session>/<id>.json`` or ``part/<message>/<id>.json`` file."""
    if not isinstance(value, dict) or not _text_id(value).startswith(("msg", "prt")):
        return False
    return isinstance(value.get("sessionID"), str) and ("role" in value or "messageID" in value)


def _text_id(value: dict[str, Any]) -> str:
    """A record's ``id`` when it is text, else ``""``."""
    return value["id"] if isinstance(value.get("id"), str) else ""


@dataclass
class _Catalogue:
    """Every session the inputs hold: where it is read from and its links."""

    where: dict[str, str] = field(default_factory=dict)
    parents: dict[str, str] = field(default_factory=dict)
    cut: dict[str, str] = field(default_factory=dict)
    paths: dict[str, set[str]] = field(default_factory=dict)


def _read(path: Path, sink: DiagnosticSink) -> stores.Store | None:
    """The store of one input (reported and ``None`` when it cannot be read)."""
    if sqlite_copy.database_kind(path) is not None:
        try:
            return stores.read_database(path)
        except stores.OpenCodeStoreError as exc:
            sink.add(
                Diagnostic("error", "opencode_db_unreadable", f"{exc}; its sessions are not built", path=str(path))
            )
            return None
    value = read_json_file(path, sink)
    if value is None:
        return None
    if not stores.is_export(value):
        message = "not an OpenCode export (no info object with an id and messages list); nothing read"
        sink.add(Diagnostic("error", "opencode_record_invalid", message, path=str(path)))
        return None
    return stores.export_store(value)


def _report_store(path: Path, store: stores.Store, sink: DiagnosticSink) -> None:
    for session in store.sessions.values():
        if session.version is not None and stores.major(session.version) not in stores.READ_MAJORS:
            message = f"session {session.id} was written by OpenCode {quoted(session.version)}; read as far as 2.x goes"
            sink.add(Diagnostic("warning", "input_unsupported", message, path=str(path)))
    if store.unowned:
        shown = ", ".join(store.unowned[:5]) + (" …" if len(store.unowned) > 5 else "")
        message = f"{plural(len(store.unowned), 'message')} of sessions the store does not hold ({shown}); left out"
        sink.add(Diagnostic("warning", "opencode_record_unowned", message, path=str(path)))
    if store.broken:
        shown = ", ".join(store.broken[:5]) + (" …" if len(store.broken) > 5 else "")
        message = f"{plural(len(store.broken), 'message')} whose object did not decode ({shown}); their content is lost"
        sink.add(Diagnostic("warning", "opencode_record_invalid", message, path=str(path)))


def _break_cycles(catalogue: _Catalogue, sink: DiagnosticSink) -> None:
    present = {s: p for s, p in catalogue.parents.items() if s in catalogue.where}
    for cycle in parent_cycles(present):
        head = cycle[0]
        catalogue.cut[head] = catalogue.parents.pop(head)
        message = (
            f"parent links form a cycle ({cycle_text(cycle)}); the link of {head} to "
            f"{catalogue.cut[head]} is ignored and {head} heads the tree"
        )
        sink.add(Diagnostic("warning", "parent_cycle", message, path=catalogue.where.get(head)))


def _root(session: str, parents: dict[str, str], present: dict[str, str]) -> str:
    seen = {session}
    while (parent := parents.get(session)) is not None and parent in present and parent not in seen:
        seen.add(parent)
        session = parent
    return session


def index(files: Sequence[str | Path], sink: DiagnosticSink) -> list[NativeUnit]:
    """Group the claimed files into session trees (see the module docstring)."""
    files = as_paths(files)  # a build gives text
    catalogue = _Catalogue()
    for path in sorted(files, key=str):
        if sqlite_copy.sidecar_of(path) is not None:
            continue
        found = _read(path, sink)
        if found is None:
            continue
        _report_store(path, found, sink)
        for session in found.sessions.values():
            if session.id in catalogue.where:
                message = f"session {session.id} is also in {catalogue.where[session.id]}; that copy is used"
                sink.add(Diagnostic("warning", "opencode_session_duplicate", message, path=str(path)))
                continue
            catalogue.where[session.id] = str(path)
            linked = session.parent_id or session.fork_of
            if linked:
                catalogue.parents[session.id] = linked
    _break_cycles(catalogue, sink)
    trees: dict[str, list[str]] = {}
    for session in sorted(catalogue.where):
        trees.setdefault(_root(session, catalogue.parents, catalogue.where), []).append(session)
    units = []
    reported: set[str] = set()
    for root, sessions in sorted(trees.items()):
        paths = {catalogue.where[session] for session in sessions}
        store_gaps = sorted(paths - reported)  # a store's own gaps go to the first of its trees
        reported |= paths
        paths |= {str(side) for path in list(paths) for side in sqlite_copy.sidecars(Path(path))}
        hints = tuple((f"session:{session}", catalogue.where[session]) for session in sessions)
        hints += tuple(("cut", session) for session in sessions if session in catalogue.cut)
        hints += tuple(("store", path) for path in store_gaps)
        unit_paths = tuple(sorted(paths))
        anchor = catalogue.where[root]
        units.append(NativeUnit(NAME, root, unit_paths, folders=folders_of(unit_paths), hints=hints, anchor=anchor))
    return units


def _lineage(
    session: stores.Session,
    observed: dict[str, SessionObservation],
    cut: set[str],
    gaps: list[ObservationGap],
) -> AgentInvocation:
    obs = observed[session.id]
    invocation = obs.invocation
    update: dict[str, Any] = {}
    if session.id in cut:
        gaps.append(
            ObservationGap(
                code="cyclic_subagent_parent", invocation_id=session.id, detail=session.parent_id or session.fork_of
            )
        )
        return invocation
    if session.fork_of is not None and session.parent_id is None:
        update["parent_invocation_id"] = session.fork_of
        detail = f"{session.fork_of}:{session.fork_boundary or ''}"
        gaps.append(ObservationGap(code="copied_context", invocation_id=session.id, detail=detail))
        if session.fork_of not in observed:
            gaps.append(
                ObservationGap(code="subagent_parent_unavailable", invocation_id=session.id, detail=session.fork_of)
            )
        return invocation.model_copy(update=update)
    parent = session.parent_id
    if parent is None:
        return invocation
    update["parent_invocation_id"] = parent
    candidates: set[str] = set()
    spawn_status = None
    if parent in observed:
        candidates = observed[parent].spawns.get(session.id, set())
        spawn_status = observed[parent].spawn_status.get(session.id)
    else:
        gaps.append(ObservationGap(code="subagent_parent_unavailable", invocation_id=session.id, detail=parent))
    if len(candidates) > 1:
        gaps.append(ObservationGap(code="subagent_spawn_ambiguous", invocation_id=session.id))
    elif not candidates:
        gaps.append(ObservationGap(code="subagent_spawn_tool_unavailable", invocation_id=session.id))
    else:
        update["spawned_by_tool_call_id"] = next(iter(candidates))
    if invocation.status == "unknown" and spawn_status is not None:
        update["status"] = spawn_status
    return invocation.model_copy(update=update)


def load(unit: NativeUnit, sink: DiagnosticSink) -> NativeObservations:
    """Read one unit fully: every session of its tree, lineage, tools, compactions, calls, turns."""
    wanted = {key.removeprefix("session:"): path for key, path in unit.hints if key.startswith("session:")}
    cut = {value for key, value in unit.hints if key == "cut"}
    sessions: dict[str, stores.Session] = {}
    messages: dict[str, list[stores.Message]] = {session: [] for session in wanted}
    gaps: list[ObservationGap] = []
    read: dict[str, stores.Store | None] = {}
    for session, path in sorted(wanted.items()):
        if path not in read:
            read[path] = _read(Path(path), sink)
        found = read[path]
        if found is None or session not in found.sessions:
            gaps.append(ObservationGap(code="agent_transcript_unavailable", invocation_id=session))
            sessions[session] = stores.Session(session)
            continue
        sessions[session] = found.sessions[session]
    store_gaps = {value for key, value in unit.hints if key == "store"}
    for path, found in read.items():
        if found is None:
            continue
        for message in found.messages:
            if wanted.get(message.session_id) == path:
                messages[message.session_id].append(message)
        if path in store_gaps:
            gaps.extend(ObservationGap(code="agent_artifact_record_unowned", detail=m) for m in found.unowned)
            if found.broken:
                gaps.append(ObservationGap(code="agent_artifact_record_unparseable", detail=",".join(found.broken)))
    ordered = sorted(sessions, key=lambda s: (s != unit.key, s))
    observed = {session: observe(sessions[session], messages[session]) for session in ordered}
    records: list[Any] = []
    calls = []
    turns: list[dict[str, Any]] = []
    unavailable: set[str] = set()
    for session in ordered:
        records.append(_lineage(sessions[session], observed, cut, gaps))
    for session in ordered:
        obs = observed[session]
        records.extend(obs.records)
        gaps.extend(obs.gaps)
        calls.extend(obs.calls)
        turns.extend(obs.turns)
        unavailable |= obs.unavailable
    bundle = AgentObservationBundle(source=SOURCE, records=records, gaps=gaps)
    turn_gaps = [ObservationGap(code="turns_unavailable", detail=",".join(sorted(unavailable)))] if unavailable else []
    return NativeObservations(bundle, calls, _totals(sessions.values()), turns, turn_gaps)


def _totals(sessions: Any) -> dict[str, int]:
    """Per-session token totals OpenCode keeps (export ``info.tokens``; 2.x ``tokens_*`` columns), summed."""
    summed: dict[str, int] = {}
    count = 0
    for session in sessions:
        tokens = session.totals
        if not tokens:
            continue
        if "tokens_input" in tokens:
            tokens = {
                "input": tokens.get("tokens_input"),
                "output": tokens.get("tokens_output"),
                "reasoning": tokens.get("tokens_reasoning"),
                "cache": {"read": tokens.get("tokens_cache_read"), "write": tokens.get("tokens_cache_write")},
            }
        stats = token_stats(tokens)
        count += 1
        for key in ("prompt_tokens", "completion_tokens", "reasoning_tokens", "cached_tokens"):
            if stats[key] is not None:
                summed[key] = summed.get(key, 0) + stats[key]
    if count:
        summed["sessions"] = count
    return summed


READER = register(FunctionReader(NAME, SOURCE, sniff, index, load))
