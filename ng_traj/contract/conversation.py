"""Conversation items an invocation may hold: NeMo Gym's Responses input-item union.

Source: ``nemo_gym/openai_utils.py`` (``NeMoGymResponseInputItem``) in nemo-gym 0.7.0, with the
shapes of the ``openai`` SDK 2.44.0 that it pins. The items Gym defines itself (messages, function
calls and outputs, reasoning, their training variants) are written here; the hosted and built-in
tool items (MCP, file and web search, computer use, image generation, code interpreter, local and
hosted shell, custom tools, apply-patch, compaction, tool search, additional tools) are the SDK's
own models, as upstream uses them, with the same relaxations Gym makes to the MCP ones. Using the
SDK's models rather than copies keeps every field, default, nested union and the key order of
their serialisation exactly as upstream's, and follows the SDK when Gym moves its pin.

An item is routed to one member by a discriminator that decides as Gym's does (``type``, then for
messages the role, content and status; an item without ``type`` by its shape, falling back to the
permissive ``mcp_list_tools`` model, whose extra keys are kept; complete token metadata selects the
training variant). So an item validates, and serialises with the same keys in the same order,
nulls included, exactly as in Gym. Gym's own item models drop unknown keys; the SDK's keep them.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Annotated, Any, Literal, Required

from pydantic import (
    BaseModel,
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
)
from typing_extensions import TypedDict

from ng_traj.contract.base import contract_error
from ng_traj.contract.sdk_modules import import_sdk_modules

_SDK_MODULES = tuple(
    f"openai.types.responses.{name}"
    for name in (
        "response_apply_patch_tool_call",
        "response_apply_patch_tool_call_output",
        "response_code_interpreter_tool_call",
        "response_compaction_item",
        "response_computer_tool_call",
        "response_custom_tool_call",
        "response_file_search_tool_call",
        "response_function_call_output_item_list_param",
        "response_function_shell_tool_call",
        "response_function_shell_tool_call_output",
        "response_function_web_search",
        "response_input_content_param",
        "response_input_item",
        "response_output_item",
        "response_reasoning_item",
        "response_tool_search_call",
        "response_tool_search_output_item",
    )
)
"""The SDK's modules the imports below take from: imported first without the SDK's package initialisers
(``contract/sdk_modules.py``: about 0.15 s of CPU less), so that those imports find them loaded."""

import_sdk_modules(_SDK_MODULES)

from openai.types.responses.response_apply_patch_tool_call import ResponseApplyPatchToolCall  # noqa: E402
from openai.types.responses.response_apply_patch_tool_call_output import (  # noqa: E402
    ResponseApplyPatchToolCallOutput,
)
from openai.types.responses.response_code_interpreter_tool_call import ResponseCodeInterpreterToolCall  # noqa: E402
from openai.types.responses.response_compaction_item import ResponseCompactionItem  # noqa: E402
from openai.types.responses.response_computer_tool_call import ResponseComputerToolCall  # noqa: E402
from openai.types.responses.response_custom_tool_call import ResponseCustomToolCall  # noqa: E402
from openai.types.responses.response_file_search_tool_call import ResponseFileSearchToolCall  # noqa: E402
from openai.types.responses.response_function_call_output_item_list_param import (  # noqa: E402
    ResponseFunctionCallOutputItemListParam,
)
from openai.types.responses.response_function_shell_tool_call import ResponseFunctionShellToolCall  # noqa: E402
from openai.types.responses.response_function_shell_tool_call_output import (  # noqa: E402
    ResponseFunctionShellToolCallOutput,
)
from openai.types.responses.response_function_web_search import ResponseFunctionWebSearch  # noqa: E402
from openai.types.responses.response_input_content_param import ResponseInputContentParam  # noqa: E402
from openai.types.responses.response_input_item import (  # noqa: E402
    AdditionalTools,
    CompactionTrigger,
    ComputerCallOutput,
    LocalShellCallOutput,
    McpApprovalResponse,
    ResponseCustomToolCallOutput,
)
from openai.types.responses.response_output_item import (  # noqa: E402
    ImageGenerationCall,
    LocalShellCall,
    McpApprovalRequest,
    McpCall,
    McpListTools,
)
from openai.types.responses.response_reasoning_item import Content as ReasoningText  # noqa: E402
from openai.types.responses.response_reasoning_item import Summary as ReasoningSummary  # noqa: E402
from openai.types.responses.response_tool_search_call import ResponseToolSearchCall  # noqa: E402
from openai.types.responses.response_tool_search_output_item import ResponseToolSearchOutputItem  # noqa: E402

ItemStatus = Literal["in_progress", "completed", "incomplete"]
Phase = Literal["commentary", "final_answer"]


class InputVideo(TypedDict, total=False):
    """Video part (Gym extension): exactly one of ``video_url`` or ``video`` with a non-empty URL."""

    type: Required[Literal["input_video"]]
    video_url: str | dict[str, Any]
    video: str | dict[str, Any]


def _check_input_video(value: Any) -> Any:
    if not isinstance(value, dict) or value.get("type") != "input_video":
        return value
    sources = [key for key in ("video_url", "video") if key in value]
    if len(sources) != 1:
        raise contract_error("invalid_input_video", "input_video needs exactly one of video_url or video")
    source = value[sources[0]]
    url = source.get("url") if isinstance(source, dict) else source
    if not isinstance(url, str) or not url.strip():
        raise contract_error("invalid_input_video", "input_video source must hold a non-empty URL")
    return value


InputContentPart = Annotated[ResponseInputContentParam | InputVideo, BeforeValidator(_check_input_video)]
"""An input message part: the SDK's ``input_text``, ``input_image``, ``input_file``, or Gym's ``input_video``."""


class AnnotationFileCitation(TypedDict, total=False):
    """A citation of a file in output text (``file_citation``)."""

    file_id: Required[str]
    filename: Required[str]
    index: Required[int]
    type: Required[Literal["file_citation"]]


class AnnotationURLCitation(TypedDict, total=False):
    """A citation of a web resource in output text (``url_citation``); indexes are character offsets."""

    end_index: Required[int]
    start_index: Required[int]
    title: Required[str]
    type: Required[Literal["url_citation"]]
    url: Required[str]


class AnnotationContainerFileCitation(TypedDict, total=False):
    """A citation of a container file in output text (``container_file_citation``)."""

    container_id: Required[str]
    end_index: Required[int]
    file_id: Required[str]
    filename: Required[str]
    start_index: Required[int]
    type: Required[Literal["container_file_citation"]]


class AnnotationFilePath(TypedDict, total=False):
    """A path to a file in output text (``file_path``)."""

    file_id: Required[str]
    index: Required[int]
    type: Required[Literal["file_path"]]


Annotation = AnnotationFileCitation | AnnotationURLCitation | AnnotationContainerFileCitation | AnnotationFilePath
"""One ``output_text`` annotation, as the SDK's ``response_output_text_param.Annotation``."""


