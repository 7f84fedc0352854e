"""``ModelCallRecord``: the record NeMo Gym derives from one raw capture line.

Source: ``ModelCallRecord`` in ``nemo_gym/base_responses_api_model.py`` of nemo-gym 0.7.0 (the
released field set and order: ``client_session_id`` and the four execution fields were added after
commit ``07d6b0d07``). Like upstream this model is *not* strict: unknown keys are ignored and
pydantic's lax coercion applies, so a raw line whose ``model_ref`` or ``dialect`` has the wrong shape
fails to build and counts as unreadable, exactly as in the reference collector.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ng_traj.contract.base import ModelServerRef


class ModelCallRecord(BaseModel):
    """One captured model call. Times are UTC Unix seconds; latencies milliseconds.

    Token counts: ``tokens_in`` includes cached tokens (Anthropic cache reads and writes folded in),
    ``tokens_out`` includes reasoning tokens; ``None`` means not reported.
    """

    model_call_id: str | None = None
    """Capture identity (``uuid4().hex``)."""
    response_id: str | None = None
    """``response.id`` when a string."""
    client_session_id: str | None = None
    """The request's single ``x-session-id`` header value (correlation evidence); null unless a string."""
    call_index: int
    """Tolerant-reader index: counts every non-blank line of the capture file, valid or not."""
    model_ref: ModelServerRef | None = None
    """Model server that served the call."""
    model: str | None = None
    """``response.model``, falling back to ``request.model``."""
    dialect: str | None = None
    """``responses``, ``chat`` or ``messages``."""
    status_code: int | None = None
    """HTTP status."""
    response_status: str | None = None
    """``response.status`` when a string (Responses lifecycle)."""
    finish_reason: str | None = None
    """First string of ``stop_reason``, ``choices[0].finish_reason``, ``incomplete_details.reason``."""
    upstream_attempted: bool | None = None
    """Whether the model server contacted its backend (recorded by vLLM-style servers only)."""
    response_source: Literal["upstream", "local"] | None = None
    """``upstream`` when the body came from the backend, ``local`` when the server made it up."""
    upstream_status_code: int | None = None
    """The backend's HTTP status when it differs from what the client got."""
    local_response_reason: str | None = None
    """Why the server answered locally (``empty_assistant``, ``context_length_exceeded``)."""
    started_at: float | None = None
    """Start, UTC Unix seconds."""
    completed_at: float | None = None
    """Completion, UTC Unix seconds."""
    tokens_in: int | None = None
    """Prompt tokens (inclusive of cached)."""
    tokens_out: int | None = None
    """Completion tokens."""
    tokens_reasoning: int | None = None
    """Reasoning tokens; always null for Anthropic."""
    tokens_total: int | None = None
    """Provider total, else in + out."""
    request: dict[str, Any] | None = None
    """Request body when a JSON object."""
    response: dict[str, Any] | None = None
    """Response body when a JSON object."""
    request_raw: str | None = None
    """Raw request text when the body was not a JSON object."""
    response_raw: str | None = None
    """Raw response text (full SSE text of streams)."""
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    """``{call_id, name, arguments}`` per tool call in the response."""
    reasoning_content: str | None = None
    """Reasoning text joined by newlines."""
    cache_hit: bool | None = None
    """``cached_tokens > 0``."""
    cached_tokens: int | None = None
    """Cache-read prompt tokens."""
    cache_creation_tokens: int | None = None
    """Anthropic cache-write tokens."""
    error_category: str | None = None
    """Capture error category."""
    latency_total_ms: float | None = None
    """Latency in milliseconds."""
    latency_ttft_ms: float | None = None
    """Milliseconds to the first response byte."""


PAYLOAD_KEYS = ("request", "response", "request_raw", "response_raw")
