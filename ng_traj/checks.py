"""Checking one record against the contract: what ``ng-traj validate`` reports for each line or row.

A record is first validated with the pydantic models (the 1.0 contract and its invariants, exactly
as NeMo Gym's models enforce them), then, when valid, cross-referenced for
warnings the contract does not enforce: refs that name no model call of the record,
tool calls without a ``function_call`` in any conversation, unknown gap codes, and parent cycles
among a trajectory's invocations (a warning there, as NeMo Gym's trajectory model accepts them; an error in bundles).

A rollout row's own ``ng_agent_observations`` bundle is the producer's record, kept as recorded by
``build --attach``: what fails the contract in it is reported as a warning (the trajectory built from
the row carries ``agent_observations_invalid`` and does not use it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from ng_traj.contract import AgentObservationBundle, ModelCallRef, TrajectoryRecord
from ng_traj.contract.gaps import KNOWN_GAPS
from ng_traj.contract.observations import parent_cycle
from ng_traj.diagnostics import CODES, Diagnostic, Severity

ROLLOUT_KEYS = ("responses_create_params", "response", "_ng_task_index", "_ng_rollout_id", "reward")
"""Keys that mark a line as a rollout row rather than a bare trajectory."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem inside a record: severity, diagnostic code, dotted pointer and message."""

    severity: Severity
    code: str
    pointer: str
    message: str

    def at(self, path: str, line: int | None, offset: int | None = None) -> Diagnostic:
        """The diagnostic of this finding in the record at ``path``:``line``."""
        return Diagnostic(self.severity, self.code, self.message, path, line, offset, self.pointer or None)


TRAJECTORY_MISSING = Finding(
    "warning", "trajectory_missing", "ng_trajectory", "the rollout row has no trajectory (ng-traj build assembles one)"
)
"""The finding for a rollout row without ``ng_trajectory`` (a raw NeMo Gym rollout row)."""


def is_bare_trajectory(value: Mapping[str, Any]) -> bool:
    """True for a bare ``ng_trajectory`` record; false for a rollout row (which may carry one)."""
    return "ng_trajectory" not in value and ("schema_version" in value or not any(k in value for k in ROLLOUT_KEYS))


def check_line(value: dict[str, Any]) -> tuple[list[Finding], bool]:
    """Check one JSONL object: a bare trajectory, or a rollout row that may carry one.

    Returns:
        The findings and whether the line held a trajectory to check.
    """
    if is_bare_trajectory(value):
        return check_trajectory(value), True
    findings: list[Finding] = []
    bundle = value.get("ng_agent_observations")
    if bundle is not None:
        findings.extend(map(_as_recorded, check_bundle(bundle, prefix="ng_agent_observations")))
    trajectory = value.get("ng_trajectory")
    if trajectory is None:
        findings.append(TRAJECTORY_MISSING)
        return findings, False
    findings.extend(check_trajectory(trajectory, prefix="ng_trajectory"))
    return findings, True


def recorded_bundle_problems(bundle: Any) -> list[Finding]:
    """Where a row's recorded ``ng_agent_observations`` fails the contract, as warnings (``build``
    reports them on the row, whose trajectory then carries ``agent_observations_invalid``)."""
    return [_as_recorded(f) for f in check_bundle(bundle, prefix="ng_agent_observations") if f.severity == "error"]


def _as_recorded(finding: Finding) -> Finding:
    """A problem of a row's ``ng_agent_observations`` is a warning: the bundle is the producer's, kept as
    recorded (``build --attach`` never rewrites it), and a trajectory built from the row carries
    ``agent_observations_invalid`` instead of using it. Bundles ng-traj builds are valid by construction."""
    if finding.severity != "error":
        return finding
    return replace(finding, severity="warning", message=f"{finding.message} (the row's recorded bundle; not used)")


def check_trajectory(value: Any, *, prefix: str = "") -> list[Finding]:
    """Validate one ``ng_trajectory`` value; cross-reference it when valid."""
    try:
        record = TrajectoryRecord.model_validate(value)
    except ValidationError as exc:
        return list(findings_from_error(exc, value, prefix))
    return list(cross_reference(record, prefix))


