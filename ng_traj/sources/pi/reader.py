"""Pi coding-agent session files (``~/.pi/agent/sessions/--<cwd>--/<time>_<id>.jsonl``).

Format and versions: ``sources/pi/session.py`` (producer-formats.md §2). One session file is one
unit and one invocation whose id is the header's session id; its status comes from the last assistant
message on the active path, with NeMo Gym's pi table (gym-reference.md §7.6): ``stop`` completed,
``error`` failed, ``aborted`` / ``length`` incomplete, anything else unknown with
``invocation_outcome_unavailable``. Core pi has no sub-agents, so every invocation carries
``subagent_hierarchy_unavailable``, as in the reference. Transcripts that belong to OpenClaw are
left to ``sources/openclaw/reader.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ng_traj.contract import AgentObservationBundle, ObservationGap
from ng_traj.diagnostics import DiagnosticSink
from ng_traj.sources.native import NativeObservations, NativeUnit, folders_of, register
from ng_traj.sources.openclaw.reader import is_openclaw_transcript, is_pi_family
from ng_traj.sources.pi.observe import observe, response_ids
from ng_traj.sources.pi.session import read_session
from ng_traj.sources.sniff import Claim, Sniffed


class PiReader:
    """The pi session reader (``sources/native.py`` contract)."""

    name = "pi"
    source = "pi"

    def sniff(self, sniffed: Sniffed) -> Claim | None:
        """Claim pi-family session files that are not OpenClaw's."""
        if is_pi_family(sniffed.first) and not is_openclaw_transcript(sniffed.path):
            return Claim(self.name, "pi session")
        return None

    def index(self, files: Sequence[Path], sink: DiagnosticSink) -> list[NativeUnit]:
        """One unit per session file, keyed by its session id."""
        units = []
        for path in files:
            session = read_session(path, DiagnosticSink())
            name = str(path)
            units.append(NativeUnit(self.name, session.session_id, (name,), response_ids(session), folders_of([name])))
        return units

    def load(self, unit: NativeUnit, sink: DiagnosticSink) -> NativeObservations:
        """Read the session file and observe it."""
        session = read_session(unit.paths[0], sink)
        observed = observe(session, session.session_id)
        gaps = [ObservationGap(code="subagent_hierarchy_unavailable", invocation_id=session.session_id), *observed.gaps]
        bundle = AgentObservationBundle(source=self.source, records=[observed.invocation, *observed.records], gaps=gaps)
        return NativeObservations(bundle, observed.calls)


READER = register(PiReader())
