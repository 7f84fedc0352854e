"""A seeded mutation fuzzer over the project's fixtures (test code, not product code).

A *unit* is one fixture scenario copied to a scratch folder (Hermes ``*.db.json`` exports turned into
SQLite databases) and the inputs named on the command line. A *mutant* is that unit with one file
changed by one operator (:data:`OPERATORS`); it is reproducible from ``(seed, index)`` alone.

Each mutant is built in-process through the CLI (``--output-format json``, a time bound per build) and
judged by :func:`judge`:

- no internal error: exit code 2, ``internal error`` on standard error, an exception escaping the CLI,
  or a reader failing on a shape it does not expect (``native_load_failed``);
- no hang: every build finishes within the time bound;
- the output validates (``ng-traj validate``: no error-severity finding);
- determinism: the inputs named in reverse order give the same bytes (and, for some mutants, a second
  build in the same order and a build with ``--jobs 2``);
- nothing is lost silently: per rollout id, the records, invocations, model calls, tool calls and
  conversation items of the unmutated build are counted again in the mutant's; a count that dropped
  must be explained by an error or warning whose path is the mutated file and, when the operator
  touched lines of a line-oriented file, whose line is within :data:`WINDOW` of one of them. Counts
  that moved to a rollout id the unmutated build did not have (a mutated id) offset the loss. A deleted
  line may cost what that line costs when it is unreadable instead (the same unit with the line
  replaced by invalid JSON), and no more.

``NG_TRAJ_FUZZ_MUTANTS`` and ``NG_TRAJ_FUZZ_SEED`` choose the campaign; ``NG_TRAJ_FUZZ_ONLY`` builds
one mutant index (to reproduce a failure).
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from typer.testing import CliRunner

from conftest import build_db
from ng_traj.cli import app

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

WINDOW = 2
"""How far (in lines) the line of an explaining diagnostic may be from a line the operator touched."""

BUILD_SECONDS = 20.0
"""The time bound of one in-process build; a build that takes longer is a hang."""

DEEP = (990, 1030)
"""Nesting depths of the deep-value operator: either side of orjson's limit of 1024."""

HUGE_BYTES = (2 << 20, 5 << 20)
"""Size range of a huge string value (bytes)."""

FLAG_SETS: tuple[tuple[str, ...], ...] = ((), (), ("--attach",), ("--attach", "--redact"), ("--no-payloads",))

UNITS: dict[str, tuple[str, tuple[str, ...] | None]] = {
    # name: (fixture folder, inputs inside it; None = every top-level entry)
    "retained_run": ("build/retained_run/input", None),
    "legacy_attachments": ("build/legacy_attachments/input", None),
    "judge_stores": ("judge/stores/input", None),
    "judge_attachments": ("judge/attachments/input", None),
    "native_e2e": ("native_e2e", None),
    "pi": ("pi", None),
    "openclaw_tree": ("openclaw/tree", None),
    "openclaw_pinchbench": ("openclaw/pinchbench", None),
    "openclaw_archive": ("openclaw/archive_and_missing", ("agents",)),
    "hermes_v1": ("hermes/db_v1/input", None),
    "hermes_v23": ("hermes/db_v23_inplace/input", None),
    "hermes_v6": ("hermes/db_v6_lineage/input", None),
    "hermes_v99": ("hermes/db_v99_unknown/input", None),
    "hermes_forms": ("hermes/forms/input", None),
    "hermes_capture_db": ("hermes/rollout_capture_db/input", None),
    "hermes_sharegpt": ("hermes/sharegpt/input", None),
}


# --- units ---------------------------------------------------------------------------------------


def materialise(name: str, target: Path) -> tuple[Path, list[Path]]:
    """Copy unit ``name`` to ``target``; return the folder and the inputs to name, in sorted order."""
    source, inputs = UNITS[name]
    shutil.copytree(FIXTURES / source, target, symlinks=True)
    for export in sorted(target.rglob("*.db.json")):
        build_db(json.loads(export.read_text()), export.with_suffix(""))
        export.unlink()
    for expected in target.rglob("expected.*"):
        expected.unlink()
    names = inputs if inputs is not None else sorted(p.name for p in target.iterdir())
    return target, [target / n for n in names]


