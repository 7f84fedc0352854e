"""The rows a collector writes for the corpus: rollout rows, their judge calls, the agent's observation bundle.

Shapes: rollout rows (identity keys, ``agent_ref``), ``ng_agent_observations`` (an
invocation with conversation and model-call refs by ``(model_ref, response_id)``, tool observations,
a context compaction), judge records (``judge_evaluations[]`` entries: the judge's request and
its Responses-API response, plus ``verdict_label``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from dialects import Conversation, Usage, responses_output

POLICY = {"type": "responses_api_models", "name": "policy_model"}
JUDGE = {"type": "responses_api_models", "name": "judge_model"}


def hex_id(rng: random.Random, bits: int = 128) -> str:
    return f"{rng.getrandbits(bits):0{bits // 4}x}"


@dataclass
class Rollout:
    """One rollout being generated."""

    task: int
    index: int
    agent: tuple[str, str, str]
    stream: bool
    conv: Conversation
    start: float
    attempt: int = 0

    @property
    def rollout_id(self) -> str:
        base = f"{self.task}-{self.index}"
        return f"{base}-a{self.attempt}" if self.attempt else base


def judge(rollout: Rollout, rng: random.Random, at: float) -> tuple[dict, dict[str, Any]]:
    answer = rollout.conv.steps[-1].text or ""
    request = {
        "model": "judge-1",
        "input": [{"role": "user", "content": f"Task: {rollout.conv.task}\nAnswer: {answer}"}],
    }
    response_id = f"resp_{hex_id(rng, 96)}"
    verdict = rng.choice(("correct", "incorrect"))
    content = [{"type": "output_text", "text": verdict, "annotations": []}]
    response = {
        "id": response_id,
        "object": "response",
        "model": "judge-1",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": f"msg_{response_id[5:]}",
                "role": "assistant",
                "status": "completed",
                "content": content,
            }
        ],
        "usage": {
            "input_tokens": len(request["input"][0]["content"]) // 4,
            "output_tokens": 2,
            "total_tokens": len(request["input"][0]["content"]) // 4 + 2,
        },
    }
    line = {
        "model_call_id": hex_id(rng),
        "dialect": "responses",
        "model_ref": JUDGE,
        "started_at": at,
        "completed_at": at + 0.6,
        "latency_ms": 600.0,
        "latency_ttft_ms": None,
        "status_code": 200,
        "error_category": None,
        "request": request,
        "response": response,
    }
    return line, {"responses_create_params": request, "response": response, "verdict_label": verdict}


def bundle(rollout: Rollout, timings: list[tuple[float, float]], usages: list[Usage]) -> dict[str, Any]:
    """The OpenClaw-style agent's ``ng_agent_observations``: refs by (model_ref, response_id)."""
    conv, invocation = rollout.conv, f"sess-{rollout.rollout_id}"
    items: list[dict[str, Any]] = [{"role": "user", "content": conv.task, "type": "message"}]
    records: list[dict[str, Any]] = []
    for k, step in enumerate(conv.steps):
        items.extend(responses_output(step))
        if step.tool is not None and step.result is not None:
            items.append({"type": "function_call_output", "call_id": step.tool[0], "output": step.result})
            done = timings[k][1] + 0.5
            records.append(
                {
                    "kind": "tool_call",
                    "invocation_id": invocation,
                    "tool_call_id": step.tool[0],
                    "tool_name": step.tool[1],
                    "started_at": timings[k][1] + 0.01,
                    "completed_at": done,
                    "duration_ms": 490.0,
                    "timing_source": "harness",
                    "status": "completed",
                }
            )
    refs = [{"model_ref": POLICY, "response_id": step.response_id} for step in conv.steps]
    records.insert(
        0,
        {
            "kind": "agent_invocation",
            "invocation_id": invocation,
            "status": "completed",
            "model_calls": refs,
            "conversation": items,
        },
    )
    if len(conv.steps) > 12:
        records.append(
            {
                "kind": "context_compaction",
                "invocation_id": invocation,
                "observed_at": timings[10][1] + 1,
                "trigger": "overflow",
                "tokens_before": usages[10].prompt,
                "tokens_after": None,
                "outcome": "completed",
                "summary": "Earlier steps explored the workspace.",
                "before_model_call": refs[10],
                "after_model_call": refs[11],
            }
        )
    return {"source": "openclaw", "records": records, "gaps": [{"code": "no_sandbox_runtime"}]}


def row(rollout: Rollout, judge: dict[str, Any], failed: bool, bundle: dict | None) -> dict[str, Any]:
    output = [item for step in rollout.conv.steps for item in responses_output(step)]
    response = {
        "id": f"resp-{rollout.rollout_id}",
        "object": "response",
        "model": rollout.conv.model,
        "status": "failed" if failed else "completed",
        "output": output,
        "usage": None,
    }
    if failed:
        response["error"] = {"code": "server_error", "message": "agent timed out"}
    row: dict[str, Any] = {
        "responses_create_params": {"input": [{"role": "user", "content": rollout.conv.task}]},
        "response": response,
        "reward": 0.0 if failed else 1.0,
        "_ng_task_index": rollout.task,
        "_ng_rollout_index": rollout.index,
        "agent_ref": {"name": rollout.agent[0]},
        "judge_evaluations": [judge],
    }
    if rollout.attempt:
        row["_ng_attempt_index"] = rollout.attempt
    if bundle is not None:
        row["ng_agent_observations"] = bundle
    return row
