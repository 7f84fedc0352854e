"""Compressed inputs: gzip and Zstandard files read as the text they hold, streaming.

A file is taken as compressed by its first bytes, never by its name: gzip starts ``1f 8b``, a
Zstandard frame ``28 b5 2f fd``; anything else (SQLite databases included) is read as it is. A name's
compression suffix (``.gz``, ``.zst``, ``.zstd``) is dropped when the name says what the file is
(:func:`logical_name`): ``<id>.capture.jsonl.zst`` is a capture file of rollout ``<id>``,
``rollouts_failures.jsonl.gz`` a failures sidecar.

Decompression streams: memory holds one read buffer of text, never the file. gzip is read with the
standard library (``gzip``; several members are read one after another, as ``zcat`` does), Zstandard
with the ``zstandard`` package, frame after frame, fed 16 KiB of compressed input at a time. A stream
that ends inside a frame, or whose data is corrupt, raises :class:`CompressedStreamError` at the point
reached; everything read before it has been handed out.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import zstandard

from ng_traj.io.files import open_regular, open_sized

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
SUFFIXES = (".gz", ".zst", ".zstd")
"""Name suffixes of compressed files, dropped by :func:`logical_name`."""

_ZSTD_STEP = 16 << 10
"""Compressed bytes given to the Zstandard decoder at a time (bounds the text each step produces)."""


class CompressedStreamError(Exception):
    """A compressed stream is cut short or corrupt; ``str()`` says which and how.

    Attributes:
        text_read: Bytes of text the stream decoded to before it broke, all of them handed out
            (the whole lines read and the start of the line it broke in); ``None`` when not counted.
    """

    def __init__(self, message: str, text_read: int | None = None) -> None:
        super().__init__(message)
        self.text_read = text_read


def compression_of(head: bytes) -> str | None:
    """``gzip`` or ``zstd`` for a file starting with ``head`` (its first 4 bytes or more), else ``None``."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


def logical_name(name: str) -> str:
    """``name`` without its compression suffix: ``a.jsonl.gz`` -> ``a.jsonl``; other names unchanged."""
    for suffix in SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def logical_path(path: Path) -> Path:
    """``path`` with its file name passed through :func:`logical_name`."""
    name = logical_name(path.name)
    return path if name == path.name else path.with_name(name)


def open_input(path: str | Path, buffering: int = io.DEFAULT_BUFFER_SIZE) -> BinaryIO:
    """Open ``path`` for reading its text: decompressed when its first bytes say gzip or Zstandard.

    The returned file supports ``read`` and ``readline``; closing it closes the file. A file smaller
    than ``buffering`` bytes when opened is read whole at once, into memory no larger than the buffer
    a file object would allocate (its descriptor closed at once), and read from there: many capture
    files are a few KiB, and a file object's buffer, its checks and system calls cost more than
    reading them. A larger file, or one that grew past that size while being read, is read through a
    buffer of ``buffering`` bytes.

    Raises:
        OSError: The file cannot be opened or read, or is not a regular file (``io/files.py``).
    """
    descriptor, size = open_sized(path)
    try:
        text = _whole(descriptor, size) if size < buffering else None
        if text is None:
            os.set_blocking(descriptor, True)
            handle: BinaryIO = os.fdopen(descriptor, "rb", buffering=buffering)  # type: ignore[assignment]
    except BaseException:
        os.close(descriptor)
        raise
    if text is not None:
        os.close(descriptor)
        handle = io.BytesIO(text)
        kind = compression_of(text[:4])
    else:
        try:
            kind = compression_of(handle.peek(4)[:4])  # type: ignore[attr-defined]
        except BaseException:
            handle.close()
            raise
    if kind == "gzip":  # gzip's own 8 KiB buffer makes long lines slow to find: read in larger steps
        return io.BufferedReader(_GzipInput(handle), buffering)  # type: ignore[arg-type, return-value]
    if kind == "zstd":
        return io.BufferedReader(_ZstdRaw(handle), buffering)  # type: ignore[return-value]
    return handle


def _whole(descriptor: int, size: int) -> bytes | None:
    """Every byte of the open regular file of ``size`` bytes, or ``None`` (read position back at 0)
    when it holds more than ``size`` by now. Read until end of file, so a short read loses nothing."""
    pieces: list[bytes] = []
    total = 0
    while total <= size:
        piece = os.read(descriptor, size + 1 - total)
        if not piece:
            return pieces[0] if len(pieces) == 1 else b"".join(pieces)
        pieces.append(piece)
        total += len(piece)
    os.lseek(descriptor, 0, os.SEEK_SET)
    return None


def is_compressed(path: str | Path) -> bool:
    """Whether ``path`` starts like a gzip or Zstandard stream (``False`` when it cannot be read)."""
    try:
        with open_regular(path) as handle:
            return compression_of(handle.read(4)) is not None
    except OSError:
        return False


class _GzipInput(gzip.GzipFile):
    """A gzip reader (read through a larger buffer) whose truncation and corruption errors are
    :class:`CompressedStreamError`."""

    def __init__(self, handle: BinaryIO) -> None:
        super().__init__(fileobj=handle, mode="rb")
        self._source = handle
        self._text_read = 0

    def read(self, size: int | None = -1) -> bytes:
        with _gzip_errors():
            return super().read(size)

    def read1(self, size: int = -1) -> bytes:
        with _gzip_errors():
            return super().read1(size)

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        """Fill ``buffer`` with what one step decodes (``read1``), so that text before a break is handed out.

        Raises:
            CompressedStreamError: The stream breaks; ``text_read`` counts the text handed out before.
        """
        try:
            data = self.read1(len(buffer))
        except CompressedStreamError as exc:
            exc.text_read = self._text_read
            raise
        buffer[: len(data)] = data
        self._text_read += len(data)
        return len(data)

    def close(self) -> None:
        super().close()
        self._source.close()


@contextlib.contextmanager
def _gzip_errors() -> Iterator[None]:
    try:
        yield
    except EOFError as exc:
        raise CompressedStreamError("gzip stream ends before its end marker (truncated)") from exc
    except (zlib.error, gzip.BadGzipFile) as exc:
        raise CompressedStreamError(f"gzip stream is corrupt: {exc}") from exc


class _ZstdRaw(io.RawIOBase):
    """Raw reader over a Zstandard file: every frame in turn; a file ending inside a frame raises."""

    def __init__(self, handle: BinaryIO) -> None:
        self._handle = handle
        self._context = zstandard.ZstdDecompressor()
        self._frame = self._context.decompressobj()
        self._in_frame = False
        self._text = memoryview(b"")
        self._text_read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._text:
            data = self._handle.read(_ZSTD_STEP)
            if not data:
                if self._in_frame:
                    raise CompressedStreamError("zstd stream ends inside a frame (truncated)", self._text_read)
                return 0
            try:
                self._text = memoryview(self._decode(data))
            except CompressedStreamError as exc:
                exc.text_read = self._text_read
                raise
        count = min(len(buffer), len(self._text))
        buffer[:count] = self._text[:count]
        self._text = self._text[count:]
        self._text_read += count
        return count

    def _decode(self, data: bytes) -> bytes:
        pieces = []
        while data:
            if self._frame.eof:
                self._frame = self._context.decompressobj()
            try:
                pieces.append(self._frame.decompress(data))
            except zstandard.ZstdError as exc:
                raise CompressedStreamError(f"zstd stream is corrupt: {exc}") from exc
            self._in_frame = not self._frame.eof
            data = self._frame.unused_data if self._frame.eof else b""
        return b"".join(pieces)

    def close(self) -> None:
        super().close()
        self._handle.close()
