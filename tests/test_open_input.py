"""Opening an input: a file smaller than the read buffer is read whole at once, a larger one (or one
that grew past its size while being read) through a buffered file; both give the same text, compressed
or not, and a short read loses nothing."""

from __future__ import annotations

import gzip
import io
import json
import os
from pathlib import Path

import pytest
import zstandard

from ng_traj.io import compression
from ng_traj.io.compression import open_input
from ng_traj.io.lines import iter_json_lines

TEXT = b"".join(b'{"n": %d, "pad": "%s"}\n' % (n, b"x" * n) for n in range(200))
COMPRESS = {"plain": lambda data: data, "gzip": lambda data: gzip.compress(data, mtime=0)}
COMPRESS["zstd"] = lambda data: zstandard.ZstdCompressor().compress(data)


@pytest.mark.parametrize("kind", list(COMPRESS))
@pytest.mark.parametrize("buffering", [1 << 20, 64])  # read whole at once; through a buffered file
def test_small_and_large_files_give_the_same_text(tmp_path: Path, kind: str, buffering: int):
    path = tmp_path / "in.jsonl"
    path.write_bytes(COMPRESS[kind](TEXT))
    with open_input(path, buffering) as handle:
        assert isinstance(handle, io.BytesIO) == (kind == "plain" and buffering > len(TEXT))
        assert handle.readline(10) + handle.read() == TEXT
    with open_input(path, buffering) as handle:
        assert list(handle) == TEXT.splitlines(keepends=True)


def test_lines_are_the_same_read_whole_or_buffered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "in.jsonl"
    path.write_bytes(TEXT + b"\n  \n{bad\n" + TEXT[:20])  # a blank line, a bad line, a cut last line
    whole = [(line.line, line.offset, line.size, line.value, line.problem) for line in iter_json_lines(path)]
    monkeypatch.setattr("ng_traj.io.lines.READ_BUFFER", 16)
    buffered = [(line.line, line.offset, line.size, line.value, line.problem) for line in iter_json_lines(path)]
    assert whole == buffered and len(whole) == 202


def test_an_empty_file_is_read_as_empty(tmp_path: Path):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    with open_input(path, 1 << 20) as handle:
        assert handle.read() == b""


def test_short_reads_lose_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A read that returns less than asked (a network file system may) is followed by more reads."""
    path = tmp_path / "in.jsonl"
    path.write_bytes(TEXT)
    read = os.read
    monkeypatch.setattr(compression.os, "read", lambda descriptor, size: read(descriptor, min(size, 7)))
    with open_input(path, 1 << 20) as handle:
        assert handle.read() == TEXT


def test_a_file_grown_past_its_size_is_read_through_a_buffered_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Every byte is read, from the start, when the file holds more than its size said."""
    path = tmp_path / "in.jsonl"
    path.write_bytes(TEXT)
    descriptor = os.open(path, os.O_RDONLY)
    try:
        assert compression._whole(descriptor, 10) is None
        assert os.lseek(descriptor, 0, os.SEEK_CUR) == 0
        assert compression._whole(descriptor, len(TEXT)) == TEXT
    finally:
        os.close(descriptor)
    real = compression.open_sized
    # as if the file had grown since its fstat
    monkeypatch.setattr(compression, "open_sized", lambda name: (real(name)[0], len(TEXT) // 2))
    with open_input(path, 1 << 20) as handle:
        assert not isinstance(handle, io.BytesIO) and handle.read() == TEXT


def test_what_is_not_a_regular_file_is_refused(tmp_path: Path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        open_input(fifo, 1 << 20)
    with pytest.raises(OSError):
        open_input(tmp_path, 1 << 20)


@pytest.mark.parametrize("kind", list(COMPRESS))
def test_sniffing_a_json_file_reads_what_it_holds_not_the_bound(tmp_path: Path, kind: str):
    """A .json file was sniffed with read(64 MiB + 1), which allocates 64 MiB before reading; the
    verdicts are the same read in steps."""
    import tracemalloc

    from ng_traj.sources import sniff

    value = {"sessions": [{"id": n, "pad": "y" * 500} for n in range(4000)]}  # 2 MB of JSON
    path = tmp_path / "store.json"
    path.write_bytes(COMPRESS[kind](b"\xef\xbb\xbf " + json.dumps(value).encode() + b"\n\n"))
    assert sniff.first_record(path) == value
    decode = sniff._value
    sniff._value = len  # the reading alone is measured (the decoder allocates what it allocates)
    tracemalloc.start()
    try:
        size = sniff.first_record(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        sniff._value = decode
    assert size == len(json.dumps(value))
    assert peak < 16 << 20  # the text and its pieces: a few times 2 MB, never 64 MiB
    cut = tmp_path / "cut.json"
    cut.write_bytes(COMPRESS[kind](json.dumps(value).encode()[:-1]))
    assert sniff.first_record(cut) is None


def test_a_json_file_past_the_sniffing_bound_is_not_sniffed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from ng_traj.sources import sniff

    monkeypatch.setattr(sniff, "SNIFF_JSON_BYTES", 10)
    monkeypatch.setattr(sniff, "_JSON_STEP", 3)  # the bound met across steps
    (tmp_path / "fits.json").write_bytes(b'  {"a": 12}\n\n\n')  # 10 bytes once stripped
    (tmp_path / "over.json").write_bytes(b'{"a": 123}  ')
    (tmp_path / "long.json").write_bytes(b'{"a": 1234}')
    assert sniff.first_record(tmp_path / "fits.json") == {"a": 12}
    assert sniff.first_record(tmp_path / "over.json") == {"a": 123}  # 11 bytes read, 10 once stripped
    assert sniff.first_record(tmp_path / "long.json") is None