def mutable_files(folder: Path) -> list[Path]:
    """The regular files of a unit (symlinks are followed only through their targets), sorted."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


# --- operators -----------------------------------------------------------------------------------


@dataclass
class Mutation:
    """What an operator did: the new bytes, the 1-based lines it touched (empty: not line-based)."""

    data: bytes
    lines: tuple[int, ...] = ()
    note: str = ""
    deleted: int | None = None  # the line a deletion removed (judged against that line made unreadable)
    value_path: tuple = ()  # the value a value operator replaced
    replaced_container: bool = False  # that value was a list or an object


def split_lines(data: bytes) -> list[bytes]:
    """Lines with their ``\\n`` kept (a last line without one kept as it is)."""
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines


def _pick_line(rng: random.Random, lines: list[bytes], *, content: bool = True) -> int | None:
    """A 0-based index of a line (one with more than a newline when ``content``)."""
    choices = [i for i, line in enumerate(lines) if not content or len(line.rstrip(b"\r\n")) > 1]
    return rng.choice(choices) if choices else None


def _inside(rng: random.Random, line: bytes) -> int:
    """A byte position strictly inside a line's content."""
    body = len(line.rstrip(b"\r\n"))
    return rng.randrange(1, body) if body > 1 else 0


def _insert_bytes(payloads: tuple[bytes, ...]) -> Callable[[random.Random, bytes], Mutation | None]:
    def operator(rng: random.Random, data: bytes) -> Mutation | None:
        lines = split_lines(data)
        i = _pick_line(rng, lines)
        if i is None:
            return None
        at, payload = _inside(rng, lines[i]), rng.choice(payloads)
        lines[i] = lines[i][:at] + payload + lines[i][at:]
        return Mutation(b"".join(lines), (i + 1,), f"{payload!r} at byte {at}")

    return operator


def truncate_line(rng: random.Random, data: bytes) -> Mutation | None:
    lines = split_lines(data)
    i = _pick_line(rng, lines)
    if i is None:
        return None
    at = _inside(rng, lines[i])
    end = lines[i][len(lines[i].rstrip(b"\r\n")) :]
    lines[i] = lines[i][:at] + end
    return Mutation(b"".join(lines), (i + 1,), f"cut at byte {at}")


def truncate_file(rng: random.Random, data: bytes) -> Mutation | None:
    lines = split_lines(data)
    i = _pick_line(rng, lines)
    if i is None:
        return None
    at = _inside(rng, lines[i])
    return Mutation(b"".join(lines[:i]) + lines[i][:at], (i + 1,), f"file ends at byte {at} of the line")


def fuse_lines(rng: random.Random, data: bytes) -> Mutation | None:
    lines = split_lines(data)
    if len(lines) < 2:
        return None
    i = rng.randrange(len(lines) - 1)
    lines[i : i + 2] = [lines[i].rstrip(b"\r\n") + lines[i + 1]]
    return Mutation(b"".join(lines), (i + 1,), "joined with the next line")


def repeat_line(rng: random.Random, data: bytes) -> Mutation | None:
    lines = split_lines(data)
    i = _pick_line(rng, lines)
    if i is None:
        return None
    copy = lines[i] if lines[i].endswith(b"\n") else lines[i] + b"\n"
    j = rng.choice([i + 1, len(lines), rng.randrange(len(lines) + 1)])
    if j == len(lines) and not lines[-1].endswith(b"\n"):
        lines[-1] += b"\n"
    lines.insert(j, copy)
    return Mutation(b"".join(lines), (i + 1, j + 1), f"copy of line {i + 1} as line {j + 1}")


def delete_line(rng: random.Random, data: bytes) -> Mutation | None:
    lines = split_lines(data)
    i = _pick_line(rng, lines)
    if i is None or len(lines) < 2:
        return None
    del lines[i]
    return Mutation(b"".join(lines), (max(i, 1), i + 1), f"line {i + 1} deleted", deleted=i + 1)


