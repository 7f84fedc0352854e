"""The Hermes Agent reader (NousResearch/hermes-agent): every form a Hermes home keeps of a session.

NeMo Gym reads no Hermes file (it observes Hermes in-process); this reader
rebuilds the same observations from what Hermes itself writes:

* ``state.db`` (+ ``-wal``/``-shm``), every schema version (``db``);
* ``session_<id>.json`` snapshots of both eras and gateway ``<id>.jsonl`` transcripts with the
  ``sessions.json`` store (``files``);
* ``trajectory_samples.jsonl`` / ``failed_trajectories.jsonl`` ShareGPT lines (``sharegpt``).

A *unit* is a session tree: the sessions linked by ``parent_session_id`` in ``state.db`` (sub-agents
and compression continuations), each with every form the inputs hold of it; a ShareGPT line is a
unit of its own. Links that form a cycle are cut at the cycle's smallest session id, which heads the
tree (reported as ``parent_cycle``; gap ``cyclic_subagent_parent``). Hermes keeps no provider
response ids, so units attribute to rollouts through the manifest or a folder named by the rollout
id, and native calls join captured calls only through their tool-call id sets. Request dumps (``request_dump_*.json``: one
failed API request) are recognised and not read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ng_traj.contract import ObservationGap
from ng_traj.diagnostics import Diagnostic, DiagnosticSink, plural, quoted
from ng_traj.io.compression import logical_name
from ng_traj.io.files import os_reason
from ng_traj.io.lines import JsonLine, decode_line, iter_json_lines, read_json_file
from ng_traj.io.spans import read_span, text_copy
from ng_traj.sources import sqlite_copy
from ng_traj.sources.hermes import db
from ng_traj.sources.hermes.files import (
    SessionForm,
    is_gateway_line,
    is_request_dump,
    is_snapshot,
    is_store,
    read_gateway,
    report_message,
    session_totals,
    snapshot_local_times,
    snapshot_messages,
    snapshot_session,
    utc_seconds,
)
from ng_traj.sources.hermes.sessions import SOURCE, Tree, build_tree
from ng_traj.sources.hermes.sharegpt import is_sharegpt, sharegpt_messages
from ng_traj.sources.lineage import cycle_text, parent_cycles
from ng_traj.sources.native import FunctionReader, NativeObservations, NativeUnit, as_paths, folders_of, register
from ng_traj.sources.sniff import Claim, Sniffed, first_record, later_records

NAME = "hermes"


def _is_state_db(path: Path, head: bytes) -> bool:
    return path.name == "state.db" or (b"CREATE TABLE sessions" in head and b"CREATE TABLE messages" in head)


sqlite_copy.register_kind(NAME, _is_state_db, names=("state.db",))


def _sqlite_kind(path: Path) -> str | None:
    """``hermes`` for a Hermes ``state.db``, ``other`` for an SQLite file no reader knows, the other
    reader's kind for one it knows, else ``None``."""
    return sqlite_copy.database_kind(path)


_sidecar_of = sqlite_copy.sidecar_of


def sniff(sniffed: Sniffed) -> Claim | None:
    """Claim Hermes files by name and first record; never raises (module docstring lists the forms)."""
    path, first = sniffed.path, sniffed.first
    database = _sidecar_of(path)
    kind = _sqlite_kind(database if database is not None else path)
    if kind == "hermes":
        return Claim(NAME, "Hermes state.db" + (" sidecar" if database is not None else ""))
    if kind == "other":
        return Claim("unsupported", "SQLite database that is not a Hermes state.db (not read)")
    if path.suffix == ".json":
        if snapshot_session(path, first) is not None:
            return Claim(NAME, "Hermes session snapshot")
        if is_store(first):
            return Claim(NAME, "Hermes gateway session store")
        if is_request_dump(first):
            return Claim("unsupported", "Hermes request dump (one failed API request; not read)")
    elif ".jsonl" in path.name:
        if is_sharegpt(first):
            return Claim(NAME, "Hermes ShareGPT trajectories")
        if is_gateway_line(first):
            return Claim(NAME, "Hermes gateway transcript")
    return None


