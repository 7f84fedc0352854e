"""Turns made without validating them again are the turns pydantic makes; anything not exactly of its
type is validated (and coerced, or rejected) as before."""

from __future__ import annotations

import types

import orjson
import pydantic
import pytest
from pydantic import TypeAdapter
from test_conversation_items import ACCEPTED

from ng_traj.assemble.turns import (
    TranscriptCall,
    _dumped_items,
    _item_members,
    turns_from_calls,
    turns_from_transcript,
)
from ng_traj.contract import AgentInvocation, ModelCallRef, TrajectoryModelCall, TrajectoryTurn
from ng_traj.contract.conversation import ConversationItem, items_adapter

ASK = {"type": "message", "role": "user", "content": "q"}
SAID = {"type": "message", "role": "assistant", "id": "m", "status": "completed", "content": []}
TOOL = {"type": "function_call", "call_id": "f1", "name": "f", "arguments": "{}"}
REF = {"type": "responses_api_models", "name": "policy_model"}


def _invocation(refs: list[dict] | None = None) -> AgentInvocation:
    conversation = [ASK, {"type": "reasoning", "id": "r", "summary": []}, SAID, TOOL, ASK, SAID]
    return AgentInvocation.model_validate(
        {"invocation_id": "root", "conversation": conversation, "model_calls": refs or []}
    )


def _as_pydantic_makes(turn: TrajectoryTurn) -> TrajectoryTurn:
    """The turn validated from its own fields (the set it was given), as the validating path builds it."""
    return TrajectoryTurn(**{name: getattr(turn, name) for name in turn.model_fields_set})


def _same(turns: list[TrajectoryTurn]) -> None:
    for turn in turns:
        expected = _as_pydantic_makes(turn)
        assert turn == expected and turn.model_fields_set == expected.model_fields_set
        assert list(turn.__dict__) == list(TrajectoryTurn.model_fields)  # the writers' field order
        for name in TrajectoryTurn.model_fields:
            assert type(getattr(turn, name)) is type(getattr(expected, name)), name
        assert all(type(ref) is ModelCallRef for ref in turn.model_calls)
        assert turn.model_dump_json() == expected.model_dump_json()


def test_transcript_turns_are_the_ones_pydantic_makes():
    ref = ModelCallRef(model_call_id="a" * 32)
    calls = [TranscriptCall("root", frozenset({"f1"}), 3.0, ref), TranscriptCall("root", frozenset(), 4.0)]
    turns = turns_from_transcript("t", "r", [_invocation()], calls, [], True)
    assert [(t.turn_no, t.step_count, len(t.question), t.timestamp) for t in turns] == [(1, 0, 1, 3.0), (2, 1, 5, 4.0)]
    assert turns[0].model_calls == [ref] and turns[1].model_calls == [] and turns[-1].resolved is True
    _same(turns)


def test_captured_call_turns_are_the_ones_pydantic_makes():
    call = TrajectoryModelCall.model_validate(
        {
            "model_call_id": "c" * 32,
            "started_at": 5.0,
            "request": {"input": [ASK]},
            "response": {"output": [SAID, TOOL]},
            "response_metadata": {"response_id": "resp_1", "model_ref": REF},
        }
    )
    turns = turns_from_calls("t", "r", [_invocation([{"model_call_id": "c" * 32}])], [call], None)
    assert len(turns) == 1 and turns[0].timestamp == 5.0
    _same(turns)


def test_a_time_that_is_not_a_float_is_validated_into_one():
    """A session's time given as an int (not the float the contract keeps) is coerced as pydantic
    coerces it, not written as it came."""
    calls = [TranscriptCall("root", frozenset({"f1"}), 7), TranscriptCall("root", frozenset(), 8.0)]
    turns = turns_from_transcript("t", "r", [_invocation()], calls, [], None)  # type: ignore[list-item]
    assert type(turns[0].timestamp) is float and turns[0].timestamp == 7.0
    _same(turns)


def test_a_ref_that_is_not_a_model_call_ref_is_rejected():
    """Something shaped like a ref but not one is not written as it came: pydantic rejects it."""
    ref = types.SimpleNamespace(model_call_id="a" * 32, response_id=None)
    calls = [TranscriptCall("root", frozenset({"f1"}), 1.0, ref), TranscriptCall("root", frozenset(), 2.0)]  # type: ignore[arg-type]
    with pytest.raises(pydantic.ValidationError):
        turns_from_transcript("t", "r", [_invocation()], calls, [], None)


def test_an_identity_of_the_wrong_type_is_rejected():
    with pytest.raises(pydantic.ValidationError):
        turns_from_transcript("t", 3, [_invocation()], [], [], None)  # type: ignore[arg-type]


TOKENS = {"prompt_token_ids": [1, 2], "generation_token_ids": [3], "generation_log_probs": [-0.5]}
ITEMS = [
    *(value for value, _ in ACCEPTED.values()),
    ASK,
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]},
    {**ASK, "role": "system", "status": "completed", "content": [{"type": "input_text", "text": "s"}]},
    SAID,
    TOOL,
    {"type": "function_call_output", "call_id": "f1", "output": "o"},
    {"type": "reasoning", "id": "r", "summary": [{"type": "summary_text", "text": "t"}]},
    {**ASK, **TOKENS},
    {**ASK, "role": "system", "status": "completed", "content": [{"type": "input_text", "text": "s"}], **TOKENS},
    {**SAID, **TOKENS},
    {**TOOL, **TOKENS},
    {"type": "reasoning", "id": "r", "summary": [], **TOKENS},
]


def test_items_are_dumped_as_the_conversations_adapter_dumps_them():
    """Every member of the conversation union, dumped by its own serializer, gives the adapter's
    values, key order included; a list holding something else goes through the adapter."""
    items = TypeAdapter(list[ConversationItem]).validate_python(ITEMS)
    assert {type(item) for item in items} == _item_members()  # every member is compared
    expected = items_adapter().dump_python(items, mode="json")
    assert orjson.dumps(_dumped_items(items)) == orjson.dumps(expected)
    other = [*items, {"type": "message", "role": "user", "content": "a dict"}]
    with pytest.warns(UserWarning):  # not one of the union's models: the adapter's own handling
        assert _dumped_items(other)[-1] == other[-1]