def check_bundle(value: Any, *, prefix: str = "") -> list[Finding]:
    """Validate one ``ng_agent_observations`` value; warn on unknown gap codes when valid."""
    try:
        bundle = AgentObservationBundle.model_validate(value)
    except ValidationError as exc:
        return list(findings_from_error(exc, value, prefix))
    return list(_unknown_gaps(bundle.gaps, _join(prefix, "gaps")))


def _join(*parts: object) -> str:
    return ".".join(str(part) for part in parts if part != "")


def cross_reference(record: TrajectoryRecord, prefix: str = "") -> Iterator[Finding]:
    """Yield the warnings for a valid trajectory (see module docstring)."""
    ids = {call.model_call_id for call in record.model_calls if call.model_call_id}
    keys = {
        (meta.model_ref.name, meta.response_id)
        for meta in (call.response_metadata for call in record.model_calls)
        if meta.model_ref is not None and meta.response_id
    }

    def resolves(ref: ModelCallRef) -> bool:
        if ref.model_call_id:
            return ref.model_call_id in ids
        return ref.model_ref is not None and (ref.model_ref.name, ref.response_id) in keys

    owners = [("invocations", i, inv.model_calls) for i, inv in enumerate(record.invocations)]
    owners += [("turns", i, turn.model_calls) for i, turn in enumerate(record.turns)]
    for section, index, refs in owners:
        for position, ref in enumerate(refs):
            if not resolves(ref):
                name = ref.model_call_id or ref.response_id
                yield Finding(
                    "warning",
                    "unresolved_model_call_ref",
                    _join(prefix, section, index, "model_calls", position),
                    f"ref {name!r} names no model call of this record",
                )
    for index, call in enumerate(record.model_calls):
        if call.started_at is not None and call.completed_at is not None and call.completed_at < call.started_at:
            yield Finding(
                "warning",
                "model_call_timing_reversed",
                _join(prefix, "model_calls", index, "completed_at"),
                "completed_at precedes started_at",
            )
    yield from _unmatched_tools(record, prefix)
    yield from _unknown_gaps(record.gaps, _join(prefix, "gaps"))
    cycle = parent_cycle(record.invocations)
    if cycle is not None:
        yield Finding(
            "warning",
            "parent_cycle",
            _join(prefix, "invocations", cycle, "parent_invocation_id"),
            f"parent links form a cycle through {record.invocations[cycle].invocation_id!r}",
        )


def _unmatched_tools(record: TrajectoryRecord, prefix: str) -> Iterator[Finding]:
    calls = {
        item.call_id
        for invocation in record.invocations
        for item in invocation.conversation
        if getattr(item, "type", None) == "function_call"
    }
    for index, tool in enumerate(record.tool_calls):
        if tool.tool_call_id not in calls:
            yield Finding(
                "warning",
                "tool_call_without_function_call",
                _join(prefix, "tool_calls", index, "tool_call_id"),
                f"no function_call with call_id {tool.tool_call_id!r} in any conversation",
            )


def _unknown_gaps(gaps: Iterable[Any], prefix: str) -> Iterator[Finding]:
    for index, gap in enumerate(gaps):
        if gap.code not in KNOWN_GAPS:
            yield Finding(
                "warning", "unknown_gap_code", _join(prefix, index, "code"), f"gap code {gap.code!r} is not defined"
            )


_TYPE_CODES = {
    "extra_forbidden": "unknown_field",
    "missing": "missing_field",
    "literal_error": "invalid_value",
    "union_tag_invalid": "invalid_value",
    "union_tag_not_found": "missing_field",
    "value_error": "invalid_value",
}


