"""Where a Claude Code session keeps its files, and how its sub-agents nest.

Layout (``~/.claude/projects/<project dir>/``, or ``$CLAUDE_CONFIG_DIR/projects/``):

* ``<session>.jsonl`` — the session's own transcript (the root invocation);
* ``<session>/subagents/agent-<id>.jsonl`` — one sub-agent each (CLI 2.1 and later), with
  ``agent-<id>.meta.json`` beside it (``agentType``, ``description``; optionally the spawning
  ``toolUseId`` and a ``parentAgentId``). Sub-agents nest up to five levels since CLI 2.1.172, and
  workflows put nested folders under ``subagents/``: a transcript found below a folder named
  ``agent-<parent>`` belongs to that parent, any other folder is transparent;
* ``<session>/tool-results/<name>`` — tool outputs too large for the transcript, which then holds a
  ``<persisted-output>`` stub naming the file.

The session folder is the one above the first ``subagents`` (or ``tool-results``) folder of a path;
its name is the session id.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ng_traj.io.files import open_regular

SUBAGENTS = "subagents"
TOOL_RESULTS = "tool-results"
AGENT_PREFIX = "agent-"
META_SUFFIX = ".meta.json"
META_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class Agent:
    """One sub-agent transcript: its id, file, metadata file and the agent folder it sits in."""

    agent_id: str
    path: str
    meta: str | None
    path_parent: str | None
    depth: int


@dataclass
class Session:
    """The files of one session: root transcript (may be absent), sub-agents, tool-results folder."""

    session_id: str
    root: str | None
    folder: Path
    agents: list[Agent] = field(default_factory=list)
    tool_results: list[str] = field(default_factory=list)

    @property
    def paths(self) -> tuple[str, ...]:
        """Every file of the session (sorted)."""
        files = [self.root] if self.root else []
        files += [agent.path for agent in self.agents] + [agent.meta for agent in self.agents if agent.meta]
        return tuple(sorted({*files, *self.tool_results}))


def agent_id(path: Path) -> str | None:
    """``<id>`` of ``agent-<id>.jsonl``, else ``None``."""
    if path.name.startswith(AGENT_PREFIX) and path.name.endswith(".jsonl"):
        return path.name[len(AGENT_PREFIX) : -len(".jsonl")] or None
    return None


def session_folder(path: Path) -> Path:
    """The session folder a file belongs to (module docstring); ``<dir>/<stem>`` for a root transcript."""
    parts = path.parts
    for index, part in enumerate(parts[:-1]):
        if part in (SUBAGENTS, TOOL_RESULTS) and index > 0:
            return Path(*parts[:index])
    return path.with_name(path.name.split(".jsonl")[0])


def is_companion(path: Path) -> bool:
    """True for a sub-agent ``.meta.json`` or a file in a session's ``tool-results`` folder."""
    if path.name.startswith(AGENT_PREFIX) and path.name.endswith(META_SUFFIX) and SUBAGENTS in path.parts:
        return True
    if path.parent.name != TOOL_RESULTS:  # before the session folder is worked out: every input file is asked
        return False
    folder = session_folder(path)
    return folder.with_name(f"{folder.name}.jsonl").is_file()


def discover(folder: Path, root: Path | None) -> Session:
    """Every file of the session whose folder is ``folder`` (files on disk, in sorted order)."""
    session = Session(folder.name, str(root) if root is not None and root.is_file() else None, folder)
    subagents = folder / SUBAGENTS
    for directory, dirs, files in os.walk(subagents):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        here = Path(directory)
        for name in sorted(files):
            path = here / name
            found = agent_id(path)
            if found is None:
                continue
            meta = path.with_name(f"{AGENT_PREFIX}{found}{META_SUFFIX}")
            folders = here.relative_to(subagents).parts
            owners = [part[len(AGENT_PREFIX) :] for part in folders if part.startswith(AGENT_PREFIX)]
            session.agents.append(
                Agent(
                    found,
                    str(path),
                    str(meta) if meta.is_file() else None,
                    owners[-1] if owners else None,
                    len(owners) + 1,
                )
            )
    results = folder / TOOL_RESULTS
    if results.is_dir():
        session.tool_results = sorted(str(p) for p in results.iterdir() if p.is_file() and not p.name.startswith("."))
    return session


def read_meta(path: str | None) -> dict[str, Any] | None:
    """A sub-agent's ``.meta.json`` object: ``{}`` when there is none, ``None`` when the file is
    unreadable, not JSON or not an object."""
    if path is None:
        return {}
    try:
        with open_regular(Path(path)) as handle:
            value = json.loads(handle.read(META_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None
