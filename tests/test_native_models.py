"""Native observation models made without validating again (``sources/native.py``,
``sources/pi/items.py``) against the models pydantic makes of the same values, value types included."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from conftest import FIXTURES
from ng_traj.contract import (
    AgentInvocation,
    AgentObservationBundle,
    ObservationGap,
    ToolCallObservation,
)
from ng_traj.contract.conversation import validate_items
from ng_traj.diagnostics import DiagnosticSink
from ng_traj.sources.native import (
    agent_invocation,
    observation_bundle,
    tool_observation,
)
from ng_traj.sources.pi.conversation import conversation
from ng_traj.sources.pi.items import conversation_items, member_items
from ng_traj.sources.pi.session import read_session


class Text(str):
    """Text of a subclass of ``str``: pydantic makes it a plain ``str``, so it is never built as it is."""


def same(built: Any, validated: Any, where: str = "value") -> None:
    """``built`` is ``validated`` field for field: the same classes, values of the same types, the same
    ``model_fields_set``, extra and private attributes, and the same key order."""
    assert type(built) is type(validated), where
    if isinstance(validated, BaseModel):
        assert list(built.__dict__) == list(validated.__dict__), where
        assert built.model_fields_set == validated.model_fields_set, where
        assert built.__pydantic_extra__ == validated.__pydantic_extra__, where
        assert built.__pydantic_private__ == validated.__pydantic_private__, where
        for name, value in validated.__dict__.items():
            same(built.__dict__[name], value, f"{where}.{name}")
    elif isinstance(validated, dict):
        assert list(built) == list(validated), where
        for key, value in validated.items():
            same(built[key], value, f"{where}.{key}")
    elif isinstance(validated, list):
        assert len(built) == len(validated), where
        for position, (mine, theirs) in enumerate(zip(built, validated, strict=True)):
            same(mine, theirs, f"{where}[{position}]")
    else:
        assert built == validated or (built != built and validated != validated), where


def outcome(make, *args, **kwargs) -> Any:
    """The model ``make`` returns, or the validation errors it raises (as ``errors()``)."""
    try:
        return make(*args, **kwargs)
    except ValidationError as exc:
        return ("rejected", exc.errors(include_url=False))


def same_outcome(built: Any, validated: Any) -> None:
    if isinstance(validated, tuple):
        assert built == validated
    else:
        same(built, validated)


@pytest.mark.parametrize(
    ("ids", "name", "status", "timing"),
    [
        (("inv", "call-1"), "bash", "completed", {"completed_at": 10.0, "timing_source": "artifact"}),
        (
            ("inv", "call-1"),
            "bash",
            "failed",
            {"completed_at": 10.0, "timing_source": "artifact", "started_at": 9.5, "duration_ms": 500.0},
        ),
        (("inv", "call-1"), None, "unknown", {}),
        (("inv", "call-1"), "", "timeout", {"completed_at": 10.0, "started_at": 10.0, "duration_ms": 0.0}),
        (("inv", "call-1"), "bash", "completed", {"completed_at": 9.0, "started_at": 10.0}),  # reversed
        (("inv", "call-1"), "bash", "completed", {"completed_at": 10, "timing_source": "artifact"}),
        (("inv", "call-1"), "bash", "completed", {"duration_ms": -1.0}),
        (("inv", "call-1"), "bash", "completed", {"duration_ms": 5}),
        (("inv", "call-1"), "bash", "completed", {"timing_source": "transcript"}),
        (("inv", "call-1"), "bash", "done", {}),
        (("inv", Text("call-1")), "bash", "completed", {}),
        ((None, "call-1"), "bash", "completed", {}),
        (("inv", "call-1"), 3, "completed", {}),
        (("inv", "call-1"), "bash", "completed", {"completed_at": float("nan"), "started_at": 1.0}),
    ],
)
def test_tool_observations_are_the_ones_pydantic_makes(ids, name, status, timing):
    invocation_id, call_id = ids
    built = outcome(tool_observation, invocation_id, call_id, name, status, dict(timing))
    validated = outcome(
        ToolCallObservation, invocation_id=invocation_id, tool_call_id=call_id, tool_name=name, status=status, **timing
    )
    same_outcome(built, validated)


ITEMS = [
    {"type": "message", "role": "user", "content": "What is 2 + 2?"},
    {"type": "reasoning", "id": "rs_a1", "summary": [{"type": "summary_text", "text": "add"}]},
    {
        "type": "message",
        "id": "msg_a1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "4", "annotations": []}],
    },
    {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{}", "id": "c1", "status": "completed"},
    {"type": "function_call_output", "call_id": "c1", "output": "ok", "status": "completed"},
]


@pytest.mark.parametrize("status", ["completed", "incomplete", "unknown"])
@pytest.mark.parametrize("parent", [None, "root", 5])
def test_invocations_are_the_ones_pydantic_makes(status, parent):
    items, _ = validate_items(ITEMS)
    built = outcome(agent_invocation, "inv", parent, status, list(items))
    validated = outcome(
        AgentInvocation, invocation_id="inv", parent_invocation_id=parent, status=status, conversation=items
    )
    same_outcome(built, validated)
    if not isinstance(validated, tuple):
        assert all(mine is theirs for mine, theirs in zip(built.conversation, validated.conversation, strict=True))


def test_bundles_are_the_ones_pydantic_makes_and_bad_ones_are_rejected_as_before():
    root = agent_invocation("root", None, "completed", [])
    child = agent_invocation("child", "root", "unknown", [])
    tool = tool_observation("root", "c1", "bash", "completed", {})
    gap = ObservationGap(code="tool_timing_unavailable", invocation_id="root", detail="c1")
    cases = [
        [root, child, tool],
        [root, agent_invocation("root", None, "unknown", [])],  # an invocation id twice
        [agent_invocation("a", "b", "unknown", []), agent_invocation("b", "a", "unknown", [])],  # a cycle
        [root, {"kind": "tool_call", "invocation_id": "root", "tool_call_id": "c2"}],  # a record to validate
    ]
    for records in cases:
        built = outcome(observation_bundle, "pi", records, [gap])
        validated = outcome(AgentObservationBundle, source="pi", records=records, gaps=[gap])
        same_outcome(built, validated)
    rejected = outcome(observation_bundle, "pi", cases[1], [gap])
    assert rejected[0] == "rejected" and rejected[1][0]["type"] == "duplicate_invocation_id"
    same_outcome(
        outcome(observation_bundle, "pi", [root], [{"code": "x"}]),
        outcome(AgentObservationBundle, source="pi", records=[root], gaps=[{"code": "x"}]),
    )


def _variants(item: dict[str, Any]) -> list[dict[str, Any]]:
    """The item with each value made another type, a key dropped or added, and its order changed."""
    variants = []
    for key in item:
        for value in (None, 5, Text("x"), "", ["x"], {"x": 1}):
            variants.append({**item, key: value})
        variants.append({k: v for k, v in item.items() if k != key})
    variants.append({**item, "extra": "x"})
    variants.append(dict(reversed(list(item.items()))))
    return variants


def _nested_variants() -> list[dict[str, Any]]:
    reasoning, output = ITEMS[1], ITEMS[2]
    parts = [
        [{"type": "summary_text", "text": 5}],
        [{"type": "summary_text", "text": Text("t")}],
        [{"text": "t", "type": "summary_text"}],
        [{"type": "summary_text", "text": "a"}, {"type": "summary_text", "text": "b"}],
        [],
        [{"type": "summary_text", "text": "t", "extra": 1}],
    ]
    contents = [
        [{"type": "output_text", "text": "4", "annotations": [{"type": "file_path", "file_id": "f", "index": 0}]}],
        [{"type": "output_text", "text": Text("4"), "annotations": []}],
        [{"type": "refusal", "refusal": "no"}],
        [
            {"type": "output_text", "text": "4", "annotations": []},
            {"type": "output_text", "text": "5", "annotations": []},
        ],
        [],
    ]
    return [{**reasoning, "summary": p} for p in parts] + [{**output, "content": c} for c in contents]


IMAGE = {
    "type": "message",
    "role": "user",
    "content": [
        {"type": "input_text", "text": "see"},
        {"type": "input_image", "detail": "auto", "image_url": "data:,"},
    ],
}


@pytest.mark.parametrize(
    "values",
    [
        ITEMS,
        [],
        [*ITEMS, IMAGE],
        [{**ITEMS[0], "role": "system"}, {**ITEMS[0], "role": "developer"}, {**ITEMS[0], "role": "assistant"}],
        *([ITEMS[0], variant] for item in ITEMS for variant in _variants(item)),
        *([variant] for variant in _nested_variants()),
    ],
)
def test_conversation_items_are_the_items_validation_makes(values):
    built, dropped = conversation_items(copy.deepcopy(values))
    validated, validated_dropped = validate_items(copy.deepcopy(values))
    assert dropped == validated_dropped
    same(built, validated)


def test_every_item_the_pi_conversation_writes_is_validated_by_its_member():
    """The shapes ``member_items`` knows are the ones ``sources/pi/conversation.py`` writes (assistant items
    named by entry and by position, images), so loading a session takes the fast path."""
    sessions = [read_session(path, DiagnosticSink()) for path in sorted((FIXTURES / "pi").glob("*.jsonl"))]
    written = 0
    for session in sessions:
        path, _ = session.active_path()
        for positional in (False, True):
            values = conversation(path, "inv", [], positional_ids=positional)
            items = member_items(values)
            assert items is not None, session.path
            same(items, validate_items(values)[0])
            written += len(items)
    assert written > 50
