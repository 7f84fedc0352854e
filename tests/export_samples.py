"""Trajectories the export tests share: a clean single-agent rollout NeMo Gym 0.7.0's exporter accepts,
and one with two tool calls run in parallel."""

from __future__ import annotations

import copy
from pathlib import Path

import orjson

from conftest import ROOT

RETAINED = ROOT / "fixtures" / "build" / "retained_run" / "expected.jsonl"
SUBAGENTS = ROOT / "fixtures" / "opencode" / "db_v1" / "expected.jsonl"
ALL_EXPECTED = sorted((ROOT / "fixtures").rglob("expected.jsonl"))


def _call(call_id: str, started: float, completed: float, response_id: str, finish: str, usage: tuple) -> dict:
    prompt, completion, cached, reasoning = usage
    return {
        "model_call_id": call_id,
        "started_at": started,
        "completed_at": completed,
        "duration_ms": (completed - started) * 1000,
        "response_metadata": {
            "response_id": response_id,
            "model_ref": {"type": "responses_api_models", "name": "policy_model"},
            "model": "policy-1",
            "dialect": "responses",
            "status_code": 200,
            "response_status": "completed",
            "finish_reason": finish,
        },
        "token_stats": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "reasoning_tokens": reasoning,
            "total_tokens": prompt + completion,
            "cached_tokens": cached,
        },
    }


USER = {"type": "message", "role": "user", "content": "What is 6*7?"}
CALL = {
    "type": "function_call",
    "call_id": "call_1",
    "name": "calc",
    "arguments": '{"expr": "6*7"}',
    "id": "fc_1",
    "status": "completed",
}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "42", "id": "fco_1"}
ANSWER = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "It is 42.", "annotations": []}],
}


def clean_rollout() -> dict:
    """One invocation, no gap: a tool call, then the answer; two turns, two calls (a value the 0.7.0
    exporter accepts: every rule of its preflight and mapping holds)."""
    turn = {"invocation_id": "root", "task_id": "7", "rollout_id": "7-0", "reasoning_content": None, "step_count": 1}
    return copy.deepcopy(
        {
            "schema_version": "1.0",
            "task_id": "7",
            "rollout_id": "7-0",
            "invocations": [
                {
                    "kind": "agent_invocation",
                    "invocation_id": "root",
                    "status": "completed",
                    "model_calls": [{"model_call_id": "mc1"}, {"model_call_id": "mc2"}],
                    "conversation": [USER, CALL, OUTPUT, ANSWER],
                }
            ],
            "turns": [
                {
                    **turn,
                    "turn_no": 1,
                    "timestamp": 1786000000.5,
                    "question": [USER],
                    "answer": [CALL],
                    "model_calls": [{"model_call_id": "mc1"}],
                },
                {
                    **turn,
                    "turn_no": 2,
                    "timestamp": 1786000002.0,
                    "question": [USER, CALL, OUTPUT],
                    "answer": [ANSWER],
                    "resolved": True,
                    "model_calls": [{"model_call_id": "mc2"}],
                },
            ],
            "model_calls": [
                _call("mc1", 1786000000.0, 1786000000.25, "resp_1", "tool_calls", (20, 8, 0, 0)),
                _call("mc2", 1786000001.0, 1786000001.5, "resp_2", "stop", (35, 5, 16, 2)),
            ],
            "tool_calls": [
                {
                    "kind": "tool_call",
                    "invocation_id": "root",
                    "tool_call_id": "call_1",
                    "tool_name": "calc",
                    "started_at": 1786000000.5,
                    "completed_at": 1786000000.75,
                    "duration_ms": 250.0,
                    "timing_source": "executor",
                    "status": "completed",
                    "output": "42",
                }
            ],
            "gaps": [],
        }
    )


def with_rollout_id(rollout_id: str) -> dict:
    """The clean rollout under another rollout id (its turns' too)."""
    value = clean_rollout()
    value["rollout_id"] = rollout_id
    for turn in value["turns"]:
        turn["rollout_id"] = rollout_id
    return value


LONG_AND_DOT_IDS = (  # names past the length limit (two sharing its prefix), hidden names, a collision
    "a" * 300,
    "a" * 299 + "b",
    "é" * 300,
    ".",
    "..",
    "_",
)


def parallel_rollout() -> dict:
    """The clean rollout with two tool calls from one response, run at overlapping times."""
    value = clean_rollout()
    second = {**CALL, "call_id": "call_2", "id": "fc_2", "arguments": '{"expr": "1+1"}'}
    value["invocations"][0]["conversation"] = [
        USER,
        CALL,
        second,
        OUTPUT,
        {**OUTPUT, "call_id": "call_2", "output": "2", "id": "fco_2"},
        ANSWER,
    ]
    value["turns"][0]["answer"] = [CALL, second]
    value["turns"][0]["step_count"] = 2
    value["turns"][1]["step_count"] = 2
    value["turns"][1]["question"] = value["invocations"][0]["conversation"][:5]
    tool = value["tool_calls"][0]
    value["tool_calls"].append(
        {**tool, "tool_call_id": "call_2", "started_at": 1786000000.6, "completed_at": 1786000000.9, "output": "2"}
    )
    return value


def write_jsonl(path: Path, *values: dict) -> Path:
    path.write_bytes(b"".join(orjson.dumps(value) + b"\n" for value in values))
    return path
