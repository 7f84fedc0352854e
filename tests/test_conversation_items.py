"""Conversation items: every member of Gym's input-item union accepts and rejects what Gym does, and
serialises with Gym's keys in Gym's order (nulls included). Expectations are written out by hand from
the item models (Gym's own, and the ``openai`` SDK's hosted-tool models with Gym's MCP relaxations)."""

from __future__ import annotations

import orjson
import pytest
from pydantic import TypeAdapter, ValidationError

from ng_traj.checks import check_line
from ng_traj.contract.conversation import ConversationItem, validate_items
from ng_traj.writers.jsonl import dumps

ITEM = TypeAdapter(ConversationItem)


def _dumped(value: dict) -> dict:
    return orjson.loads(dumps(ITEM.validate_python(value)))


ACCEPTED = {
    "mcp_call": (
        {"type": "mcp_call", "arguments": "{}", "name": "python", "status": "calling-ish", "extra": 1},
        # id and server_label may be missing and status is any text (Gym's relaxation); extra keys kept.
        {
            "id": None,
            "arguments": "{}",
            "name": "python",
            "server_label": None,
            "type": "mcp_call",
            "approval_request_id": None,
            "error": None,
            "output": None,
            "status": "calling-ish",
            "extra": 1,
        },
    ),
    "mcp_list_tools": (
        {"type": "mcp_list_tools", "server_label": "s", "tools": [{"name": "t"}, 3]},
        {"id": None, "server_label": "s", "tools": [{"name": "t"}, 3], "type": "mcp_list_tools", "error": None},
    ),
    "mcp_approval_request": (
        {"type": "mcp_approval_request", "arguments": "{}", "name": "n"},
        {"id": None, "arguments": "{}", "name": "n", "server_label": None, "type": "mcp_approval_request"},
    ),
    "mcp_approval_response": (
        {"type": "mcp_approval_response", "approval_request_id": "a", "approve": True},
        {"approval_request_id": "a", "approve": True, "type": "mcp_approval_response", "id": None, "reason": None},
    ),
    "file_search_call": (
        {"type": "file_search_call", "id": "f", "queries": ["q"], "status": "completed", "results": [{"score": 0.5}]},
        {
            "id": "f",
            "queries": ["q"],
            "status": "completed",
            "type": "file_search_call",
            "results": [{"attributes": None, "file_id": None, "filename": None, "score": 0.5, "text": None}],
        },
    ),
    "web_search_call": (
        {"type": "web_search_call", "id": "w", "status": "completed", "action": {"type": "search", "query": "q"}},
        {
            "id": "w",
            "action": {"type": "search", "queries": None, "query": "q", "sources": None},
            "status": "completed",
            "type": "web_search_call",
        },
    ),
    "computer_call": (
        {
            "type": "computer_call",
            "id": "cc",
            "call_id": "c",
            "action": {"type": "click", "button": "left", "x": 1, "y": 2},
            "pending_safety_checks": [],
            "status": "completed",
        },
        {
            "id": "cc",
            "call_id": "c",
            "pending_safety_checks": [],
            "status": "completed",
            "type": "computer_call",
            "action": {"button": "left", "type": "click", "x": 1, "y": 2, "keys": None},
            "actions": None,
        },
    ),
    "computer_call_output": (
        {"type": "computer_call_output", "call_id": "c", "output": {"type": "computer_screenshot", "image_url": "u"}},
        {
            "call_id": "c",
            "output": {"type": "computer_screenshot", "file_id": None, "image_url": "u"},
            "type": "computer_call_output",
            "id": None,
            "acknowledged_safety_checks": None,
            "status": None,
        },
    ),
    "image_generation_call": (
        {"type": "image_generation_call", "id": "i", "status": "generating"},
        {"id": "i", "result": None, "status": "generating", "type": "image_generation_call"},
    ),
    "code_interpreter_call": (
        {
            "type": "code_interpreter_call",
            "id": "ci",
            "code": "print(1)",
            "container_id": "k",
            "status": "completed",
            "outputs": [{"type": "logs", "logs": "1"}],
        },
        {
            "id": "ci",
            "code": "print(1)",
            "container_id": "k",
            "outputs": [{"logs": "1", "type": "logs"}],
            "status": "completed",
            "type": "code_interpreter_call",
        },
    ),
    "local_shell_call": (
        {
            "type": "local_shell_call",
            "id": "l",
            "call_id": "c",
            "status": "completed",
            "action": {"type": "exec", "command": ["ls"], "env": {}},
        },
        {
            "id": "l",
            "action": {
                "command": ["ls"],
                "env": {},
                "type": "exec",
                "timeout_ms": None,
                "user": None,
                "working_directory": None,
            },
            "call_id": "c",
            "status": "completed",
            "type": "local_shell_call",
        },
    ),
    "local_shell_call_output": (
        {"type": "local_shell_call_output", "id": "l", "output": "o"},
        {"id": "l", "output": "o", "type": "local_shell_call_output", "status": None},
    ),
    "custom_tool_call": (
        {"type": "custom_tool_call", "call_id": "c", "input": "i", "name": "n"},
        {"call_id": "c", "input": "i", "name": "n", "type": "custom_tool_call", "id": None, "namespace": None},
    ),
    "custom_tool_call_output": (
        {"type": "custom_tool_call_output", "call_id": "c", "output": [{"type": "input_text", "text": "t"}]},
        {
            "call_id": "c",
            "output": [{"text": "t", "type": "input_text"}],
            "type": "custom_tool_call_output",
            "id": None,
        },
    ),
    "apply_patch_call": (
        {
            "type": "apply_patch_call",
            "id": "a",
            "call_id": "c",
            "status": "completed",
            "operation": {"type": "create_file", "path": "p", "diff": "d"},
        },
        {
            "id": "a",
            "call_id": "c",
            "operation": {"diff": "d", "path": "p", "type": "create_file"},
            "status": "completed",
            "type": "apply_patch_call",
            "created_by": None,
        },
    ),
    "apply_patch_call_output": (
        {"type": "apply_patch_call_output", "id": "a", "call_id": "c", "status": "failed"},
        {
            "id": "a",
            "call_id": "c",
            "status": "failed",
            "type": "apply_patch_call_output",
            "created_by": None,
            "output": None,
        },
    ),
    "compaction": (
        {"type": "compaction", "id": "k", "encrypted_content": "e"},
        {"id": "k", "encrypted_content": "e", "type": "compaction", "created_by": None},
    ),
    "shell_call": (
        {"type": "shell_call", "id": "s", "call_id": "c", "status": "completed", "action": {"commands": ["ls"]}},
        {
            "id": "s",
            "action": {"commands": ["ls"], "max_output_length": None, "timeout_ms": None},
            "call_id": "c",
            "environment": None,
            "status": "completed",
            "type": "shell_call",
            "created_by": None,
        },
    ),
    "shell_call_output": (
        {
            "type": "shell_call_output",
            "id": "s",
            "call_id": "c",
            "status": "completed",
            "output": [{"stdout": "a", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
        },
        {
            "id": "s",
            "call_id": "c",
            "max_output_length": None,
            "output": [{"outcome": {"exit_code": 0, "type": "exit"}, "stderr": "", "stdout": "a", "created_by": None}],
            "status": "completed",
            "type": "shell_call_output",
            "created_by": None,
        },
    ),
    "tool_search_call": (
        {
            "type": "tool_search_call",
            "id": "t",
            "call_id": None,
            "arguments": {},
            "execution": "client",
            "status": "completed",
        },
        {
            "id": "t",
            "arguments": {},
            "call_id": None,
            "execution": "client",
            "status": "completed",
            "type": "tool_search_call",
            "created_by": None,
        },
    ),
    "tool_search_output": (
        {
            "type": "tool_search_output",
            "id": "t",
            "call_id": "c",
            "execution": "server",
            "status": "completed",
            "tools": [{"type": "function", "name": "f", "parameters": {}, "strict": True}],
        },
        {
            "id": "t",
            "call_id": "c",
            "execution": "server",
            "status": "completed",
            "tools": [
                {
                    "name": "f",
                    "parameters": {},
                    "strict": True,
                    "type": "function",
                    "defer_loading": None,
                    "description": None,
                }
            ],
            "type": "tool_search_output",
            "created_by": None,
        },
    ),
    "compaction_trigger": ({"type": "compaction_trigger"}, {"type": "compaction_trigger"}),
    "additional_tools": (
        {"type": "additional_tools", "role": "developer", "tools": [{"type": "web_search"}]},
        {
            "role": "developer",
            "tools": [{"type": "web_search", "filters": None, "search_context_size": None, "user_location": None}],
            "type": "additional_tools",
            "id": None,
        },
    ),
}


@pytest.mark.parametrize("kind", list(ACCEPTED))
def test_hosted_tool_items_keep_every_field_in_the_models_order(kind):
    value, expected = ACCEPTED[kind]
    assert list(_dumped(value).items()) == list(expected.items())


REJECTED = {
    "mcp_call": ({"type": "mcp_call", "name": "n"}, "arguments"),
    "mcp_approval_request": ({"type": "mcp_approval_request", "name": "n"}, "arguments"),
    "mcp_approval_response": ({"type": "mcp_approval_response", "approval_request_id": "a"}, "approve"),
    "file_search_call": ({"type": "file_search_call", "id": "f", "queries": ["q"]}, "status"),
    "web_search_call": (
        {"type": "web_search_call", "id": "w", "status": "completed", "action": {"type": "nope"}},
        "action",
    ),
    "computer_call": (
        {
            "type": "computer_call",
            "id": "cc",
            "call_id": "c",
            "action": {"type": "click", "x": 1, "y": 2},
            "pending_safety_checks": [],
            "status": "completed",
        },
        "action",
    ),
    # Gym turns a provider's failed status into none only when it replays a request.
    "computer_call_output": (
        {
            "type": "computer_call_output",
            "call_id": "c",
            "output": {"type": "computer_screenshot"},
            "status": "failed",
        },
        "status",
    ),
    "image_generation_call": ({"type": "image_generation_call", "id": "i"}, "status"),
    "code_interpreter_call": (
        {"type": "code_interpreter_call", "id": "ci", "code": "x", "status": "completed"},
        "container_id",
    ),
    "local_shell_call": (
        {
            "type": "local_shell_call",
            "id": "l",
            "call_id": "c",
            "status": "completed",
            "action": {"type": "exec", "command": "ls", "env": {}},
        },
        "action",
    ),
    "local_shell_call_output": ({"type": "local_shell_call_output", "output": "o"}, "id"),
    "custom_tool_call": ({"type": "custom_tool_call", "call_id": "c", "name": "n"}, "input"),
    "custom_tool_call_output": ({"type": "custom_tool_call_output", "output": "o"}, "call_id"),
    "apply_patch_call": (
        {
            "type": "apply_patch_call",
            "id": "a",
            "call_id": "c",
            "status": "completed",
            "operation": {"type": "delete_file"},
        },
        "operation",
    ),
    "apply_patch_call_output": ({"type": "apply_patch_call_output", "call_id": "c", "status": "bad"}, "status"),
    "compaction": ({"type": "compaction", "encrypted_content": "e"}, "id"),
    "shell_call": ({"type": "shell_call", "id": "s", "call_id": "c", "status": "completed"}, "action"),
    "shell_call_output": ({"type": "shell_call_output", "call_id": "c", "output": []}, "id"),
    "tool_search_call": ({"type": "tool_search_call", "id": "t"}, "arguments"),
    "tool_search_output": ({"type": "tool_search_output", "id": "t", "tools": [{"type": "nope"}]}, "tools"),
    "additional_tools": ({"type": "additional_tools", "tools": []}, "role"),
    "unknown type": ({"type": "unknown_x"}, None),
    "not an object": (5, None),
    "type not text": ({"type": 5}, None),
}


@pytest.mark.parametrize("kind", list(REJECTED))
def test_items_missing_what_their_model_requires_are_rejected(kind):
    value, field = REJECTED[kind]
    with pytest.raises(ValidationError) as caught:
        ITEM.validate_python(value)
    if field is not None:
        # The errors are those of the one member the item routes to (its tag), at the fields it breaks.
        assert {error["loc"][0] for error in caught.value.errors()} == {kind}
        assert field in {error["loc"][1] for error in caught.value.errors()}
    assert validate_items([value]) == ([], 1)


def test_validate_reports_a_hosted_item_without_its_fields_as_an_invalid_item():
    record = {
        "task_id": "t",
        "rollout_id": "r",
        "invocations": [{"invocation_id": "root", "conversation": [{"type": "web_search_call"}, {"type": "zzz"}]}],
    }
    findings, checked = check_line(record)
    assert checked
    assert [(f.code, f.pointer) for f in findings] == [
        ("invalid_conversation_item", "invocations.0.conversation.0"),
        ("invalid_conversation_item", "invocations.0.conversation.1"),
    ]


def test_output_text_annotations_and_logprobs_are_typed():
    message = {
        "type": "message",
        "id": "m",
        "role": "assistant",
        "content": [
            {
                "type": "output_text",
                "text": "x",
                "annotations": [
                    {"type": "url_citation", "url": "u", "title": "t", "start_index": 0, "end_index": 1, "extra": 1}
                ],
                "logprobs": [{"token": "x", "bytes": [120], "logprob": -0.5, "top_logprobs": []}],
            }
        ],
    }
    part = _dumped(message)["content"][0]
    # Annotation keys in the model's order, unknown keys dropped (annotations are typed dicts).
    assert list(part["annotations"][0].items()) == [
        ("end_index", 1),
        ("start_index", 0),
        ("title", "t"),
        ("type", "url_citation"),
        ("url", "u"),
    ]
    assert part["logprobs"] == [{"token": "x", "bytes": [120], "logprob": -0.5, "top_logprobs": []}]
    for bad in ({"type": "bogus"}, {"type": "file_path", "file_id": "f"}):
        message["content"][0]["annotations"] = [bad]
        with pytest.raises(ValidationError):
            ITEM.validate_python(message)
    message["content"][0]["annotations"] = []
    for bad in (
        {"token": "x", "logprob": -0.5, "top_logprobs": []},
        # Checked when read (the SDK types these as iterables, checked only when written).
        {"token": "x", "bytes": ["a"], "logprob": -0.5, "top_logprobs": []},
        {"token": "x", "bytes": [1], "logprob": -0.5, "top_logprobs": [{"token": "y", "bytes": ["b"], "logprob": 0}]},
    ):
        message["content"][0]["logprobs"] = [bad]
        with pytest.raises(ValidationError):
            ITEM.validate_python(message)


def test_messages_route_by_role_content_and_status():
    # A user message with list content is the easy message unless it has a status (then no phase key).
    parts = [{"type": "input_text", "text": "x"}]
    assert _dumped({"type": "message", "role": "user", "content": parts}) == {
        "content": [{"text": "x", "type": "input_text"}],
        "role": "user",
        "type": "message",
        "phase": None,
    }
    assert _dumped({"type": "message", "role": "user", "content": parts, "status": "completed"}) == {
        "content": [{"text": "x", "type": "input_text"}],
        "role": "user",
        "status": "completed",
        "type": "message",
    }
    # The SDK 2.44 input parts: image detail "original", file detail.
    image = {"type": "input_image", "detail": "original", "image_url": "data:x"}
    assert _dumped({"role": "user", "content": [image]})["content"] == [image]
    file = {"type": "input_file", "detail": "high", "file_data": "x"}
    assert _dumped({"role": "user", "content": [file]})["content"] == [file]
    # An assistant message with an empty list and an id is an output message.
    assert _dumped({"type": "message", "role": "assistant", "content": [], "id": "m"})["status"] == "completed"


def test_items_without_a_type_are_told_by_their_shape():
    assert _dumped({"arguments": "{}", "name": "f", "call_id": "c"})["type"] == "function_call"
    assert _dumped({"arguments": "{}", "name": "f"})["type"] == "mcp_call"
    assert _dumped({"call_id": "c", "output": "o"})["type"] == "function_call_output"
    assert _dumped({"id": "r", "summary": []})["type"] == "reasoning"
    assert _dumped({"id": "m", "content": []})["type"] == "message"
    # Nothing fits: the permissive MCP listing keeps the item's keys after its own.
    assert _dumped({"role": "assistant", "content": [{"type": "output_text", "text": "x", "annotations": []}]}) == {
        "id": None,
        "server_label": None,
        "tools": [],
        "type": "mcp_list_tools",
        "error": None,
        "role": "assistant",
        "content": [{"type": "output_text", "text": "x", "annotations": []}],
    }


def test_token_metadata_selects_the_training_variant_and_is_checked_on_every_item():
    tokens = {"prompt_token_ids": [1], "generation_token_ids": [2], "generation_log_probs": [0.5]}
    trained = _dumped({"type": "function_call", "arguments": "{}", "name": "f", "call_id": "c", **tokens})
    assert list(trained)[:4] == ["prompt_token_ids", "generation_token_ids", "generation_log_probs", "routed_experts"]
    # An item without a training variant keeps the metadata as extra keys, checked all the same.
    mcp = {"type": "mcp_call", "arguments": "{}", "name": "n"}
    assert _dumped({**mcp, **tokens})["generation_log_probs"] == [0.5]
    with pytest.raises(ValidationError) as caught:
        ITEM.validate_python({**mcp, **tokens, "generation_log_probs": ["x"]})
    assert caught.value.errors()[0]["type"] == "token_metadata_invalid"
    with pytest.raises(ValidationError) as caught:
        ITEM.validate_python({"type": "reasoning", "id": "r", "summary": [], "routed_experts": "x"})
    assert caught.value.errors()[0]["type"] == "token_metadata_incomplete"


@pytest.mark.parametrize("present", [(0,), (1,), (2,), (0, 1), (0, 2), (1, 2)])
def test_any_part_of_the_token_metadata_alone_is_incomplete(present: tuple[int, ...]):
    fields = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
    given = {fields[index]: [1] for index in present}
    for item in (
        {"type": "function_call", "arguments": "{}", "name": "f", "call_id": "c"},
        {"call_id": "c", "output": "o"},
    ):
        with pytest.raises(ValidationError) as caught:
            ITEM.validate_python({**item, **given})
        assert caught.value.errors()[0]["type"] == "token_metadata_incomplete"
        assert fields[next(i for i in range(3) if i not in present)] in caught.value.errors()[0]["msg"]
