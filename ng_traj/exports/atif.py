"""One trajectory as an ATIF v1.8 document (Harbor's Agent Trajectory Interchange Format).

Shape (keys in this order, nulls left out): ``schema_version`` ``ATIF-v1.8``; ``session_id`` (the
run, when known); ``trajectory_id`` (``<run>:<task_id>:<rollout_id>``, sub-agents
``<parent trajectory_id>/<invocation_id>``); ``agent`` {name, version, model_name?}; ``steps``;
``final_metrics``; ``subagent_trajectories`` (each child invocation embedded in its parent's
document, linked from the spawning tool call's observation result by ``subagent_trajectory_ref``);
``extra.ng_traj`` (exporter, source identity, reward, gaps, model and tool calls no step holds).

Steps come from the invocation's turns when it has any (new system/user messages of each turn's
question, then one agent step per turn), else from its conversation (system/user messages one step
each; one agent step per model response: its reasoning, text and function calls, with the
``function_call_output`` items as ``observation.results``). Per-step ``metrics`` sum the step's
model calls (prompt tokens include cached ones, as ATIF counts them; reasoning and total tokens under
``metrics.extra``). Tool timing and outcome, model-call records and ids, items ATIF has no place for:
under ``extra.ng_traj``. A ``copied_context`` gap becomes a system step marked
``is_copied_context`` at the start of its invocation (the copied entries themselves were left out of
the trajectory when it was built). The document is checked with Harbor's models
(``harbor.models.trajectories``) when Harbor is installed, else with the ``atif`` package's.

Upstream's exporter (NeMo Gym 0.7.0, ATIF v1.7) accepts only clean single-agent rollouts;
:func:`strict_refusal` applies its acceptance rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from ng_traj import __version__
from ng_traj.diagnostics import plural
from ng_traj.exports.common import (
    INCOMPLETE_FINISH_REASONS,
    Completeness,
    ModelCalls,
    Rollout,
    children_of,
    iso_time,
    json_text,
    message_role,
    reasoning_text,
    root_invocations,
    text_of,
    token_totals,
    without_nulls,
)

SCHEMA_VERSION = "ATIF-v1.8"
UNKNOWN = "unknown"
_INPUT_ROLES = {"system": "system", "developer": "system", "user": "user"}


def trajectory_model() -> tuple[type, str]:
    """ATIF's ``Trajectory`` model and the library it comes from: Harbor's (``harbor``, Python >= 3.12)
    when it imports, else the ``atif`` package's."""
    try:
        from harbor.models.trajectories import Trajectory

        return Trajectory, "harbor"
    except ImportError:
        from atif import Trajectory

        return Trajectory, "atif"


def validate(document: Mapping[str, Any]) -> None:
    """Check ``document`` with the ATIF models.

    Raises:
        pydantic.ValidationError: The models reject it.
    """
    model, _ = trajectory_model()
    model.model_validate(document)


def document_bytes(document: Mapping[str, Any]) -> bytes:
    """The file: JSON with a 2-space indent, non-ASCII kept, and a trailing newline."""
    return orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)


