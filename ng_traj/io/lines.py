"""The JSONL line reader every source uses.

Files are read in binary (gzip and Zstandard files decompressed as they are read, see
``io/compression.py``), split on ``\\n`` only (a U+2028 or lone ``\\r`` inside a record never splits
it), and decoded one line at a time, so memory is bounded by the longest line, never the file. Each
line carries its 1-based number and the byte offset of its first byte (in a compressed file, of its
decompressed text). Blank lines are skipped silently, as NeMo Gym's capture reader does.

Decoding: ``orjson`` first; a line it rejects is retried with the standard
library parser, and kept only when the sole problems were lone UTF-16 surrogate escapes, which become
U+FFFD with a ``lone_surrogate`` warning, or the bare tokens ``NaN``, ``Infinity`` and ``-Infinity``
(not JSON, but what Python's ``json.dumps`` writes by default), which are read as ``null`` with one
``json_nonfinite_number`` warning for the line (the same tokens inside strings are text and are left
alone). Everything else is one error diagnostic and the line is skipped: ``nul_byte``,
``invalid_utf8``, ``truncated_line`` (an unterminated, unparseable last line), ``invalid_json``,
``line_too_long`` (longer than ``max_line_bytes``; read past in 1 MiB steps without holding it) and,
for object readers, ``not_an_object``. A file whose first line looks UTF-16 (:func:`utf16_encoding`)
is one ``utf16_input`` error, and nothing more of it is read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from ng_traj.diagnostics import Diagnostic, DiagnosticSink, plural
from ng_traj.io.compression import CompressedStreamError, open_input
from ng_traj.io.files import os_reason, read_regular

DEFAULT_MAX_LINE_BYTES = 1 << 30
"""Lines longer than 1 GiB are skipped with ``line_too_long``."""

MAX_LINE_BYTES_LIMIT = 1 << 40
"""The largest ``--max-line-bytes`` (1 TiB): a line is read into memory whole, and a bound past
``sys.maxsize`` cannot even be passed to ``readline`` (``OverflowError``)."""

_SKIP_STEP = 1 << 20
BOM = b"\xef\xbb\xbf"
"""A UTF-8 byte-order mark at the start of a file is not part of its first record."""
UTF16_CODE = "utf16_input"
"""The code of a file that looks UTF-16 (inputs are UTF-8): one error for the file, nothing read."""
_UTF16_PROBE = 64
"""Bytes of a file's start :func:`utf16_encoding` looks at."""
READ_BUFFER = 1 << 20
"""Read buffer of a JSONL file: long lines (growing request histories) are read in few system calls."""


@dataclass(frozen=True, slots=True)
class JsonLine:
    """One non-blank line of a JSONL file.

    Attributes:
        path: The file as the user named it.
        line: 1-based line number.
        offset: Byte offset of the line's first byte.
        size: Length of the line in bytes, newline included.
        value: The decoded JSON value; ``None`` when ``problem`` is an error.
        problem: An error (line unusable) or a warning (line kept, e.g. ``lone_surrogate``).
    """

    path: str
    line: int
    offset: int
    size: int
    value: Any
    problem: Diagnostic | None = None

    @property
    def ok(self) -> bool:
        """True when ``value`` is usable."""
        return self.problem is None or self.problem.severity != "error"


DEEP_LEVELS = 2048
"""Recursion levels added while :func:`deep_dumps` writes a value (a value's depth, at most the 1,024
levels the reader accepts, with room for the encoder's own frames)."""


def deep_dumps(value: Any, **options: Any) -> str:
    """``json.dumps(value, **options)`` for any value a line can hold, however deep.

    The standard library's encoder recurses once per level and orjson stops at 255 levels, while a
    line may be nested 1,024 deep; the interpreter's recursion limit is raised while the value is
    written, and put back after.
    """
    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(limit + DEEP_LEVELS)
    try:
        return json.dumps(value, **options)
    finally:
        sys.setrecursionlimit(limit)


def json_text(value: Any, *, sort_keys: bool = False) -> str:
    """Compact JSON text of a value a line can hold, however deep (at most the 1,024 levels the reader
    accepts): orjson's encoding, or for a value nested deeper than orjson writes (255 levels),
    :func:`deep_dumps` with the same separators (non-ASCII kept).

    Raises:
        TypeError: ``value`` holds something that is not JSON.
    """
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS if sort_keys else None).decode()
    except orjson.JSONEncodeError:
        return deep_dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys)


