"""Throughput and peak memory of ``ng-traj matrix`` at two input sizes: it streams records, so memory must not grow.

Generates (seeded, deterministic) rollout rows carrying ``ng_trajectory`` by varying the rows of
``fixtures/matrix/rows.jsonl`` over 40 agent names, then runs ``ng-traj matrix --format json`` on
each file in a child process and prints wall time, records per second and the child's peak RSS.

    python bench/matrix_memory.py --sizes-mb 20 200 --workdir /tmp/ng-traj-bench
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import orjson
from child import measure

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "fixtures" / "matrix" / "rows.jsonl"


def generate(path: Path, size_bytes: int, seed: int = 11) -> int:
    """Write at least ``size_bytes`` of rows to ``path``; return the record count."""
    rng = random.Random(seed)
    templates = [orjson.loads(line) for line in TEMPLATES.read_bytes().splitlines()]
    written = count = 0
    with open(path, "wb") as handle:
        while written < size_bytes:
            row = templates[count % len(templates)]
            row["agent_ref"] = {"name": f"agent_{rng.randrange(40)}"}
            row["_ng_task_index"], row["_ng_rollout_index"] = divmod(count, 8)
            trajectory = row["ng_trajectory"]
            trajectory["rollout_id"] = f"{count // 8}-{count % 8}"
            trajectory["task_id"] = str(count // 8)
            for turn in trajectory["turns"]:
                turn["rollout_id"], turn["task_id"] = trajectory["rollout_id"], trajectory["task_id"]
            line = orjson.dumps(row) + b"\n"
            handle.write(line)
            written += len(line)
            count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[20, 200])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ng-traj-bench"))
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"{'size':>10} {'records':>10} {'seconds':>9} {'records/s':>10} {'peak RSS MiB':>13} exit")
    for size in sorted(args.sizes_mb):
        path = args.workdir / f"matrix_rows_{size}mb.jsonl"
        records = generate(path, size << 20)
        seconds, peak, code = measure(*["matrix", "--format", "json", str(path)])
        mb = path.stat().st_size / 1e6
        print(f"{mb:>8.0f}MB {records:>10} {seconds:>9.1f} {records / seconds:>10.0f} {peak:>13.1f} {code:>4}")
        path.unlink()


if __name__ == "__main__":
    main()
