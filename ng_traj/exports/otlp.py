"""One trajectory as one OpenTelemetry trace, in the OTLP/JSON encoding of a ``TracesData`` message.

Encoding (the OTLP specification's JSON rules, not protobuf's default JSON mapping): lowerCamelCase
keys, ``traceId``/``spanId``/``parentSpanId`` as lowercase hex strings (32 and 16 digits), enum values
(``kind``, ``status.code``) as integers, 64-bit integers (times, ``intValue``) as decimal strings.

Spans, following the OpenTelemetry GenAI semantic conventions (still in development upstream):

* ``invoke_agent <agent>`` per invocation (kind INTERNAL), child of the invocation that spawned it;
  it spans its own timed model and tool calls (start of the first, end of the last);
* ``chat <model>`` per model call (kind CLIENT), child of the invocation that made it, with
  ``gen_ai.usage.input_tokens`` (cached tokens included), ``gen_ai.usage.output_tokens`` (reasoning
  included), ``gen_ai.usage.cache_read.input_tokens`` and ``gen_ai.usage.reasoning.output_tokens``;
* ``execute_tool <tool>`` per tool call (kind INTERNAL) with its own start and end, so tool calls
  run in parallel overlap.

Ids are derived from ours (:func:`common.hex_id` of the run, task and rollout ids, then the span's
kind and the invocation, model-call or tool-call id). No time is invented: a call with neither a start
nor an end time gets no span; its id is listed on its invocation span (``ng_traj.untimed_model_calls``,
``ng_traj.untimed_tool_calls``) and counted in the completeness report. A call with a start but
neither an end nor a duration is a zero-length span marked ``ng_traj.end_unknown``; one with only an
end, a zero-length span at its end marked ``ng_traj.start_unknown``. An invocation
with nothing timed in it gets no span either (its timed children hang from the nearest timed
ancestor, else become roots).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from ng_traj import __version__
from ng_traj.exports.common import (
    Completeness,
    ModelCalls,
    Rollout,
    hex_id,
    json_text,
    span_times,
)

KIND_INTERNAL, KIND_CLIENT = 1, 3
STATUS_UNSET, STATUS_OK, STATUS_ERROR = 0, 1, 2


def attribute(key: str, value: Any) -> dict[str, Any]:
    """One ``KeyValue``: strings, booleans, integers (as decimal strings), floats, lists of strings."""
    return {"key": key, "value": _any_value(value)}


def _any_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_any_value(item) for item in value]}}
    return {"stringValue": str(value)}


def _attributes(pairs: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [attribute(key, value) for key, value in pairs.items() if value is not None and value != []]


class _Trace:
    def __init__(self, rollout: Rollout, report: Completeness) -> None:
        self.rollout = rollout
        self.report = report
        value = rollout.value
        self.value = value
        self.trace_id = hex_id(rollout.seed, "trace")
        self.calls = ModelCalls(value["model_calls"])
        self.owner = self.calls.owners(value["invocations"], value["turns"])
        self.arguments: dict[tuple[str, str], Any] = {}
        for invocation in value["invocations"]:
            for item in invocation.get("conversation") or []:
                if isinstance(item, Mapping) and item.get("type") == "function_call" and item.get("call_id"):
                    self.arguments.setdefault((invocation["invocation_id"], item["call_id"]), item.get("arguments"))

    def span_id(self, *parts: str) -> str:
        return hex_id(self.rollout.seed, *parts, length=16)

    def traces_data(self) -> dict[str, Any] | None:
        """The ``TracesData`` object, or ``None`` when nothing in the rollout is timed."""
        value = self.value
        agent = self.rollout.agent or self.rollout.producer
        invocations = value["invocations"]
        ids = {inv["invocation_id"] for inv in invocations}
        spans_by_invocation: dict[str | None, list[dict[str, Any]]] = {}
        untimed_calls: dict[str | None, list[str]] = {}
        untimed_tools: dict[str | None, list[str]] = {}
        for index, call in enumerate(value["model_calls"]):
            owner = self.owner.get(index)
            times = span_times(call)
            if times is None:
                untimed_calls.setdefault(owner, []).append(self.calls.key(index))
                continue
            spans_by_invocation.setdefault(owner, []).append(self._model_span(index, call, times, agent))
        for index, tool in enumerate(value["tool_calls"]):
            owner = tool["invocation_id"] if tool["invocation_id"] in ids else None
            times = span_times(tool)
            if times is None:
                untimed_tools.setdefault(owner, []).append(tool["tool_call_id"])
                continue
            spans_by_invocation.setdefault(owner, []).append(self._tool_span(index, tool, times, agent))
        count_calls = sum(len(v) for v in untimed_calls.values())
        count_tools = sum(len(v) for v in untimed_tools.values())
        self.report.lose("model calls without a time (no span)", count_calls, "ids on the invocation span")
        self.report.lose("tool calls without a time (no span)", count_tools, "ids on the invocation span")

        # invocation spans, bottom-up extents
        by_id = {inv["invocation_id"]: inv for inv in invocations}
        children: dict[str, list[str]] = {}
        for inv in invocations:
            parent = inv.get("parent_invocation_id")
            if parent in by_id and parent != inv["invocation_id"]:
                children.setdefault(parent, []).append(inv["invocation_id"])
        extent: dict[str, tuple[int, int] | None] = {}

        def measure(invocation_id: str, trail: frozenset[str]) -> tuple[int, int] | None:
            if invocation_id in extent:
                return extent[invocation_id]
            bounds = [
                (int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"]))
                for s in spans_by_invocation.get(invocation_id, [])
            ]
            for child in children.get(invocation_id, []):
                if child not in trail:
                    found = measure(child, trail | {child})
                    if found:
                        bounds.append(found)
            extent[invocation_id] = (min(b[0] for b in bounds), max(b[1] for b in bounds)) if bounds else None
            return extent[invocation_id]

        for inv in invocations:
            measure(inv["invocation_id"], frozenset({inv["invocation_id"]}))

        def timed_ancestor(invocation_id: str | None) -> str | None:
            seen: set[str] = set()
            while invocation_id is not None and invocation_id not in seen:
                seen.add(invocation_id)
                if extent.get(invocation_id):
                    return invocation_id
                invocation_id = by_id[invocation_id].get("parent_invocation_id") if invocation_id in by_id else None
                invocation_id = invocation_id if invocation_id in by_id else None
            return None

        spans: list[dict[str, Any]] = []
        untimed_invocations = 0
        gaps_by_invocation: dict[str | None, list[str]] = {}
        for gap in value["gaps"]:
            where = gap.get("invocation_id") if gap.get("invocation_id") in ids else None
            text = gap["code"] + (f": {gap['detail']}" if gap.get("detail") else "")
            gaps_by_invocation.setdefault(where, []).append(text)
        roots = [inv["invocation_id"] for inv in invocations if inv.get("parent_invocation_id") not in by_id]
        for inv in invocations:
            invocation_id = inv["invocation_id"]
            bounds = extent.get(invocation_id)
            is_first_root = bool(roots) and invocation_id == roots[0]
            if bounds is None:
                untimed_invocations += 1
                continue
            parent = inv.get("parent_invocation_id")
            parent_span = timed_ancestor(parent) if parent in by_id else None
            extra_gaps = gaps_by_invocation.get(None, []) if is_first_root else []
            attributes = {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": agent,
                "gen_ai.agent.id": invocation_id,
                "gen_ai.conversation.id": self.rollout.rollout_id,
                "ng_traj.run": self.rollout.run if is_first_root else None,
                "ng_traj.task_id": self.rollout.task_id if is_first_root else None,
                "ng_traj.rollout_id": self.rollout.rollout_id if is_first_root else None,
                "ng_traj.reward": self.rollout.reward if is_first_root else None,
                "ng_traj.producer": self.rollout.producer if is_first_root else None,
                "ng_traj.invocation.status": inv.get("status"),
                "ng_traj.invocation.duration_ms": inv.get("duration_ms"),
                "ng_traj.spawned_by_tool_call_id": inv.get("spawned_by_tool_call_id"),
                "error.type": inv.get("error_type"),
                "ng_traj.untimed_model_calls": untimed_calls.get(invocation_id, [])
                + (untimed_calls.get(None, []) if is_first_root else []),
                "ng_traj.untimed_tool_calls": untimed_tools.get(invocation_id, [])
                + (untimed_tools.get(None, []) if is_first_root else []),
                "ng_traj.gaps": gaps_by_invocation.get(invocation_id, []) + extra_gaps,
            }
            span = {
                "traceId": self.trace_id,
                "spanId": self.span_id("invocation", invocation_id),
                **({"parentSpanId": self.span_id("invocation", parent_span)} if parent_span else {}),
                "name": f"invoke_agent {agent}" if agent else "invoke_agent",
                "kind": KIND_INTERNAL,
                "startTimeUnixNano": str(bounds[0]),
                "endTimeUnixNano": str(bounds[1]),
                "attributes": _attributes(attributes),
                "status": _status(
                    inv.get("status") in ("failed", "error", "timeout", "cancelled") or bool(inv.get("error_type"))
                ),
            }
            spans.append(span)
            for child in spans_by_invocation.get(invocation_id, []):
                child["parentSpanId"] = span["spanId"]
                spans.append(child)
        self.report.lose(
            "invocations with nothing timed (no span)",
            untimed_invocations,
            "their timed sub-agents hang from the nearest timed ancestor",
        )
        unowned = spans_by_invocation.get(None, [])
        root_span = next((s for s in spans if "parentSpanId" not in s), None)
        for child in unowned:
            if root_span is not None:
                child["parentSpanId"] = root_span["spanId"]
            child["attributes"].append(attribute("ng_traj.invocation_unknown", True))
            spans.append(child)
        gaps = sum(len(v) for v in gaps_by_invocation.values())
        if gaps:
            self.report.keep("gaps", gaps, "attribute ng_traj.gaps of the invocation span")
        if not spans:
            return None
        if any(inv.get("conversation") for inv in invocations):
            items = sum(len(inv.get("conversation") or []) for inv in invocations)
            self.report.lose("conversation items", items, "a trace holds calls, times and tokens, not the messages")
        if value["turns"]:
            self.report.lose("turns", len(value["turns"]), "a trace has no turns")
        payloads = sum(
            1 for call in value["model_calls"] if call.get("request") is not None or call.get("response") is not None
        )
        self.report.lose("model-call payloads", payloads, "request and response bodies are not span attributes here")
        if not agent:
            self.report.unfill("gen_ai.agent.name", "the input has no agent name (trajectory JSONL carries none)")
        resource = {"attributes": _attributes({"service.name": agent or "ng-traj"})}
        scope = {"name": "ng-traj", "version": __version__}
        return {"resourceSpans": [{"resource": resource, "scopeSpans": [{"scope": scope, "spans": spans}]}]}

    def _model_span(
        self, index: int, call: Mapping[str, Any], times: tuple[int, int, str | None], agent: str | None
    ) -> dict[str, Any]:
        meta = call.get("response_metadata") or {}
        stats = call.get("token_stats") or {}
        model = meta.get("model")
        failed = bool(meta.get("error_category")) or (
            meta.get("status_code") is not None and not 200 <= meta["status_code"] < 300
        )
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": None,
            "gen_ai.request.model": model,
            "gen_ai.response.model": model,
            "gen_ai.response.id": meta.get("response_id"),
            "gen_ai.response.finish_reasons": [meta["finish_reason"]] if meta.get("finish_reason") else None,
            "gen_ai.agent.name": agent,
            "gen_ai.usage.input_tokens": stats.get("prompt_tokens"),
            "gen_ai.usage.output_tokens": stats.get("completion_tokens"),
            "gen_ai.usage.cache_read.input_tokens": stats.get("cached_tokens"),
            "gen_ai.usage.reasoning.output_tokens": stats.get("reasoning_tokens"),
            "ng_traj.usage.total_tokens": stats.get("total_tokens"),
            "ng_traj.model_call_id": call.get("model_call_id"),
            "ng_traj.dialect": meta.get("dialect"),
            "http.response.status_code": meta.get("status_code"),
            "error.type": meta.get("error_category"),
            f"ng_traj.{times[2]}_unknown": True if times[2] else None,
        }
        return {
            "traceId": self.trace_id,
            "spanId": self.span_id("model_call", str(index), call.get("model_call_id") or ""),
            "name": f"chat {model}" if model else "chat",
            "kind": KIND_CLIENT,
            "startTimeUnixNano": str(times[0]),
            "endTimeUnixNano": str(times[1]),
            "attributes": _attributes(attributes),
            "status": _status(failed),
        }

    def _tool_span(
        self, index: int, tool: Mapping[str, Any], times: tuple[int, int, str | None], agent: str | None
    ) -> dict[str, Any]:
        arguments = self.arguments.get((tool["invocation_id"], tool["tool_call_id"]))
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool.get("tool_name"),
            "gen_ai.tool.call.id": tool["tool_call_id"],
            "gen_ai.tool.call.arguments": json_text(arguments) if arguments is not None else None,
            "gen_ai.tool.call.result": json_text(tool["output"]) if tool.get("output") is not None else None,
            "gen_ai.agent.name": agent,
            "ng_traj.tool.status": tool.get("status"),
            "ng_traj.tool.timing_source": tool.get("timing_source"),
            "ng_traj.sandbox_id": tool.get("sandbox_id"),
            "error.type": tool.get("error_type"),
            f"ng_traj.{times[2]}_unknown": True if times[2] else None,
        }
        name = tool.get("tool_name")
        return {
            "traceId": self.trace_id,
            "spanId": self.span_id("tool_call", str(index), tool["tool_call_id"]),
            "name": f"execute_tool {name}" if name else "execute_tool",
            "kind": KIND_INTERNAL,
            "startTimeUnixNano": str(times[0]),
            "endTimeUnixNano": str(times[1]),
            "attributes": _attributes(attributes),
            "status": _status(
                tool.get("status") in ("failed", "error", "timeout", "cancelled") or bool(tool.get("error_type"))
            ),
        }


def _status(failed: bool) -> dict[str, Any]:
    return {"code": STATUS_ERROR} if failed else {}


def build_traces(rollout: Rollout, report: Completeness) -> dict[str, Any] | None:
    """The ``TracesData`` of one rollout (``None``: nothing timed, no trace); losses go to ``report``."""
    return _Trace(rollout, report).traces_data()


def line_bytes(traces: Mapping[str, Any]) -> bytes:
    """One JSON Lines line of the file exporter format: compact JSON and ``\\n``."""
    return orjson.dumps(traces, option=orjson.OPT_APPEND_NEWLINE)
