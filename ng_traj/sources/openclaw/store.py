"""OpenClaw session stores (``agents/<agentId>/sessions/sessions.json``) and sub-agent lineage.

Format: one JSON object per agent,
session key (``agent:main:main``, ``agent:main:subagent:<uuid>``) -> entry with ``sessionId``, optional
``sessionFile`` (an absolute path on the gateway host), ``spawnedBy`` / ``parentSessionKey`` (the
parent's *key*), ``status``, times in ms. Lineage follows NeMo Gym's discovery: stores of one agents
root are read together (cross-agent spawns); an unreadable store, a non-object entry and a key seen in
two stores are gaps (the key is dropped); a child whose ``spawnedBy`` and ``parentSessionKey``
disagree is excluded with ``subagent_parent_ambiguous``; parent links that form a cycle (ng-traj) are
cut at the cycle's smallest key, reported (``parent_cycle``) and given ``cyclic_subagent_parent``;
order is root, then layer by layer with children sorted by key. A transcript is found by the
basename of ``sessionFile`` inside the store's own folder, then ``<sessionId>.jsonl``, then
(ng-traj) the newest ``<sessionId>.jsonl.reset.*`` / ``.deleted.*`` archive, then (ng-traj) a
transcript of the build's inputs in that folder whose header carries the ``sessionId`` (a renamed
file: :func:`adopt_renamed`); a compressed copy (``<name>.gz``, ``.zst``, ``.zstd``) of a named file
stands for it when the file itself is absent. It must be a regular file, not a symlink, inside the agents root (one that is not is reported when the tree is loaded:
``session_path_refused``). A missing transcript gives ``agent_transcript_unavailable``
(invocation = key, detail = sessionId). Entries of the wrong shape are reported
(``openclaw_entry_invalid``) when the stores are indexed.

Forks and checkpoints (ng-traj): a thread fork (``forkedFromParent: true``) with neither ``spawnedBy``
nor ``parentSessionKey`` is the child of the entry whose transcript its transcript header's
``parentSession`` names, by file name. An entry's compaction checkpoints (``checkpoints_for``) are the
files ``compactionCheckpoints[].preCompaction`` / ``postCompaction`` name by ``sessionFile`` and
``<sessionId>.checkpoint.*.jsonl`` beside its transcript.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from ng_traj.contract import ObservationGap
from ng_traj.diagnostics import Diagnostic, DiagnosticSink
from ng_traj.io.compression import SUFFIXES, CompressedStreamError, open_input
from ng_traj.io.files import is_regular, read_regular, resolved, resolved_folder
from ng_traj.io.lines import BOM
from ng_traj.sources.lineage import cycle_text, parent_cycles

ARCHIVE_MARKERS = (".jsonl.reset.", ".jsonl.deleted.")
HEADER_BYTES = 1 << 20
"""At most this much of a transcript's first line is read for its header's ``parentSession``."""


def is_store(value: Any) -> bool:
    """True for an OpenClaw store object: session keys mapping to entries with ``sessionId``."""
    return (
        isinstance(value, dict)
        and bool(value)
        and any(isinstance(entry, dict) and "sessionId" in entry for entry in value.values())
    )


@dataclass(frozen=True, slots=True)
class StoreEntry:
    """One session of a store: its key, session id, parent key and the store file it is in."""

    key: str
    session_id: str | None
    parent: str | None
    conflict: bool
    store: Path
    session_file: str | None
    cut_parent: str | None = None
    """The parent key dropped to break a cycle of parent links (the entry then heads its tree)."""
    forked: bool = False
    """The entry is marked ``forkedFromParent`` (a thread fork)."""
    checkpoint_files: tuple[str, ...] = ()
    """File names of the transcript copies its ``compactionCheckpoints`` name (``sessionFile`` of
    ``preCompaction`` / ``postCompaction``)."""

    @property
    def folder(self) -> Path:
        """The folder of the entry's store, where its transcripts are looked up."""
        return self.store.parent


