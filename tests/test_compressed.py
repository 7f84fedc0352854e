"""gzip and Zstandard inputs: read by their magic bytes, named without their suffix, re-read by offset,
and a stream cut short or corrupt reported at the line it reached with the lines before it kept."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import zlib
from pathlib import Path

import pytest
import zstandard

from conftest import FIXTURES, run_cli, shared_dir
from ng_traj.diagnostics import DiagnosticSink
from ng_traj.io import spans
from ng_traj.io.compression import logical_name
from ng_traj.io.lines import iter_json_lines, read_json_objects

KINDS = {
    "gzip": (".gz", lambda data: gzip.compress(data, mtime=0)),
    "zstd": (".zst", lambda data: zstandard.ZstdCompressor().compress(data)),
}


def _compress_tree(source: Path, target: Path, kind: str) -> Path:
    """A copy of ``source`` with every ``*.jsonl`` file replaced by its compressed ``*.jsonl<suffix>``."""
    suffix, compress = KINDS[kind]
    shutil.copytree(source, target)
    for path in sorted(target.rglob("*.jsonl")):
        path.with_name(path.name + suffix).write_bytes(compress(path.read_bytes()))
        path.unlink()
    return target


def _build(*args: object) -> tuple[bytes, str]:
    out = Path(str(args[-1]))
    result = run_cli("build", *args[:-1], "-o", out)
    assert result.exit_code == 0, result.stderr
    return out.read_bytes(), result.stderr


FIXTURE_INPUTS = [
    "build/retained_run/input",
    "build/legacy_attachments/input",
    "native_e2e",
    "hermes/sharegpt/input",
    "openclaw/pinchbench",
    "openclaw/tree",
    "openclaw/archive_and_missing",
    "hermes/forms/input",
    "judge/attachments/input",
    "judge/stores/input",
    "pi",
]


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("fixture", FIXTURE_INPUTS)
@pytest.mark.parametrize("flags", [(), ("--attach", "--jobs", "2")], ids=["records", "attach-jobs2"])
def test_compressed_fixtures_build_what_the_plain_ones_do(tmp_path, fixture, kind, flags):
    plain = tmp_path / "plain"
    shutil.copytree(FIXTURES / fixture, plain)
    packed = _compress_tree(FIXTURES / fixture, tmp_path / "packed", kind)
    expected, _ = _build(plain, *flags, tmp_path / "plain.jsonl")
    produced, stderr = _build(packed, *flags, tmp_path / "packed.jsonl")
    assert _details_as_plain(produced, KINDS[kind][0]) == expected
    assert "compressed_stream_invalid" not in stderr


def _details_as_plain(output: bytes, suffix: str) -> bytes:
    """``output`` with the compression suffix dropped from file names inside gap details, the one
    place a trajectory names a file as it is on disk (``3-0.capture.jsonl.zst``, ``x.jsonl.gz:5``)."""
    return re.sub(rb'"detail":"[^"]*"', lambda m: m.group(0).replace(b".jsonl" + suffix.encode(), b".jsonl"), output)


def test_retained_run_diagnostics_name_the_compressed_files(tmp_path):
    packed = _compress_tree(FIXTURES / "build/retained_run/input", tmp_path / "packed", "zstd")
    _, stderr = _build(packed, tmp_path / "out.jsonl")
    assert f"{packed}/rollouts.jsonl.zst:7: error[invalid_json]" in stderr
    assert f"{packed}/capture/1-1.capture.jsonl.zst:2: error[invalid_json]" in stderr


def _pad(index: int) -> str:
    """Text that compresses little, so that a cut stream has whole blocks before the cut."""
    return hashlib.sha256(str(index).encode()).hexdigest() * 4


def _rows(count: int, order: range | None = None) -> bytes:
    return b"".join(
        json.dumps({"_ng_task_index": i, "_ng_rollout_index": 0, "response": {"output": []}, "pad": _pad(i)}).encode()
        + b"\n"
        for i in (order or range(count))
    )


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_truncated_stream_keeps_the_lines_before_it(tmp_path, kind):
    suffix, compress = KINDS[kind]
    data = compress(_rows(2000))
    path = tmp_path / f"rollouts.jsonl{suffix}"
    path.write_bytes(data[: len(data) // 2])
    found = []
    lines = list(read_json_objects(path, DiagnosticSink(found.append)))
    (problem,) = found
    assert problem.code == "compressed_stream_invalid" and problem.severity == "error"
    assert problem.path == str(path) and problem.line == len(lines) + 1
    assert "truncated" in problem.message and f"at line {len(lines) + 1}" in problem.message
    assert 0 < len(lines) < 2000
    assert [line.value["_ng_task_index"] for line in lines] == list(range(len(lines)))
    assert problem.offset == sum(line.size for line in lines)
    decodable = _decodable(kind, data[: len(data) // 2])
    assert len(lines) == decodable.count(b"\n")  # every whole line the cut stream still holds


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize(("first", "kept"), [(200, 0.75), (300_000, 0.25)])
def test_a_truncated_stream_says_how_much_text_it_decoded(tmp_path, kind, first, kept):
    """The message counts all the text decoded, the start of the line the stream broke in included
    (a stream broken inside a long line said 0 bytes, or only the whole lines' bytes)."""
    suffix, compress = KINDS[kind]
    text = b"".join(
        json.dumps({"n": n, "pad": "".join(_digest(f"{n}.{i}") for i in range(size // 64))}).encode() + b"\n"
        for n, size in enumerate([first, 300, 300, 300_000, 300])
    )
    data = compress(text)
    cut = data[: int(len(data) * kept)]
    path = tmp_path / f"rows.jsonl{suffix}"
    path.write_bytes(cut)
    *whole, last = iter_json_lines(path)
    decoded = len(_decodable(kind, cut))
    assert last.problem.code == "compressed_stream_invalid"
    assert last.line == len(whole) + 1 and last.offset == sum(line.size for line in whole)
    assert decoded > last.offset  # the cut is inside a line
    assert f"at line {len(whole) + 1}, {decoded} bytes of text in;" in last.problem.message


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _decodable(kind: str, data: bytes) -> bytes:
    """All the text a cut stream decodes to, by the decoders' own one-shot objects."""
    if kind == "gzip":
        return zlib.decompressobj(wbits=31).decompress(data)
    return zstandard.ZstdDecompressor().decompressobj().decompress(data)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_truncated_rollouts_file_builds_its_whole_rows(tmp_path, kind):
    suffix, compress = KINDS[kind]
    data = compress(_rows(2000, range(1999, -1, -1)))  # output order is the reverse: rows are re-read backwards
    path = tmp_path / f"rollouts.jsonl{suffix}"
    path.write_bytes(data[: len(data) * 2 // 3])
    out = tmp_path / "out.jsonl"
    result = run_cli("build", path, "-o", out, "--attach", "--jobs", "2")
    assert result.exit_code == 0, result.stderr
    built = [json.loads(line) for line in out.read_text().splitlines()]
    reached = len(built) + 1
    assert f"{path}:{reached}: error[compressed_stream_invalid]" in result.stderr
    assert "1 line skipped" in result.stderr  # the line the stream broke in
    assert 0 < len(built) < 2000
    assert [row["_ng_task_index"] for row in built] == list(range(2000 - len(built), 2000))
    assert all(row["pad"] == _pad(row["_ng_task_index"]) for row in built)
    assert "Traceback" not in result.stderr


def test_a_corrupt_gzip_stream_is_reported(tmp_path):
    data = bytearray(gzip.compress(_rows(200), mtime=0))
    data[len(data) // 2 : len(data) // 2 + 64] = b"\xff" * 64
    path = tmp_path / "rows.jsonl.gz"
    path.write_bytes(bytes(data))
    lines = list(iter_json_lines(path))
    assert lines[-1].problem.code == "compressed_stream_invalid"
    assert "gzip stream is corrupt" in lines[-1].problem.message
    assert lines[0].value["_ng_task_index"] == 0 and len(lines) > 50  # what decoded before the damage


def test_a_corrupt_zstd_stream_is_reported(tmp_path):
    data = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(_rows(200)))  # as the zstd tool writes
    data[len(data) // 2 : len(data) // 2 + 64] = b"\xff" * 64
    path = tmp_path / "rows.jsonl.zst"
    path.write_bytes(bytes(data))
    (*_, last) = iter_json_lines(path)
    assert last.problem.code == "compressed_stream_invalid" and "zstd stream" in last.problem.message


def test_several_members_and_frames_are_read_one_after_another(tmp_path):
    first, second = _rows(3), _rows(5)[len(_rows(3)) :]
    gz, zst = tmp_path / "a.jsonl.gz", tmp_path / "a.jsonl.zst"
    gz.write_bytes(gzip.compress(first) + gzip.compress(second))
    compressor = zstandard.ZstdCompressor()
    zst.write_bytes(compressor.compress(first) + compressor.compress(second))
    for path in (gz, zst):
        lines = list(iter_json_lines(path))
        assert [line.value["_ng_task_index"] for line in lines] == [0, 1, 2, 3, 4]
        assert all(line.problem is None for line in lines)


def test_compression_is_told_by_magic_bytes_not_by_name(tmp_path):
    plain_named_gz = tmp_path / "a" / "rollouts.jsonl.gz"
    gz_named_plain = tmp_path / "b" / "rollouts.jsonl"
    plain_named_gz.parent.mkdir()
    gz_named_plain.parent.mkdir()
    plain_named_gz.write_bytes(_rows(2))
    gz_named_plain.write_bytes(gzip.compress(_rows(2)))
    first, _ = _build(plain_named_gz, tmp_path / "1.jsonl")
    second, _ = _build(gz_named_plain, tmp_path / "2.jsonl")
    assert first == second and first.count(b"\n") == 2


def test_names_lose_their_compression_suffix_for_detection():
    assert logical_name("0-1.capture.jsonl.zst") == "0-1.capture.jsonl"
    assert logical_name("rollouts_failures.jsonl.gz") == "rollouts_failures.jsonl"
    assert logical_name("x.jsonl.zstd") == "x.jsonl"
    assert logical_name(".gz") == ".gz" and logical_name("state.db") == "state.db"


def test_a_failures_sidecar_and_rows_without_identity_survive_compression(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    main = {"_ng_task_index": 0, "_ng_rollout_index": 0, "response": {"output": []}}
    failed = {"_ng_task_index": 0, "_ng_rollout_index": 0, "_ng_attempt_index": 1, "_ng_failure_class": "x"}
    anonymous = {"response": {"output": []}}
    (run / "rollouts.jsonl.gz").write_bytes(
        gzip.compress((json.dumps(main) + "\n" + json.dumps(anonymous) + "\n").encode())
    )
    (run / "rollouts_failures.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(json.dumps(failed).encode()))
    produced, stderr = _build(run, tmp_path / "out.jsonl")
    ids = [json.loads(line)["rollout_id"] for line in produced.splitlines()]
    assert ids == ["0-0", "0-0-a1", "rollouts.jsonl:2"]
    assert "input_unclaimed" not in stderr


def test_rows_are_re_read_from_a_copy_made_on_first_use(tmp_path):
    data = _rows(50)
    path = tmp_path / "r.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(data))
    lines = list(iter_json_lines(path))
    spans._copies.pop(str(path), None)
    for line in reversed(lines):
        assert spans.read_span(path, line.offset, line.size) == data[line.offset : line.offset + line.size]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_validate_matrix_and_convert_read_compressed_trajectories(tmp_path, kind):
    suffix, compress = KINDS[kind]
    source = FIXTURES / "build/retained_run/expected.jsonl"
    packed = tmp_path / f"trajectories.jsonl{suffix}"
    packed.write_bytes(compress(source.read_bytes()))
    plain_validate, packed_validate = run_cli("validate", source, "--json"), run_cli("validate", packed, "--json")
    assert packed_validate.exit_code == plain_validate.exit_code == 0
    assert packed_validate.stdout == plain_validate.stdout.replace(str(source), str(packed))
    assert run_cli("matrix", packed).stdout == run_cli("matrix", source).stdout
    assert run_cli("convert", packed, "-o", tmp_path / "ds.parquet").exit_code == 0
    assert run_cli("convert", tmp_path / "ds.parquet", "-o", tmp_path / "back.jsonl").exit_code == 0
    assert (tmp_path / "back.jsonl").read_bytes() == source.read_bytes()


def test_validate_reports_a_truncated_stream(tmp_path):
    data = gzip.compress((FIXTURES / "build/retained_run/expected.jsonl").read_bytes())
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    result = run_cli("validate", path)
    assert result.exit_code == 1
    assert f"{path}:" in result.stderr and "error[compressed_stream_invalid]" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("sample", ["gym-examples", "producer-samples"])
def test_real_samples_build_the_same_compressed(tmp_path, sample, kind):
    source = shared_dir(sample)
    plain = tmp_path / "plain"
    shutil.copytree(source, plain)
    packed = _compress_tree(source, tmp_path / "packed", kind)
    plain_result = run_cli("build", plain, "-o", tmp_path / "plain.jsonl")
    packed_result = run_cli("build", packed, "-o", tmp_path / "packed.jsonl")
    assert packed_result.exit_code == plain_result.exit_code
    assert (tmp_path / "packed.jsonl").read_bytes() == (tmp_path / "plain.jsonl").read_bytes()
    suffix = KINDS[kind][0]

    def said(stderr: str, folder: Path, out: str) -> str:
        return (
            stderr.replace(str(tmp_path / out), "OUT").replace(str(folder), "IN").replace(".jsonl" + suffix, ".jsonl")
        )

    assert said(packed_result.stderr, packed, "packed.jsonl") == said(plain_result.stderr, plain, "plain.jsonl")


def test_a_build_removes_the_text_copies_it_made(tmp_path):
    path = tmp_path / "rollouts.jsonl.gz"
    path.write_bytes(gzip.compress(_rows(3, range(2, -1, -1))))
    spans.read_span(path, 0, 1)  # the copies folder exists, with this file's copy made outside a build
    folder = Path(spans._folder[0].name)
    spans._copies.pop(str(path))
    before = sorted(folder.iterdir())
    produced, _ = _build(path, "--attach", tmp_path / "out.jsonl")
    assert produced.count(b"\n") == 3
    assert str(path) not in spans._copies and sorted(folder.iterdir()) == before


def test_a_stream_broken_before_its_first_line_is_said_to_be(tmp_path):
    data = gzip.compress(_rows(1))
    path = tmp_path / "rollouts.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    result = run_cli("build", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 1
    assert f"{path}:1: error[compressed_stream_invalid]: gzip stream ends before its end marker" in result.stderr
    assert f"{path}: error[input_unclaimed]: no line is JSON" in result.stderr


def test_spans_of_files_read_in_turn_come_from_their_own_files(tmp_path):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_bytes(b"\xef\xbb\xbf" + b'{"a": 1}\n{"a": 2}\n')
    second.write_bytes(b'{"b": 1}\n')
    with spans.text_copies():
        assert spans.read_span(first, 0, 12) == b'{"a": 1}\n'  # the byte-order mark left out, as read
        assert spans.read_span(second, 0, 9) == b'{"b": 1}\n'
        assert spans.read_span(first, 12, 9) == b'{"a": 2}\n'
        assert spans.read_span(first, 0, 12) == b'{"a": 1}\n'
        assert [path for path, _ in spans._kept] == [str(first)]
    assert not spans._kept, "the descriptor kept for re-reading is closed when the build ends"
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        spans.read_span(fifo, 0, 1)