class LogprobTopLogprob(TypedDict, total=False):
    """One alternative token: its text, UTF-8 bytes and log probability."""

    token: Required[str]
    bytes: Required[list[int]]
    logprob: Required[float]


class Logprob(TypedDict, total=False):
    """The log probability of one output token and its top alternatives."""

    token: Required[str]
    bytes: Required[list[int]]
    logprob: Required[float]
    top_logprobs: Required[list[LogprobTopLogprob]]


class _Item(BaseModel):
    """Base of the item models written here (their attribute docstrings reach the JSON Schemas)."""


class EasyInputMessage(_Item):
    """A message with string or input-part content, any role (``type: message``)."""

    content: str | list[InputContentPart]
    role: Literal["user", "assistant", "system", "developer"]
    type: Literal["message"] = "message"
    phase: Phase | None = None
    """Responses ``phase`` of a replayed assistant message (nemo-gym 0.7.0 and later)."""


class InputMessage(_Item):
    """A user, system or developer message with input-part content and a status."""

    content: list[InputContentPart]
    role: Literal["user", "system", "developer"]
    status: ItemStatus = "completed"
    type: Literal["message"] = "message"


class OutputText(_Item):
    """Assistant output text part."""

    annotations: list[Annotation]
    text: str
    type: Literal["output_text"] = "output_text"
    logprobs: list[Logprob] | None = None


class OutputRefusal(_Item):
    """Assistant refusal part."""

    refusal: str
    type: Literal["refusal"] = "refusal"


class OutputMessage(_Item):
    """An assistant output message with an id."""

    id: str
    content: list[OutputText | OutputRefusal]
    role: Literal["assistant"] = "assistant"
    status: ItemStatus = "completed"
    type: Literal["message"] = "message"
    phase: Phase | None = None
    """Responses ``phase``: ``commentary`` or ``final_answer`` (nemo-gym 0.7.0 and later)."""