@dataclass
class Stores:
    """Every store entry of one agents root, and the gaps of reading them."""

    root: Path
    entries: dict[str, StoreEntry] = field(default_factory=dict)
    gaps: list[ObservationGap] = field(default_factory=list)
    incomplete: bool = False
    renamed: dict[str, Path] = field(default_factory=dict)
    """Session id -> an input transcript under another name whose header carries that id."""
    transcripts: dict[tuple[Path, str | None, str | None], Path | None] = field(default_factory=dict, repr=False)
    """:func:`transcript_for` of each entry asked so far, by its store file, ``sessionFile`` and
    ``sessionId`` (what it depends on): indexing asks it of an entry more than once, and the files
    are taken not to change meanwhile."""
    root_resolved: Path | None = field(default=None, repr=False)
    """:func:`io.files.resolved` of :attr:`root` once asked (:meth:`resolved_root`)."""

    def resolved_root(self) -> Path:
        """The agents root resolved (``io/files.resolved``), worked out once per ``Stores``: every
        transcript and checkpoint looked up for an entry is checked against it, and the files are
        taken not to change while the stores are indexed or loaded."""
        if self.root_resolved is None:
            self.root_resolved = resolved(self.root)
        return self.root_resolved


def _entry(key: str, value: dict[str, Any], store: Path) -> StoreEntry:
    spawned, parent_key = value.get("spawnedBy"), value.get("parentSessionKey")
    spawned = spawned if isinstance(spawned, str) and spawned else None
    parent_key = parent_key if isinstance(parent_key, str) and parent_key else None
    session_id = value.get("sessionId") if isinstance(value.get("sessionId"), str) else None
    session_file = value.get("sessionFile") if isinstance(value.get("sessionFile"), str) else None
    conflict = spawned is not None and parent_key is not None and spawned != parent_key
    checkpoints = _checkpoint_files(value.get("compactionCheckpoints"), _transcript_names(session_file, session_id))
    forked = value.get("forkedFromParent") is True
    return StoreEntry(key, session_id, spawned or parent_key, conflict, store, session_file, None, forked, checkpoints)


def _checkpoint_files(checkpoints: Any, own: list[str]) -> tuple[str, ...]:
    """File names the checkpoints' ``preCompaction`` / ``postCompaction`` ``sessionFile`` give (not the
    entry's own transcript); checkpoints of the wrong shape are passed over."""
    names = []
    for checkpoint in checkpoints if isinstance(checkpoints, list) else []:
        for side in ("preCompaction", "postCompaction"):
            state = checkpoint.get(side) if isinstance(checkpoint, dict) else None
            path = state.get("sessionFile") if isinstance(state, dict) else None
            if isinstance(path, str) and path:
                names.append(Path(path.replace("\\", "/")).name)
    return tuple(name for name in dict.fromkeys(names) if name not in own)


_TEXT_FIELDS = ("sessionId", "sessionFile", "spawnedBy", "parentSessionKey")


def _entry_problem(value: Any) -> str | None:
    """What is wrong with a store entry (not an object; a text field holding something else), or ``None``."""
    if not isinstance(value, dict):
        return f"not an object ({type(value).__name__}); skipped"
    wrong = [name for name in _TEXT_FIELDS if value.get(name) is not None and not isinstance(value[name], str)]
    return f"{', '.join(wrong)} not text; ignored" if wrong else None