@dataclass
class _Catalogue:
    """Every session the claimed files hold, by id, and what attribution and loading need."""

    files: dict[str, set[str]] = field(default_factory=dict)
    parents: dict[str, str] = field(default_factory=dict)
    cut: dict[str, str] = field(default_factory=dict)
    databases: dict[str, str] = field(default_factory=dict)
    units: list[NativeUnit] = field(default_factory=list)

    def add(self, session: str, path: str) -> None:
        self.files.setdefault(session, set()).add(path)


def _classify(files: Sequence[Path]) -> dict[str, list[Path]]:
    groups: dict[str, list[Path]] = {"db": [], "json": [], "jsonl": []}
    for path in files:
        if _sidecar_of(path) is not None:
            continue
        if _sqlite_kind(path) is not None:  # another SQLite file only when forced (--as hermes): reported unreadable
            groups["db"].append(path)
        elif path.suffix == ".json":
            groups["json"].append(path)
        else:
            groups["jsonl"].append(path)
    return groups


def _index_db(path: Path, catalogue: _Catalogue, sink: DiagnosticSink) -> None:
    try:
        found = db.read_catalogue(path)
    except db.HermesDbError as exc:
        sink.add(Diagnostic("error", "hermes_db_unreadable", f"{exc}; its sessions are not built", path=str(path)))
        return
    if not found.version_known:
        version = "none recorded" if found.recorded is None else quoted(found.recorded)
        message = f"schema_version {version} is not one of 1-{db.KNOWN_SCHEMA_VERSION}; known columns read"
        sink.add(Diagnostic("warning", "hermes_schema_version_unknown", message, path=str(path)))
    for session, row in found.sessions.items():
        if session in catalogue.databases:
            message = f"session {session} is also in {catalogue.databases[session]}; that copy is used"
            sink.add(Diagnostic("warning", "hermes_session_duplicate", message, path=str(path)))
            continue
        catalogue.databases[session] = str(path)
        catalogue.add(session, str(path))
        if isinstance(row.get("parent_session_id"), str) and row["parent_session_id"]:
            catalogue.parents[session] = row["parent_session_id"]
        elif row.get("parent_session_id") is not None and not isinstance(row["parent_session_id"], str):
            message = (
                f"session {session}: parent_session_id is not text ({quoted(row['parent_session_id'])}); "
                "read as a session without a parent"
            )
            sink.add(Diagnostic("warning", "hermes_column_invalid", message, path=str(path)))


def _index_json(path: Path, catalogue: _Catalogue, stores: list[Path], sink: DiagnosticSink) -> None:
    value = read_json_file(path, sink)
    if (session := snapshot_session(path, value)) is not None:
        if not is_snapshot(value):
            why = f"session_id is not text ({quoted(value.get('session_id'))}); the session is named after its file"
            sink.add(Diagnostic("warning", "hermes_session_id_invalid", why, path=str(path), pointer="session_id"))
        catalogue.add(session, str(path))
    elif is_store(value):
        stores.append(path)


def _index_store(path: Path, catalogue: _Catalogue, sink: DiagnosticSink) -> None:
    value = read_json_file(path, sink) or {}
    named = sorted({session for e in value.values() if (session := _store_session(e)) is not None})
    known = [session for session in named if session in catalogue.files]
    for session in known:
        catalogue.add(session, str(path))
    if not known:
        message = f"gateway session store naming {plural(len(named), 'session')}, none of them among the inputs; nothing to build"
        sink.add(Diagnostic("info", "hermes_store_unused", message, path=str(path)))


def _store_session(entry: Any) -> str | None:
    """The session id of a gateway store entry: text only (a number is written as text); a list or
    an object there names no session (and could be nested too deep to write out)."""
    if not isinstance(entry, dict):
        return None
    session = entry.get("session_id")
    if isinstance(session, int | float) and not isinstance(session, bool):
        return str(session)
    return session if isinstance(session, str) else None