class _NonFinite:
    """Stands for a bare ``NaN``, ``Infinity`` or ``-Infinity`` token while a rejected line is re-read;
    :func:`_repair` turns it into ``None``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


def _repair(value: Any, names: set[str]) -> tuple[Any, int, int]:
    """Return ``value`` with lone surrogates replaced by U+FFFD and non-finite tokens
    (:class:`_NonFinite`) by ``None``, how many strings changed and how many tokens were replaced (their
    names added to ``names``).

    Raises:
        RecursionError: ``value`` is nested deeper than the Python recursion limit allows.
    """
    if isinstance(value, str):
        return (_surrogate_fix(value), 1, 0) if _has_surrogate(value) else (value, 0, 0)
    if isinstance(value, _NonFinite):
        names.add(value.name)
        return None, 0, 1
    if isinstance(value, list):
        changed = replaced = 0
        items = []
        for item in value:
            fixed, count, tokens = _repair(item, names)
            items.append(fixed)
            changed += count
            replaced += tokens
        return items, changed, replaced
    if isinstance(value, dict):
        changed = replaced = 0
        result = {}
        for key, item in value.items():
            fixed_key, key_count, _ = _repair(key, names)
            fixed, count, tokens = _repair(item, names)
            result[fixed_key] = fixed
            changed += key_count + count
            replaced += tokens
        return result, changed, replaced
    return value, 0, 0


def _has_surrogate(text: str) -> bool:
    return any("\ud800" <= char <= "\udfff" for char in text)


def _surrogate_fix(text: str) -> str:
    return "".join("\ufffd" if "\ud800" <= char <= "\udfff" else char for char in text)


def _problem(jl: tuple[str, int, int], severity: str, code: str, message: str) -> Diagnostic:
    path, line, offset = jl
    return Diagnostic(severity, code, message, path=path, line=line, offset=offset)  # type: ignore[arg-type]


def _position(reason: str) -> str:
    """orjson's message without its ``line 1`` (the record is one line of the file): column only."""
    return re.sub(r"line 1 column (\d+) \(char \d+\)", r"at column \1", reason)


