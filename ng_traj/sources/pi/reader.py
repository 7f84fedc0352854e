"""Pi coding-agent session files (``~/.pi/agent/sessions/--<cwd>--/<time>_<id>.jsonl``).

Format and versions: ``sources/pi/session.py``. One session file is one
invocation whose id is the header's session id; its status comes from the last assistant message on
the active path, with NeMo Gym's pi table: ``stop`` completed, ``error``
failed, ``aborted`` / ``length`` incomplete, anything else unknown with
``invocation_outcome_unavailable``. Core pi has no sub-agents, so every invocation carries
``subagent_hierarchy_unavailable``, as in the reference. Transcripts that belong to OpenClaw are
left to ``sources/openclaw/reader.py``.

Forks: ``/fork`` (and ``createBranchedSession``) writes a new file holding the parent's root-to-leaf
path, its header's ``parentSession`` naming the parent's file. A file whose ``parentSession`` names
another input (by path, else by file name) is a child invocation of that session, in the parent's
unit (one trajectory); the entries it copies from its ancestors are left out of its counts
(``sources/pi/copies.py``). A ``parentSession`` naming no input gives ``subagent_parent_unavailable``
(detail: the file name it names) and the file is a unit of its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path

from ng_traj.contract import ObservationGap
from ng_traj.diagnostics import DiagnosticSink
from ng_traj.sources.native import (
    NativeObservations,
    NativeUnit,
    folders_of,
    observation_bundle,
    register,
)
from ng_traj.sources.openclaw.reader import is_pi_family, sniffed_openclaw_transcript
from ng_traj.sources.pi.forks import fork_header, fork_parents, fork_trees, observe_forks
from ng_traj.sources.pi.session import scan_header, scanned_ids
from ng_traj.sources.sniff import Claim, Sniffed


class PiReader:
    """The pi session reader (``sources/native.py`` contract)."""

    name = "pi"
    source = "pi"

    def sniff(self, sniffed: Sniffed) -> Claim | None:
        """Claim pi-family session files that are not OpenClaw's."""
        if is_pi_family(sniffed.first) and not sniffed_openclaw_transcript(sniffed):
            return Claim(self.name, "pi session")
        return None

    def index(self, files: Sequence[str | Path], sink: DiagnosticSink) -> Iterator[NativeUnit]:
        """One unit per session file without a parent among the inputs, with its forks; keyed by its id.

        Every file's header is read first (forks are grouped by them, ``scan_header``); a unit's
        response ids are scanned only when attribution asks them (``scan_ids``: the manifest and a
        rollout folder place a unit without), so a caller that takes each unit as it comes
        (``native.index_units``) never holds the ids of every session, and reads no transcript twice
        for a unit placed without them. The root names itself in ``hints`` and ``anchor`` only when
        it is not the first of the unit's paths (what loading and messages take without them).
        """
        sessions = {str(path): fork_header(scan_header(path)) for path in files}  # held until the forks are known
        for root, names in fork_trees(fork_parents(sessions)).items():
            paths = tuple(sorted(names))
            first = root == paths[0]  # what load and messages take without a hint: no tuples per unit for it
            hints = () if first else (("root", root),)
            yield NativeUnit(
                self.name,
                sessions[root].session_id,
                paths,
                folders=folders_of(paths),
                hints=hints,
                anchor=None if first else root,
                scan_ids=partial(scanned_ids, paths),
            )

    def load(self, unit: NativeUnit, sink: DiagnosticSink) -> NativeObservations:
        """Read the unit's session files (the root, then its forks) and observe them."""
        root = dict(unit.hints).get("root", unit.paths[0])
        records, gaps, calls = [], [], []
        for observed in observe_forks(unit.paths, root, sink, derive_status=True):
            invocation_id = observed.invocation.invocation_id
            gaps.append(ObservationGap(code="subagent_hierarchy_unavailable", invocation_id=invocation_id))
            gaps.extend(observed.gaps)
            records.extend([observed.invocation, *observed.records])
            calls.extend(observed.calls)
        bundle = observation_bundle(self.source, records, gaps)
        return NativeObservations(bundle, calls)


READER = register(PiReader())
