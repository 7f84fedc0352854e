"""One Claude Code session file (``<session>.jsonl`` or ``agent-<id>.jsonl``), read line by line.

Format (Claude Code CLI 1.x–2.x): one JSON object per line. The lines that make the conversation
have ``type`` ``user``, ``assistant`` or ``system`` with ``uuid``, ``parentUuid``, ``sessionId``,
``timestamp`` (ISO UTC), ``version`` (the CLI version) and a ``message`` (Anthropic Messages shape
for assistants: ``id``, ``model``, ``content``, ``stop_reason``, ``usage``). An assistant response is
written as one line per content block (thinking, text, tool_use); every line of one response shares
``message.id``, early lines carry provisional usage and the last one the final usage. Bookkeeping
lines (``permission-mode``, ``file-history-snapshot``, ``attachment``, ``ai-title``,
``last-prompt``, ...) carry no message. Older CLIs wrote sub-agent turns into the session file with
``isSidechain: true`` and an ``agentId``; 2.1 files no longer carry ``agentId`` anywhere.

Reading never raises for bad data: a line that is not JSON or not an object is reported by the line
reader and counted; an entry type ng-traj does not know is reported (``claude_code_entry_unknown``,
naming the type and the CLI version) and passed over; a ``uuid`` read before (a resumed session
copies earlier lines) is read once (``claude_code_entry_repeated``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ng_traj.diagnostics import Diagnostic, DiagnosticSink, quoted
from ng_traj.io.files import os_reason
from ng_traj.sources.native import json_objects, scalar_text

MESSAGE_TYPES = frozenset({"user", "assistant", "system"})
"""Entry types that take part in the conversation tree."""

BOOKKEEPING_TYPES = frozenset(
    {
        "summary",
        "file-history-snapshot",
        "permission-mode",
        "attachment",
        "ai-title",
        "custom-title",
        "last-prompt",
        "queue-operation",
        "mode",
        "agent-name",
        "progress",
    }
)
"""Entry types Claude Code writes that carry no model-visible message (read, not used)."""

KNOWN_TYPES = MESSAGE_TYPES | BOOKKEEPING_TYPES

KNOWN_MAJOR_VERSIONS = ("1", "2")
"""CLI major versions whose files ng-traj reads; others are recognised, not read."""


@dataclass(slots=True)
class Line:
    """One usable entry: its ``type``, ``uuid`` (``line-<n>`` when absent), raw object and line number."""

    type: str
    uuid: str
    raw: dict[str, Any]
    line: int

    @property
    def message(self) -> dict[str, Any]:
        """The entry's ``message`` object (``{}`` when absent or not an object)."""
        message = self.raw.get("message")
        return message if isinstance(message, dict) else {}


@dataclass
class Transcript:
    """A parsed session file.

    Attributes:
        path: The file as named.
        lines: Usable entries in file order (repeated uuids read once).
        unparseable: ``<file name>:<line>`` of each line that was not a JSON object.
        unknown: ``(type, line)`` of each entry type that is not known.
        session_id: The first ``sessionId`` the file records (``None`` when none).
        versions: CLI versions the file records, in first-seen order.
        unreadable: The file could not be read at all.
    """

    path: str
    lines: list[Line] = field(default_factory=list)
    unparseable: list[str] = field(default_factory=list)
    unknown: list[tuple[str, int]] = field(default_factory=list)
    session_id: str | None = None
    versions: list[str] = field(default_factory=list)
    unreadable: bool = False


def is_transcript_record(value: Any) -> bool:
    """True for a Claude Code transcript line: an object with a text ``type`` and ``sessionId``."""
    return isinstance(value, dict) and isinstance(value.get("type"), str) and isinstance(value.get("sessionId"), str)


def version_supported(version: str) -> bool:
    """Whether a CLI version (``2.1.145``) is of a major version ng-traj reads."""
    return version.split(".", 1)[0] in KNOWN_MAJOR_VERSIONS


def read_transcript(path: str | Path, sink: DiagnosticSink) -> Transcript:
    """Parse one session file; problems go to ``sink`` (module docstring)."""
    transcript = Transcript(str(path))
    seen: dict[str, int] = {}
    for number, value in _objects(path, transcript, sink):
        kind = value.get("type") if isinstance(value.get("type"), str) else None
        version = scalar_text(value.get("version"))
        if version and version not in transcript.versions:
            transcript.versions.append(version)
        if transcript.session_id is None and isinstance(value.get("sessionId"), str) and value["sessionId"]:
            transcript.session_id = value["sessionId"]
        if kind not in KNOWN_TYPES:
            transcript.unknown.append((kind or "", number))
            at = f" (CLI version {version})" if version else ""
            message = f"entry type {quoted(value.get('type'))}{at} is not one ng-traj knows; passed over"
            sink.add(Diagnostic("warning", "claude_code_entry_unknown", message, path=transcript.path, line=number))
            continue
        uuid = value.get("uuid") if isinstance(value.get("uuid"), str) and value.get("uuid") else f"line-{number}"
        if uuid in seen:
            message = f"a copy of entry {uuid} (line {seen[uuid]}); read once"
            sink.add(Diagnostic("warning", "claude_code_entry_repeated", message, path=transcript.path, line=number))
            continue
        seen[uuid] = number
        transcript.lines.append(Line(kind, uuid, value, number))
    return transcript


def _objects(path: str | Path, transcript: Transcript, sink: DiagnosticSink) -> Iterator[tuple[int, dict[str, Any]]]:
    name = Path(path).name
    try:
        yield from json_objects(path, sink, lambda line: transcript.unparseable.append(f"{name}:{line}"))
    except OSError as exc:
        sink.add(Diagnostic("error", "unreadable_file", os_reason(exc, str(path)), path=str(path)))
        transcript.unreadable = True