def read_stores(paths: list[Path], root: Path, sink: DiagnosticSink) -> Stores:
    """Read the stores of one agents root (sorted), applying the reference's identity rules.

    A store that is not JSON, or not an object, is reported to ``sink``; callers that read the
    stores again (loading a unit indexed before) pass a sink of their own so that it is reported once.
    """
    stores = Stores(root)
    dropped: set[str] = set()
    for path in sorted(paths):
        try:
            data = orjson.loads(read_regular(path))
        except (OSError, orjson.JSONDecodeError) as exc:
            data = None
            sink.add(Diagnostic("error", "invalid_json", f"session store unreadable: {exc}", path=str(path)))
        else:
            if not isinstance(data, dict):
                message = "session store unreadable: JSON, but not an object"
                sink.add(Diagnostic("error", "not_an_object", message, path=str(path)))
        if not isinstance(data, dict):
            stores.incomplete = True
            stores.gaps.append(ObservationGap(code="agent_session_store_unreadable"))
            continue
        for key, value in data.items():
            problem = _entry_problem(value)
            if problem is not None:
                message = f"entry {key}: {problem}"
                sink.add(Diagnostic("warning", "openclaw_entry_invalid", message, path=str(path)))
            if not isinstance(value, dict):
                stores.incomplete = True
                stores.gaps.append(ObservationGap(code="agent_session_entry_unparseable"))
            elif key in stores.entries or key in dropped:
                stores.incomplete = True
                stores.gaps.append(ObservationGap(code="agent_session_identity_ambiguous", detail=key))
                stores.entries.pop(key, None)
                dropped.add(key)
            else:
                stores.entries[key] = _entry(key, value, path)
    _header_parents(stores)
    _break_cycles(stores, sink)
    return stores


def _header_parents(stores: Stores) -> None:
    """Give a parent to a thread fork (``forkedFromParent``) without ``spawnedBy`` / ``parentSessionKey``
    whose transcript header names, as ``parentSession``, the transcript of another entry."""
    if not any(entry.forked and entry.parent is None for entry in stores.entries.values()):
        return
    transcripts = {key: stored_transcript(stores, entry) for key, entry in stores.entries.items()}
    owners: dict[str, list[str]] = {}
    for key, transcript in transcripts.items():
        if transcript is not None:
            owners.setdefault(transcript.name, []).append(key)
    for key, entry in sorted(stores.entries.items()):
        transcript = transcripts[key]
        if not entry.forked or entry.parent is not None or entry.conflict or transcript is None:
            continue
        named = _parent_session(transcript)
        candidates = owners.get(Path(named.replace("\\", "/")).name, []) if named else []
        if len(candidates) == 1 and candidates[0] != key:
            stores.entries[key] = replace(entry, parent=candidates[0])


def _parent_session(transcript: Path) -> str | None:
    """The ``parentSession`` of a transcript's header line, else ``None``."""
    try:
        with open_input(transcript) as handle:
            first = handle.readline(HEADER_BYTES)
        header = orjson.loads(first.removeprefix(BOM))
    except (OSError, CompressedStreamError, orjson.JSONDecodeError):
        return None
    value = header.get("parentSession") if isinstance(header, dict) and header.get("type") == "session" else None
    return value if isinstance(value, str) and value else None


def _break_cycles(stores: Stores, sink: DiagnosticSink) -> None:
    """Cut every cycle of parent keys at its lexically smallest key, which then heads its tree."""
    for cycle in parent_cycles({key: entry.parent for key, entry in stores.entries.items()}):
        head = stores.entries[cycle[0]]
        stores.entries[head.key] = replace(head, parent=None, cut_parent=head.parent)
        message = (
            f"spawnedBy/parentSessionKey links form a cycle ({cycle_text(cycle)}); the link of {head.key} to "
            f"{head.parent} is ignored and {head.key} heads the tree"
        )
        sink.add(Diagnostic("warning", "parent_cycle", message, path=str(head.store)))


@dataclass(frozen=True, slots=True)
class TreeNode:
    """One session of a lineage tree."""

    key: str
    parent: str | None
    session_id: str | None
    transcript: Path | None
    checkpoints: tuple[Path, ...] = ()
    """Compaction checkpoint copies of the transcript (``checkpoints_for``)."""


def transcript_names(entry: StoreEntry) -> list[str]:
    """The file names an entry's transcript may have: its ``sessionFile``'s, then ``<sessionId>.jsonl``."""
    return _transcript_names(entry.session_file, entry.session_id)


def _transcript_names(session_file: str | None, session_id: str | None) -> list[str]:
    """:func:`transcript_names` of an entry with this ``sessionFile`` and ``sessionId``."""
    names = []
    if session_file:
        names.append(Path(session_file.replace("\\", "/")).name)
    if session_id:
        names.append(f"{session_id}.jsonl")
    return [variant for name in names for variant in (name, *(name + suffix for suffix in SUFFIXES))]