class FunctionCall(_Item):
    """A model-issued function (tool) call; ``arguments`` is JSON text."""

    arguments: str
    call_id: str
    name: str
    type: Literal["function_call"] = "function_call"
    id: str | None = None
    status: ItemStatus | None = None
    namespace: str | None = None
    """The tool's namespace when tool names overlap (nemo-gym 0.7.0 and later)."""


class FunctionCallOutput(_Item):
    """The model-visible output of a function call, joined to it by ``call_id``."""

    call_id: str
    output: str | ResponseFunctionCallOutputItemListParam
    type: Literal["function_call_output"] = "function_call_output"
    id: str | None = None
    status: ItemStatus | None = None


class ReasoningItem(_Item):
    """A reasoning item: summary parts, optional encrypted or raw content."""

    id: str
    summary: list[ReasoningSummary]
    type: Literal["reasoning"] = "reasoning"
    encrypted_content: str | None = None
    content: list[ReasoningText] | None = None


class HostedMcpCall(McpCall):
    """A tool call an MCP server ran for the provider (``mcp_call``); output or error already filled.

    Gym relaxes the SDK model: ``id`` and ``server_label`` may be missing, ``status`` is any text.
    """

    type: Literal["mcp_call"] = "mcp_call"
    id: str | None = None
    server_label: str | None = None
    status: str | None = None


class HostedMcpListTools(McpListTools):
    """The tools an MCP server offers (``mcp_list_tools``); also where Gym routes an item it cannot
    otherwise place (an item without ``type``), keeping its keys.

    Gym relaxes the SDK model: ``id`` and ``server_label`` may be missing, ``tools`` holds any values.
    """

    type: Literal["mcp_list_tools"] = "mcp_list_tools"
    tools: list[Any] = Field(default_factory=list)
    id: str | None = None
    server_label: str | None = None


class HostedMcpApprovalRequest(McpApprovalRequest):
    """A request to approve an MCP tool call (``mcp_approval_request``); ``id`` and ``server_label``
    may be missing (Gym's relaxation)."""

    type: Literal["mcp_approval_request"] = "mcp_approval_request"
    id: str | None = None
    server_label: str | None = None


RoutedExperts = str | list[list[list[int]]]


class TokenIds(BaseModel):
    """Token metadata a training capture adds to an item: all of the first three, or none."""

    prompt_token_ids: list[int]
    generation_token_ids: list[int]
    generation_log_probs: list[float]
    routed_experts: RoutedExperts | None = None


class EasyInputMessageForTraining(EasyInputMessage, TokenIds):
    """``EasyInputMessage`` with token metadata."""


class InputMessageForTraining(InputMessage, TokenIds):
    """``InputMessage`` with token metadata."""


class OutputMessageForTraining(OutputMessage, TokenIds):
    """``OutputMessage`` with token metadata."""


class FunctionCallForTraining(FunctionCall, TokenIds):
    """``FunctionCall`` with token metadata."""


class ReasoningItemForTraining(ReasoningItem, TokenIds):
    """``ReasoningItem`` with token metadata."""


_TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")


@cache
def _token_ids() -> TypeAdapter[TokenIds]:
    """The token metadata's adapter, built when an item first carries token metadata."""
    return TypeAdapter(TokenIds)


def _check_token_metadata(value: Any) -> Any:
    """Token metadata on an item is all of :data:`_TOKEN_FIELDS` or none, and well typed (on any item:
    the SDK's items keep it as extra keys)."""
    if not isinstance(value, dict):
        return value
    if not ("prompt_token_ids" in value or "generation_token_ids" in value or "generation_log_probs" in value) and (
        "routed_experts" not in value
    ):
        return value  # the usual item: no token metadata (checked without making a list per item)
    present = [key for key in (*_TOKEN_FIELDS, "routed_experts") if key in value]
    missing = [key for key in _TOKEN_FIELDS if key not in value]
    if missing:
        raise contract_error(
            "token_metadata_incomplete",
            "token metadata must include all of prompt_token_ids, generation_token_ids, "
            "generation_log_probs; missing: {missing}",
            missing=", ".join(missing),
        )
    try:
        _token_ids().validate_python({key: value[key] for key in present})
    except ValidationError as exc:
        error = exc.errors()[0]
        raise contract_error(
            "token_metadata_invalid",
            "token metadata {field}: {problem}",
            pointer=str(error["loc"][0]),
            field=str(error["loc"][0]),
            problem=error["msg"],
        ) from None
    return value


