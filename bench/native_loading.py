"""CPU seconds of loading native sessions (pi, OpenClaw), apart from a build, best of several passes.

Discovers the corpus, indexes each reader's files once (as planning does), then loads every unit
``--passes`` times in one process, each reader timed with ``time.process_time``. A build of the
bench corpora loads the pi sessions but not the OpenClaw ones (the rows carry OpenClaw's bundles),
so this is where OpenClaw loading is measured. ``--digest`` prints one digest of everything loaded
(the bundles' JSON, the native calls with their times and transcript calls, and the diagnostics), for
comparing two trees' results (run this script with either tree on ``PYTHONPATH``).

    python bench/native_loading.py /tmp/ngb/corpus_500mb_c16_s7 --passes 3 [--digest]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import time
from pathlib import Path
from typing import Any

import orjson

from ng_traj.assemble.inputs import discover
from ng_traj.diagnostics import Diagnostic, DiagnosticSink
from ng_traj.io.files import resolved_folders
from ng_traj.sources.native import index_units, load_unit


def _timestamp_and_transcript(call: Any) -> tuple[float | None, Any]:
    """What consumers read of a native call: its time for the turns' order (asked first, before the
    transcript call is made) and its transcript call; a tree before ``NativeCall.transcript`` and
    ``timestamp`` existed gives the same from ``transcript_call``, so digests of both compare."""
    if hasattr(call, "transcript"):
        return call.timestamp(), call.transcript()
    transcript = call.transcript_call
    return ((transcript.started_at or transcript.completed_at) if transcript is not None else None), transcript


def _digest_of(observations: object, held: list[Diagnostic], digest: hashlib._Hash) -> None:
    if observations is None:
        digest.update(b"none")
    else:
        digest.update(observations.bundle.model_dump_json().encode())
        for call in observations.calls:
            timestamp, transcript = _timestamp_and_transcript(call)
            dumped = transcript.model_dump_json() if transcript is not None else ""
            fields = [call.invocation_id, call.response_id, sorted(call.tool_call_ids), call.label, dumped]
            fields.append(repr(timestamp))
            digest.update(orjson.dumps(fields))
            if transcript is not None:
                digest.update(repr([type(v).__name__ for v in transcript.model_dump().values()]).encode())
    for diagnostic in held:
        digest.update(repr(diagnostic).encode())
    held.clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--readers", nargs="+", default=["pi", "openclaw"])
    parser.add_argument("--digest", action="store_true")
    args = parser.parse_args()
    held: list[Diagnostic] = []
    sink = DiagnosticSink(held.append)
    with resolved_folders():
        inputs = discover([args.corpus], sink)
        units = {name: index_units(name, inputs.native.get(name, []), sink) for name in args.readers}
    held.clear()
    gc.freeze()
    for name, of_reader in units.items():
        best = None
        for _ in range(args.passes):
            digest = hashlib.blake2b(digest_size=16)
            start = time.process_time()
            for unit in of_reader:
                observations = load_unit(unit, sink)
                if args.digest:
                    _digest_of(observations, held, digest)
            seconds = time.process_time() - start
            best = seconds if best is None else min(best, seconds)
        line = f"{name:10} {len(of_reader):6} units  load {best:.3f} s CPU (best of {args.passes})"
        print(line + (f"  digest {digest.hexdigest()}" if args.digest else ""))


if __name__ == "__main__":
    main()