def _code_for(error: dict[str, Any], pointer: str) -> str:
    kind = error["type"]
    if kind in CODES:
        return kind
    if kind == "literal_error" and pointer.endswith("schema_version"):
        return "schema_version_unsupported"
    if kind in ("greater_than_equal", "greater_than"):
        bound = (error.get("ctx") or {}).get("ge", (error.get("ctx") or {}).get("gt"))
        return "negative_value" if bound == 0 else "out_of_range"
    if kind in _TYPE_CODES:
        return _TYPE_CODES[kind]
    if kind.endswith(("_type", "_parsing")) or kind == "int_from_float":
        return "invalid_type"
    return "invalid_value"


def _resolve_loc(value: Any, loc: tuple[Any, ...]) -> tuple[list[Any], bool]:
    """Map a pydantic error location onto the data, dropping union tags.

    Returns the real path and whether a tag was dropped (the error came from a union member).
    """
    path: list[Any] = []
    tagged = False
    current = value
    for position, part in enumerate(loc):
        last = position == len(loc) - 1
        if isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current):
            path.append(part)
            current = current[part]
        elif isinstance(current, dict) and isinstance(part, str) and (part in current or last):
            path.append(part)
            current = current.get(part)
        else:
            tagged = True
    return path, tagged


def _describe(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return type(value).__name__
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def findings_from_error(exc: ValidationError, value: Any, prefix: str = "") -> Iterator[Finding]:
    """Turn a pydantic ``ValidationError`` into one finding per problem.

    Errors from the members of the conversation-item union are collapsed into one
    ``invalid_conversation_item`` finding per item, unless a specific check inside the item
    (``token_metadata_incomplete``, ``token_metadata_invalid``, ``invalid_input_video``) explains it.
    An item no member takes (an unknown ``type``, not an object) is ``invalid_conversation_item`` too.
    """
    findings: dict[tuple[str, str], Finding] = {}
    item_errors: dict[str, list[Finding]] = {}
    for error in exc.errors():
        path, tagged = _resolve_loc(value, error["loc"])
        tagged = tagged or error["type"] in ("union_tag_invalid", "union_tag_not_found")
        pointer = _join(prefix, *path, (error.get("ctx") or {}).get("pointer", ""))
        code = _code_for(error, pointer)
        finding = Finding("error", code, pointer, _message(error, code))
        item = _conversation_item(path) if tagged else None
        if item is None:
            findings.setdefault((code, pointer), finding)
            continue
        item_pointer = _join(prefix, *item)
        if item_pointer not in item_errors:
            item_errors[item_pointer] = []
            summary = f"matches no conversation item shape ({_item_summary(value, item)})"
            findings[("item", item_pointer)] = Finding("error", "invalid_conversation_item", item_pointer, summary)
        item_errors[item_pointer].append(finding)
    for item_pointer, errors in item_errors.items():
        specific = [f for f in errors if f.code in CODES_RAISED_IN_ITEMS]
        if specific:
            del findings[("item", item_pointer)]
            for finding in specific:
                findings.setdefault((finding.code, finding.pointer), finding)
    return iter(list(findings.values()))


CODES_RAISED_IN_ITEMS = frozenset({"token_metadata_incomplete", "token_metadata_invalid", "invalid_input_video"})


def _conversation_item(path: list[Any]) -> list[Any] | None:
    for index in range(len(path) - 1):
        if path[index] == "conversation" and isinstance(path[index + 1], int):
            return path[: index + 2]
    return None


def _item_summary(value: Any, path: list[Any]) -> str:
    item: Any = value
    for part in path:
        item = item[part]
    if not isinstance(item, dict):
        return f"a JSON {type(item).__name__}"
    fields = [f"{key}={item[key]!r}" for key in ("type", "role") if isinstance(item.get(key), str)]
    return ", ".join(fields) or "no type"


def _message(error: dict[str, Any], code: str) -> str:
    if code == "unknown_field":
        return "field is not part of the contract"
    if code == "missing_field":
        return "required field is missing"
    ctx_pointer = (error.get("ctx") or {}).get("pointer")
    if error["type"] in CODES or ctx_pointer:
        return error["msg"]
    return f"{error['msg']} (got {_describe(error.get('input'))})"