def _index_sharegpt(path: Path, catalogue: _Catalogue, sink: DiagnosticSink) -> None:
    """One unit per trajectory line, re-read later by offset (a compressed file's text is kept for it);
    its key is ``<file name>:<line>``, any compression suffix of the name dropped."""
    with text_copy(path) as copy:
        for line in iter_json_lines(path, copy=copy):
            _index_trajectory(path, line, catalogue, sink)


def _index_trajectory(path: Path, line: JsonLine, catalogue: _Catalogue, sink: DiagnosticSink) -> None:
    if line.problem is not None:
        sink.add(line.problem)
    if not line.ok:
        return
    if not is_sharegpt(line.value):
        message = "not a ShareGPT trajectory (no conversations list with a turn that can be read); skipped"
        sink.add(Diagnostic("error", "hermes_record_invalid", message, path=str(path), line=line.line))
        return
    hints = (("line", str(line.line)), ("offset", str(line.offset)), ("size", str(line.size)))
    key = f"{logical_name(path.name)}:{line.line}"
    catalogue.units.append(NativeUnit(NAME, key, (str(path),), folders=folders_of([path]), hints=hints))


def _holds_sharegpt(path: Path) -> bool:
    """Whether a JSON Lines file holds ShareGPT trajectories, judged as detection judges a file: by its
    first JSON value, else by the lines after it, so that a damaged first line (a turn without
    ``from``, a value that is not an object) costs that line, not the file's other trajectories."""
    return is_sharegpt(first_record(path)) or any(is_sharegpt(value) for value in later_records(path))


def _break_cycles(catalogue: _Catalogue, sink: DiagnosticSink) -> None:
    """Cut every ``parent_session_id`` cycle at its smallest session id (reported; the tree's root)."""
    present = {s: p for s, p in catalogue.parents.items() if s in catalogue.files}
    for cycle in parent_cycles(present):
        head = cycle[0]
        catalogue.cut[head] = catalogue.parents.pop(head)
        message = (
            f"parent_session_id links form a cycle ({cycle_text(cycle)}); the link of {head} to "
            f"{catalogue.cut[head]} is ignored and {head} heads the tree"
        )
        sink.add(Diagnostic("warning", "parent_cycle", message, path=catalogue.databases.get(head)))


def _root(session: str, parents: dict[str, str], present: dict[str, set[str]]) -> str:
    seen = {session}
    while (parent := parents.get(session)) is not None and parent in present and parent not in seen:
        seen.add(parent)
        session = parent
    return session


def index(files: Sequence[str | Path], sink: DiagnosticSink) -> list[NativeUnit]:
    """Group the claimed files into session trees and ShareGPT lines (see the module docstring)."""
    files = as_paths(files)  # a build gives text
    groups, catalogue, stores = _classify(files), _Catalogue(), []
    for path in groups["db"]:
        _index_db(path, catalogue, sink)
    for path in groups["json"]:
        _index_json(path, catalogue, stores, sink)
    for path in groups["jsonl"]:
        if _holds_sharegpt(path):
            _index_sharegpt(path, catalogue, sink)
        else:
            catalogue.add(path.name.split(".jsonl", 1)[0], str(path))
    for path in stores:
        _index_store(path, catalogue, sink)
    _break_cycles(catalogue, sink)
    trees: dict[str, list[str]] = {}
    for session in sorted(catalogue.files):
        trees.setdefault(_root(session, catalogue.parents, catalogue.files), []).append(session)
    for root, sessions in sorted(trees.items()):
        paths = {path for session in sessions for path in catalogue.files[session]}
        paths |= {str(side) for path in paths if Path(path) in groups["db"] for side in db.sidecars(Path(path))}
        hints = tuple(("session", session) for session in sessions)
        hints += tuple(("cut", session) for session in sessions if session in catalogue.cut)
        unit_paths = tuple(sorted(paths))
        catalogue.units.append(NativeUnit(NAME, root, unit_paths, folders=folders_of(unit_paths), hints=hints))
    return sorted(catalogue.units, key=lambda unit: unit.key)


