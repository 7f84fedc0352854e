"""Judge records inside rollout rows: ``judge_evaluations[]`` and ``judge_response``.

Format: a resources server that grades with an LLM judge returns its judge exchanges in the verify
response, which the collector writes into the rollout row (NeMo Gym ``07d6b0d07``):

* ``judge_evaluations``: a list (or null when the judge did not run) of
  ``{"responses_create_params": <the judge's Responses request>, "response": <its Responses-API
  response>}``; some servers add ``verdict_label`` (``math_with_judge``, ``equivalence_llm_judge``,
  ``labbench2_vlm``, ``terminus_judge``, ``text_to_sql``, ``xstest`` ``JudgeEvaluation`` models).
* ``judge_response``: one Responses-API response (``aalcr``, ``tavily_search``,
  ``browsecomp_advanced_harness``). Other servers use the same key for something else: verdict text
  (``inverse_if``, ``multichallenge``) or a result summary (``gdpval``: criteria scores, or
  ``{"error": ...}``); those are not model calls and are reported as skipped.

Each response becomes a ``ModelCallRecord`` derived exactly as a capture line would be
(``sources/capture/record.py``: dialect ``responses``, response id, model, status, finish reason,
token counts with the null-vs-0 rule, tool calls, reasoning). The row does not record the HTTP
status, the times, the latency or the model server, so those stay null; ``model_ref`` is set only
when the caller knows the judge server (exactly one ``--role NAME=judge``). An entry may carry a
``model_call_id`` (no upstream server writes one at ``07d6b0d07``; accepted for merging by exact id).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ng_traj.contract import ModelCallRecord
from ng_traj.contract.base import ModelServerRef
from ng_traj.sources.capture.record import derive_record

JUDGE_KEYS = ("judge_evaluations", "judge_response")


@dataclass(frozen=True, slots=True)
class JudgeCall:
    """One judge call recorded in a rollout row.

    Attributes:
        location: Where the row holds it: ``judge_evaluations.<i>`` or ``judge_response``.
        record: The call derived like a capture line (``call_index`` is its position among the
            row's judge calls).
    """

    location: str
    record: ModelCallRecord

    @property
    def label(self) -> str:
        """``<location>:<response_id>``, or the location alone when the response has no id."""
        return f"{self.location}:{self.record.response_id}" if self.record.response_id else self.location


@dataclass(frozen=True, slots=True)
class SkippedJudgeRecord:
    """A value under a judge key that is not a judge call; ``malformed`` when it breaks the format."""

    location: str
    reason: str
    malformed: bool


def is_response(value: Any) -> bool:
    """True for a Responses-API response object: ``object == "response"`` or an ``output`` list."""
    return isinstance(value, Mapping) and (value.get("object") == "response" or isinstance(value.get("output"), list))


def _record(
    location: str, request: Any, response: Mapping[str, Any], extra: Mapping[str, Any], index: int
) -> JudgeCall:
    exchange = {"dialect": "responses", "request": request, "response": dict(response), **extra}
    return JudgeCall(location, derive_record(exchange, call_index=index))


def read_judge_calls(
    row: Mapping[str, Any], judge_ref: ModelServerRef | None = None
) -> tuple[list[JudgeCall], list[SkippedJudgeRecord]]:
    """The judge calls of one rollout row, in row order (``judge_evaluations`` then ``judge_response``).

    Args:
        row: A rollout row; absent or null judge keys mean no judge records.
        judge_ref: The judge model server, when known; becomes every call's ``model_ref``.

    Returns:
        The calls, and the values that were skipped with the reason.
    """
    calls: list[JudgeCall] = []
    skipped: list[SkippedJudgeRecord] = []
    extra = {"model_ref": judge_ref.model_dump()} if judge_ref is not None else {}
    evaluations = row.get("judge_evaluations")
    if evaluations is not None and not isinstance(evaluations, list):
        skipped.append(SkippedJudgeRecord("judge_evaluations", "not a list", malformed=True))
        evaluations = None
    for index, entry in enumerate(evaluations or []):
        location = f"judge_evaluations.{index}"
        response = entry.get("response") if isinstance(entry, Mapping) else None
        if not is_response(response):
            skipped.append(SkippedJudgeRecord(location, "no Responses-API response", malformed=True))
            continue
        call_id = entry.get("model_call_id")
        own = {**extra, "model_call_id": call_id} if isinstance(call_id, str) and call_id else extra
        calls.append(_record(location, entry.get("responses_create_params"), response, own, len(calls)))
    value = row.get("judge_response")
    if is_response(value):
        calls.append(_record("judge_response", None, value, extra, len(calls)))
    elif value is not None:
        skipped.append(SkippedJudgeRecord("judge_response", "not a Responses-API response", malformed=False))
    return calls, skipped