def _under(folder: Path, root: Path) -> bool:
    """``folder`` is ``root`` or lies inside it (both resolved, so compared as text)."""
    inside, top = str(folder), str(root)
    return inside == top or inside.startswith(top.rstrip("/") + "/")


def _usable(candidate: Path, resolved_root: Path) -> bool:
    """A regular file, not a symbolic link, under ``resolved_root`` once its folders are resolved (a file
    that is no link resolves to its resolved folder and its name, so only folders are resolved): one
    ``lstat`` of the file (none for an input discovery found regular, ``io/files.is_regular``), and its
    folder resolved once per planning (``io/files.resolved_folder``)."""
    if not is_regular(candidate):  # a symlink is no regular file to lstat
        return False
    try:
        return _under(resolved_folder(candidate.parent), resolved_root)
    except (OSError, ValueError):  # a name the file system refuses (longer than it allows, a NUL)
        return False


def refused_transcript(entry: StoreEntry, root: Path) -> Path | None:
    """A file the entry names that exists but was refused (a symlink, or outside ``root``), else ``None``."""
    for candidate in (entry.folder / name for name in transcript_names(entry)):
        if os.path.lexists(candidate) and not _usable(candidate, resolved(root)):
            return candidate
    return None


def transcript_for(entry: StoreEntry, root: Path, resolved_root: Path | None = None) -> Path | None:
    """The transcript file of a store entry (module docstring), or ``None``; ``resolved_root`` is
    ``resolved(root)`` when the caller has it."""
    resolved_root = resolved_root or resolved(root)
    for candidate in (entry.folder / name for name in transcript_names(entry)):
        if _usable(candidate, resolved_root):
            return candidate
    if entry.session_id:  # archived transcripts, newest first; listed only when no live file is usable
        for candidate in sorted(_archives(entry.folder, entry.session_id), reverse=True):
            if _usable(candidate, resolved_root):
                return candidate
    return None


def stored_transcript(stores: Stores, entry: StoreEntry) -> Path | None:
    """:func:`transcript_for` of an entry of ``stores``, looked up once per entry (``Stores.transcripts``)."""
    key = (entry.store, entry.session_file, entry.session_id)
    if key not in stores.transcripts:
        stores.transcripts[key] = transcript_for(entry, stores.root, stores.resolved_root())
    return stores.transcripts[key]


def checkpoints_for(
    entry: StoreEntry, root: Path, transcript: Path | None, resolved_root: Path | None = None
) -> tuple[Path, ...]:
    """Checkpoint copies of an entry's transcript in its store's folder: the files its
    ``compactionCheckpoints`` name, and ``<sessionId>.checkpoint.*.jsonl``; usable files only (as
    transcripts), never the transcript itself. ``resolved_root`` is ``resolved(root)`` when the
    caller has it."""
    resolved_root = resolved_root or resolved(root)
    candidates = [entry.folder / name for name in entry.checkpoint_files]
    if entry.session_id:
        candidates += sorted(_named(entry.folder, (f"{entry.session_id}.checkpoint.",), ".jsonl"))
    usable = [path for path in dict.fromkeys(candidates) if path != transcript and _usable(path, resolved_root)]
    return tuple(sorted(usable))


def adopt_renamed(stores: Stores, headers: Mapping[str, str] | Mapping[Path, str]) -> list[tuple[StoreEntry, Path]]:
    """Find the transcripts of entries whose named file is missing among renamed inputs.

    ``headers`` maps input transcripts (``Path`` objects, or their text as ``str`` of a ``Path`` gives
    it: an index holds no ``Path`` per file) to the session id of their header. An entry without a
    usable transcript of its own adopts the one input in its store's folder whose header id is its
    ``sessionId`` (none when several are). Returns the entries adopted, in key order, with their file.
    """
    resolved_root = stores.resolved_root()
    adopted = []
    for key, entry in sorted(stores.entries.items()):
        if not entry.session_id or stored_transcript(stores, entry) is not None:
            continue
        named = sorted(Path(path) for path, session_id in headers.items() if session_id == entry.session_id)
        found = [path for path in named if path.parent == entry.folder and _usable(path, resolved_root)]
        if len(found) == 1:
            stores.renamed[entry.session_id] = found[0]
            adopted.append((stores.entries[key], found[0]))
    return adopted


