"""``ng-traj export --format otlp``: OTLP/JSON traces, decoded as the OTLP specification says."""

from __future__ import annotations

import base64
import re

import orjson
import pytest
from google.protobuf import json_format
from opentelemetry.proto.trace.v1.trace_pb2 import Span, TracesData

from conftest import build_valid, run_cli, run_json, shared_dir
from export_samples import (
    ALL_EXPECTED,
    LONG_AND_DOT_IDS,
    RETAINED,
    SUBAGENTS,
    clean_rollout,
    parallel_rollout,
    with_rollout_id,
    write_jsonl,
)

HEX32, HEX16 = re.compile(r"[0-9a-f]{32}"), re.compile(r"[0-9a-f]{16}")


def _decode(line: bytes) -> TracesData:
    """One line as OTLP/JSON: ids are hex (checked here, then turned into protobuf's base64 to parse)."""
    value = orjson.loads(line)
    for resource in value["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                assert HEX32.fullmatch(span["traceId"]) and HEX16.fullmatch(span["spanId"]), span
                assert isinstance(span["kind"], int)
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        assert key != "parentSpanId" or HEX16.fullmatch(span[key])
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    message = TracesData()
    json_format.ParseDict(value, message)  # unknown or mistyped keys raise
    return message


def _spans(message: TracesData) -> list[Span]:
    return [span for r in message.resource_spans for s in r.scope_spans for span in s.spans]


def _attributes(span: Span) -> dict:
    out = {}
    for kv in span.attributes:
        kind = kv.value.WhichOneof("value")
        value = getattr(kv.value, kind)
        out[kv.key] = [getattr(v, v.WhichOneof("value")) for v in value.values] if kind == "array_value" else value
    return out


def _export(tmp_path, *inputs, extra=()):
    out = tmp_path / "traces.jsonl"
    result = run_json("export", *inputs, "--format", "otlp", "-o", out, *extra)
    return result, out


def test_every_line_decodes_as_traces_data_one_trace_per_rollout(tmp_path):
    result, out = _export(tmp_path, *ALL_EXPECTED)
    assert result.exit_code in (1, 3), result.stderr
    lines = out.read_bytes().splitlines()
    assert len(lines) == result.summary["written"] > 10
    trace_ids = []
    for line in lines:
        spans = _spans(_decode(line))
        assert spans and len({span.trace_id for span in spans}) == 1
        ids = {span.span_id for span in spans}
        assert len(ids) == len(spans)
        assert all(span.parent_span_id in ids for span in spans if span.parent_span_id)
        assert all(span.end_time_unix_nano >= span.start_time_unix_nano > 0 for span in spans)
        trace_ids.append(spans[0].trace_id)
    assert len(set(trace_ids)) == len(trace_ids)
    untimed = {d["line"] for d in result.diagnostics if d["code"] == "export_untimed"}
    assert untimed and all(d["severity"] == "warning" for d in result.diagnostics if d["code"] == "export_untimed")


def test_spans_parentage_tokens_and_times_of_a_clean_rollout(tmp_path):
    _, out = _export(tmp_path, write_jsonl(tmp_path / "clean.jsonl", clean_rollout()))
    spans = _spans(_decode(out.read_bytes()))
    names = [span.name for span in spans]
    assert names == ["invoke_agent", "chat policy-1", "chat policy-1", "execute_tool calc"]
    agent, first, second, tool = spans
    assert agent.parent_span_id == b"" and agent.kind == Span.SPAN_KIND_INTERNAL
    assert {s.parent_span_id for s in (first, second, tool)} == {agent.span_id}
    assert first.kind == Span.SPAN_KIND_CLIENT and tool.kind == Span.SPAN_KIND_INTERNAL
    assert (agent.start_time_unix_nano, agent.end_time_unix_nano) == (1786000000_000000000, 1786000001_500000000)
    assert (tool.start_time_unix_nano, tool.end_time_unix_nano) == (1786000000_500000000, 1786000000_750000000)
    tokens = _attributes(second)
    assert tokens["gen_ai.usage.input_tokens"] == 35  # cached tokens included
    assert tokens["gen_ai.usage.cache_read.input_tokens"] == 16
    assert tokens["gen_ai.usage.output_tokens"] == 5  # reasoning tokens included
    assert tokens["gen_ai.usage.reasoning.output_tokens"] == 2
    assert tokens["gen_ai.response.finish_reasons"] == ["stop"]
    assert tokens["ng_traj.model_call_id"] == "mc2"
    assert _attributes(tool)["gen_ai.tool.call.arguments"] == '{"expr": "6*7"}'
    assert _attributes(agent)["ng_traj.rollout_id"] == "7-0"


def test_parallel_tool_calls_overlap(tmp_path):
    _, out = _export(tmp_path, write_jsonl(tmp_path / "parallel.jsonl", parallel_rollout()))
    tools = [span for span in _spans(_decode(out.read_bytes())) if span.name.startswith("execute_tool")]
    assert [_attributes(span)["gen_ai.tool.call.id"] for span in tools] == ["call_1", "call_2"]
    first, second = tools
    assert first.start_time_unix_nano < second.start_time_unix_nano < first.end_time_unix_nano
    assert second.end_time_unix_nano > first.end_time_unix_nano


def test_subagent_span_hangs_from_the_spawning_invocation(tmp_path):
    record = orjson.loads(SUBAGENTS.read_bytes().splitlines()[0])
    for call in record["model_calls"] + record["tool_calls"]:  # a time for every call (some have none here)
        call["started_at"] = call.get("started_at") or 1786000000.0
    (child,) = [i for i in record["invocations"] if i.get("parent_invocation_id")]
    record["model_calls"][2]["model_call_id"] = "mc-child"  # the fixture's calls name no owner: give one
    child["model_calls"] = [{"model_call_id": "mc-child"}]
    _, out = _export(tmp_path, write_jsonl(tmp_path / "sub.jsonl", record))
    spans = _spans(_decode(out.read_bytes()))
    agents = {_attributes(s)["gen_ai.agent.id"]: s for s in spans if s.name.startswith("invoke_agent")}
    assert agents[child["invocation_id"]].parent_span_id == agents[child["parent_invocation_id"]].span_id
    (chat,) = [s for s in spans if _attributes(s).get("ng_traj.model_call_id") == "mc-child"]
    assert chat.parent_span_id == agents[child["invocation_id"]].span_id
    unowned = [s for s in spans if _attributes(s).get("ng_traj.invocation_unknown")]
    assert len(unowned) == 2 and {s.parent_span_id for s in unowned} == {agents["ses_root"].span_id}


def test_untimed_calls_get_no_span_and_are_named_on_the_invocation(tmp_path):
    value = clean_rollout()
    value["model_calls"][1].update(started_at=None, completed_at=None)
    result, out = _export(tmp_path, write_jsonl(tmp_path / "untimed.jsonl", value))
    assert result.exit_code == 3
    spans = _spans(_decode(out.read_bytes()))
    assert [span.name for span in spans] == ["invoke_agent", "chat policy-1", "execute_tool calc"]
    assert _attributes(spans[0])["ng_traj.untimed_model_calls"] == ["mc2"]
    report = orjson.loads((tmp_path / "traces.jsonl.completeness.json").read_bytes())
    lost = {entry["what"]: entry["count"] for entry in report["rollouts"][0]["lost"]}
    assert lost["model calls without a time (no span)"] == 1


def test_a_call_with_one_known_time_is_a_marked_zero_length_span(tmp_path):
    value = clean_rollout()
    value["model_calls"][0].update(started_at=None, duration_ms=None)  # dated by its completion only
    value["tool_calls"][0].update(completed_at=None, duration_ms=None)  # by its start only
    _, out = _export(tmp_path, write_jsonl(tmp_path / "half.jsonl", value))
    agent, first, _, tool = _spans(_decode(out.read_bytes()))
    assert first.start_time_unix_nano == first.end_time_unix_nano == 1786000000_250000000
    assert _attributes(first)["ng_traj.start_unknown"] is True
    assert tool.start_time_unix_nano == tool.end_time_unix_nano == 1786000000_500000000
    assert _attributes(tool)["ng_traj.end_unknown"] is True
    assert "ng_traj.end_unknown" not in _attributes(agent) and agent.start_time_unix_nano == 1786000000_250000000


def test_ids_are_derived_and_output_is_byte_identical(tmp_path):
    source = write_jsonl(tmp_path / "clean.jsonl", clean_rollout())
    run_json("export", source, "--format", "otlp", "-o", tmp_path / "a.jsonl")
    run_json("export", source, "--format", "otlp", "-o", tmp_path / "b.jsonl")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    from ng_traj.exports.common import hex_id

    trace = orjson.loads((tmp_path / "a.jsonl").read_bytes())["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert trace["traceId"] == hex_id(f"{source}\x00\x007\x007-0".encode(), "trace")


def test_split_writes_one_file_per_rollout(tmp_path):
    out = tmp_path / "traces"
    result = run_json("export", RETAINED, "--format", "otlp", "--split", "-o", out)
    files = sorted(path.name for path in out.iterdir())
    assert len(files) == result.summary["written"] == 10
    assert "0-0.jsonl" in files
    for path in out.iterdir():
        (line,) = path.read_bytes().splitlines()
        _decode(line)


def test_a_directory_output_without_split_is_a_usage_error(tmp_path):
    result = run_cli("export", RETAINED, "--format", "otlp", "-o", tmp_path)
    assert result.exit_code == 2
    assert "is a directory" in result.stderr


@pytest.mark.parametrize("option", ["--agent-version", "--session-id"])
def test_an_atif_only_option_with_otlp_is_a_usage_error(tmp_path, option):
    out = tmp_path / "traces.jsonl"
    result = run_cli("export", RETAINED, "--format", "otlp", option, "1.4", "-o", out)
    assert result.exit_code == 2
    assert f"error: {option} is for --format atif (OTLP traces have no place for it)" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("flag", ["--redact"])
def test_redaction_masks_secrets_in_the_trace(tmp_path, flag):
    value = clean_rollout()
    value["tool_calls"][0]["output"] = "key sk-abcdefghijklmnopqrstuvwxyz0123456789"
    _, out = _export(tmp_path, write_jsonl(tmp_path / "secret.jsonl", value), extra=(flag,))
    text = out.read_text()
    assert "sk-abcdefghijklmnopqrstuvwxyz0123456789" not in text and "[REDACTED]" in text


def test_real_samples_one_trace_per_timed_rollout(tmp_path):
    records = build_valid(tmp_path, shared_dir("producer-samples"))
    source = write_jsonl(tmp_path / "natives.jsonl", *records)
    result, out = _export(tmp_path, source)
    timed = [
        r for r in records if any(c["started_at"] or c["completed_at"] for c in r["model_calls"] + r["tool_calls"])
    ]
    assert result.exit_code == (1 if len(timed) < len(records) else 3)
    lines = out.read_bytes().splitlines()
    assert len(lines) == len(timed) == result.summary["written"]
    for line, record in zip(lines, timed, strict=True):
        spans = _spans(_decode(line))
        chats = [s for s in spans if s.name.startswith("chat")]
        timed_calls = [c for c in record["model_calls"] if c["started_at"] or c["completed_at"]]
        assert len(chats) == len(timed_calls)
        assert sum(_attributes(s).get("gen_ai.usage.input_tokens", 0) for s in chats) == sum(
            c["token_stats"]["prompt_tokens"] or 0 for c in timed_calls
        )


def test_split_names_long_and_dot_rollout_ids_short_visible_and_distinct(tmp_path):
    source = write_jsonl(tmp_path / "ids.jsonl", *map(with_rollout_id, LONG_AND_DOT_IDS))
    out = tmp_path / "traces"
    result = run_json("export", source, "--format", "otlp", "--split", "-o", out)
    assert result.exit_code == 3, result.summary  # written, lossy as every OTLP export of the clean rollout
    names = sorted(path.name for path in out.iterdir())
    assert len(names) == result.summary["written"] == len(LONG_AND_DOT_IDS)
    assert all(len(name.encode()) <= 200 and not name.startswith(".") for name in names), names
    for path in out.iterdir():
        (line,) = path.read_bytes().splitlines()
        _decode(line)