def decode_line(raw: bytes, where: tuple[str, int, int], *, at_eof: bool) -> tuple[Any, Diagnostic | None]:
    """Decode one stripped, non-blank line.

    Args:
        raw: The line without surrounding whitespace.
        where: ``(path, line, offset)`` for the diagnostic.
        at_eof: The line was the last of the file and had no terminating newline.

    Returns:
        ``(value, None)``, ``(value, warning)`` for a repaired line, or ``(None, error)``.
    """
    try:
        return orjson.loads(raw), None
    except orjson.JSONDecodeError as exc:
        reason = str(exc)
    if b"\x00" in raw:
        column = raw.index(b"\x00") + 1
        return None, _problem(where, "error", "nul_byte", f"raw NUL byte at column {column}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, _problem(where, "error", "invalid_utf8", f"invalid UTF-8 at column {exc.start + 1}")
    try:
        value = json.loads(text, parse_constant=_NonFinite)
    except (ValueError, RecursionError):
        code = "truncated_line" if at_eof else "invalid_json"
        return None, _problem(where, "error", code, _position(reason))
    names: set[str] = set()
    try:
        fixed, changed, replaced = _repair(value, names)
    except RecursionError:
        # From Python 3.12 the standard library decodes nesting deeper than orjson's limit of 1024
        # levels (its C recursion is no longer bounded by the Python recursion limit); the repair
        # walk, a Python recursion, cannot follow. Such a line is as invalid as orjson said.
        changed = replaced = 0
    if not changed and not replaced:
        return None, _problem(where, "error", "invalid_json", _position(reason))
    surrogates = f"{plural(changed, 'string')} held lone surrogates; replaced by U+FFFD"
    if not replaced:
        return fixed, _problem(where, "warning", "lone_surrogate", surrogates)
    tokens = ", ".join(name for name in ("NaN", "Infinity", "-Infinity") if name in names)
    message = f"{plural(replaced, 'non-finite number')} ({tokens}; not JSON) read as null"
    if changed:
        message += f"; {surrogates}"
    return fixed, _problem(where, "warning", NONFINITE, message)


NONFINITE = "json_nonfinite_number"
"""The code of a line whose bare ``NaN``, ``Infinity`` or ``-Infinity`` tokens were read as ``null``."""


def utf16_encoding(head: bytes) -> str | None:
    """``"UTF-16LE"`` or ``"UTF-16BE"`` when the start of a file, ``head``, looks UTF-16 (a byte-order
    mark ``FF FE`` or ``FE FF``, which UTF-8 text never starts with, followed by an ASCII character in
    that byte order, as JSON starts; or a NUL every other byte of its first 64 bytes, at least 4 of
    them, which JSON text in UTF-8 never holds); else ``None`` (garbage that merely starts ``FF FE``
    stays invalid UTF-8)."""
    if head.startswith(b"\xff\xfe") and len(head) >= 4 and head[2] and not head[3]:
        return "UTF-16LE"
    if head.startswith(b"\xfe\xff") and len(head) >= 4 and not head[2] and head[3]:
        return "UTF-16BE"
    probe = head[:_UTF16_PROBE]
    if len(probe) < 4 or (probe[0] and probe[1]):
        return None
    even, odd = probe[0::2], probe[1::2]
    if not odd.strip(b"\x00") and all(even):
        return "UTF-16LE"
    if not even.strip(b"\x00") and all(odd):
        return "UTF-16BE"
    return None


def utf16_message(encoding: str, head: bytes) -> str:
    """The ``utf16_input`` message for a file :func:`utf16_encoding` says is ``encoding``."""
    bom = head[:2].hex(" ").upper() if head[:2] in (b"\xff\xfe", b"\xfe\xff") else None
    why = f"byte-order mark {bom}" if bom else "a NUL byte every other byte"
    source = "UTF-16" if bom else encoding
    return f"the file looks {encoding} ({why}): inputs must be UTF-8 (iconv -f {source} -t UTF-8 converts it); not read"


def file_utf16(path: str | Path) -> str | None:
    """The ``utf16_input`` message when the file at ``path`` (decompressed) looks UTF-16, else ``None``;
    ``None`` too when it cannot be read."""
    try:
        with open_input(path) as handle:
            head = handle.read(_UTF16_PROBE)
    except (OSError, CompressedStreamError):
        return None
    encoding = utf16_encoding(head)
    return utf16_message(encoding, head) if encoding else None


def iter_json_lines(
    path: str | Path, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, copy: BinaryIO | None = None
) -> Iterator[JsonLine]:
    """Yield every non-blank line of ``path`` with its decoded value or its problem.

    A file that looks UTF-16 (:func:`utf16_encoding`, judged by its first line) yields one
    ``utf16_input`` error at line 1 and nothing else, not one error per line.

    A gzip or Zstandard file is read decompressed (``io/compression.py``): line numbers, offsets and
    sizes are those of its text. A stream cut short or corrupt ends the file with one
    ``compressed_stream_invalid`` error at the line it reached (its offset is where that line starts;
    its message counts every byte of text decoded, that line's start included); the lines before it
    are yielded.

    Args:
        copy: Receives every byte of text read, in order (a compressed file's rows are re-read
            from such a copy, at the same offsets).

    Raises:
        OSError: The file cannot be opened; callers report it as ``unreadable_file``.
    """
    name = str(path)
    position = [0, 0]  # byte offset, lines read
    with open_input(path, READ_BUFFER) as handle:
        try:
            yield from _lines(handle, name, max_line_bytes, copy, position)
        except CompressedStreamError as exc:
            offset, number = position
            where = (name, number + 1, offset)
            # The offset is where the line the stream broke in starts; the text read counts that
            # line's bytes too (a break inside a first line of 30 KB is 30 KB in, not 0).
            text_read = offset if exc.text_read is None else max(offset, exc.text_read)
            message = f"{exc} at line {number + 1}, {text_read} bytes of text in; the lines before it are kept"
            yield JsonLine(name, number + 1, offset, 0, None, _problem(where, "error", STREAM_INVALID, message))


STREAM_INVALID = "compressed_stream_invalid"
"""The code of a compressed input cut short or corrupt."""


def _lines(
    handle: BinaryIO, name: str, max_line_bytes: int, copy: BinaryIO | None, position: list[int]
) -> Iterator[JsonLine]:
    """The lines of an open file; ``position`` holds the offset and count of lines read so far."""
    while True:
        chunk = handle.readline(max_line_bytes + 1)
        if not chunk:
            return
        if copy is not None:
            copy.write(chunk)
        start, number = position[0], position[1] + 1
        position[1] = number
        if len(chunk) > max_line_bytes and not chunk.endswith(b"\n"):
            size = len(chunk) + _skip_rest_of_line(handle, copy)
            position[0] += size
            problem = _problem(
                (name, number, start), "error", "line_too_long", f"{size} bytes exceeds {max_line_bytes}"
            )
            yield JsonLine(name, number, start, size, None, problem)
            continue
        position[0] += len(chunk)
        if number == 1 and (encoding := utf16_encoding(chunk)) is not None:
            problem = _problem((name, 1, 0), "error", UTF16_CODE, utf16_message(encoding, chunk))
            yield JsonLine(name, 1, 0, len(chunk), None, problem)
            return
        body = chunk.removeprefix(BOM) if number == 1 else chunk
        if not body or body.isspace():
            continue
        try:
            value, problem = orjson.loads(body), None
        except orjson.JSONDecodeError:
            at_eof = not chunk.endswith(b"\n")
            value, problem = decode_line(body.strip(), (name, number, start), at_eof=at_eof)
        yield JsonLine(name, number, start, len(chunk), value, problem)


def _skip_rest_of_line(handle: Any, copy: BinaryIO | None) -> int:
    skipped = 0
    while True:
        piece = handle.readline(_SKIP_STEP)
        if copy is not None:
            copy.write(piece)
        skipped += len(piece)
        if not piece or piece.endswith(b"\n"):
            return skipped


def quiet_objects(path: str | Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of ``path``'s lines, for a second look at a file the build reads (and reports
    on) anyway: a line that is not an object is passed over, and a file that cannot be read, or a
    compressed stream that breaks, ends the iteration without a word."""
    try:
        with open_input(path) as handle:
            for raw in handle:
                try:
                    value = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(value, dict):
                    yield value
    except (OSError, CompressedStreamError):
        return


def read_json_objects(
    path: str | Path,
    sink: DiagnosticSink,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    copy: BinaryIO | None = None,
) -> Iterator[JsonLine]:
    """Yield the lines of ``path`` that hold JSON objects; report every other line to ``sink``.

    A file that cannot be opened is one ``unreadable_file`` error; nothing is raised. ``copy`` is as
    for :func:`iter_json_lines`.
    """
    try:
        for line in iter_json_lines(path, max_line_bytes=max_line_bytes, copy=copy):
            if line.problem is not None:
                sink.add(line.problem)
                if not line.ok:
                    continue
            if not isinstance(line.value, dict):
                sink.add(not_an_object(line))
                continue
            yield line
    except OSError as exc:
        sink.add(Diagnostic("error", "unreadable_file", os_reason(exc, str(path)), path=str(path)))


JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def not_an_object(line: JsonLine) -> Diagnostic:
    """The ``not_an_object`` error for a line whose JSON value is not an object."""
    kind = JSON_TYPES.get(type(line.value), type(line.value).__name__)
    return Diagnostic(
        "error", "not_an_object", f"JSON {kind}, expected an object", path=line.path, line=line.line, offset=line.offset
    )


def read_json_file(path: Path, sink: DiagnosticSink) -> Any:
    """The JSON value of a whole ``.json`` file (a lone surrogate repaired, with a warning, as for a
    line), or ``None`` with an ``unreadable_file`` error, or an ``invalid_json`` error (``truncated_line``
    when the text ends early) said of the file, not of a line (native readers' JSON documents: Hermes
    snapshots and stores, OpenCode exports)."""
    try:
        data = read_regular(path)
    except OSError as exc:
        sink.add(Diagnostic("error", "unreadable_file", os_reason(exc, str(path)), path=str(path)))
        return None
    text = data.removeprefix(BOM).strip()
    if not text:
        sink.add(Diagnostic("error", "invalid_json", "empty: holds no JSON document", path=str(path)))
        return None
    value, problem = decode_line(text, (str(path), 1, 0), at_eof=True)
    if problem is not None and problem.severity == "error":  # said of the file: orjson's message has the line
        code = "truncated_line" if "end of data" in problem.message else "invalid_json"
        problem = replace(
            problem, code=code, message=f"not one JSON document ({problem.message})", line=None, offset=None
        )
    if problem is not None:
        sink.add(problem)
    return value