def _archives(folder: Path, session_id: str) -> list[Path]:
    """Files of ``folder`` named ``<session_id><marker>…`` (:func:`_named`)."""
    return _named(folder, tuple(f"{session_id}{marker}" for marker in ARCHIVE_MARKERS))


def _named(folder: Path, prefixes: tuple[str, ...], suffix: str = "") -> list[Path]:
    """Entries of ``folder`` whose name starts with one of ``prefixes`` and ends with ``suffix`` (after
    the prefix): by the name, not a glob pattern, so that a ``[`` or ``*`` in a session id is itself,
    and a long id is not compiled into a regular expression (a 3 MB id took minutes)."""
    try:
        names = [name for name in os.listdir(folder) if name.startswith(prefixes)]
    except OSError:  # no such folder, or one that cannot be listed: none
        return []
    return [folder / name for name in names if name.endswith(suffix) and _after_prefix(name, prefixes, suffix)]


def _after_prefix(name: str, prefixes: tuple[str, ...], suffix: str) -> bool:
    """Whether ``suffix`` follows one of ``prefixes`` in ``name`` without overlapping it."""
    return any(name.startswith(prefix) and len(name) >= len(prefix) + len(suffix) for prefix in prefixes)


def discover_tree(
    stores: Stores, root_key: str, root_transcript: Path | None = None
) -> tuple[list[TreeNode], list[ObservationGap]]:
    """The lineage tree under ``root_key``: nodes in reference order, and its gaps.

    ``root_transcript`` overrides where the root's transcript is (PinchBench keeps it outside the store).
    """
    gaps = list(stores.gaps)
    incomplete = stores.incomplete
    selected, parents = {root_key}, {root_key: None}
    changed = True
    reported: set[str] = set()
    while changed:
        changed = False
        for key, entry in sorted(stores.entries.items()):
            if key in selected or key in reported:
                continue
            if entry.conflict:
                if entry.parent in selected:
                    incomplete = True
                    gaps.append(ObservationGap(code="subagent_parent_ambiguous", invocation_id=key))
                    reported.add(key)
                continue
            if entry.parent in selected:
                selected.add(key)
                parents[key] = entry.parent
                changed = True
    ordered = [root_key]
    while len(ordered) < len(selected):
        layer = sorted(key for key in selected - set(ordered) if parents.get(key) in ordered)
        if not layer:
            break
        ordered.extend(layer)
    if stores.entries[root_key].cut_parent is not None:
        detail = stores.entries[root_key].cut_parent
        gaps.append(ObservationGap(code="cyclic_subagent_parent", invocation_id=root_key, detail=detail))
    stored_parent = stores.entries[root_key].parent
    if stored_parent is not None and stored_parent not in stores.entries:
        parents[root_key] = stored_parent
        gaps.append(ObservationGap(code="subagent_parent_unavailable", invocation_id=root_key, detail=stored_parent))
    nodes = []
    for key in ordered:
        entry = stores.entries[key]
        transcript = root_transcript if key == root_key and root_transcript else stored_transcript(stores, entry)
        transcript = transcript or stores.renamed.get(entry.session_id or "")
        if transcript is None:
            incomplete = True
            gaps.append(ObservationGap(code="agent_transcript_unavailable", invocation_id=key, detail=entry.session_id))
        checkpoints = checkpoints_for(entry, stores.root, transcript, stores.resolved_root())
        nodes.append(TreeNode(key, parents[key], entry.session_id, transcript, checkpoints))
    if incomplete:
        gaps.append(ObservationGap(code="subagent_hierarchy_incomplete"))
    return nodes, gaps


def tree_roots(stores: Stores) -> list[str]:
    """Keys that start a tree: entries without a parent, or whose parent key no store holds."""
    return sorted(
        key for key, entry in stores.entries.items() if entry.parent is None or entry.parent not in stores.entries
    )
