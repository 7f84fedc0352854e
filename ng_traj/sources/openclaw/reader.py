"""OpenClaw: session stores, transcripts (pi v3 format), archives, sub-agent trees, PinchBench layout.

Layouts: a state dir ``~/.openclaw`` holds
``agents/<agentId>/sessions/`` with ``sessions.json`` (the store), ``<sessionId>.jsonl`` transcripts
and rotated archives ``<sessionId>.jsonl.reset.<ts>`` / ``.jsonl.deleted.<ts>``. PinchBench retains
``<task>_<run_id>/<task>.jsonl`` (the root transcript) with ``openclaw_sessions/agents/...`` beside it.
A transcript is claimed by OpenClaw (not plain pi) when it sits beside a store, is an archive, lies
in a PinchBench layout, or carries OpenClaw's own entries (``model-snapshot``, ``openclaw:*``).

Units: each tree of a store (a root key and its sub-agents, in NeMo Gym's lineage order; invocation
ids are session keys, children carry ``subagent_spawn_tool_unavailable`` because OpenClaw records no
spawning call); each PinchBench run (root = the transcript's header id, run id from the folder
name); and each transcript no store entry names (invocation id = its header id, with the reference's
``subagent_hierarchy_unavailable``), joined by the transcripts forked from it (header ``parentSession``,
``sources/pi/forks.py``) as its child invocations. Invocation status stays ``unknown``, as in the
reference.

Copied context (``sources/pi/copies.py``): the transcripts of a tree are read root first, each compared
with the ones before it, so what a fork copies from its parent is counted in the parent only; a
node's compaction checkpoints belong to its unit (never a trajectory of their own) and only what they
hold that no transcript before them holds counts.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from ng_traj.contract import AgentInvocation, ObservationGap
from ng_traj.diagnostics import Diagnostic, DiagnosticSink
from ng_traj.io.compression import CompressedStreamError, logical_name, open_input
from ng_traj.io.files import is_link, path_order, resolved_folders
from ng_traj.sources.native import (
    NativeObservations,
    NativeUnit,
    folders_of,
    observation_bundle,
    register,
)
from ng_traj.sources.openclaw.store import (
    ARCHIVE_MARKERS,
    Stores,
    TreeNode,
    adopt_renamed,
    discover_tree,
    is_store,
    read_stores,
    refused_transcript,
    transcript_names,
    tree_roots,
)
from ng_traj.sources.pi.copies import CopyIndex, id_list, mark_copies
from ng_traj.sources.pi.forks import fork_header, fork_parents, fork_trees, observe_forks
from ng_traj.sources.pi.observe import SessionObservation, is_model_call, native_call, observe, response_ids
from ng_traj.sources.pi.session import Session, read_session, scan_header, scan_session, scanned_ids
from ng_traj.sources.sniff import Claim, Sniffed

OPENCLAW_CUSTOM = ("model-snapshot", "openclaw")
PEEK_LINES = 12


PI_ENTRY_TYPES = frozenset(
    {
        "message",
        "model_change",
        "thinking_level_change",
        "compaction",
        "branch_summary",
        "custom",
        "custom_message",
        "label",
        "session_info",
    }
)
"""Entry types of pi-family session files."""


MESSAGE_RECORDS = frozenset({"message", "message_start", "message_end"})
"""Record types that carry a ``message`` object: a v1 entry, or a ``pi --mode json`` event."""


def is_pi_family(first: Any) -> bool:
    """True for a pi-family record: a ``session`` header (or the unsupported ``kind: header``), or,
    when the header line is damaged or absent, a tree entry (a known ``type`` with ``id`` and
    ``parentId``) or a message record (``type`` ``message``, ``message_start`` or ``message_end`` with
    a ``message`` object whose ``role`` is text): a v1 entry, or an event of a ``pi --mode json`` log,
    which has a header line only since pi v0.45."""
    if not isinstance(first, dict):
        return False
    if first.get("type") == "session" or first.get("kind") == "header":
        return True
    kind = first.get("type")
    if not isinstance(kind, str):
        return False
    if kind in MESSAGE_RECORDS and isinstance(first.get("message"), dict):
        return isinstance(first["message"].get("role"), str)
    return kind in PI_ENTRY_TYPES and "id" in first and "parentId" in first


def pinchbench_run(path: str | Path) -> str | None:
    """The run id of a PinchBench root transcript ``<task>_<run_id>/<task>.jsonl``, else ``None``; a path
    as text must be as ``str`` of a ``Path`` gives it (no ``.`` part, doubled or trailing separator)."""
    text = os.fspath(path)
    name = logical_name(os.path.basename(text))
    stem, folder = name.removesuffix(".jsonl"), os.path.basename(os.path.dirname(text))
    if name.endswith(".jsonl") and folder.startswith(f"{stem}_") and len(folder) > len(stem) + 1:
        return folder[len(stem) + 1 :]
    return None


def _has_openclaw_entries(path: Path) -> bool:
    try:
        with open_input(path) as handle:
            for raw in itertools.islice(handle, PEEK_LINES):
                try:
                    value = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                kind = value.get("customType") if isinstance(value, dict) else None
                if isinstance(kind, str) and kind.startswith(OPENCLAW_CUSTOM):
                    return True
    except (OSError, CompressedStreamError):
        return False
    return False


def is_openclaw_transcript(path: Path) -> bool:
    """True when a pi-family transcript belongs to OpenClaw (module docstring)."""
    return (
        any(marker in path.name for marker in ARCHIVE_MARKERS)
        or (path.parent / "sessions.json").is_file()
        or "openclaw_sessions" in path.parts
        or pinchbench_run(path) is not None
        or _has_openclaw_entries(path)
    )


def sniffed_openclaw_transcript(sniffed: Sniffed) -> bool:
    """:func:`is_openclaw_transcript` of a sniffed file, worked out once for every sniffer that asks."""
    found = sniffed.facts.get("openclaw_transcript")
    if found is None:
        found = sniffed.facts["openclaw_transcript"] = is_openclaw_transcript(sniffed.path)
    return found


def _store_location(path: Path) -> bool:
    """True for ``agents/<id>/sessions/sessions.json`` (claimed even when unreadable, to report it)."""
    return (
        path.name == "sessions.json" and path.parent.name == "sessions" and path.parent.parent.parent.name == "agents"
    )


def _agents_root(store: Path) -> Path:
    """The agents root of a store (:func:`_agents_root_text` of its text)."""
    return Path(_agents_root_text(str(store)))


def _parent_text(path: str) -> str:
    """``str(Path(path).parent)`` of a path as text as ``str`` of a ``Path`` gives it, without a ``Path``."""
    return os.path.dirname(path) or "."


def _agents_root_text(store: str) -> str:
    """The agents root of a store's path as text (as ``str`` of a ``Path`` gives it): the folder above
    ``sessions/`` for ``<root>/<agent>/sessions/sessions.json``, else the store's folder; no ``Path`` is
    made, so indexing holds none (nor its interned parts) per file."""
    folder = _parent_text(store)
    if os.path.basename(folder) == "sessions" and os.path.basename(store) == "sessions.json":
        return _parent_text(_parent_text(folder))
    return folder


def _is_json(path: str) -> bool:
    """``Path(path).suffix == ".json"`` of a path as text, without a ``Path``: the name ends with
    ``.json`` after at least one other character."""
    name = os.path.basename(path)
    return name.endswith(".json") and len(name) > len(".json")


class OpenClawReader:
    """The OpenClaw reader (``sources/native.py`` contract)."""

    name = "openclaw"
    source = "openclaw"

    def sniff(self, sniffed: Sniffed) -> Claim | None:
        """Claim stores and OpenClaw transcripts."""
        if sniffed.path.suffix == ".json" and (is_store(sniffed.first) or _store_location(sniffed.path)):
            return Claim(self.name, "OpenClaw session store")
        if is_pi_family(sniffed.first) and sniffed_openclaw_transcript(sniffed):
            return Claim(self.name, "OpenClaw session transcript")
        return None

    def index(self, files: Sequence[str | Path], sink: DiagnosticSink) -> Iterator[NativeUnit]:
        """Units: PinchBench runs, store trees, then transcripts no store names.

        Made one at a time (an agents root's trees together): every transcript's header is read first
        (``pi/session.scan_header``), and a unit's response ids only if attribution asks them (the
        unit's ``scan_ids``: a unit the manifest or a rollout folder places needs none), so a caller
        that takes each unit as it comes (``native.index_units``) never holds the ids of every session.

        ``files`` are kept as text (``str`` of each), which must be as ``str`` of a ``Path`` gives it
        (a build's, or ``Path`` objects): the stores' agents roots and the files' types are worked out
        on the text (``_agents_root_text``, ``_is_json``), and ``Path`` objects are made only of one
        root's stores while its trees are made, so the index holds no ``Path`` per file.
        """
        stores_by_root: dict[str, list[str]] = {}  # the files as text: no Path (and its parts) held per file
        transcripts = []
        for file in map(str, files):  # a build gives text, kept as it is
            if is_link(file):
                message = "symlinked session file refused (it may point outside the agents folder)"
                sink.add(Diagnostic("warning", "session_path_refused", message, path=file))
            elif _is_json(file):
                stores_by_root.setdefault(_agents_root_text(file), []).append(file)
            else:
                transcripts.append(file)
        used: set[str] = set()
        covered: dict[str, set[str]] = {}  # by agents root, as text
        scans = _Scans()
        for transcript in transcripts:
            if pinchbench_run(transcript) is not None:
                yield self._pinchbench(Path(transcript), sink, used, covered, scans)
        headers = {t: scans.header(t).session_id for t in transcripts if t not in used}
        for root in sorted(stores_by_root, key=path_order):  # Path order; a root's Paths live while its trees are made
            store_paths = [Path(store) for store in stores_by_root.pop(root)]
            stores = read_stores(store_paths, Path(root), sink)
            for entry, path in adopt_renamed(stores, headers):
                message = (
                    f"session {entry.key}: transcript {path.name} read for it (its header carries session id "
                    f"{entry.session_id}; the store names {transcript_names(entry)[0]}, which is not there)"
                )
                sink.add(Diagnostic("info", "session_transcript_renamed", message, path=str(path)))
            yield from self._trees(stores, store_paths, sink, used, covered.pop(root, set()), scans)
        yield from _loose(transcripts, sink, used, scans)

    def _pinchbench(
        self, transcript: Path, sink: DiagnosticSink, used: set[str], covered: dict[str, set[str]], scans: _Scans
    ) -> NativeUnit:
        agents = transcript.parent / "openclaw_sessions" / "agents"
        stores = read_stores(_pinchbench_stores(agents), agents, DiagnosticSink())
        hints = [("transcript", str(transcript)), ("agents_root", str(agents))]
        paths = [transcript, *_pinchbench_stores(agents)]
        root = _root_key(stores, scans.header(transcript).session_id)
        if root is not None:
            nodes, _ = discover_tree(stores, root, transcript)
            covered.setdefault(str(agents), set()).update(node.key for node in nodes)
            paths += [node.transcript for node in nodes[1:] if node.transcript is not None]
            paths += [checkpoint for node in nodes for checkpoint in node.checkpoints]
            hints.append(("root", root))
        run_ids = frozenset({pinchbench_run(transcript) or ""})
        return _unit("pinchbench", paths, scans, used, tuple(hints), run_ids=run_ids)

    def _trees(
        self,
        stores: Stores,
        store_paths: list[Path],
        sink: DiagnosticSink,
        used: set[str],
        covered: set[str],
        scans: _Scans,
    ) -> list[NativeUnit]:
        units = []
        roots = tree_roots(stores)
        for root in [*roots, *sorted(set(stores.entries) - set(roots))]:
            if root in covered:
                continue
            nodes, _ = discover_tree(stores, root)
            covered.update(node.key for node in nodes)
            paths = [*store_paths, *(node.transcript for node in nodes if node.transcript is not None)]
            paths += [checkpoint for node in nodes for checkpoint in node.checkpoints]
            # the agents root only when loading cannot tell it from the first store (``_agents_root``)
            derived = bool(store_paths) and _agents_root_text(str(store_paths[0])) == str(stores.root)  # no Path made
            agents = () if derived else (("agents_root", str(stores.root)),)
            hints = (("root", root), *agents, *(("store", str(p)) for p in store_paths))
            renamed = {node.transcript for node in nodes} & set(stores.renamed.values())
            hints += tuple(("renamed", str(path)) for path in sorted(renamed))
            anchor = nodes[0].transcript or stores.entries[root].store
            key = stores.entries[root].session_id or root
            units.append(_unit("tree", paths, scans, used, hints, key=key, anchor=anchor))
        return units

    def load(self, unit: NativeUnit, sink: DiagnosticSink) -> NativeObservations:
        """Read a unit's transcripts and build its bundle.

        The unit's folders are resolved once each while it is read (``io/files.resolved_folders``): the
        store's transcript checks resolve the folder of every file they look at, and a unit's files
        share their folders.
        """
        with resolved_folders():
            return self._load(unit, sink)

    def _load(self, unit: NativeUnit, sink: DiagnosticSink) -> NativeObservations:
        hints = dict(unit.hints)
        if hints["mode"] == "single":
            return _bundle([_single(Path(hints["transcript"]), sink)], [])
        if hints["mode"] == "forks":
            root = Path(hints["transcript"])
            detail = "root_session_not_found" if (root.parent / "sessions.json").is_file() else None
            observed = observe_forks(unit.paths, str(root), sink, derive_status=False, positional_ids=True)
            scanned = {session.session_id: ids for session, ids in map(scan_session, unit.paths)}
            for one in observed:
                unowned = _unowned_by(scanned.get(one.invocation.invocation_id))
                one.gaps[:0] = [ObservationGap(code="subagent_hierarchy_unavailable", detail=detail), *unowned]
            return _bundle(observed, [])
        store_paths = (
            _pinchbench_stores(Path(hints["agents_root"]))
            if hints["mode"] == "pinchbench"
            else [Path(value) for name, value in unit.hints if name == "store"]
        )
        agents = Path(hints["agents_root"]) if "agents_root" in hints else _agents_root(store_paths[0])
        if "root" not in hints:
            return _bundle([_single(Path(hints["transcript"]), sink, detail="root_session_not_found")], [])
        root_transcript = Path(hints["transcript"]) if hints["mode"] == "pinchbench" else None
        stores = read_stores(store_paths, agents, DiagnosticSink())  # reported when indexed
        renamed = [Path(value) for name, value in unit.hints if name == "renamed"]
        if renamed:  # without renamed transcripts there is nothing to adopt (only files would be looked at)
            adopt_renamed(stores, {path: scan_session(path)[0].session_id for path in renamed})
        nodes, gaps = discover_tree(stores, hints["root"], root_transcript)
        for node in nodes:
            refused = None if node.transcript else refused_transcript(stores.entries[node.key], stores.root)
            if refused is not None and not refused.is_symlink():  # a symlink was reported when indexed
                message = f"session {node.key}: {refused} lies outside the agents folder; not read"
                sink.add(Diagnostic("warning", "session_path_refused", message, path=str(refused)))
        earlier = CopyIndex(sealing=True)  # a node's transcript is let go once it is observed
        observed = [
            _tree_session(node, sink, earlier, child=position > 0, last=position == len(nodes) - 1)
            for position, node in enumerate(nodes)
        ]
        return _bundle(observed, gaps)


def _loose(transcripts: list[str], sink: DiagnosticSink, used: set[str], scans: _Scans) -> list[NativeUnit]:
    """Units of the transcripts (as text) no store or PinchBench run took: one per transcript, except
    that a fork (header ``parentSession`` naming another of them) joins its parent's unit (mode
    ``forks``)."""
    loose = {path: scans.header(path) for path in transcripts if path not in used}
    units = []
    for root, names in fork_trees(fork_parents(loose)).items():
        mode = "single" if len(names) == 1 else "forks"
        units.append(_unit(mode, names, scans, used, (("transcript", root),)))
    return units


class _Scans:
    """What indexing needs of each transcript: its header-only session, read once however many steps
    of indexing ask (a unit's response ids are read by its ``scan_ids``, if attribution asks them);
    diagnostics are left to loading.

    Holds no entries and no ids, so an index of many transcripts stays small; it lives for one
    ``index`` call.
    """

    def __init__(self) -> None:
        self._seen: dict[str, Session] = {}

    def header(self, path: str | Path) -> Session:
        """The transcript at ``path`` without its entries, its header cut to what forks need
        (``forks.fork_header``)."""
        text = str(path)
        found = self._seen.get(text)
        if found is None:
            found = self._seen[text] = fork_header(scan_header(text))
        return found


def _pinchbench_stores(agents: Path) -> list[Path]:
    return sorted(agents.glob("*/sessions/sessions.json")) if agents.is_dir() else []


def _root_key(stores: Stores, session_id: str) -> str | None:
    keys = [key for key, entry in stores.entries.items() if entry.session_id == session_id]
    return keys[0] if len(keys) == 1 else None


def _unit(
    mode: str,
    paths: Sequence[str | Path],
    scans: _Scans,
    used: set[str],
    hints: tuple[tuple[str, str], ...],
    key: str | None = None,
    run_ids: frozenset[str] = frozenset(),
    anchor: Path | None = None,
) -> NativeUnit:
    texts = [str(path) for path in paths]
    transcripts = [path for path in texts if not _is_json(path)]
    used.update(transcripts)
    scan = partial(scanned_ids, tuple(transcripts))  # read if attribution asks
    unit_key = key or (scans.header(transcripts[0]).session_id if transcripts else Path(texts[0]).stem)
    names = tuple(sorted(dict.fromkeys(texts)))
    first = str(anchor or (transcripts[0] if transcripts else paths[0]))
    hints = (("mode", mode), *hints)
    return NativeUnit("openclaw", unit_key, names, (), folders_of(names), run_ids, hints, first, scan)


def _single(path: Path, sink: DiagnosticSink, detail: str | None = None) -> SessionObservation:
    session = read_session(path, sink)
    observed = observe(session, session.session_id, derive_status=False, positional_ids=True)
    if detail is None and (path.parent / "sessions.json").is_file():
        detail = "root_session_not_found"
    observed.gaps[:0] = [ObservationGap(code="subagent_hierarchy_unavailable", detail=detail), *_unowned(session)]
    return observed


def _unowned(session: Session | None) -> list[ObservationGap]:
    """NeMo Gym's OpenClaw rule: a session without a transcript, or none of whose assistant messages
    carries a provider response id, has no reference to any of its model calls, which the bundle-level
    gap ``model_call_ownership_unavailable`` (no invocation id) says; one gap per such session."""
    return _unowned_by(response_ids(session) if session is not None else None)


def _unowned_by(ids: frozenset[str] | None) -> list[ObservationGap]:
    """:func:`_unowned` of a session by its response ids (``None``: no transcript)."""
    return [] if ids else [ObservationGap(code="model_call_ownership_unavailable")]


def _tree_session(
    node: TreeNode, sink: DiagnosticSink, earlier: CopyIndex, *, child: bool, last: bool
) -> SessionObservation:
    """One node of a tree: its transcript observed after marking what it copies from the sessions before
    it (a thread fork starts with its parent's entries), then its compaction checkpoints, whose entries
    the transcript or an earlier session holds are copies; the checkpoint's own model calls count in
    the node's invocation, as those of an abandoned branch do. The entries of the tree's ``last`` node
    are compared with the earlier ones but not added to ``earlier`` (no session is compared with them)."""
    key = node.key
    session = None
    if node.transcript is None:
        observed = SessionObservation(AgentInvocation(invocation_id=key, parent_invocation_id=node.parent))
    else:
        session = read_session(node.transcript, sink)
        keep = not (last and not node.checkpoints)
        mark_copies(session, earlier, "entries of sessions earlier in its tree", sink, keep=keep)
        observed = observe(session, key, parent_id=node.parent, derive_status=False, positional_ids=True)
    for position, path in enumerate(node.checkpoints):
        checkpoint = read_session(path, sink)
        keep = not (last and position == len(node.checkpoints) - 1)
        mark_copies(checkpoint, earlier, f"entries of session {key} (a compaction checkpoint)", sink, keep=keep)
        if checkpoint.copied():
            detail = f"entries={id_list(checkpoint.copied())}"
            observed.gaps.append(ObservationGap(code="copied_context", invocation_id=key, detail=detail))
        observed.calls.extend(
            native_call(entry, key)
            for entry in checkpoint.entries
            if entry.type == "message" and entry.copy_of is None and is_model_call(entry.message)
        )
    observed.gaps[:0] = _unowned(session)
    if child:
        observed.gaps.append(ObservationGap(code="subagent_spawn_tool_unavailable", invocation_id=key))
    return observed


def _bundle(observed: list[SessionObservation], gaps: list[ObservationGap]) -> NativeObservations:
    records: list[Any] = []
    all_gaps = list(gaps)
    for session in observed:
        records.append(session.invocation)
        records.extend(session.records)
        all_gaps.extend(session.gaps)
    bundle = observation_bundle("openclaw", records, all_gaps)
    return NativeObservations(bundle, [call for session in observed for call in session.calls])


READER = register(OpenClawReader())
