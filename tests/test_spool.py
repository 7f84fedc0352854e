"""``writers/spool.py``: segments appended in order, each handed to the disk once appended."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

from ng_traj.writers import spool
from ng_traj.writers.spool import Spooled, SpooledPayloads, read_payloads, spool_appender, write_payload


def _segments(folder: Path, texts: list[bytes]) -> list[Spooled]:
    paths = [folder / f"{n}.jsonl" for n in range(len(texts))]
    for path, text in zip(paths, texts, strict=True):
        path.write_bytes(text)
    return [Spooled(str(path), len(text)) for path, text in zip(paths, texts, strict=True)]


def test_each_appended_segment_is_handed_to_the_disk_by_its_range(tmp_path, monkeypatch):
    handed: list[tuple[int, int, int]] = []

    def writeback(fd: int):
        return lambda offset, size: handed.append((fd, offset, size))

    monkeypatch.setattr(spool, "_writeback", writeback)
    texts = [b'{"a":1}\n', b'{"b":22}\n{"c":3}\n', b'{"d":4444}\n']
    segments = _segments(tmp_path, texts)
    with open(tmp_path / "out.jsonl", "wb") as handle:
        handle.write(b"head\n")  # written before the appender: ranges start after it
        append = spool_appender(handle)
        for segment in segments:
            append(segment)
        fd = handle.fileno()
    assert (tmp_path / "out.jsonl").read_bytes() == b"head\n" + b"".join(texts)
    assert handed == [(fd, 5, 8), (fd, 13, 17), (fd, 30, 11)]
    assert not any(Path(segment.path).exists() for segment in segments)


def test_a_stream_without_a_descriptor_gets_the_bytes_and_no_writeback(tmp_path, monkeypatch):
    monkeypatch.setattr(spool, "_writeback", lambda fd: pytest.fail("no descriptor to hand over"))
    texts = [b"1\n", b"22\n"]
    buffer = io.BytesIO()
    append = spool_appender(buffer)
    for segment in _segments(tmp_path, texts):
        append(segment)
    assert buffer.getvalue() == b"1\n22\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_writeback_is_offered_for_a_regular_file_only(tmp_path):
    with open(tmp_path / "f", "wb") as handle:
        handle.write(b"x" * 4096)
        handle.flush()
        writeback = spool._writeback(handle.fileno())
        assert writeback is not None and writeback(0, 4096) == 0
    reader, writer = os.pipe()
    try:
        assert spool._writeback(writer) is None
    finally:
        os.close(reader)
        os.close(writer)


def test_payloads_come_back_as_written_and_their_file_goes_when_given_up(tmp_path):
    payloads = [{"rows": [(1, b"x", None, 2.5)]}, b"line\n", None]
    path = tmp_path / "0.pickle"
    with open(path, "wb") as handle:
        for payload in payloads:
            write_payload(handle, payload)
    assert list(read_payloads(SpooledPayloads(str(path), 3))) == payloads
    assert not path.exists()
    with open(path, "wb") as handle:
        for payload in payloads:
            write_payload(handle, payload)
    reading = read_payloads(SpooledPayloads(str(path), 3))
    assert next(reading) == payloads[0]
    reading.close()  # an interrupted build stops reading part-way
    assert not path.exists()


def test_a_spool_folder_a_killed_build_left_is_removed_by_the_next_and_a_running_ones_is_kept(tmp_path, monkeypatch):
    """A build killed with SIGKILL cannot remove its spool folder; the next build removes it. The
    folder of a build still running is locked, and kept, as is one changed in the last minute (a
    build's that may not have locked it yet) and anything not named as ours."""
    import fcntl
    import tempfile
    import time

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    hour_ago = (time.time() - 3600,) * 2
    (tmp_path / "ng-traj-spool-dead1234").mkdir()
    (tmp_path / "ng-traj-spool-dead1234" / "segment").write_bytes(b"x")
    (tmp_path / "ng-traj-spool-new09876").mkdir()  # just made: another build's, perhaps not locked yet
    (tmp_path / "ng-traj-spool-live5678").mkdir()
    (tmp_path / "ng-traj-spool-notours").mkdir()  # not the random part tempfile gives
    for name in ("dead1234", "live5678", "notours"):
        os.utime(tmp_path / f"ng-traj-spool-{name}", hour_ago)
    live = os.open(tmp_path / "ng-traj-spool-live5678", os.O_RDONLY)
    fcntl.flock(live, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        with spool.spool_folder() as folder:
            names = sorted(path.name for path in tmp_path.iterdir())
            kept = ["ng-traj-spool-live5678", "ng-traj-spool-new09876", "ng-traj-spool-notours"]
            assert names == sorted([*kept, os.path.basename(folder)])
    finally:
        os.close(live)
    assert sorted(path.name for path in tmp_path.iterdir()) == kept
