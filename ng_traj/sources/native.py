"""The contract between native session readers (pi, OpenClaw, Hermes, ...) and the build.

A reader turns a harness's own files into observations in two steps, so that a build never holds
every session in memory:

* ``index(files, sink)`` groups the files it claimed into *units* (a session, or a session tree
  with its sub-agents) and records only what attribution needs: the unit's key, its files, the
  provider response ids of its assistant messages, the folder names above it and any run id. It
  may make the units one at a time (an iterator): planning attributes each as it comes.
* ``load(unit, sink)`` reads a unit fully when its trajectory is assembled, returning an
  observation bundle (invocations without model-call refs, tool and compaction observations,
  gaps) and the *native calls*: one per assistant message that was a real model call.

Native calls carry no ``model_ref`` (session files do not know the Gym model server), so refs
are made by the build from captured calls by exact id; a native call that
matches none can still contribute its transcript usage as a model call, labelled with a gap.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from math import isfinite
from pathlib import Path
from typing import Any, Protocol, TypeVar, get_args

from ng_traj.contract import (
    AgentInvocation,
    AgentObservationBundle,
    ContextCompactionObservation,
    ObservationGap,
    SandboxObservation,
    ToolCallObservation,
    TrajectoryModelCall,
)
from ng_traj.contract.base import built_model
from ng_traj.contract.observations import InvocationStatus, ToolStatus, duplicate_invocation, parent_cycle
from ng_traj.diagnostics import QUOTE_LIMIT, Diagnostic, DiagnosticSink
from ng_traj.io.files import resolved_parent
from ng_traj.io.lines import iter_json_lines
from ng_traj.sources.sniff import Claim, Sniffed


@dataclass(frozen=True, slots=True)
class NativeUnit:
    """What attribution needs to know about one session (tree), and how to load it again.

    Attributes:
        reader: Name of the reader in :data:`READERS` that produced the unit.
        key: Root session id; the rollout id of the unit's own trajectory when unattributed.
        paths: Every file the unit is read from (sorted).
        response_ids: Provider response ids of its assistant messages, each once, sorted (exact-id
            attribution; a tuple rather than a set: it is held for every unit while a reader indexes).
            A reader may leave them to ``scan_ids`` instead.
        scan_ids: Gives ``response_ids`` when asked (:func:`unit_response_ids`), for a reader that
            reads them only for the units attribution asks it of: exact-id attribution is the third
            way, and a unit the manifest or a rollout folder places needs no ids (nor a read of its
            transcripts for them). Attribution drops it with the ids.
        folders: Names of the folders above its files, each once (per-rollout folder attribution; a
            tuple for the same reason).
        run_ids: Run ids it records (PinchBench ``<task>_<run_id>`` folders).
        hints: Reader-specific values ``load`` needs (for example the root session key).
        anchor: The file a message about the unit should name (its root transcript); else ``paths[0]``.
    """

    reader: str
    key: str
    paths: tuple[str, ...]
    response_ids: tuple[str, ...] = ()
    folders: tuple[str, ...] = ()
    run_ids: frozenset[str] = frozenset()
    hints: tuple[tuple[str, str], ...] = ()
    anchor: str | None = None
    scan_ids: Callable[[], tuple[str, ...]] | None = None


class IndexFailure(Exception):
    """A unit's :attr:`NativeUnit.scan_ids` raised (its ``__cause__``): the reader failed on its files,
    as when it raises while indexing them (``index_units`` asks it again file by file)."""


def unit_response_ids(unit: NativeUnit) -> tuple[str, ...]:
    """The unit's response ids: ``response_ids``, or what its ``scan_ids`` gives.

    Raises:
        IndexFailure: ``scan_ids`` raised.
    """
    if unit.scan_ids is None:
        return unit.response_ids
    try:
        return unit.scan_ids()
    except Exception as exc:
        raise IndexFailure(str(exc)) from exc


@dataclass(frozen=True, slots=True)
class NativeCall:
    """One model call a session file records (one assistant message that reached a provider).

    Attributes:
        invocation_id: Invocation whose ``model_calls`` receives the ref.
        response_id: Provider response id (``responseId``), when the file has one.
        tool_call_ids: Provider tool-call ids the message issued (the fallback join key when a message has no response id).
        transcript_call: The call as the transcript reports it (token counts normalised to the
            inclusive convention by the reader, ``model_call_id`` null), used only when no
            captured call matches; ``None`` when the reader makes it lazily (``make_transcript``).
            Consumers ask :meth:`transcript` and :meth:`timestamp`, which serve both.
        label: How gaps name the call: its response id, else a reader-specific stable id
            (for example ``entry:<entry id>``).
        make_transcript: Makes the transcript call when :meth:`transcript` is first asked, for a
            reader that leaves it until a consumer needs it (pi: most calls match a captured call,
            and then only the time is read); ``None`` when ``transcript_call`` holds it.
        started_at: With ``make_transcript``: the ``started_at`` its call will have (UTC seconds), so
            :meth:`timestamp` needs no call made (such a reader's calls have no ``completed_at``).
    """

    invocation_id: str
    response_id: str | None = None
    tool_call_ids: frozenset[str] = frozenset()
    transcript_call: TrajectoryModelCall | None = None
    label: str | None = None
    make_transcript: Callable[[], TrajectoryModelCall] | None = None
    started_at: float | None = None

    def transcript(self) -> TrajectoryModelCall | None:
        """The transcript call: ``transcript_call``, else made by ``make_transcript`` (once: the call
        made is kept, so every consumer gets the same instance), else ``None``."""
        if self.transcript_call is None and self.make_transcript is not None:
            object.__setattr__(self, "transcript_call", self.make_transcript())  # frozen: set once, as made
        return self.transcript_call

    def timestamp(self) -> float | None:
        """When the call happened, for ordering transcript turns: the transcript call's ``started_at``,
        else its ``completed_at`` (``None`` when neither, or a time of ``0.0``, or no transcript call)."""
        if self.transcript_call is None and self.make_transcript is not None:
            return self.started_at or None
        transcript = self.transcript_call
        return (transcript.started_at or transcript.completed_at) if transcript is not None else None


@dataclass
class NativeObservations:
    """A loaded unit: its bundle (no model-call refs yet) and its native calls in file order.

    ``session_totals`` holds the token totals the producer keeps per session (Hermes ``sessions``
    columns), summed over the unit's sessions with the inclusive prompt convention; only keys some
    session reported are present. The build adds them to its summary as a cross-check, never to a
    trajectory.
    """

    bundle: AgentObservationBundle
    calls: list[NativeCall] = field(default_factory=list)
    session_totals: dict[str, int] = field(default_factory=dict)
    turns: list[dict[str, Any]] = field(default_factory=list)
    turn_gaps: list[ObservationGap] = field(default_factory=list)


class NativeReader(Protocol):
    """What a native reader module provides (one module per producer in ``sources/``).

    ``name`` is also the input kind its ``sniff`` claims (``Claim(kind=name, ...)``); ``source`` is
    the ``AgentObservationBundle.source`` it produces. ``index`` is given the paths as text (a build's)
    or as ``Path`` objects, and must keep them exactly as given (``str(path)``), so that the build can
    tell which named input a unit came from; :func:`as_paths` makes ``Path`` objects of them for a
    reader that needs them.
    """

    name: str
    source: str

    def sniff(self, sniffed: Sniffed) -> Claim | None:
        """Claim a file (or decline) from its name and first record; never raises."""

    def index(self, files: Sequence[str | Path], sink: DiagnosticSink) -> Iterable[NativeUnit]:
        """Group the claimed files into units (a list, or an iterator that makes each as it is taken)."""

    def load(self, unit: NativeUnit, sink: DiagnosticSink) -> NativeObservations:
        """Read one unit fully."""


T = TypeVar("T")

READERS: dict[str, NativeReader] = {}
"""Registered native readers by name; a reader module registers itself with :func:`register`."""


@dataclass(frozen=True)
class FunctionReader:
    """A :class:`NativeReader` made of a reader module's ``sniff``, ``index`` and ``load`` functions."""

    name: str
    source: str
    sniff_fn: Callable[[Sniffed], Claim | None]
    index_fn: Callable[[Sequence[str | Path], DiagnosticSink], Iterable[NativeUnit]]
    load_fn: Callable[[NativeUnit, DiagnosticSink], NativeObservations]

    def sniff(self, sniffed: Sniffed) -> Claim | None:
        return self.sniff_fn(sniffed)

    def index(self, files: Sequence[str | Path], sink: DiagnosticSink) -> Iterable[NativeUnit]:
        return self.index_fn(files, sink)

    def load(self, unit: NativeUnit, sink: DiagnosticSink) -> NativeObservations:
        return self.load_fn(unit, sink)


def as_paths(files: Sequence[str | Path]) -> list[Path]:
    """``files`` as ``Path`` objects (a reader's own, for the time it indexes: a build gives text)."""
    return [Path(file) for file in files]


def register(reader: NativeReader) -> NativeReader:
    """Add ``reader`` to :data:`READERS` (its ``name`` is also the input kind its sniffer claims)."""
    READERS[reader.name] = reader
    return reader


def load_unit(unit: NativeUnit, sink: DiagnosticSink) -> NativeObservations | None:
    """Read one unit with its reader; ``None`` (reported as ``native_load_failed``) when the reader
    fails on a shape it does not expect, so that one session, not the run, is lost."""
    try:
        return READERS[unit.reader].load(unit, sink)
    except Exception as exc:
        message = f"session {unit.key} could not be read ({_exception_text(exc)}); its observations are left out"
        sink.add(Diagnostic("error", "native_load_failed", message, path=unit.anchor or unit.paths[0]))
        return None


def _same(unit: NativeUnit) -> Any:
    return unit


def index_units(
    name: str, files: Sequence[str | Path], sink: DiagnosticSink, each: Callable[[NativeUnit], T] = _same
) -> list[T]:
    """Group ``files`` into units with reader ``name``; a reader failing on a file costs that file.

    ``each`` is applied to every unit as the reader makes it and the results are returned in order
    (the units themselves by default): a reader that makes its units one at a time then never has all
    of them held at once. ``each`` must report nothing, since its results are dropped with the attempt
    when the reader fails.

    A reader that raises (a shape its code does not expect) is asked again file by file; each file it
    still fails on is one ``native_load_failed`` error, and the others are grouped together as usual.
    A unit's ``scan_ids`` raising while ``each`` asks it (:class:`IndexFailure`) is the reader's failure.
    The diagnostics of an attempt that failed are dropped, so nothing is reported twice.
    """
    reader = READERS[name]
    results = _attempt(reader, files, sink, each)
    if results is not None:
        return results
    readable = []
    for path in files:
        failure = _failure(reader, path)
        if failure is None:
            readable.append(path)
        else:
            message = f"could not be indexed ({failure}); the sessions it holds are left out"
            sink.add(Diagnostic("error", "native_load_failed", message, path=str(path)))
    return _attempt(reader, readable, sink, each) or []


def _attempt(
    reader: NativeReader, files: Sequence[str | Path], sink: DiagnosticSink, each: Callable[[NativeUnit], T]
) -> list[T] | None:
    """``each`` of every unit the reader makes of ``files``; ``None`` when the reader raises (what
    ``each`` raises is not the reader's failure: it goes to the caller)."""
    held: list[Diagnostic] = []
    results = []
    try:
        units = iter(reader.index(files, DiagnosticSink(held.append)))
    except Exception:
        return None
    while True:
        try:
            unit = next(units, None)
        except Exception:
            return None
        if unit is None:
            break
        try:
            results.append(each(unit))
        except IndexFailure:  # the unit's scan_ids, asked by each: the reader's failure
            return None
    for diagnostic in held:
        sink.add(diagnostic)
    return results


def _failure(reader: NativeReader, path: str | Path) -> str | None:
    try:
        for unit in reader.index([path], DiagnosticSink()):
            unit_response_ids(unit)  # as a unit's attribution may ask them
    except IndexFailure as exc:
        return _exception_text(exc.__cause__)  # type: ignore[arg-type]
    except Exception as exc:
        return _exception_text(exc)
    return None


def _exception_text(exc: Exception) -> str:
    """``Type: message``, the message cut to :data:`QUOTE_LIMIT` characters."""
    text = str(exc)
    return f"{type(exc).__name__}: {text if len(text) <= QUOTE_LIMIT else text[:QUOTE_LIMIT] + '…'}"


def scalar_text(value: object) -> str:
    """A record's id, name or tag as text: a string as it is, a number or boolean as its JSON-ish
    ``str``, anything else (``None``, a list, an object) as ``""``.

    ``str()`` of a list or object is never an id, and it recurses once per level of nesting (a value
    1,000 levels deep raises ``RecursionError``), so containers are never turned into text.
    """
    if isinstance(value, str):
        return value
    return str(value) if isinstance(value, int | float) else ""


def joined_ids(sets: Sequence[Collection[str]]) -> tuple[str, ...]:
    """The union of ``sets`` (a scan's ids of each session of a unit), each id once, sorted; the one
    scan's tuple itself when the unit has one session (no copy).

    A tuple takes about a sixth of a set of the same ids (17 ids: 176 bytes against about 1.2 KB),
    and a unit's ids are held for every unit of a reader while it indexes.
    """
    if len(sets) == 1 and isinstance(sets[0], tuple):
        return sets[0]
    return tuple(sorted(set().union(*sets)))


def folders_of(paths: Sequence[str | Path]) -> tuple[str, ...]:
    """Names of every folder above ``paths``, symlinks resolved, each once in the order first found
    (for per-rollout folder attribution).

    Inside a build's planning (``io/files.resolved_folders``) each folder is resolved once, so a path
    costs an ``lstat`` of each folder not seen before instead of one per component. The names are
    interned (one string per name, however many units hold it), and the paths of one folder give
    one tuple (a tuple of nine names is about 130 bytes, a set of them about 730).
    """
    names: tuple[str, ...] | None = None
    seen: dict[str, tuple[str, ...]] = {}
    for path in paths:
        folder = resolved_parent(Path(path))
        found = seen.get(folder)
        if found is None:
            found = seen[folder] = _folder_names(folder)
        names = found if names is None or names is found else tuple(dict.fromkeys((*names, *found)))
    return names if names is not None else ()


def _folder_names(folder: str) -> tuple[str, ...]:
    """The names in the resolved folder ``folder`` (absolute text), as ``Path(folder).parts`` has them
    (each once)."""
    plain = folder.startswith("/") and "//" not in folder and "/." not in folder  # no part for Path to drop
    parts = folder.split("/") if plain else Path(folder).parts
    return tuple(dict.fromkeys(sys.intern(part) for part in parts if part and part != "/"))


EPOCH_UNITS = ((1e11, 1.0), (1e14, 1e3), (1e17, 1e6))
"""Epoch numbers below each bound are in the unit of that many per second; larger ones are nanoseconds.

Since 2001 an epoch time is about 1e9 in seconds, 1e12 in milliseconds, 1e15 in microseconds and 1e18 in
nanoseconds, so the unit shows in the magnitude: below 1e11 seconds, below 1e14 milliseconds, below 1e17
microseconds, else nanoseconds. Only epoch times are read this way, never durations."""

NANOSECONDS = 1e9


def epoch_seconds(value: float) -> float:
    """An epoch number in seconds, milliseconds, microseconds or nanoseconds as seconds (by magnitude)."""
    for bound, per_second in EPOCH_UNITS:
        if value < bound:
            return float(value) / per_second
    return float(value) / NANOSECONDS


def timestamp_seconds(value: Any) -> float | None:
    """A session file's time as UTC Unix seconds: an epoch number in s, ms, µs or ns (``EPOCH_UNITS``),
    or an ISO string (naive read as UTC).

    Booleans, negatives, non-finite numbers and unparseable strings give ``None``.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        if not isfinite(value) or value < 0:
            return None
        return epoch_seconds(value)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed.replace(tzinfo=parsed.tzinfo or UTC).timestamp()
    return None


def json_objects(
    path: str | Path, sink: DiagnosticSink, unparseable: Callable[[int], None]
) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every line of a JSON Lines session file that is a JSON object.

    Problems of the line reader go to ``sink``; a line that is not JSON, or JSON but not an object
    (reported ``not_an_object``), is handed to ``unparseable`` by its number and skipped.

    Raises:
        OSError: The file cannot be opened; callers report it as ``unreadable_file``.
    """
    for line in iter_json_lines(path):
        if line.problem is not None:
            sink.add(line.problem)
        if not line.ok or not isinstance(line.value, dict):
            unparseable(line.line)
            if line.ok:
                sink.add(
                    Diagnostic("error", "not_an_object", "JSON, but not an object", path=line.path, line=line.line)
                )
            continue
        yield line.line, line.value


LoadUnit = Callable[[NativeUnit, DiagnosticSink], NativeObservations]


# Contract models of native observations, made without validating again what a reader built itself.
#
# A native reader (pi, OpenClaw) builds invocations, tool observations and bundles from values it has
# already checked (ids as text, times as floats, statuses from its own tables) and from models it has
# validated (conversation items, records, gaps). Validating an invocation routes each of its items
# through the conversation union again, and a bundle each record and gap, which cost most of loading
# a session; each function below makes the instance pydantic would make (the same values, the same
# ``model_fields_set``) with ``contract/base.built_model`` when every value has its field's type
# exactly and meets the model's bounds and validators, and calls the model's constructor otherwise,
# so that a value that needs coercion, or breaks the contract, is treated (and rejected) as before.
# Smaller models (gaps, transcript calls) are validated: pydantic makes them about as fast.

_INVOCATION_STATUSES = frozenset(get_args(InvocationStatus))
_TOOL_STATUSES = frozenset(get_args(ToolStatus))
_TIMING_FIELDS = frozenset({"started_at", "completed_at", "duration_ms", "timing_source"})
_TIMING_SOURCES_OR_NONE = frozenset({"executor", "artifact", "harness", None})
_RECORD_TYPES = frozenset({AgentInvocation, ToolCallObservation, ContextCompactionObservation, SandboxObservation})


def _text(value: Any) -> bool:
    return value is None or type(value) is str


def _seconds(value: Any) -> bool:
    return value is None or type(value) is float


def agent_invocation(
    invocation_id: str, parent_id: str | None, status: str, conversation: list[Any]
) -> AgentInvocation:
    """``AgentInvocation(invocation_id=..., parent_invocation_id=..., status=..., conversation=...)``.

    ``conversation`` must hold validated conversation items (``contract/conversation.validate_items``,
    or ``sources/pi/items.member_items``), which pydantic keeps as they are; the list itself is kept,
    not copied. Built when the ids are text and the status one of the contract's.
    """
    if type(invocation_id) is str and _text(parent_id) and type(status) is str and status in _INVOCATION_STATUSES:
        values = {
            "kind": "agent_invocation",
            "invocation_id": invocation_id,
            "parent_invocation_id": parent_id,
            "spawned_by_tool_call_id": None,
            "status": status,
            "duration_ms": None,
            "error_type": None,
            "model_calls": [],
            "conversation": conversation,
        }
        return built_model(AgentInvocation, values, {"invocation_id", "parent_invocation_id", "status", "conversation"})
    return AgentInvocation(
        invocation_id=invocation_id, parent_invocation_id=parent_id, status=status, conversation=conversation
    )


def tool_observation(
    invocation_id: str, tool_call_id: str, tool_name: str | None, status: str, timing: dict[str, Any]
) -> ToolCallObservation:
    """``ToolCallObservation(invocation_id=..., tool_call_id=..., tool_name=..., status=..., **timing)``,
    ``timing`` holding any of ``started_at``, ``completed_at`` (floats), ``duration_ms`` (a float, not
    negative) and ``timing_source``. Built when every value has its type and the completion is not
    before the start; validated (and so rejected as before) otherwise."""
    started, completed, duration = timing.get("started_at"), timing.get("completed_at"), timing.get("duration_ms")
    typed = (
        type(invocation_id) is str
        and type(tool_call_id) is str
        and _text(tool_name)
        and type(status) is str
        and status in _TOOL_STATUSES
        and timing.keys() <= _TIMING_FIELDS
        and _seconds(started)
        and _seconds(completed)
        and (duration is None or (type(duration) is float and duration >= 0))
        and timing.get("timing_source") in _TIMING_SOURCES_OR_NONE
    )
    if typed and (started is None or completed is None or not completed < started):
        values = {
            "kind": "tool_call",
            "invocation_id": invocation_id,
            "tool_call_id": tool_call_id,
            "sandbox_id": None,
            "tool_name": tool_name,
            "started_at": started,
            "completed_at": completed,
            "duration_ms": duration,
            "timing_source": timing.get("timing_source"),
            "status": status,
            "error_type": None,
        }
        return built_model(
            ToolCallObservation, values, {"invocation_id", "tool_call_id", "tool_name", "status", *timing}
        )
    return ToolCallObservation(
        invocation_id=invocation_id, tool_call_id=tool_call_id, tool_name=tool_name, status=status, **timing
    )


def observation_bundle(source: str, records: Sequence[Any], gaps: Sequence[Any]) -> AgentObservationBundle:
    """``AgentObservationBundle(source=source, records=records, gaps=gaps)``, built when the records are
    the contract's observation models and the gaps its gap models (pydantic keeps such instances as
    they are) and the bundle's own check holds (no invocation id twice, no parent cycle); validated,
    and so rejected with pydantic's error, otherwise. The lists are copied, as validating does."""
    typed = type(source) is str and all(type(record) in _RECORD_TYPES for record in records)
    if typed and all(type(gap) is ObservationGap for gap in gaps):
        invocations = [record for record in records if type(record) is AgentInvocation]
        if duplicate_invocation(invocations) is None and parent_cycle(invocations) is None:
            return built_model(AgentObservationBundle, {"source": source, "records": list(records), "gaps": list(gaps)})
    return AgentObservationBundle(source=source, records=records, gaps=gaps)
