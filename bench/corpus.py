"""A seeded generator of realistic retained NeMo Gym runs, at any size (rollouts x calls).

    python bench/corpus.py OUT --rollouts 1000 --calls 16 [--seed 7]
    python bench/corpus.py OUT --size-mb 2048 --calls 16

What one run leaves behind:

* ``rollouts.jsonl`` and the ``rollouts_failures.jsonl`` sidecar: one row per rollout with its task
  (``responses_create_params``), the agent's Responses-API ``response`` (the whole output sequence),
  reward, identity keys, ``agent_ref`` and ``judge_evaluations``; the OpenClaw-style agent's rows
  carry an ``ng_agent_observations`` bundle (invocation with conversation and refs, tool
  observations, a context compaction in long rollouts).
* ``capture/policy/`` and ``capture/judge/``: one ``<rollout_id>.capture.jsonl`` per rollout and
  store. Each policy call's request holds the whole history so far, so request payloads grow with
  the conversation; the three agents speak the three dialects (``responses``, ``chat``,
  ``messages``), every other rollout streamed (SSE text in ``response_raw`` beside the reassembled
  ``response``, as the middleware records it), now and then a stream cut off mid-way
  (``response: null``, ``error_category: exception``). The judge store holds one judge call per
  rollout.
* ``sessions/pi/<rollout_id>/`` (pi v3 session files) and ``sessions/openclaw/<rollout_id>/agents/
  main/sessions/`` (OpenClaw transcripts and ``sessions.json``) for the pi and OpenClaw agents.
* Defects at fixed rates: a corrupt capture line, an incomplete marker, a killed attempt whose
  capture file has no row (the retried row has ``_ng_attempt_index: 1``), failed rows in the sidecar.

Identical arguments give identical bytes.
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import rows
from dialects import DIALECTS, Conversation, Step, Usage
from rows import POLICY, Rollout, hex_id
from sessions import session_lines, write_session

AGENTS = (
    ("simple_agent", "responses", "policy-large"),
    ("openclaw_agent", "chat", "glm-5"),
    ("pi_agent", "messages", "claude-sonnet-4-5"),
)
# fmt: off
WORDS = [
    "the", "file", "config", "value", "test", "error", "build", "output", "result", "function", "module", "path",
    "request", "server", "model", "token", "cache", "stream", "agent", "tool", "call", "shell", "read", "write",
    "patch", "diff", "line", "column", "index", "table", "row", "json", "parse", "check", "run", "fix", "update",
    "return", "list", "dict", "string", "number", "empty", "null", "missing", "found", "expected", "actual",
    "assert", "import", "class", "method", "field", "type", "schema", "version", "commit", "branch", "merge",
    "status", "log", "warning", "trace",
]
# fmt: on
ROLLOUTS_PER_TASK = 4


@dataclass
class Totals:
    """What was generated."""

    rollouts: int = 0
    calls: int = 0
    bytes: int = 0


class Text:
    """Deterministic filler text: a pool of sentences picked by a seeded generator."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.pool = [" ".join(rng.choices(WORDS, k=rng.randint(6, 18))).capitalize() + "." for _ in range(2000)]

    def __call__(self, chars: int) -> str:
        parts: list[str] = []
        size = 0
        while size < chars:
            sentence = self.pool[self.rng.randrange(len(self.pool))]
            parts.append(sentence)
            size += len(sentence) + 1
        return " ".join(parts)


def _steps(rng: random.Random, text: Text, calls: int, prefix: str) -> list[Step]:
    steps = []
    for index in range(calls):
        call_id = f"call_{hex_id(rng, 64)}" if prefix != "msg_" else f"toolu_{hex_id(rng, 64)}"
        reasoning = text(rng.randint(80, 600)) if rng.random() < 0.6 else None
        response_id = f"{prefix}{hex_id(rng, 96)}"
        if index == calls - 1:
            steps.append(Step(response_id, reasoning, text(rng.randint(200, 1500)), None))
            continue
        name = rng.choice(("exec", "read", "write"))
        arguments = {"command": text(60)} if name == "exec" else {"path": f"src/{rng.choice(WORDS)}.py"}
        result = text(int(rng.lognormvariate(7.0, 1.0)) + 100)
        steps.append(Step(response_id, reasoning, None, (call_id, name, arguments), result))
    return steps


