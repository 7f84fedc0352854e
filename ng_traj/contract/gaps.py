"""The gap-code catalogue: every code NeMo Gym 0.7.0 emits and the codes ng-traj adds.

Upstream codes are reused wherever the meaning is the same. ng-traj's own codes
are listed in ``NG_TRAJ_GAPS`` and documented in ``docs/gaps.md``; ``ng-traj validate`` warns about any code
in neither table.
"""

from __future__ import annotations

UPSTREAM_GAPS: dict[str, str] = {
    # capture, collector, join
    "model_call_capture_no_records": "no capture file or marker for the rollout, or the file had no records",
    "model_call_capture_records_unreadable": "n capture lines were not JSON objects or not valid records",
    "model_call_capture_incomplete": "the .capture.incomplete marker is present: a capture write was lost",
    "model_call_capture_unreadable": "reading the capture store failed",
    "agent_observation_join_failed": "observations could not be validated or joined",
    "compaction_model_call_join_failed": "Claude Code compaction association failed",
    "model_call_reference_unmatched": "no captured call matches the reference",
    "model_call_reference_ambiguous": "several captured calls match the reference",
    "model_call_reference_conflict": "the matched call is already owned by another reference",
    "model_call_ownership_unavailable": "a captured call is owned by no invocation, or a producer cannot name its calls",
    "producer_trajectory_identity_mismatch": "producer ids differ from the canonical ids; turns rewritten",
    "producer_trajectory_invalid": "the producer ng_trajectory failed validation and was ignored",
    "agent_observations_invalid": "ng_agent_observations failed validation and was ignored",
    "model_call_capture_gap_invalid": "a capture gap entry was not a valid gap",
    "model_calls_unavailable": "the trajectory has no model calls",
    "turns_unavailable": "the trajectory has no turns",
    "conversation_unavailable": "no invocation has a non-empty conversation",
    "trajectory_projection_failed": "the projection raised; payloads retained",
    # simple agent, LabBench
    "model_call_reference_unavailable": "a model response had no id for this turn",
    "resolution_unavailable": "the verify result had no boolean resolved",
    "multimodal_history_redacted": "images were stripped; payload copies omitted",
    # shared producer codes
    "observation_capture_failed": "observation building raised; the bundle holds only this gap",
    "observation_parse_failed": "the extractor raised",
    "no_sandbox_runtime": "the harness ran locally; no sandbox observation exists",
    "sandbox_observation_unavailable": "sandbox observation unavailable for this terminal backend",
    "agent_transcript_unavailable": "no usable transcript or artifact",
    "subagent_hierarchy_unavailable": "sub-agent lineage is not observable",
    "invocation_outcome_unavailable": "no explicit invocation outcome",
    "tool_timing_unavailable": "no valid start/completion interval for the tool call",
    "tool_outcome_unavailable": "tool status unknown",
    "compaction_summary_unavailable": "compaction without summary",
    "compaction_tokens_after_unavailable": "no post-compaction token count",
    "compaction_model_call_boundary_unavailable": "before/after model calls of a compaction not observable",
    "compaction_outcome_unavailable": "compaction outcome unknown",
    "compaction_after_model_call_unavailable": "no identifiable model call after compaction",
    "subagent_parent_unavailable": "sub-agent without resolvable parent",
    "subagent_spawn_tool_unavailable": "parent known but not the spawning tool call",
    # Claude Code
    "transcript_dir_missing": "Claude Code config or projects directory missing",
    "transcript_dir_unreadable": "transcript directory unreadable",
    "transcript_unreadable": "a transcript file could not be read",
    "malformed_transcript_line": "a transcript line is not JSON",
    "invalid_transcript_record": "a transcript line is JSON but not an object",
    "model_response_id_missing": "assistant message without response id",
    "unsupported_assistant_content_block": "assistant content block of an unsupported type",
    "invalid_assistant_content": "assistant content of an invalid shape",
    "assistant_item_id_missing": "no id for an assistant output item",
    "reasoning_item_id_missing": "no id for a reasoning item",
    "tool_call_id_missing": "tool call without id",
    "unsupported_user_content_block": "user content block of an unsupported type",
    "invalid_user_content": "user content of an invalid shape",
    "tool_result_id_missing": "tool result without id",
    "conflicting_subagent_parent": "a sub-agent claims two parents",
    "cyclic_subagent_parent": "a sub-agent parent link would form a cycle",
    "ambiguous_subagent_relation": "several tool results could spawn the sub-agent",
    "compaction_before_model_call_unavailable": "no model call before the compaction",
    "compaction_model_call_reference_unavailable": "the compaction's own model call is not referenced",
    "compaction_timestamp_missing": "compaction without timestamp",
    "ambiguous_tool_artifact": "more than one start or finish for a tool call",
    "tool_start_missing": "tool result without start",
    "tool_result_missing": "tool call without result",
    "tool_start_timestamp_missing": "tool start without timestamp",
    "tool_result_timestamp_missing": "tool result without timestamp",
    "tool_timing_invalid": "tool completion precedes its start",
    "subagent_transcript_missing": "referenced sub-agent has no transcript",
    "compaction_model_call_match_ambiguous": "several captured calls match a compaction",
    # OpenClaw, PinchBench
    "agent_session_store_unreadable": "a sessions.json store is unreadable or not an object",
    "agent_session_entry_unparseable": "a session store entry is not an object",
    "agent_session_identity_ambiguous": "a session key appears in two stores",
    "subagent_parent_ambiguous": "spawnedBy and parentSessionKey disagree",
    "subagent_hierarchy_incomplete": "the sub-agent tree is incomplete",
    "agent_invocation_unavailable": "a session yielded no invocation",
    "context_compaction_unavailable": "compaction not observable",
    "agent_conversation_branching_unavailable": "the transcript branches; branches not resolved",
    "tool_call_identity_ambiguous": "a tool call id appears more than once",
    "agent_artifact_record_unparseable": "an artifact line is not a JSON object",
    "tool_result_unowned": "a tool result names no unique model-visible call",
    # Hermes
    "hermes_hook_unavailable": "a Hermes runtime hook is missing",
    "hermes_observer_error": "the Hermes observer raised",
    "model_response_id_unavailable": "a model call returned no response id",
    "subagent_spawn_unattributed": "a child agent not spawned by delegate_task",
    "duplicate_tool_call": "a tool call started twice",
    "reasoning_details_unavailable": "provider reasoning_details not converted",
    # Pi
    "compaction_start_unavailable": "compaction end without start",
    "compaction_result_unavailable": "compaction without result",
    "compaction_tokens_before_unavailable": "no pre-compaction token count",
    "compaction_boundary_unavailable": "compaction without first kept entry",
    # OpenCode
    "agent_artifact_unavailable": "the OpenCode database is missing or unreadable",
    "agent_artifact_record_unowned": "a message or part belongs to no session",
    "tool_call_identity_unavailable": "a tool part has no call id",
    "compaction_summary_ambiguous": "several summaries for one compaction",
    "compaction_first_kept_item_unavailable": "first kept item not resolvable",
    "compaction_token_counts_unavailable": "compaction token counts not reported",
    "subagent_spawn_ambiguous": "several tool calls could have spawned the sub-agent",
    "agent_run_timeout": "the agent run timed out",
    # added by nemo-gym 0.7.0: Terminus 2, mini-SWE, NOOA, sandboxed OpenCode and vibench producers
    "auxiliary_model_calls": "recorded responses exist that were not main decisions of the agent",
    "compaction_outside_main_turns": "a summarisation ran; its calls are not turns",
    "decision_model_response_unavailable": "no unique response for a decision; no turn (detail decision=<n>)",
    "model_attempt_without_response": "a request attempt produced no response (detail: the exception class)",
    "model_response_id_reused": "two responses shared an id (detail: the response id)",
    "model_response_rejected": "an empty or incomplete response was rejected as context overflow",
    "transport_retry_visibility_unavailable": "HTTP-level retries are not visible",
    "turn_model_call_scope_incomplete": "a turn's refs may not cover every call made for it",
    "native_trajectory_unavailable": "the harness wrote no native trajectory file",
    "native_trajectory_partial": "the run was cancelled or timed out; the last step may be missing",
    "non_trainable_terminal_output": "a fallback final message was appended that the model did not write",
    "foreign_turn_projected_portable": "a stored turn lacked Gym raw output; only portable fields were replayed",
    "sandbox_lifecycle_timing_unavailable": "no sandbox wall-clock or CPU timing",
    "verifier_sandbox_observation_invalid": "the verifier's sandbox record was invalid or had the wrong role",
    "verifier_sandbox_observation_unavailable": "the resources server sent no verifier sandbox record",
}