def _db_forms(path: Path, sessions: list[str], tree: Tree, totals: list[dict[str, int]], sink: DiagnosticSink) -> None:
    try:
        catalogue = db.read_catalogue(path)
        mine = [s for s in sessions if s in catalogue.sessions and s not in tree.rows]
        rows = db.read_sessions(path, catalogue, mine)
    except db.HermesDbError as exc:
        sink.add(Diagnostic("error", "hermes_db_unreadable", str(exc), path=str(path)))
        return
    for session, row in rows.items():
        for column in db.undecodable_columns(row):
            text = f"session {session}: sessions.{column} is not UTF-8 text; read with U+FFFD in place of the bytes that are not"
            sink.add(Diagnostic("warning", "hermes_column_invalid", text, path=str(path)))
        rows[session] = db.plain_text(row)
    tree.rows.update(rows)
    if not catalogue.version_known:
        tree.gaps.append(
            ObservationGap(code="hermes_schema_version_unsupported", detail=f"schema_version={catalogue.recorded}")
        )
    exclusive = catalogue.version is not None and catalogue.version >= 5
    totals.extend(session_totals(rows[s], exclusive=exclusive) for s in mine if s in rows)
    try:
        messages = db.read_messages(path, catalogue, mine)
    except db.HermesDbError as exc:
        message = f"messages of {', '.join(mine)}: {exc}; built without their transcript"
        sink.add(Diagnostic("error", "hermes_db_unreadable", message, path=str(path)))
        for session in mine:
            detail = f"state.db:{str(exc).split(':', 1)[0]}"
            tree.gaps.append(ObservationGap(code="agent_transcript_unavailable", invocation_id=session, detail=detail))
        messages = {}
    for session in mine:
        tree.forms[session].insert(0, _db_form(session, path, messages.get(session, []), sink))
        tree.compacted_rows[session] = sum(1 for row in messages.get(session, []) if row.get("compacted"))


def _db_form(session: str, path: Path, rows: list[dict[str, Any]], sink: DiagnosticSink) -> SessionForm:
    form = SessionForm(session, "state.db", str(path))
    for row in rows:
        if not db.is_live(row):
            continue
        message, broken = db.message_dict(row)
        for column in db.undecodable_columns(row):
            text = (
                f"session {session}, messages.id={row.get('id')}: {column} is not UTF-8 text; "
                "the message is kept with U+FFFD in place of the bytes that are not"
            )
            sink.add(Diagnostic("warning", "hermes_column_invalid", text, path=str(path)))
        for column in broken:
            detail = f"{path.name}:messages.id={row.get('id')}:{column}"
            text = (
                f"session {session}, messages.id={row.get('id')}: {column} is not JSON; the message is kept without it"
            )
            sink.add(Diagnostic("warning", "hermes_column_invalid", text, path=str(path)))
            form.gaps.append(
                ObservationGap(code="agent_artifact_record_unparseable", invocation_id=session, detail=detail)
            )
        form.messages.append(message)
    return form


def _snapshot_form(path: Path, value: dict[str, Any], sink: DiagnosticSink) -> SessionForm:
    session = value["session_id"]
    form = SessionForm(session, "snapshot", str(path), local_times=snapshot_local_times(value))
    if isinstance(value.get("system_prompt"), str):
        form.system_prompt = value["system_prompt"]
    elif value.get("system_prompt") is not None:
        why = f"system_prompt is not text ({quoted(value['system_prompt'])}); the session has no system prompt"
        sink.add(Diagnostic("warning", "hermes_message_invalid", why, path=str(path), pointer="system_prompt"))
    if isinstance(value.get("messages"), list):
        form.messages = snapshot_messages(value)
        for position, message in enumerate(value["messages"]):
            report_message(message, (str(path), None, f"messages.{position}"), sink)
    else:
        form.messages, form.gaps, skipped = sharegpt_messages(value["conversations"], session)
        _report_turns(form, skipped, None, sink)
    return form


