"""Peak memory of ``ng-traj validate`` at two file sizes: streaming means it must not grow with the file.

Generates (seeded, deterministic) ng_trajectory JSONL files of the requested sizes by varying the
golden retained-run trajectories, then runs ``ng-traj validate`` on each in a child process and
prints its wall time and peak RSS (``ru_maxrss`` of the child).

    python bench/validate_memory.py --sizes-mb 100 1000 --workdir /tmp/ng-traj-bench
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import orjson
from child import measure

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "fixtures" / "build" / "retained_run" / "expected.jsonl"


def generate(path: Path, size_bytes: int, seed: int = 7) -> int:
    """Write at least ``size_bytes`` of valid trajectories to ``path``; return the record count."""
    rng = random.Random(seed)
    templates = [orjson.loads(line) for line in TEMPLATES.read_bytes().splitlines()]
    written = count = 0
    with open(path, "wb") as handle:
        while written < size_bytes:
            record = templates[count % len(templates)]
            record["rollout_id"] = f"{count // 8}-{count % 8}"
            for turn in record["turns"]:
                turn["rollout_id"] = record["rollout_id"]
            for call in record["model_calls"]:
                call["model_call_id"] = f"{rng.getrandbits(128):032x}"
            line = orjson.dumps(record) + b"\n"
            handle.write(line)
            written += len(line)
            count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ng-traj-bench"))
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"{'size':>10} {'records':>10} {'seconds':>9} {'MB/s':>8} {'peak RSS MiB':>13} exit")
    for size in sorted(args.sizes_mb):
        path = args.workdir / f"trajectories_{size}mb.jsonl"
        records = generate(path, size << 20)
        seconds, peak, code = measure(*["validate", "--json", str(path)])
        mb = path.stat().st_size / 1e6
        print(f"{mb:>8.0f}MB {records:>10} {seconds:>9.1f} {mb / seconds:>8.1f} {peak:>13.1f} {code:>4}")
        path.unlink()


if __name__ == "__main__":
    main()