_STATUSES = frozenset({"in_progress", "completed", "incomplete"})
_OUTPUT_PARTS = frozenset({"output_text", "refusal"})
_TRAINABLE = frozenset({"easy_message", "input_message", "output_message", "function_call", "reasoning"})


def _first_part_type(content: Any) -> str | None:
    """The ``type`` of the first content part (``refusal`` for a typeless part holding one), or ``None``."""
    if not isinstance(content, list) or not content or not isinstance(content[0], dict):
        return None
    part = content[0]
    kind = part.get("type")
    if kind is not None and not isinstance(kind, str):
        return None  # a list or an object: no part type (the models then say what is wrong with it)
    return kind or ("refusal" if "refusal" in part else None)


def _message_tag(value: dict[str, Any]) -> str:
    """Which message model: input (a simple role, list content and a status), output (assistant list
    content starting with an output part, or empty with an id), else the easy message."""
    content = value.get("content")
    if value.get("role") in ("user", "system", "developer"):
        listed = isinstance(content, list) and isinstance(status := value.get("status"), str)
        return "input_message" if listed and status in _STATUSES else "easy_message"
    if isinstance(content, list):
        if not content:
            return "output_message" if isinstance(value.get("id"), str) else "easy_message"
        if _first_part_type(content) in _OUTPUT_PARTS:
            return "output_message"
    return "easy_message"


def _untyped_tag(value: dict[str, Any]) -> str:
    """The member of an item without ``type``, told by its keys; ``mcp_list_tools`` when nothing fits."""
    content = value.get("content")
    has_id = isinstance(value.get("id"), str)
    if value.get("role") in ("user", "system", "developer", "assistant") and isinstance(content, str | list):
        tag = _message_tag(value)
        if tag == "output_message":
            return tag if has_id else "mcp_list_tools"
        return tag if _first_part_type(content) not in _OUTPUT_PARTS else "mcp_list_tools"
    output_content = isinstance(content, list) and (not content or _first_part_type(content) in _OUTPUT_PARTS)
    if "role" not in value and has_id and output_content:
        return "output_message"
    if "arguments" in value and "name" in value:
        return "function_call" if "call_id" in value else "mcp_call"
    if isinstance(value.get("call_id"), str) and "output" in value:
        return "function_call_output"
    if has_id and isinstance(value.get("summary"), list):
        return "reasoning"
    return "mcp_list_tools"


def _item_tag(value: Any) -> str | None:
    """The union member an item validates as (see the module docstring); ``None``: no member."""
    if isinstance(value, BaseModel):
        known = (_TAG_OF_CLASS[cls] for cls in type(value).__mro__ if cls in _TAG_OF_CLASS)
        return next(known, getattr(value, "type", None))
    if not isinstance(value, dict):
        return None
    kind = value.get("type")
    if kind == "message":
        tag = _message_tag(value)
    elif isinstance(kind, str):
        tag = kind
    elif kind is None:
        tag = _untyped_tag(value)
    else:
        return None
    if (
        tag in _TRAINABLE
        and "prompt_token_ids" in value
        and "generation_token_ids" in value
        and "generation_log_probs" in value
    ):  # every one of _TOKEN_FIELDS
        return f"{tag}__training"
    return tag


_MEMBERS: dict[str, type[BaseModel]] = {
    "easy_message": EasyInputMessage,
    "input_message": InputMessage,
    "output_message": OutputMessage,
    "function_call": FunctionCall,
    "function_call_output": FunctionCallOutput,
    "reasoning": ReasoningItem,
    "mcp_call": HostedMcpCall,
    "mcp_list_tools": HostedMcpListTools,
    "mcp_approval_request": HostedMcpApprovalRequest,
    "file_search_call": ResponseFileSearchToolCall,
    "web_search_call": ResponseFunctionWebSearch,
    "computer_call": ResponseComputerToolCall,
    "image_generation_call": ImageGenerationCall,
    "code_interpreter_call": ResponseCodeInterpreterToolCall,
    "local_shell_call": LocalShellCall,
    "custom_tool_call": ResponseCustomToolCall,
    "computer_call_output": ComputerCallOutput,
    "custom_tool_call_output": ResponseCustomToolCallOutput,
    "local_shell_call_output": LocalShellCallOutput,
    "mcp_approval_response": McpApprovalResponse,
    "apply_patch_call": ResponseApplyPatchToolCall,
    "apply_patch_call_output": ResponseApplyPatchToolCallOutput,
    "compaction": ResponseCompactionItem,
    "shell_call": ResponseFunctionShellToolCall,
    "shell_call_output": ResponseFunctionShellToolCallOutput,
    "tool_search_call": ResponseToolSearchCall,
    "tool_search_output": ResponseToolSearchOutputItem,
    "compaction_trigger": CompactionTrigger,
    "additional_tools": AdditionalTools,
    "easy_message__training": EasyInputMessageForTraining,
    "input_message__training": InputMessageForTraining,
    "output_message__training": OutputMessageForTraining,
    "function_call__training": FunctionCallForTraining,
    "reasoning__training": ReasoningItemForTraining,
}
"""Union tag -> member, in Gym's order (the tags are the item types, with the message shapes and the
``__training`` variants told apart)."""