def swap_lines(rng: random.Random, data: bytes) -> Mutation | None:
    lines = split_lines(data)
    if len(lines) < 2 or not lines[-1].endswith(b"\n"):
        if len(lines) < 2:
            return None
        lines[-1] += b"\n"
    i = rng.randrange(len(lines) - 1)
    j = i + 1 if rng.random() < 0.5 else rng.choice([n for n in range(len(lines)) if n != i])
    lines[i], lines[j] = lines[j], lines[i]
    return Mutation(b"".join(lines), (i + 1, j + 1), f"lines {i + 1} and {j + 1} swapped")


def bom(rng: random.Random, data: bytes) -> Mutation | None:
    return Mutation(b"\xef\xbb\xbf" + data, (1,), "UTF-8 BOM")


def byte_flips(rng: random.Random, data: bytes) -> Mutation | None:
    """1-4 bytes XOR-ed with a random non-zero byte; half of them within the first 4 KiB (SQLite's page 1)."""
    if not data:
        return None
    buffer = bytearray(data)
    where = []
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(min(len(buffer), 4096) if rng.random() < 0.5 else len(buffer))
        buffer[at] ^= rng.randrange(1, 256)
        where.append(at)
    return Mutation(bytes(buffer), (), f"bytes flipped at {where}")


def truncate_binary(rng: random.Random, data: bytes) -> Mutation | None:
    if len(data) < 2:
        return None
    at = rng.randrange(1, len(data))
    return Mutation(data[:at], (), f"file ends at byte {at}")


# Value operators: a JSON line (or a whole JSON document) is parsed, one value in it replaced, and the
# line written again; strings are the only values for the text operators.


TAG_KEYS = frozenset({"type", "role", "from", "kind", "status", "customType", "stopReason", "object", "dialect"})
"""Keys whose value says what a record *is*: changing one changes the meaning, not the integrity, of the
record (it is then read as another kind, or passed over as an unknown one), so value operators leave
them alone. The whole value of a line or document (the root) is left alone for the same reason."""


def _paths(value: Any, path: tuple = ()) -> Iterator[tuple]:
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*path, index))


def _get(value: Any, path: tuple) -> Any:
    for step in path:
        value = value[step]
    return value