def _capture_line(rollout: Rollout, k: int, rng: random.Random, usage: Usage, timing: tuple[float, float]) -> dict:
    request_of, response_of, sse_of = DIALECTS[rollout.agent[1]]
    step = rollout.conv.steps[k]
    history = Conversation(rollout.conv.model, rollout.conv.system, rollout.conv.task, rollout.conv.steps[:k])
    request = request_of(history, rollout.stream)
    response = response_of(rollout.conv, step, usage, int(timing[1]))
    started, completed = timing
    line: dict[str, Any] = {
        "model_call_id": hex_id(rng),
        "dialect": rollout.agent[1],
        "model_ref": POLICY,
        "started_at": started,
        "completed_at": completed,
        "latency_ms": round((completed - started) * 1000, 2),
        "latency_ttft_ms": round(rng.uniform(80, 400), 2),
        "status_code": 200,
        "error_category": None,
        "request": request,
        "response": response,
    }
    if rollout.stream:
        text = step.text or ""
        pieces = [text[i : i + 40] for i in range(0, len(text), 40)]
        line["response_raw"] = sse_of(response, pieces)
        if rng.random() < 0.01:
            line["response_raw"] = line["response_raw"][: len(line["response_raw"]) // 2]
            line.update(response=None, error_category="exception")
    return line


def _usage(request_bytes: int, step: Step, previous: int) -> Usage:
    prompt = request_bytes // 4
    completion = (len(step.text or "") + len(str(step.tool or "")) + len(step.reasoning or "")) // 4 + 5
    return Usage(prompt, completion, min(previous, prompt), len(step.reasoning or "") // 4)


class Writer:
    """Writes the corpus files under one folder, counting bytes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.totals = Totals()
        for store in ("policy", "judge"):
            (root / "capture" / store).mkdir(parents=True, exist_ok=True)
        self.rows = open(root / "rollouts.jsonl", "wb")  # noqa: SIM115
        self.failures = open(root / "rollouts_failures.jsonl", "wb")  # noqa: SIM115

    def lines(self, path: Path, lines: list[bytes]) -> None:
        data = b"".join(lines)
        path.write_bytes(data)
        self.totals.bytes += len(data)

    def row(self, row: dict[str, Any], failed: bool) -> None:
        data = orjson.dumps(row) + b"\n"
        (self.failures if failed else self.rows).write(data)
        self.totals.bytes += len(data)

    def close(self) -> None:
        self.rows.close()
        self.failures.close()


def _rollout(number: int, calls: int, rng: random.Random, text: Text) -> Rollout:
    agent = AGENTS[number % len(AGENTS)]
    prefix = {"responses": "resp_", "chat": "chatcmpl-", "messages": "msg_"}[agent[1]]
    count = max(2, rng.randint(calls // 2, calls * 3 // 2))
    conv = Conversation(agent[2], "You are a coding agent. " + text(3000), text(400), [])
    conv.steps = _steps(rng, text, count, prefix)
    task, index = divmod(number, ROLLOUTS_PER_TASK)
    attempt = 1 if number % 300 == 299 else 0
    return Rollout(task, index, agent, number % 2 == 1, conv, 1786000000.0 + number * 90.0, attempt)


def write_rollout(writer: Writer, number: int, calls: int, rng: random.Random, text: Text) -> None:
    """Generate one rollout and write its row, capture lines and native session."""
    rollout = _rollout(number, calls, rng, text)
    timings, usages, lines = [], [], []
    clock, previous = rollout.start, 0
    for k, step in enumerate(rollout.conv.steps):
        request_bytes = len(
            orjson.dumps(
                DIALECTS[rollout.agent[1]][0](
                    Conversation(rollout.conv.model, rollout.conv.system, rollout.conv.task, rollout.conv.steps[:k]),
                    rollout.stream,
                )
            )
        )
        usage = _usage(request_bytes, step, previous)
        previous = usage.prompt
        timing = (clock, clock + rng.uniform(0.8, 3.0))
        clock = timing[1] + rng.uniform(0.3, 2.0)
        timings.append(timing)
        usages.append(usage)
        lines.append(orjson.dumps(_capture_line(rollout, k, rng, usage, timing)) + b"\n")
    if number % 250 == 125:
        lines.insert(len(lines) // 2, b'{"model_call_id": "' + hex_id(rng).encode() + b'", "dialect": "chat", "requ\n')
    policy = writer.root / "capture" / "policy"
    writer.lines(policy / f"{rollout.rollout_id}.capture.jsonl", lines)
    if number % 400 == 200:
        (policy / f"{rollout.rollout_id}.capture.incomplete").touch()
    if rollout.attempt:
        killed = f"{rollout.task}-{rollout.index}"
        writer.lines(policy / f"{killed}.capture.jsonl", lines[: len(lines) // 2])
    judge_line, judge = rows.judge(rollout, rng, clock)
    writer.lines(
        writer.root / "capture" / "judge" / f"{rollout.rollout_id}.capture.jsonl", [orjson.dumps(judge_line) + b"\n"]
    )
    name = rollout.agent[0]
    bundle = rows.bundle(rollout, timings, usages) if name == "openclaw_agent" else None
    writer.row(rows.row(rollout, judge, number % 50 == 49, bundle), number % 50 == 49)
    if name in ("openclaw_agent", "pi_agent"):
        openclaw = name == "openclaw_agent"
        session_id, session = session_lines(rollout.conv, timings, usages, rng, openclaw=openclaw)
        folder = writer.root / "sessions" / ("openclaw" if openclaw else "pi") / rollout.rollout_id
        writer.totals.bytes += write_session(folder, session_id, session, openclaw=openclaw, at=clock)
    writer.totals.rollouts += 1
    writer.totals.calls += len(rollout.conv.steps) + 1


def generate(root: Path, *, rollouts: int | None, calls: int, seed: int = 7, size_bytes: int | None = None) -> Totals:
    """Write a corpus under ``root``: ``rollouts`` rollouts, or as many as reach ``size_bytes``."""
    rng = random.Random(seed)
    text = Text(random.Random(seed + 1))
    root.mkdir(parents=True, exist_ok=True)
    writer = Writer(root)
    number = 0
    try:
        while (rollouts is not None and number < rollouts) or (
            size_bytes is not None and writer.totals.bytes < size_bytes
        ):
            write_rollout(writer, number, calls, rng, text)
            number += 1
    finally:
        writer.close()
    return writer.totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--rollouts", type=int)
    parser.add_argument("--size-mb", type=float, help="generate rollouts until the corpus reaches this size")
    parser.add_argument("--calls", type=int, default=16, help="mean policy calls per rollout")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if (args.rollouts is None) == (args.size_mb is None):
        parser.error("give --rollouts or --size-mb")
    size = int(args.size_mb * 1e6) if args.size_mb is not None else None
    totals = generate(args.out, rollouts=args.rollouts, calls=args.calls, seed=args.seed, size_bytes=size)
    print(f"{totals.rollouts} rollouts, {totals.calls} model calls, {totals.bytes / 1e6:.1f} MB -> {args.out}")


if __name__ == "__main__":
    main()
