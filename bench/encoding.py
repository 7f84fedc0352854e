"""CPU seconds of encoding each trajectory of a corpus to its JSONL line, against orjson's floor for the same values.

Plans the corpus and assembles every slot once, as a one-job build does. Each trajectory is then
encoded three ways right after it is built, with ``time.process_time`` summed over the corpus:

* ``record_json``: the build's own encoding, first, as a build does it (the payloads parsed a
  moment before, most of them no longer in the processor's caches);
* ``plain``: ``orjson.dumps`` of the same values as plain JSON (the line parsed again, outside the
  timing): what orjson itself costs for these bytes, without the contract models' ``default`` calls;
* ``record_json again``: the build's encoding a second time, the values now warm in the caches.

Every line is checked to be the same bytes as ``plain``'s. Compare ``record_json`` with ``plain`` for
what the models cost, and with ``record_json again`` for what reading the values from memory costs.

    python bench/encoding.py /tmp/ngb/corpus_500mb_c16_s7 [--no-payloads]
"""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path

import orjson

from ng_traj.assemble.build import BuildOptions, assemble_slot
from ng_traj.assemble.pipeline import prepare
from ng_traj.diagnostics import DiagnosticSink
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES
from ng_traj.writers.jsonl import record_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--no-payloads", action="store_true")
    args = parser.parse_args()
    inputs, slots, _ = prepare([args.corpus], DiagnosticSink(), max_line_bytes=DEFAULT_MAX_LINE_BYTES)
    options = BuildOptions(capture_enabled=inputs.capture_enabled, payloads=not args.no_payloads)
    seconds = {"record_json": 0.0, "plain": 0.0, "record_json again": 0.0}
    size = 0
    gc.freeze()
    for slot in slots:
        record = assemble_slot(slot, options, DiagnosticSink()).record
        start = time.process_time()
        line = record_json(record, newline=True)
        seconds["record_json"] += time.process_time() - start
        plain = orjson.loads(line)
        start = time.process_time()
        floor = orjson.dumps(plain, option=orjson.OPT_APPEND_NEWLINE)
        seconds["plain"] += time.process_time() - start
        start = time.process_time()
        again = record_json(record, newline=True)
        seconds["record_json again"] += time.process_time() - start
        if not line == floor == again:
            raise SystemExit(f"rollout {slot.identity.rollout_id}: the encodings differ")
        size += len(line)
    print(f"{len(slots)} trajectories, {size / 1e6:.1f} MB of JSONL")
    for name, value in seconds.items():
        print(f"{name:20s} {value:7.3f} s {size / 1e6 / value:8.1f} MB/s")


if __name__ == "__main__":
    main()