def _set(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    _get(value, path[:-1])[path[-1]] = new
    return value


def _swap_type(rng: random.Random, old: Any) -> Any:
    kinds = {
        "string": lambda: rng.choice(["", "x", "0", "null", "1786000000"]),
        "number": lambda: rng.choice([0, -1, 1, 1.5, 10**20, -(10**30)]),
        "list": lambda: rng.choice([[], [old], [1, "a"]]),
        "object": lambda: rng.choice([{}, {"x": old}, {"type": "message"}]),
        "null": lambda: None,
        "bool": lambda: rng.choice([True, False]),
    }
    current = {str: "string", int: "number", float: "number", list: "list", dict: "object", type(None): "null"}
    current[bool] = "bool"
    return kinds[rng.choice([k for k in kinds if k != current[type(old)]])]()


@dataclass(frozen=True)
class Raw:
    """JSON text put in place of a value as it is (Python's encoder cannot write ~1000 levels)."""

    text: str


PLACEHOLDER = "\u0000fuzz-raw\u0000"


def _deep(rng: random.Random, _old: Any) -> Raw:
    depth = rng.randint(*DEEP)
    inner = rng.choice(["1", '"x"', "null"])
    if rng.random() < 0.5:
        return Raw("[" * depth + inner + "]" * depth)
    return Raw('{"a":' * depth + inner + "}" * depth)


def _huge(rng: random.Random, old: Any) -> Any:
    """A string of a few MB: a string grows by that much (what it said is kept), another value becomes one."""
    return (old if isinstance(old, str) else "") + "h" * rng.randint(*HUGE_BYTES)


def _text(inserts: tuple[str, ...]) -> Callable[[random.Random, Any], Any]:
    def change(rng: random.Random, old: Any) -> Any:
        # At the end: inside the text, the insert would change markup (``<think>``) rather than test
        # how the character is read and written.
        return old + rng.choice(inserts)

    return change


def _value_operator(
    change: Callable[[random.Random, Any], Any], *, strings_only: bool = False, ascii_only: bool = False
) -> Callable[[random.Random, bytes], Mutation | None]:
    def dumps(value: Any, document: bool, raw: Raw | None) -> bytes:
        text = json.dumps(value, ensure_ascii=ascii_only, indent=2 if document else None)
        if raw is not None:
            text = text.replace(json.dumps(PLACEHOLDER, ensure_ascii=ascii_only), raw.text, 1)
        return text.encode("utf-8", "surrogatepass")

    def mutate(rng: random.Random, value: Any) -> tuple[Any, str, Raw | None, tuple, bool] | None:
        paths = [
            p
            for p in _paths(value)
            if p and p[-1] not in TAG_KEYS and (not strings_only or isinstance(_get(value, p), str))
        ]
        if not paths:
            return None
        path = rng.choice(paths)
        old = _get(value, path)
        new = change(rng, old)
        raw = new if isinstance(new, Raw) else None
        value = _set(value, path, PLACEHOLDER if raw else new)
        return value, ".".join(map(str, path)) or "(root)", raw, path, isinstance(old, list | dict)

    def operator(rng: random.Random, data: bytes) -> Mutation | None:
        with contextlib.suppress(ValueError):
            document = json.loads(data)
            if "\n" in data.decode().strip():  # a JSON document over several lines, not a JSONL file
                done = mutate(rng, document)
                if done is None:
                    return None
                return Mutation(
                    dumps(done[0], True, done[2]),
                    (),
                    f"value at {done[1]}",
                    value_path=done[3],
                    replaced_container=done[4],
                )
        lines = split_lines(data)
        candidates = []
        for i, line in enumerate(lines):
            with contextlib.suppress(ValueError):
                candidates.append((i, json.loads(line)))
        if not candidates:
            return None
        i, value = rng.choice(candidates)
        done = mutate(rng, value)
        if done is None:
            return None
        lines[i] = dumps(done[0], False, done[2]) + b"\n"
        return Mutation(
            b"".join(lines), (i + 1,), f"value at {done[1]}", value_path=done[3], replaced_container=done[4]
        )

    return operator


OPERATORS: dict[str, Callable[[random.Random, bytes], Mutation | None]] = {
    "truncate_line": truncate_line,
    "truncate_file": truncate_file,
    "fuse_lines": fuse_lines,
    "nul": _insert_bytes((b"\x00", b"\x00\x00\x00")),
    "invalid_utf8": _insert_bytes((b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80")),
    "lone_surrogate": _value_operator(_text(("\ud800", "\udfff", "\udc00x")), strings_only=True, ascii_only=True),
    "raw_separators": _value_operator(_text(("\u2028", "\u0085", "\u2029", "\u2028\u0085")), strings_only=True),
    "repeat_line": repeat_line,
    "delete_line": delete_line,
    "swap_lines": swap_lines,
    "type_swap": _value_operator(_swap_type),
    "deep_nesting": _value_operator(_deep),
    "huge_value": _value_operator(_huge),
    "bom": bom,
}
BINARY_OPERATORS = {"byte_flips": byte_flips, "truncate_binary": truncate_binary, "bom": bom}
HUGE = {"huge_value"}


def is_binary(path: Path) -> bool:
    return path.suffix == ".db"


def is_document(path: Path) -> bool:
    """A file holding one JSON document (``sessions.json``, a Hermes session file), not JSON lines."""
    return path.suffix == ".json"


def is_one_document(data: bytes) -> bool:
    """Whether ``data`` parses as one JSON value written over several lines."""
    try:
        orjson.loads(data)
    except ValueError:
        return False
    return data.strip().count(b"\n") > 0


def nothing_readable(data: bytes) -> bool:
    """Whether no line of ``data`` is a JSON object any more (a file-level diagnostic then suffices)."""
    for line in split_lines(data):
        with contextlib.suppress(ValueError):  # orjson: a depth over 1024 is a decode error too
            if isinstance(orjson.loads(line), dict):
                return False
    return True


# --- building ------------------------------------------------------------------------------------


class BuildTimeout(Exception):
    """A build ran past :data:`BUILD_SECONDS`."""


@dataclass
class Built:
    """One in-process build: its exit code, output bytes, diagnostics, seconds and any crash."""

    exit_code: int
    output: bytes | None
    diagnostics: list[dict]
    seconds: float
    crash: str | None = None
    timed_out: bool = False


@contextlib.contextmanager
def time_bound(seconds: float) -> Iterator[list[bool]]:
    """Raise :class:`BuildTimeout` in the main thread after ``seconds``; yields a flag set when it fired."""
    fired = [False]

    def expire(_signum, _frame) -> None:
        fired[0] = True
        raise BuildTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run(args: list[str], out: Path, seconds: float = BUILD_SECONDS) -> Built:
    """Run ``ng-traj build ARGS -o OUT --output-format json`` in-process within ``seconds``."""
    out.unlink(missing_ok=True)
    started = time.perf_counter()
    crash = None
    with time_bound(seconds) as fired:
        try:
            result = CliRunner().invoke(app, [*args, "-o", str(out), "--output-format", "json"])
        except BuildTimeout:
            result = None
    elapsed = time.perf_counter() - started
    if result is None or fired[0]:
        return Built(-1, None, [], elapsed, timed_out=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        crash = f"{type(result.exception).__name__}: {result.exception}"
    elif result.exit_code == 2 or "internal error" in result.stderr or "Traceback" in result.stderr:
        crash = f"exit {result.exit_code}: {result.stderr.strip()[:500]}"
    lines = [orjson.loads(line) for line in result.stdout.split("\n") if line.startswith("{")]
    diagnostics = [line for line in lines if line.get("type") == "diagnostic"]
    output = out.read_bytes() if out.exists() else None
    return Built(result.exit_code, output, diagnostics, elapsed, crash)


def validation_errors(out: Path) -> list[str]:
    """Error-severity findings of ``ng-traj validate OUT``, rendered one a line."""
    result = CliRunner().invoke(app, ["validate", str(out), "--output-format", "json"])
    found = []
    for line in result.stdout.split("\n"):
        if not line:
            continue
        record = orjson.loads(line)
        if record.get("type") == "diagnostic" and record["severity"] == "error":
            found.append(f"{record.get('line')}: {record['code']} {record.get('pointer')}: {record['message'][:200]}")
    if result.exit_code == 2:
        found.append(f"validate exit 2: {result.stderr.strip()[:300]}")
    return found


# --- judging -------------------------------------------------------------------------------------

KINDS = ("records", "invocations", "model_calls", "tool_calls", "conversation_items")


def entity_counts(output: bytes | None) -> dict[str, Counter[str]]:
    """Per rollout id (``task_id/rollout_id``): how many records, invocations, calls and items it has.

    Rows written with ``--attach`` are counted by their ``ng_trajectory``.
    """
    counts: dict[str, Counter[str]] = {}
    for line in (output or b"").split(b"\n"):
        if not line:
            continue
        record = orjson.loads(line)
        trajectory = record.get("ng_trajectory", record) if "schema_version" not in record else record
        if not isinstance(trajectory, dict):
            trajectory = {}
        key = f"{trajectory.get('task_id')}/{trajectory.get('rollout_id')}"
        tally = counts.setdefault(key, Counter())
        tally["records"] += 1
        invocations = trajectory.get("invocations") or []
        tally["invocations"] += len(invocations)
        tally["conversation_items"] += sum(len(i.get("conversation") or []) for i in invocations)
        tally["model_calls"] += len(trajectory.get("model_calls") or [])
        tally["tool_calls"] += len(trajectory.get("tool_calls") or [])
    return counts


def losses(before: dict[str, Counter[str]], after: dict[str, Counter[str]]) -> dict[str, int]:
    """Per kind, what the rollout ids of ``before`` lost in ``after``, less what ids new in ``after`` hold.

    Nothing is lost when every rollout of ``before`` has its exact counts under some rollout id of
    ``after`` (each id used once): ids that moved (a Hermes ShareGPT trajectory is named by its line,
    so swapping two lines swaps their ids) lose nothing.
    """
    if _contained([_signature(c) for c in before.values()], [_signature(c) for c in after.values()]):
        return {}
    lost: dict[str, int] = {}
    for kind in KINDS:
        missing = sum(max(0, counts[kind] - after.get(key, Counter())[kind]) for key, counts in before.items())
        gained = sum(counts[kind] for key, counts in after.items() if key not in before)
        if missing - gained > 0:
            lost[kind] = missing - gained
    return lost


def _signature(counts: Counter[str]) -> tuple[int, ...]:
    return tuple(counts[kind] for kind in KINDS)


def _contained(wanted: list[tuple[int, ...]], present: list[tuple[int, ...]]) -> bool:
    left = Counter(present)
    left.subtract(Counter(wanted))
    return all(count >= 0 for count in left.values())


def explains(diagnostic: dict, mutated: Path, lines: tuple[int, ...]) -> bool:
    """Whether an error or warning names the mutated file (and a line near a touched one)."""
    if diagnostic["severity"] not in ("error", "warning") or not diagnostic.get("path"):
        return False
    if Path(diagnostic["path"]).resolve() != mutated.resolve():
        return False
    line = diagnostic.get("line")
    return not lines or (line is not None and any(abs(line - touched) <= WINDOW for touched in lines))


KNOWN: dict[str, tuple[str, Callable[[str, Mutation], bool]]] = {
    "leaf_moved": (
        "pi and OpenClaw take a transcript's last line as the leaf of its entry tree: swapping the last line "
        "with an earlier one makes another entry the leaf, and what lay after it is off the active path",
        lambda operator, m: operator == "swap_lines" and bool(m.lines) and max(m.lines) == len(split_lines(m.data)),
    ),
    "link_id_changed": (
        "an id that links two records (a tool call's id, its result's toolCallId) changed in one of them: the "
        "records no longer pair, and a pi tool call without its result is not counted, without a diagnostic",
        lambda operator, m: (
            bool(m.value_path)
            and isinstance(m.value_path[-1], str)
            and m.value_path[-1] in ("id", "toolCallId", "tool_call_id", "call_id", "parentId", "parent_id")
        ),
    ),
    "structure_replaced": (
        "a list or an object a reader expects (a ShareGPT conversations list, a tool result content list, "
        "a content block) replaced by a value of another type, or nested 1,000 deep, is passed over without "
        "a diagnostic: what it held is missing",
        lambda operator, m: operator in ("type_swap", "deep_nesting", "huge_value") and m.replaced_container,
    ),
    "sharegpt_trailing_calls": (
        "a ShareGPT turn's tool calls are the <tool_call> blocks that end its value: text added after them "
        "(a few MB) makes them text, as the format says",
        lambda operator, m: (
            operator == "huge_value"
            and len(m.value_path) == 3
            and m.value_path[0] == "conversations"
            and m.value_path[-1] == "value"
        ),
    ),
    "document_restructured": (
        "lines of a pretty-printed JSON document moved so that it still parses: another valid document "
        "(a message moved to another place, a key to another object), not a damaged one",
        lambda operator, m: (
            operator in ("swap_lines", "repeat_line", "delete_line", "fuse_lines") and is_one_document(m.data)
        ),
    ),
    "sqlite_bytes": (
        "a byte flipped inside a state.db (SQLite keeps no checksums) can leave a valid database that says "
        "something else: a column renamed (tool_calls -> itool_calls) is read as absent, a role no longer "
        "known is passed over, without a diagnostic",
        lambda operator, m: operator == "byte_flips",
    ),
}
"""Losses the fuzzer finds that are reported, not fixed (see the project's limitations): a mutant whose
only problem is a loss of one of these shapes is counted as ``known`` rather than failed."""


@dataclass
class Verdict:
    """What one mutant did wrong (empty ``problems``: nothing) and how long it took."""

    mutant: str
    operator: str = ""
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    kind: Counter[str] = field(default_factory=Counter)


@dataclass
class Unit:
    """A materialised unit, its inputs and its unmutated builds per flag set (cached)."""

    name: str
    folder: Path
    inputs: list[Path]
    scratch: Path
    baselines: dict[tuple[str, ...], Built] = field(default_factory=dict)

    def args(self, flags: tuple[str, ...], reverse: bool = False) -> list[str]:
        names = [str(p) for p in (reversed(self.inputs) if reverse else self.inputs)]
        return ["build", *names, *flags]

    def baseline(self, flags: tuple[str, ...]) -> Built:
        if flags not in self.baselines:
            self.baselines[flags] = run(self.args(flags), self.scratch / "baseline.jsonl")
        return self.baselines[flags]


def prepare_units(root: Path, names: list[str] | None = None) -> list[Unit]:
    units = []
    for name in names or list(UNITS):
        folder, inputs = materialise(name, root / name / "input")
        units.append(Unit(name, folder, inputs, root / name))
    return units


def choose(seed: int, index: int, units: list[Unit]) -> tuple[Unit, Path, str, random.Random]:
    """The unit, file and operator of mutant ``index`` (round robin over units)."""
    rng = random.Random(f"{seed}:{index}")
    unit = units[index % len(units)]
    path = rng.choice(mutable_files(unit.folder))
    table = BINARY_OPERATORS if is_binary(path) else OPERATORS
    return unit, path, rng.choice(sorted(table)), rng


def run_mutant(seed: int, index: int, units: list[Unit]) -> Verdict:
    """Build mutant ``index`` of campaign ``seed`` and judge it; the unit's files are restored afterwards."""
    unit, path, name, rng = choose(seed, index, units)
    table = BINARY_OPERATORS if is_binary(path) else OPERATORS
    original = path.read_bytes()
    mutation = table[name](rng, original)
    flags = FLAG_SETS[rng.randrange(len(FLAG_SETS))]
    label = f"seed {seed} mutant {index}: {unit.name} {path.relative_to(unit.folder)} {name} {flags}"
    if mutation is None or mutation.data == original:
        return Verdict(label + " (not applicable)")
    if is_binary(path) or is_document(path):
        mutation.lines = ()  # a database or one JSON document: the file is what a diagnostic must name
    label += f" lines {list(mutation.lines)} ({mutation.note[:80]})"
    baseline = unit.baseline(flags)
    try:
        path.write_bytes(mutation.data)
        return judge(unit, path, mutation, flags, baseline, label, rng, name)
    finally:
        path.write_bytes(original)


def judge(
    unit: Unit,
    path: Path,
    mutation: Mutation,
    flags: tuple[str, ...],
    baseline: Built,
    label: str,
    rng: random.Random,
    operator: str,
) -> Verdict:
    verdict = Verdict(label, operator)
    out = unit.scratch / "mutant.jsonl"
    first = run(unit.args(flags), out)
    verdict.seconds = first.seconds
    if _failed(verdict, first, "build"):
        return verdict
    if first.output is not None:
        for error in validation_errors(out):
            verdict.problems.append(f"invalid output: {error}")
            verdict.kind["invalid_output"] += 1
    again_flags = ("--jobs", "2") if rng.random() < 0.04 else ()
    reverse = run([*unit.args(flags, reverse=True), *again_flags], unit.scratch / "reverse.jsonl")
    if not _failed(verdict, reverse, "reversed build") and reverse.output != first.output:
        verdict.problems.append(f"nondeterministic: reversed inputs {' '.join(again_flags)} give other bytes")
        verdict.kind["nondeterministic"] += 1
    if rng.random() < 0.1:
        second = run(unit.args(flags), unit.scratch / "second.jsonl")
        if not _failed(verdict, second, "second build") and second.output != first.output:
            verdict.problems.append("nondeterministic: a second build gives other bytes")
            verdict.kind["nondeterministic"] += 1
    _judge_losses(verdict, unit, path, mutation, flags, baseline, first)
    return verdict


def _failed(verdict: Verdict, built: Built, what: str) -> bool:
    if built.timed_out:
        verdict.problems.append(f"hang: {what} ran past {BUILD_SECONDS} s")
        verdict.kind["hang"] += 1
        return True
    if built.crash:
        verdict.problems.append(f"internal error in {what}: {built.crash}")
        verdict.kind["internal_error"] += 1
        return True
    for diagnostic in built.diagnostics:
        if diagnostic["code"] == "native_load_failed":
            verdict.problems.append(f"internal error in {what} (contained): {diagnostic['message'][:300]}")
            verdict.kind["internal_error"] += 1
            return True
    return False


def _judge_losses(
    verdict: Verdict, unit: Unit, path: Path, mutation: Mutation, flags, baseline: Built, built: Built
) -> None:
    lost = losses(entity_counts(baseline.output), entity_counts(built.output))
    short = len(split_lines(mutation.data)) <= 2 * WINDOW + 1  # every line is within the window
    lines = () if short or nothing_readable(mutation.data) else mutation.lines
    if not lost or any(explains(d, path, lines) for d in built.diagnostics):
        return
    if mutation.deleted is not None:
        unreadable = _line_unreadable(unit, path, mutation, flags)
        allowed = losses(entity_counts(baseline.output), entity_counts(unreadable))
        lost = {k: v for k, v in lost.items() if v > allowed.get(k, 0)}
        if not lost:
            return
    near = [
        f"{d['severity']}[{d['code']}] {Path(d['path']).name if d.get('path') else '-'}:{d.get('line')}"
        for d in built.diagnostics
        if d["severity"] in ("error", "warning")
    ]
    for name, (_, matches) in KNOWN.items():
        if matches(verdict.operator, mutation):
            verdict.kind[f"known:{name}"] += 1
            return
    verdict.problems.append(f"unexplained loss {lost}; errors and warnings: {near[:6]}")
    verdict.kind["unexplained_loss"] += 1


def _line_unreadable(unit: Unit, path: Path, mutation: Mutation, flags: tuple[str, ...]) -> bytes | None:
    """The output of the unit with the deleted line back but unreadable (``{`` and a NUL): what that line costs."""
    assert mutation.deleted is not None
    mutated = path.read_bytes()
    lines = split_lines(mutated)
    lines.insert(mutation.deleted - 1, b"{\x00\n")
    try:
        path.write_bytes(b"".join(lines))
        return run(unit.args(flags), unit.scratch / "unreadable.jsonl").output
    finally:
        path.write_bytes(mutated)


# --- campaigns -----------------------------------------------------------------------------------


@dataclass
class Campaign:
    """The verdicts of a campaign and its totals."""

    verdicts: list[Verdict] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failures(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.problems]

    def totals(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for verdict in self.verdicts:
            total.update(verdict.kind)
        total["mutants"] = sum(1 for v in self.verdicts if not v.mutant.endswith("(not applicable)"))
        return total


def campaign(
    root: Path,
    seed: int,
    indexes: range | list[int],
    names: list[str] | None = None,
    on_verdict: Callable[[Verdict], Any] | None = None,
) -> Campaign:
    """Run mutants ``indexes`` of campaign ``seed`` over fresh copies of the units under ``root``."""
    started = time.perf_counter()
    units = prepare_units(root, names)
    result = Campaign()
    for index in indexes:
        try:
            verdict = run_mutant(seed, index, units)
        except Exception as exc:  # the fuzzer's own failure: reported with the mutant, the campaign goes on
            verdict = Verdict(f"seed {seed} mutant {index}", problems=[f"fuzzer error: {exc!r}"[:300]])
        result.verdicts.append(verdict)
        if on_verdict is not None:
            on_verdict(verdict)
    result.seconds = time.perf_counter() - started
    return result


def report(result: Campaign, limit: int = 40) -> str:
    lines = [f"{dict(result.totals())} in {result.seconds:.1f} s"]
    for verdict in result.failures[:limit]:
        lines.append(verdict.mutant)
        lines.extend(f"    {problem}" for problem in verdict.problems)
    return "\n".join(lines)


def keep_mutant(seed: int, index: int, root: Path) -> Path:
    """Write mutant ``index`` of campaign ``seed`` as a unit folder under ``root`` (to reproduce by hand)."""
    units = prepare_units(root)
    _, path, name, rng = choose(seed, index, units)
    table = BINARY_OPERATORS if is_binary(path) else OPERATORS
    mutation = table[name](rng, path.read_bytes())
    if mutation is not None:
        path.write_bytes(mutation.data)
    return path


if __name__ == "__main__":  # python tests/fuzzing.py SEED START STOP ROOT [keep]
    seed, start, stop, root = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    if sys.argv[5:] == ["keep"]:
        print(keep_mutant(seed, start, root))
    else:

        def show(verdict: Verdict) -> None:
            if verdict.problems:
                print(report(Campaign([verdict]), limit=1).split("\n", 1)[1], flush=True)

        print(report(campaign(root, seed, range(start, stop), on_verdict=show), limit=0), flush=True)