DYNAMIC_GAPS: dict[str, str] = {
    "policy_budget_exceeded": "NOOA stopped the episode: the policy budget ran out (detail: the error text)",
    "invalid_policy_output": "NOOA stopped the episode: the policy's output was invalid (detail: the error text)",
    "timeout_exceeded": "NOOA failure class: the episode timed out",
    "transient": "NOOA failure class: a transient infrastructure error",
    "legitimate": "NOOA failure class: the episode failed for a reason of its own",
}
"""Codes the NOOA agent of nemo-gym 0.7.0 makes from its termination reason or failure class (not literals
in its code, so the list is open upstream; these are the values it is known to write)."""

NG_TRAJ_GAPS: dict[str, str] = {
    "model_call_capture_call_invalid": (
        "a call in the row's ng_model_call_capture is not an object or breaks the contract; left out (detail calls.<n>)"
    ),
    "rollout_identity_unavailable": (
        "the rollout row has no _ng_rollout_id and no task/rollout indices; rollout_id is <file>:<line>"
    ),
    "rollout_record_unavailable": (
        "artifacts (capture file, sessions) with no rollout row in the build; detail names the artifact"
    ),
    "session_id_repeated": (
        "another unattributed session of the build has this session id and other content; this one's rollout id "
        "is <session id>~<n>; detail names the session id"
    ),
    "rollout_attribution_ambiguous": (
        "the artifact's rollout id exists in several runs of the build and no manifest picks one"
    ),
    "conversation_from_rollout_record": (
        "no agent-side conversation evidence: the root invocation was rebuilt from the row's request "
        "input and response output (not reference behaviour)"
    ),
    "model_call_usage_from_transcript": (
        "a model call known only from the harness transcript (no captured call matched): its token counts "
        "are the transcript's usage, normalised to the inclusive convention; detail is its response id, "
        "else entry:<entry id>"
    ),
    "turns_from_transcript": (
        "no captured call made a turn, so the turns were read from the invocations' own conversations: one per "
        "assistant model call, its question the conversation before it"
    ),
    "agent_conversation_branch_abandoned": (
        "the session tree has entries off the active path (an abandoned branch, or another root): they are "
        "kept out of the conversation, their model calls are still counted; detail is the entry id the "
        "tree forks at (root for several roots)"
    ),
    "copied_context": (
        "entries or messages that copy earlier ones (a compaction re-append, a checkpoint, a fork, a compression "
        "continuation's kept tail) were left out of model calls, tool calls, token totals and the conversation: "
        "each call is counted once, in the invocation that made it; the detail names the copied entries: "
        "entries=<ids> (pi, OpenClaw), messages=<n>;tool_calls=<ids> (Hermes), lines=<first>-<last> (Codex), "
        "parent=<id>;entries=<n>;first=<uuid>;last=<uuid> (Claude Code), or the copied message ids (OpenCode)"
    ),
    "agent_conversation_parent_unavailable": (
        "an entry names a parent entry that was never written; the active path continues with the entry "
        "before it in the file; detail is the missing id"
    ),
    "hermes_schema_version_unsupported": (
        "the Hermes state.db records a schema_version newer than the documented 23 (or none): read as far as the "
        "known columns go; detail schema_version=<n>"
    ),
    "hermes_session_id_unavailable": (
        "a Hermes ShareGPT trajectory line carries no session id: the invocation is named <file name>:<line>"
    ),
    "local_timestamp_unconverted": (
        "the Hermes form states local times without a UTC offset (gateway timestamp, snapshot session_start, "
        "ShareGPT timestamp); they were not converted and no time was taken from them; detail names the fields"
    ),
    "session_lineage_unresolved": (
        "a Hermes session names a parent_session_id but neither source 'subagent' nor the parent's end_reason "
        "(compression, branched) nor a compaction summary says what the link is; detail is the parent session id"
    ),
    "tool_call_paired_by_position": (
        "a ShareGPT tool call took its id from the tool response at the same position in the next tool turn "
        "(the format's only pairing); detail is the tool call id"
    ),
    "model_call_payload_from_judge_record": (
        "a captured call kept no request or response body (a collector attachment without payloads) and the "
        "row's judge record supplied it; detail is <location>:<response_id>"
    ),
    "tool_result_output_unavailable": (
        "a Claude Code tool result is a stub for output saved to the session's tool-results folder, and that "
        "file is not there: the stub is kept as the output; detail is the tool call id"
    ),
    "model_call_from_judge_record": (
        "a judge call known only from the rollout row's judge record (no captured call matched): metadata and "
        "token counts derive from the recorded response; detail is <location>:<response_id>"
    ),
}

KNOWN_GAPS: frozenset[str] = frozenset(UPSTREAM_GAPS) | frozenset(DYNAMIC_GAPS) | frozenset(NG_TRAJ_GAPS)