def _report_turns(form: SessionForm, skipped: list[tuple[int, str]], line: int | None, sink: DiagnosticSink) -> None:
    """Report the ShareGPT turns passed over (``hermes_turn_invalid``, warning, pointer
    ``conversations.<n>``), each with the gap ``agent_artifact_record_unparseable`` (detail
    ``<file name>[:<line>]:conversations.<n>``)."""
    name = Path(form.path).name + (f":{line}" if line is not None else "")
    for turn, why in skipped:
        pointer = f"conversations.{turn}"
        sink.add(Diagnostic("warning", "hermes_turn_invalid", why, path=form.path, line=line, pointer=pointer))
        detail = f"{name}:{pointer}"
        form.gaps.append(
            ObservationGap(code="agent_artifact_record_unparseable", invocation_id=form.session_id, detail=detail)
        )


def _file_forms(unit: NativeUnit, tree: Tree, totals: list[dict[str, int]], sink: DiagnosticSink) -> None:
    for name in unit.paths:
        path = Path(name)
        if path.suffix == ".json":
            value = read_json_file(path, sink)
            session = snapshot_session(path, value)
            if session is not None and session in tree.forms:
                tree.forms[session].append(_snapshot_form(path, {**value, "session_id": session}, sink))
            elif is_store(value):
                entries = [e for e in value.values() if _store_session(e) in tree.forms]
                totals.extend(session_totals(e, exclusive=False) for e in entries if _store_session(e) not in tree.rows)
        elif path.name.split(".jsonl", 1)[0] in tree.forms:  # a gateway transcript (or a file forced as one)
            tree.forms[path.name.split(".jsonl", 1)[0]].append(read_gateway(path, sink))


def _sharegpt_unit(unit: NativeUnit, sink: DiagnosticSink) -> Tree:
    hints = dict(unit.hints)
    path, line = Path(unit.paths[0]), int(hints["line"])
    try:
        raw = read_span(path, int(hints["offset"]), int(hints["size"]))
    except OSError as exc:
        sink.add(Diagnostic("error", "unreadable_file", os_reason(exc, str(path)), path=str(path)))
        raw = b"{}"
    value, problem = decode_line(raw.strip(), (str(path), line, int(hints["offset"])), at_eof=not raw.endswith(b"\n"))
    if problem is not None and problem.severity == "error":
        sink.add(problem)
    value = value if is_sharegpt(value) else {"conversations": []}
    messages, gaps, skipped = sharegpt_messages(value["conversations"], unit.key)
    completed = value.get("completed") if isinstance(value.get("completed"), bool) else None
    local = ("timestamp",) if utc_seconds(value.get("timestamp"))[1] else ()
    form = SessionForm(unit.key, "sharegpt", str(path), messages, completed=completed, local_times=local, gaps=gaps)
    _report_turns(form, skipped, line, sink)
    form.gaps.append(ObservationGap(code="hermes_session_id_unavailable", invocation_id=unit.key))
    return Tree(forms={unit.key: [form]})


def _sum(totals: list[dict[str, int]]) -> dict[str, int]:
    summed: dict[str, int] = {"sessions": len(totals)} if totals else {}
    for entry in totals:
        for key, value in entry.items():
            summed[key] = summed.get(key, 0) + value
    return summed


def load(unit: NativeUnit, sink: DiagnosticSink) -> NativeObservations:
    """Read one unit fully: its sessions' chosen forms, lineage, compactions and calls."""
    if unit.hints and unit.hints[0][0] == "line":
        return build_tree(_sharegpt_unit(unit, sink), sink)
    sessions = [value for key, value in unit.hints if key == "session"]
    tree, totals = Tree(forms={session: [] for session in sessions}), []
    for name in unit.paths:
        if _sidecar_of(Path(name)) is None and _sqlite_kind(Path(name)) == "hermes":
            _db_forms(Path(name), sessions, tree, totals, sink)
    _file_forms(unit, tree, totals, sink)
    for session in (value for key, value in unit.hints if key == "cut"):
        row = tree.rows.get(session)
        if row is not None and row.get("parent_session_id"):
            parent = row["parent_session_id"]
            tree.rows[session] = {**row, "parent_session_id": None}
            tree.gaps.append(ObservationGap(code="cyclic_subagent_parent", invocation_id=session, detail=parent))
    observations = build_tree(tree, sink)
    observations.session_totals = _sum(totals)
    return observations


READER = register(FunctionReader(NAME, SOURCE, sniff, index, load))