_TAG_OF_CLASS = {member: tag for tag, member in _MEMBERS.items()}

ConversationItem = Annotated[
    Annotated[EasyInputMessage, Tag("easy_message")]
    | Annotated[InputMessage, Tag("input_message")]
    | Annotated[OutputMessage, Tag("output_message")]
    | Annotated[FunctionCall, Tag("function_call")]
    | Annotated[FunctionCallOutput, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[HostedMcpCall, Tag("mcp_call")]
    | Annotated[HostedMcpListTools, Tag("mcp_list_tools")]
    | Annotated[HostedMcpApprovalRequest, Tag("mcp_approval_request")]
    | Annotated[ResponseFileSearchToolCall, Tag("file_search_call")]
    | Annotated[ResponseFunctionWebSearch, Tag("web_search_call")]
    | Annotated[ResponseComputerToolCall, Tag("computer_call")]
    | Annotated[ImageGenerationCall, Tag("image_generation_call")]
    | Annotated[ResponseCodeInterpreterToolCall, Tag("code_interpreter_call")]
    | Annotated[LocalShellCall, Tag("local_shell_call")]
    | Annotated[ResponseCustomToolCall, Tag("custom_tool_call")]
    | Annotated[ComputerCallOutput, Tag("computer_call_output")]
    | Annotated[ResponseCustomToolCallOutput, Tag("custom_tool_call_output")]
    | Annotated[LocalShellCallOutput, Tag("local_shell_call_output")]
    | Annotated[McpApprovalResponse, Tag("mcp_approval_response")]
    | Annotated[ResponseApplyPatchToolCall, Tag("apply_patch_call")]
    | Annotated[ResponseApplyPatchToolCallOutput, Tag("apply_patch_call_output")]
    | Annotated[ResponseCompactionItem, Tag("compaction")]
    | Annotated[ResponseFunctionShellToolCall, Tag("shell_call")]
    | Annotated[ResponseFunctionShellToolCallOutput, Tag("shell_call_output")]
    | Annotated[ResponseToolSearchCall, Tag("tool_search_call")]
    | Annotated[ResponseToolSearchOutputItem, Tag("tool_search_output")]
    | Annotated[CompactionTrigger, Tag("compaction_trigger")]
    | Annotated[AdditionalTools, Tag("additional_tools")]
    | Annotated[EasyInputMessageForTraining, Tag("easy_message__training")]
    | Annotated[InputMessageForTraining, Tag("input_message__training")]
    | Annotated[OutputMessageForTraining, Tag("output_message__training")]
    | Annotated[FunctionCallForTraining, Tag("function_call__training")]
    | Annotated[ReasoningItemForTraining, Tag("reasoning__training")],
    Discriminator(_item_tag),
    BeforeValidator(_check_token_metadata),
]
"""One item of an invocation's model-visible conversation (Gym's ``NeMoGymResponseInputItem``)."""


@cache
def items_adapter() -> TypeAdapter[list[Any]]:
    """The adapter of a list of conversation items, built on first use (each adapter of the union
    costs 10–20 ms of CPU to build)."""
    return TypeAdapter(list[ConversationItem])


@cache
def _item_adapter() -> TypeAdapter[Any]:
    """The adapter of one conversation item, built when a list first holds an invalid item."""
    return TypeAdapter(ConversationItem)


def validate_items(values: Sequence[Any]) -> tuple[list[Any], int]:
    """Validate candidate conversation items; return the valid ones and how many were dropped.

    The whole list is validated at once first (the common case, and much faster); only a list with a
    bad item is gone through one by one.
    """
    try:
        return items_adapter().validate_python(values), 0
    except ValidationError:
        pass
    items, dropped = [], 0
    for value in values:
        try:
            items.append(_item_adapter().validate_python(value))
        except ValidationError:
            dropped += 1
    return items, dropped