class _Builder:
    def __init__(self, rollout: Rollout, agent_version: str, session_id: str | None, report: Completeness) -> None:
        value = rollout.value
        self.rollout = rollout
        self.value = value
        self.report = report
        self.agent_version = agent_version
        self.session_id = session_id if session_id is not None else rollout.run
        self.invocations = value["invocations"]
        self.calls = ModelCalls(value["model_calls"])
        self.owner = self.calls.owners(self.invocations, value["turns"])
        self.tools: dict[str, list[Mapping[str, Any]]] = {}
        for tool in value["tool_calls"]:
            self.tools.setdefault(tool["tool_call_id"], []).append(tool)
        self.placed_calls: set[int] = set()
        self.placed_tools: set[int] = set()
        self.children = children_of(self.invocations)

    # -- documents -------------------------------------------------------------------------------

    def document(self) -> dict[str, Any]:
        roots = root_invocations(self.invocations)
        run = self.rollout.run
        base = f"{run}:" if run else ""
        trajectory_id = f"{base}{self.rollout.task_id}:{self.rollout.rollout_id}"
        agent = self.rollout.agent or self.rollout.producer
        if agent is None:
            self.report.unfill("agent.name", "the input has no agent name (trajectory JSONL carries none): 'unknown'")
        if self.agent_version == UNKNOWN:
            self.report.unfill("agent.version", "no --agent-version given: 'unknown'")
        if not roots:
            self.report.unfill("invocations", "the trajectory has no invocation: one system step says so")
            placeholder = {
                "step_id": 1,
                "source": "system",
                "message": "[the trajectory has no invocation]",
                "extra": {"ng_traj": {"placeholder": True}},
            }
            document = self._envelope(trajectory_id, agent or UNKNOWN, [placeholder], [], None)
        else:
            document = self._trajectory(roots[0], trajectory_id, agent or UNKNOWN, extra_roots=tuple(roots[1:]))
        ng: dict[str, Any] = document.setdefault("extra", {}).setdefault("ng_traj", {})
        ng["exporter"] = {"name": "ng-traj", "version": __version__}
        ng["source"] = without_nulls(
            {
                "format": "ng_trajectory",
                "schema_version": self.value["schema_version"],
                "run": run,
                "task_id": self.rollout.task_id,
                "rollout_id": self.rollout.rollout_id,
                "producer": self.rollout.producer,
                "reward": self.rollout.reward,
            }
        )
        if self.rollout.reward is not None:
            self.report.keep("reward", 1, "ATIF has no reward field: extra.ng_traj.source.reward")
        document["extra"]["ng_traj"] = {key: ng[key] for key in sorted(ng, key=_EXTRA_ORDER.index)}
        ng = document["extra"]["ng_traj"]
        unplaced_calls = [i for i in range(len(self.calls.calls)) if i not in self.placed_calls]
        if unplaced_calls:
            ng["unplaced_model_calls"] = [without_nulls(self.calls.calls[i]) for i in unplaced_calls]
            self.report.keep(
                "model calls no step holds", len(unplaced_calls), "extra.ng_traj.unplaced_model_calls (whole records)"
            )
        unplaced_tools = [tool for i, tool in enumerate(self.value["tool_calls"]) if i not in self.placed_tools]
        if unplaced_tools:
            ng["unplaced_tool_calls"] = [without_nulls(tool) for tool in unplaced_tools]
            self.report.keep(
                "tool calls no step holds", len(unplaced_tools), "extra.ng_traj.unplaced_tool_calls (whole records)"
            )
        return document

    def _envelope(
        self,
        trajectory_id: str,
        agent: str,
        steps: list[dict[str, Any]],
        subagents: list[dict[str, Any]],
        invocation: Mapping[str, Any] | None,
        is_root: bool = True,
    ) -> dict[str, Any]:
        models = {step["model_name"] for step in steps if step.get("model_name")}
        agent_steps = [step for step in steps if step["source"] == "agent"]
        totals: dict[str, Any] = {}
        for name, total in (
            ("total_prompt_tokens", "prompt_tokens"),
            ("total_completion_tokens", "completion_tokens"),
            ("total_cached_tokens", "cached_tokens"),
        ):
            values = [(step.get("metrics") or {}).get(total) for step in agent_steps]
            if values and all(isinstance(v, int) for v in values):
                totals[name] = sum(values)
        totals["total_steps"] = len(steps)
        document: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "session_id": self.session_id,
            "trajectory_id": trajectory_id,
            "agent": without_nulls(
                {
                    "name": agent,
                    "version": self.agent_version,
                    "model_name": next(iter(models)) if len(models) == 1 else None,
                }
            ),
            "steps": steps,
            "final_metrics": totals,
        }
        if subagents:
            document["subagent_trajectories"] = subagents
        ng: dict[str, Any] = {}
        if invocation is not None:
            ng["invocation"] = without_nulls(
                {
                    "invocation_id": invocation["invocation_id"],
                    "parent_invocation_id": invocation.get("parent_invocation_id"),
                    "spawned_by_tool_call_id": invocation.get("spawned_by_tool_call_id"),
                    "status": invocation.get("status"),
                    "duration_ms": invocation.get("duration_ms"),
                    "error_type": invocation.get("error_type"),
                }
            )
        ids = {inv["invocation_id"] for inv in self.invocations}
        here = invocation["invocation_id"] if invocation is not None else None
        gaps = [
            without_nulls(gap)
            for gap in self.value["gaps"]
            if (gap.get("invocation_id") == here and here is not None)
            or (is_root and gap.get("invocation_id") not in ids)
        ]
        if gaps:
            ng["gaps"] = gaps
            self.report.keep("gaps", len(gaps), "ATIF has no place for them: extra.ng_traj.gaps")
        document["extra"] = {"ng_traj": ng}
        return {key: value for key, value in document.items() if value is not None}

    def _trajectory(
        self,
        invocation: Mapping[str, Any],
        trajectory_id: str,
        agent: str,
        extra_roots: tuple[Mapping[str, Any], ...] = (),
        is_root: bool = True,
    ) -> dict[str, Any]:
        steps = self._steps(invocation)
        subagents = []
        for child in [*self.children.get(invocation["invocation_id"], []), *extra_roots]:
            child_id = f"{trajectory_id}/{child['invocation_id']}"
            sub = self._trajectory(child, child_id, agent, is_root=False)
            subagents.append(sub)
            if not self._link(steps, child, child_id):
                why = (
                    "another root invocation"
                    if child in extra_roots
                    else "no step holds the spawning tool call"
                    if child.get("spawned_by_tool_call_id")
                    else "the spawning tool call is unknown"
                )
                self.report.keep(
                    "sub-agents not linked from a tool call", 1, f"embedded in subagent_trajectories, unlinked ({why})"
                )
        return self._envelope(trajectory_id, agent, steps, subagents, invocation, is_root)

    @staticmethod
    def _link(steps: list[dict[str, Any]], child: Mapping[str, Any], child_id: str) -> bool:
        spawn = child.get("spawned_by_tool_call_id")
        if not spawn:
            return False
        for step in steps:
            if not any(call["tool_call_id"] == spawn for call in step.get("tool_calls") or ()):
                continue
            results = step.setdefault("observation", {"results": []})["results"]
            result = next((r for r in results if r.get("source_call_id") == spawn), None)
            if result is None:
                result = {"source_call_id": spawn}
                results.append(result)
            refs = result.setdefault("subagent_trajectory_ref", [])
            refs.append({"trajectory_id": child_id})
            # keep the key order of a result: source_call_id, content, subagent_trajectory_ref, extra
            results[results.index(result)] = {key: result[key] for key in _RESULT_ORDER if key in result}
            return True
        return False

    # -- steps ------------------------------------------------------------------------------------

    def _steps(self, invocation: Mapping[str, Any]) -> list[dict[str, Any]]:
        invocation_id = invocation["invocation_id"]
        steps: list[dict[str, Any]] = []
        copied = [
            gap
            for gap in self.value["gaps"]
            if gap["code"] == "copied_context" and gap.get("invocation_id") == invocation_id
        ]
        for gap in copied:
            steps.append(
                {
                    "source": "system",
                    "message": "[copied context left out of this trajectory: "
                    + (gap.get("detail") or "entries not named")
                    + "]",
                    "is_copied_context": True,
                    "extra": {"ng_traj": {"gap": without_nulls(gap)}},
                }
            )
        turns = sorted(
            (t for t in self.value["turns"] if t["invocation_id"] == invocation_id), key=lambda t: t["turn_no"]
        )
        outputs = _outputs(invocation.get("conversation") or [])
        if turns:
            steps.extend(self._turn_steps(invocation_id, turns, outputs))
        else:
            steps.extend(self._conversation_steps(invocation_id, invocation.get("conversation") or [], outputs))
        if not steps:  # ATIF needs a step: say that nothing was observed
            steps.append(
                {
                    "source": "system",
                    "message": "[no conversation or turn was observed for this invocation]",
                    "extra": {"ng_traj": {"placeholder": True}},
                }
            )
            self.report.unfill("steps", "an invocation without conversation or turns: one system step says so")
        for number, step in enumerate(steps, 1):
            step["step_id"] = number
        return [{key: step[key] for key in _STEP_ORDER if key in step} for step in steps]

    def _turn_steps(
        self, invocation_id: str, turns: list[Mapping[str, Any]], outputs: dict[str, Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        steps: list[dict[str, Any]] = []
        seen_inputs = 0
        for turn in turns:
            question = turn.get("question") if isinstance(turn.get("question"), list) else []
            inputs = [item for item in question if isinstance(item, Mapping) and message_role(item) in _INPUT_ROLES]
            for item in inputs[seen_inputs:]:
                steps.append(self._input_step(item))
            seen_inputs = max(seen_inputs, len(inputs))
            answer = [item for item in (turn.get("answer") or []) if isinstance(item, Mapping)]
            reasoning = turn.get("reasoning_content")
            reasoning_items = (
                [item for item in reasoning if isinstance(item, Mapping)] if isinstance(reasoning, list) else []
            )
            calls = self.calls.resolve_all(turn.get("model_calls") or ())
            step = self._agent_step(invocation_id, reasoning_items + answer, outputs, calls)
            self._stamp(step, turn["timestamp"])
            step.setdefault("extra", {}).setdefault("ng_traj", {})["turn"] = without_nulls(
                {"turn_no": turn["turn_no"], "step_count": turn.get("step_count"), "resolved": turn.get("resolved")}
            )
            steps.append(step)
        return steps

    def _conversation_steps(
        self, invocation_id: str, conversation: list[Any], outputs: dict[str, Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        groups: list[tuple[str, list[Mapping[str, Any]]]] = []
        current: list[Mapping[str, Any]] | None = None
        for item in conversation:
            if not isinstance(item, Mapping):
                continue
            role = message_role(item)
            kind = item.get("type")
            if role in _INPUT_ROLES:
                groups.append(("input", [item]))
                current = None
            elif kind == "function_call_output":
                current = None  # the next model output is a new response
            else:
                if current is None:
                    current = []
                    groups.append(("agent", current))
                current.append(item)
        owned = [i for i, owner in sorted(self.owner.items()) if owner == invocation_id and i not in self.placed_calls]
        agent_groups = [items for kind, items in groups if kind == "agent"]
        assignment = _assign_calls(agent_groups, owned, self.calls.calls)
        steps = []
        agent_index = 0
        for kind, items in groups:
            if kind == "input":
                steps.append(self._input_step(items[0]))
            else:
                steps.append(self._agent_step(invocation_id, items, outputs, assignment.get(agent_index, [])))
                agent_index += 1
        return steps

    def _input_step(self, item: Mapping[str, Any]) -> dict[str, Any]:
        step: dict[str, Any] = {"source": _INPUT_ROLES[item["role"]], "message": self._message(item.get("content"))}
        if item["role"] == "developer":
            step["extra"] = {"ng_traj": {"role": "developer"}}
        return step

    def _message(self, content: Any) -> str | list[dict[str, Any]]:
        text = text_of(content)
        if text is not None:
            return text
        parts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") in ("input_text", "output_text", "text"):
                parts.append({"type": "text", "text": part.get("text") or ""})
            else:
                parts.append({"type": "text", "text": "[non-text content: " + _part_type(part) + "]"})
                self.report.lose(
                    "non-text content parts", 1, "ATIF media parts need a file path: replaced by a text placeholder"
                )
        return parts

    def _stamp(self, step: dict[str, Any], seconds: float) -> None:
        """Set the step's ``timestamp``, or report the time lost when ISO-8601 cannot hold it."""
        text = iso_time(seconds)
        if text is None:
            self.report.lose("times outside the years 1-9999", 1, "the step has no timestamp")
        else:
            step["timestamp"] = text

    def _agent_step(
        self,
        invocation_id: str,
        items: list[Mapping[str, Any]],
        outputs: dict[str, Mapping[str, Any]],
        calls: list[int],
    ) -> dict[str, Any]:
        texts: list[str] = []
        parts: list[dict[str, Any]] = []
        reasoning: list[Mapping[str, Any]] = []
        tool_calls: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        other: list[Any] = []
        for item in items:
            kind = item.get("type")
            if kind == "reasoning":
                reasoning.append(item)
            elif message_role(item) == "assistant":
                message = self._message(item.get("content"))
                if isinstance(message, str):
                    texts.append(message)
                else:
                    parts.extend(message)
            elif kind == "function_call":
                call, result = self._tool_call(invocation_id, item, outputs)
                tool_calls.append(call)
                if result is not None:
                    results.append(result)
            else:
                other.append(without_nulls(item))
        step: dict[str, Any] = {"source": "agent"}
        if parts:
            step["message"] = [{"type": "text", "text": text} for text in texts] + parts
        else:
            step["message"] = "\n".join(texts)
        chosen = [self.calls.calls[i] for i in calls]
        self.placed_calls.update(calls)
        models = [call.get("model") or (call.get("response_metadata") or {}).get("model") for call in chosen]
        models = [m for m in models if m]
        if len(set(models)) == 1:
            step["model_name"] = models[0]
        text = reasoning_text(reasoning)
        if text is not None:
            step["reasoning_content"] = text
        if tool_calls:
            step["tool_calls"] = tool_calls
        if results:
            step["observation"] = {"results": results}
        if chosen:
            totals = token_totals(chosen)
            metrics = without_nulls(
                {
                    "prompt_tokens": totals["prompt_tokens"],
                    "completion_tokens": totals["completion_tokens"],
                    "cached_tokens": totals["cached_tokens"],
                    "extra": without_nulls(
                        {"reasoning_tokens": totals["reasoning_tokens"], "total_tokens": totals["total_tokens"]}
                    )
                    or None,
                }
            )
            if metrics:
                step["metrics"] = metrics
            step["llm_call_count"] = len(chosen)
            started = [call["started_at"] for call in chosen if call.get("started_at") is not None]
            if started:
                self._stamp(step, min(started))
        ng: dict[str, Any] = {}
        if chosen:
            ng["model_calls"] = [without_nulls(call) for call in chosen]
        if other:
            ng["items"] = other
            self.report.keep("conversation items ATIF has no place for", len(other), "step extra.ng_traj.items")
        if ng:
            step["extra"] = {"ng_traj": ng}
        return step

    def _tool_call(
        self, invocation_id: str, item: Mapping[str, Any], outputs: dict[str, Mapping[str, Any]]
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        call_id = item.get("call_id") or item.get("id") or ""
        raw = item.get("arguments")
        arguments: Any
        try:
            arguments = orjson.loads(raw) if isinstance(raw, str) else raw
        except orjson.JSONDecodeError:
            arguments = None
        call: dict[str, Any] = {"tool_call_id": call_id, "function_name": item.get("name") or "", "arguments": {}}
        ng_call: dict[str, Any] = {}
        if isinstance(arguments, dict):
            call["arguments"] = arguments
        else:
            ng_call["arguments"] = raw
            self.report.keep(
                "tool arguments that are not a JSON object",
                1,
                "arguments {} and the text in tool_calls[].extra.ng_traj",
            )
        if item.get("id"):
            ng_call["source_item_id"] = item["id"]
        if ng_call:
            call["extra"] = {"ng_traj": ng_call}
        record_index = next(
            (
                i
                for i, tool in enumerate(self.value["tool_calls"])
                if tool["tool_call_id"] == call_id
                and tool["invocation_id"] == invocation_id
                and i not in self.placed_tools
            ),
            None,
        )
        record = self.value["tool_calls"][record_index] if record_index is not None else None
        if record_index is not None:
            self.placed_tools.add(record_index)
        output_item = outputs.get(call_id)
        if output_item is None and record is None:
            return call, None
        result: dict[str, Any] = {"source_call_id": call_id}
        if output_item is not None:
            output = output_item.get("output")
            result["content"] = text_of(output) if text_of(output) is not None else json_text(output)
        elif record.get("output") is not None:  # type: ignore[union-attr]
            result["content"] = json_text(record["output"])  # type: ignore[index]
        if record is not None:
            tool = without_nulls(
                {k: v for k, v in record.items() if k not in ("kind", "invocation_id", "tool_call_id", "output")}
            )
            result["extra"] = {"ng_traj": {"tool_call": tool}}
            if any(key in tool for key in ("started_at", "completed_at", "duration_ms")):
                self.report.keep("tool timing", 1, "ATIF has one timestamp per step: observation result extra.ng_traj")
        return call, result


_STEP_ORDER = (
    "step_id",
    "timestamp",
    "source",
    "model_name",
    "message",
    "reasoning_content",
    "tool_calls",
    "observation",
    "metrics",
    "llm_call_count",
    "is_copied_context",
    "extra",
)
_RESULT_ORDER = ("source_call_id", "content", "subagent_trajectory_ref", "extra")
_EXTRA_ORDER = ["exporter", "source", "invocation", "gaps", "unplaced_model_calls", "unplaced_tool_calls"]


def _part_type(part: Any) -> str:
    return str(part.get("type")) if isinstance(part, Mapping) else type(part).__name__


def _outputs(conversation: list[Any]) -> dict[str, Mapping[str, Any]]:
    """``{call_id: function_call_output item}`` (the first output of each call)."""
    found: dict[str, Mapping[str, Any]] = {}
    for item in conversation:
        if isinstance(item, Mapping) and item.get("type") == "function_call_output" and item.get("call_id"):
            found.setdefault(item["call_id"], item)
    return found


def _assign_calls(
    groups: list[list[Mapping[str, Any]]], owned: list[int], calls: list[Mapping[str, Any]]
) -> dict[int, list[int]]:
    """Which model calls made which agent group: a call whose response output names an item of the
    group (its id or call id); then the calls left, in order, to the groups left when both counts agree."""
    assignment: dict[int, list[int]] = {}
    left = list(owned)
    for index, items in enumerate(groups):
        names = {item.get("id") for item in items} | {item.get("call_id") for item in items}
        names.discard(None)
        for call_index in list(left):
            response = calls[call_index].get("response")
            output = response.get("output") if isinstance(response, Mapping) else None
            if not isinstance(output, list):
                continue
            produced = {o.get("id") for o in output if isinstance(o, Mapping)} | {
                o.get("call_id") for o in output if isinstance(o, Mapping)
            }
            if names & (produced - {None}):
                assignment.setdefault(index, []).append(call_index)
                left.remove(call_index)
    empty = [index for index in range(len(groups)) if index not in assignment]
    if left and len(left) == len(empty):
        for index, call_index in zip(empty, left, strict=True):
            assignment[index] = [call_index]
    return assignment


def build_document(
    rollout: Rollout, report: Completeness, *, agent_version: str = UNKNOWN, session_id: str | None = None
) -> dict[str, Any]:
    """The ATIF document of one rollout; what it could not hold goes to ``report``."""
    return _Builder(rollout, agent_version, session_id, report).document()


# -- upstream's acceptance rules ------------------------------------------------------------------


def strict_refusal(rollout: Rollout) -> str | None:
    """Why NeMo Gym 0.7.0's ATIF exporter would refuse this rollout, or ``None`` if it would export it.

    The rules, as upstream applies them before mapping: no gap at all; exactly one invocation, with no
    parent and no spawning tool call, status ``completed`` and no error; an ``agent_ref`` of type
    ``responses_api_agents`` when the row has one; at least one turn, one per model response; every
    model call a turn uses complete (response status ``completed``, no error category, a 2xx status
    code, a model, a finish reason that is not one of the incomplete ones nor contradicts the step's
    tool calls) with token counts that add up; each turn's ``step_count`` the tool calls made up to and
    including it; no response mixing text with tool calls; every tool call completed without error;
    no ``developer`` message, no copied assistant message before the first model output, no
    conversation item with token ids, log probabilities, a ``phase`` or a ``namespace``.
    """
    value = rollout.value
    if value["gaps"]:
        codes = sorted({gap["code"] for gap in value["gaps"]})
        return f"the trajectory has {plural(len(value['gaps']), 'gap')} ({', '.join(codes)}); upstream exports none with a gap"
    invocations = value["invocations"]
    if len(invocations) != 1:
        return f"{len(invocations)} invocations; upstream exports exactly one"
    invocation = invocations[0]
    if invocation.get("parent_invocation_id") or invocation.get("spawned_by_tool_call_id"):
        return "the only invocation is a sub-agent (it has a parent or a spawning tool call)"
    if invocation.get("status") != "completed" or invocation.get("error_type"):
        return (
            f"invocation status {invocation.get('status')!r}"
            + (f" with error {invocation['error_type']!r}" if invocation.get("error_type") else "")
            + "; upstream needs 'completed'"
        )
    ref = rollout.agent_ref
    if ref is not None and ref.get("type") not in (None, "responses_api_agents"):
        return f"agent_ref type {ref.get('type')!r}; upstream needs responses_api_agents"
    conversation = [item for item in invocation.get("conversation") or [] if isinstance(item, Mapping)]
    seen_output = False
    for position, item in enumerate(conversation):
        kept = _TOKEN_FIELDS.intersection(item)
        if any(item.get(key) is not None for key in kept):
            return f"conversation item {position} carries token ids or log probabilities; upstream refuses them"
        if item.get("phase") is not None or item.get("namespace") is not None:
            key = "phase" if item.get("phase") is not None else "namespace"
            return f"conversation item {position} has a {key}; upstream refuses it"
        role = message_role(item)
        if role == "developer":
            return f"conversation item {position} is a developer message; upstream refuses them"
        if role == "assistant" and not seen_output and isinstance(item.get("content"), str):
            return f"conversation item {position} is copied assistant context; upstream refuses it"
        if role in ("system", "user") and seen_output:
            return f"conversation item {position} is a {role} message after the first model output; upstream refuses it"
        if role == "assistant" or item.get("type") in ("function_call", "reasoning", "function_call_output"):
            seen_output = True
    turns = value["turns"]
    if not turns:
        return "the trajectory has no turns; upstream maps each model response to a turn"
    calls = ModelCalls(value["model_calls"])
    tools_so_far = 0
    for turn in sorted(turns, key=lambda t: t["turn_no"]):
        answer = [item for item in turn.get("answer") or [] if isinstance(item, Mapping)]
        has_text = any(message_role(item) == "assistant" for item in answer)
        has_tools = any(item.get("type") == "function_call" for item in answer)
        if has_text and has_tools:
            return f"turn {turn['turn_no']}: the response mixes text with tool calls; upstream refuses it"
        tools_so_far += sum(1 for item in answer if item.get("type") == "function_call")
        if turn.get("step_count") != tools_so_far:
            return (
                f"turn {turn['turn_no']}: step_count {turn.get('step_count')} is not the "
                f"{plural(tools_so_far, 'tool call')} made up to and including it; upstream refuses it"
            )
        refs = turn.get("model_calls") or []
        if len(refs) != 1:
            return f"turn {turn['turn_no']} has {len(refs)} model calls; upstream needs exactly one"
        index = calls.resolve(refs[0])
        if index is None:
            return f"turn {turn['turn_no']}: its model call does not resolve to one call of the trajectory"
        problem = _incomplete(calls.calls[index]) or _contradiction(calls.calls[index], has_tools)
        if problem:
            return f"model call {calls.key(index)} (turn {turn['turn_no']}) {problem}; upstream refuses it"
    for tool in value["tool_calls"]:
        if tool.get("status") != "completed" or tool.get("error_type"):
            return f"tool call {tool['tool_call_id']} has status {tool.get('status')!r}; upstream needs 'completed'"
    return None


_TOKEN_FIELDS = frozenset({"prompt_token_ids", "generation_token_ids", "generation_log_probs", "routed_experts"})
_TOOL_REASONS = frozenset({"tool_calls", "tool_use", "function_call"})
_STOP_REASONS = frozenset({"stop", "end_turn", "stop_sequence"})


def _contradiction(call: Mapping[str, Any], has_tools: bool) -> str | None:
    """A finish reason that contradicts the step (tools with a stop reason, or the reverse), or token
    counts that do not add up."""
    reason = ((call.get("response_metadata") or {}).get("finish_reason") or "").lower()
    if (has_tools and reason in _STOP_REASONS) or (not has_tools and reason in _TOOL_REASONS):
        return f"has finish reason {reason!r}, which contradicts {'its' if has_tools else 'no'} tool calls"
    stats = call.get("token_stats") or {}
    total = stats.get("total_tokens")
    prompt, completion = stats.get("prompt_tokens"), stats.get("completion_tokens")
    cached, reasoning = stats.get("cached_tokens"), stats.get("reasoning_tokens")
    if total is not None and (
        any(v is not None and v > total for v in (prompt, completion, cached, reasoning))
        or (prompt is not None and completion is not None and prompt + completion > total)
    ):
        return "has token counts above its total"
    if cached is not None and prompt is not None and cached > prompt:
        return "has more cached than prompt tokens"
    if reasoning is not None and completion is not None and reasoning > completion:
        return "has more reasoning than completion tokens"
    return None


def _incomplete(call: Mapping[str, Any]) -> str | None:
    meta = call.get("response_metadata") or {}
    if meta.get("response_status") not in (None, "completed"):
        return f"has response status {meta['response_status']!r}"
    if meta.get("error_category"):
        return f"failed ({meta['error_category']})"
    code = meta.get("status_code")
    if code is not None and not 200 <= code < 300:
        return f"has status code {code}"
    if not (meta.get("model") or "").strip():
        return "names no model"
    reason = meta.get("finish_reason")
    if not (reason or "").strip():
        return "has no finish reason"
    if reason.lower() in INCOMPLETE_FINISH_REASONS:
        return f"stopped early (finish reason {reason!r})"
    return None
