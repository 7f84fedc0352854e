"""Conversation items an invocation may hold: NeMo Gym's Responses input-item union.

Source: ``nemo_gym/openai_utils.py`` (``NeMoGymResponseInputItem``) at Gym commit ``07d6b0d07``,
summarised in gym-reference.md §3.9, with the content-part shapes of the ``openai`` SDK 2.7.2 that Gym
pins. The union is validated in pydantic's *smart* mode, members in the upstream order, so an item
resolves to the same member (and serialises with the same keys, nulls included) as it does in Gym.

Unlike the trajectory models these items are not strict: unknown keys are dropped on validation, as
upstream. Hosted and built-in tool items (MCP, file search, web search, computer, image generation,
code interpreter, local shell, custom tools) come from the ``openai`` SDK upstream; ng-traj does not
depend on that SDK, so it accepts them by their ``type`` and carries them through unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, Required

from pydantic import BaseModel, BeforeValidator, ConfigDict, TypeAdapter, ValidationError
from typing_extensions import TypedDict

from ng_traj.contract.base import contract_error

ItemStatus = Literal["in_progress", "completed", "incomplete"]
Phase = Literal["commentary", "final_answer"]


class InputText(TypedDict, total=False):
    """Text part of an input message (``input_text``)."""

    text: Required[str]
    type: Required[Literal["input_text"]]


class InputImage(TypedDict, total=False):
    """Image part of an input message (``input_image``); ``image_url`` may be a data URL."""

    detail: Required[Literal["low", "high", "auto"]]
    type: Required[Literal["input_image"]]
    file_id: str | None
    image_url: str | None


class InputFile(TypedDict, total=False):
    """File part of an input message (``input_file``)."""

    type: Required[Literal["input_file"]]
    file_data: str
    file_id: str | None
    file_url: str
    filename: str


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


InputContentPart = Annotated[InputText | InputImage | InputFile | InputVideo, BeforeValidator(_check_input_video)]


class OutputTextContent(TypedDict, total=False):
    """Text part of a function call output list."""

    text: Required[str]
    type: Required[Literal["input_text"]]


class OutputImageContent(TypedDict, total=False):
    """Image part of a function call output list."""

    type: Required[Literal["input_image"]]
    detail: Literal["low", "high", "auto"] | None
    file_id: str | None
    image_url: str | None


class OutputFileContent(TypedDict, total=False):
    """File part of a function call output list."""

    type: Required[Literal["input_file"]]
    file_data: str | None
    file_id: str | None
    file_url: str | None
    filename: str | None


class _Item(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)


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

    annotations: list[dict[str, Any]]
    text: str
    type: Literal["output_text"] = "output_text"
    logprobs: list[dict[str, Any]] | None = None


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
    output: str | list[OutputTextContent | OutputImageContent | OutputFileContent]
    type: Literal["function_call_output"] = "function_call_output"
    id: str | None = None
    status: ItemStatus | None = None


class ReasoningSummary(BaseModel):
    """One reasoning summary part (``summary_text``); extra keys kept, as the SDK model allows."""

    model_config = ConfigDict(extra="allow")

    text: str
    type: Literal["summary_text"]


class ReasoningText(BaseModel):
    """One reasoning content part (``reasoning_text``)."""

    model_config = ConfigDict(extra="allow")

    text: str
    type: Literal["reasoning_text"]


class ReasoningItem(_Item):
    """A reasoning item: summary parts, optional encrypted or raw content."""

    id: str
    summary: list[ReasoningSummary]
    type: Literal["reasoning"] = "reasoning"
    encrypted_content: str | None = None
    content: list[ReasoningText] | None = None


HOSTED_ITEM_TYPES = (
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "file_search_call",
    "web_search_call",
    "computer_call",
    "computer_call_output",
    "image_generation_call",
    "code_interpreter_call",
    "local_shell_call",
    "local_shell_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
)


class HostedToolItem(BaseModel):
    """A hosted or built-in tool item, carried through with all its keys (see module docstring)."""

    model_config = ConfigDict(extra="allow")

    type: Literal[HOSTED_ITEM_TYPES]  # type: ignore[valid-type]


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


def _check_token_metadata(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    present = [key for key in (*_TOKEN_FIELDS, "routed_experts") if key in value]
    missing = [key for key in _TOKEN_FIELDS if key not in value]
    if present and missing:
        raise contract_error(
            "token_metadata_incomplete",
            "token metadata must include all of prompt_token_ids, generation_token_ids, "
            "generation_log_probs; missing: {missing}",
            missing=", ".join(missing),
        )
    return value


ConversationItem = Annotated[
    EasyInputMessage
    | InputMessage
    | OutputMessage
    | FunctionCall
    | FunctionCallOutput
    | ReasoningItem
    | HostedToolItem
    | EasyInputMessageForTraining
    | InputMessageForTraining
    | OutputMessageForTraining
    | FunctionCallForTraining
    | ReasoningItemForTraining,
    BeforeValidator(_check_token_metadata),
]
"""One item of an invocation's model-visible conversation (gym-reference §3.9)."""


_ITEM = TypeAdapter(ConversationItem)
_ITEMS = TypeAdapter(list[ConversationItem])


def validate_items(values: Sequence[Any]) -> tuple[list[Any], int]:
    """Validate candidate conversation items; return the valid ones and how many were dropped.

    The whole list is validated at once first (the common case, and much faster); only a list with a
    bad item is gone through one by one.
    """
    try:
        return _ITEMS.validate_python(values), 0
    except ValidationError:
        pass
    items, dropped = [], 0
    for value in values:
        try:
            items.append(_ITEM.validate_python(value))
        except ValidationError:
            dropped += 1
    return items, dropped
