"""Diagnostics: problems in the *data*, collected and counted, never stopping a run.

A diagnostic renders as ``path:line: severity[code] pointer: message``; the line
and pointer parts are left out where there is none. Problems with the *run* itself (missing paths,
bad flags) are not diagnostics: they raise :class:`RunError` and end the command with exit code 2.
"""

from __future__ import annotations

import reprlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]

OUTPUT_VERSION = 1
"""The value of ``ng_traj_output`` in every line."""

VALIDATE_CODES: dict[str, str] = {
    # line reading (io/lines.py)
    "invalid_json": "the line is not valid JSON",
    "truncated_line": "the last line of the file ends without a newline and is not valid JSON",
    "compressed_stream_invalid": "a gzip or Zstandard input whose stream is cut short or corrupt: the lines before the damage are kept",
    "nul_byte": "the line contains a raw NUL byte",
    "utf16_input": "the file looks UTF-16 (byte-order mark FF FE or FE FF, or a NUL every other byte): inputs must be UTF-8; one error for the file, nothing read",
    "invalid_utf8": "the line is not valid UTF-8",
    "lone_surrogate": "a string held a lone UTF-16 surrogate escape; replaced by U+FFFD, record kept",
    "json_nonfinite_number": "the line held bare NaN, Infinity or -Infinity (not JSON); read as null, record kept",
    "line_too_long": "the line exceeds the line-size limit and was skipped without being read whole",
    "not_an_object": "the line is JSON but not an object",
    "empty_input": "a file with no records (nothing but blank lines); in validate, nothing was validated (exit 1); in build, an empty capture file",
    "unreadable_file": "the file could not be opened or read",
    # contract validation (validate.py)
    "unknown_field": "a field the contract does not define",
    "missing_field": "a required field is absent",
    "invalid_type": "a value of the wrong type",
    "invalid_value": "a value outside the allowed set",
    "negative_value": "a count, duration or latency below zero",
    "out_of_range": "a number outside its allowed range",
    "schema_version_unsupported": "schema_version is not 1.0",
    "invalid_conversation_item": "a conversation item matches none of the item shapes",
    "invalid_input_video": "an input_video part without exactly one non-empty source",
    "token_metadata_incomplete": "token metadata present but incomplete on a conversation item",
    "token_metadata_invalid": "token metadata of a conversation item with a value of the wrong type",
    "missing_join_key": "a model-call ref without model_call_id or model_ref + response_id",
    "duplicate_invocation_id": "two invocations share an invocation_id",
    "duplicate_model_call_id": "two model calls share a model_call_id",
    "duplicate_turn": "two turns share (invocation_id, turn_no)",
    "turn_identity_mismatch": "a turn's task_id or rollout_id differs from the record's",
    "tool_timing_reversed": "a tool call completes before it starts",
    "parent_cycle": "parent_invocation_id links form a cycle (error in bundles, warning in trajectories); in build, "
    "a native session's parent links form one (warning; broken deterministically)",
    "unresolved_model_call_ref": "a turn or invocation ref names no model call of the record",
    "model_call_timing_reversed": "a model call completes before it starts (the contract does not forbid it)",
    "tool_call_without_function_call": "a tool call has no function_call with its id in any conversation",
    "unknown_gap_code": "a gap code neither NeMo Gym nor ng-traj defines",
    "trajectory_missing": "a rollout row carries no ng_trajectory",
    "record_repeated": "a record identical to an earlier one (of the file, an earlier file named, or the dataset): a copy",
    "input_not_trajectories": "a file of another kind (a session transcript, a capture file) where trajectory records are read; its lines are not checked",
}
"""Codes of the line reader and of ``ng-traj validate``."""

BUILD_CODES: dict[str, str] = {
    "input_unclaimed": "no reader recognises the input; skipped",
    "input_ambiguous": "several readers claim the input; skipped",
    "forced_kind_mismatch": "--as or a manifest kind forces a kind the file does not look like",
    "input_unsupported": "a recognised format ng-traj does not read yet, or ng-traj's own output; skipped",
    "task_input_rows": "rows with responses_create_params but no response, reward or attachment: task inputs, not rollouts",
    "rollout_row_unrecognised": "a row of a rollouts file with none of a rollout's keys and no responses_create_params: neither a rollout nor a task input; skipped",
    "rollout_identity_unavailable": "a rollout row without identity keys; identified by file and line",
    "rollout_identity_invalid": "a rollout row with a malformed identity key (an _ng_rollout_id that is no valid id, a task or rollout index that is not a non-negative integer, an attempt index that is not an integer); identified by file and line",
    "rollout_item_invalid": "items of a row's request input or response output that are not conversation items; left out of the fallback conversation",
    "row_value_invalid": "a rollout row key ng-traj reads as an object (ng_trajectory, ng_model_call_capture, ...) holding another JSON type, or a reward that is not a number; not read",
    "capture_record_invalid": "a capture line that does not build a model-call record, has none of its keys, or is a rollout row",
    "capture_file_unrecognised": "a capture file (or a file given --as capture) none of whose lines is a capture line; no call read",
    "capture_call_invalid": "a call in a row's ng_model_call_capture that is not an object or breaks the contract; left out",
    "capture_duplicate_conflict": "two stores hold different lines with the same model_call_id",
    "capture_call_repeated": "a model_call_id repeated within one capture file; the first line is kept",
    "capture_ambiguous": "a capture file's rollout id exists in several runs; attached to none",
    "value_out_of_range": "an integer too large for a Parquet int64 column was written as null",
    "payload_as_text": "open values nested too deep for the JSON writers were written as JSON text",
    "earlier_release_dropped": "--gym-release pre-0.7 left out values of fields that releases before nemo-gym 0.7.0 lack",
    "capture_not_merged": "captured calls of a row without an agent result (agent_request_failed, agent_run_error, environment_server_failed, drained): not merged, as the collector does",
    "projection_failed": "the projection raised; a minimal trajectory with the gap was written",
    "manifest_row_invalid": "a manifest row without rollout_id and path, with a path that does not exist, or an unknown kind",
    "manifest_run_unknown": "a manifest row's run names no rollouts file of the build",
    "manifest_empty": "a manifest without rows; nothing is attributed by it",
    "manifest_column_unknown": "a manifest column other than rollout_id, path, kind, run and session_id; ignored",
    "manifest_row_repeated": "a manifest row identical to an earlier one; used once",
    "manifest_row_conflict": "manifest rows that give one path different rollouts, kinds or runs; none of them is used",
    "manifest_capture_shared": "a capture file the manifest gives one rollout shares model_call_ids with a file the rollout its name names keeps; those calls are in both",
    "rollout_id_repeated": "two rows of one run share a rollout id; capture and sessions attach to neither",
    "session_unattributed": "a native session no manifest, folder, response id or run id ties to a rollout",
    "session_ambiguous": "a native session claimed by several rollouts; used for none",
    "session_transcript_renamed": "an OpenClaw store entry's transcript found under another name, by its header's session id",
    "session_repeated": "unattributed native sessions with one session id and other content; the later ones are built as <id>~<n>",
    "session_copy_skipped": "an unattributed native session that is a byte-for-byte copy of an earlier one; built once",
    "session_path_refused": "a symlinked session file, or one outside its agents folder, was not read",
    "native_load_failed": "a native session a reader could not read (a shape it does not expect); its observations are left out",
    "native_superseded": "the row carries the same producer's observations; the native files were not read",
    "pi_session_version_unknown": "a pi session header whose version is not 1, 2 or 3; a newer one is read as v3",
    "pi_entry_repeated": "a pi entry whose id (or, without ids, whose whole content) repeats an earlier one; read as one entry",
    "context_copied": "entries or messages that copy earlier ones (compaction re-appends, checkpoints, forks, compression tails); left out of counts, counted once",
    "pi_header_misplaced": "a pi session header after the first entry; ignored",
    "openclaw_entry_invalid": "an OpenClaw sessions.json entry that is not an object, or whose sessionId/sessionFile/spawnedBy/parentSessionKey is not text",
    "pi_entry_invalid": "a pi entry whose id/parentId/type is not text, or a message entry without a message object, text role or readable content",
    "hermes_db_unreadable": "a Hermes state.db (its private copy) could not be opened or queried; sessions it holds are not built",
    "hermes_schema_version_unknown": "a state.db schema_version newer than 23 or not recorded; the known columns were read",
    "hermes_session_duplicate": "a session id in two state.db files; the first (in path order) is used",
    "hermes_session_forms_differ": "a session's forms (state.db, snapshot, gateway transcript) hold different messages; the chosen one is named",
    "hermes_store_unused": "a gateway sessions.json naming no session among the inputs",
    "hermes_column_invalid": "a state.db JSON column (tool_calls, reasoning details) that is not JSON (the message is kept without it), or a text that is not UTF-8 (read with U+FFFD)",
    "hermes_time_invalid": "a state.db session's started_at or ended_at that is not a time; no duration",
    "hermes_message_repeated": "a gateway transcript line that repeats an earlier message whole (its time included); read once",
    "hermes_record_invalid": "a Hermes line that is JSON but not a record of its file's format; skipped",
    "hermes_message_invalid": "a Hermes message that is not an object, a content part with neither text nor an image, or a snapshot system_prompt that is not text; passed over",
    "hermes_session_id_invalid": "a session_<id>.json snapshot whose session_id is not text; the session is named after its file",
    "hermes_turn_invalid": "a ShareGPT turn that is not an object, whose from is not one of the format's roles, or whose value is not text; passed over",
    "codex_record_unknown": "Codex rollout records (or response or completed items) of a type the reader does not know; skipped, counted and named with the file's cli_version",
    "codex_session_meta_missing": "a Codex rollout whose first record is not a readable session_meta; its thread id is taken from the file name",
    "codex_thread_repeated": "two Codex rollout files with one thread id; the first in path order is read",
    "codex_turns_unavailable": "a Codex rollout with records but no turns the reader can find; its invocation has no conversation",
    "claude_code_entry_unknown": "a Claude Code transcript line of an entry type ng-traj does not know (the message names it and the CLI version); passed over",
    "claude_code_entry_repeated": "a Claude Code transcript line whose uuid was read before in the file (a resumed session's copy), or a second transcript of one agent id in a session; read once",
    "claude_code_version_unknown": "a Claude Code transcript recording a CLI major version other than 1 or 2 after its first line; read as the current format",
    "claude_code_no_messages": "a Claude Code transcript with no user or assistant message; its invocation has no conversation",
    "claude_code_meta_invalid": "a sub-agent's .meta.json that is not a JSON object; its lineage is taken from the path",
    "opencode_db_unreadable": "an opencode.db (its private copy) could not be read, or has no OpenCode session tables; sessions it holds are not built",
    "opencode_record_invalid": "an OpenCode export or message that is not the object its format needs; skipped",
    "opencode_record_unowned": "OpenCode messages of a session the store does not hold; left out",
    "opencode_session_duplicate": "an OpenCode session in two inputs; the first (in path order) is used",
    "judge_record_skipped": "a judge_evaluations entry or judge_response that is not a Responses-API exchange",
    "role_unmatched": "a --role naming a model server no model call of the build (records evaluated, shown rollout) has; it labels nothing",
}
"""Codes of ``ng-traj build`` (inputs, sources, assembly)."""

DATASET_CODES: dict[str, str] = {
    "dataset_invalid": "a Parquet dataset lacks a table or column, its trajectory_index does not count 0, 1, 2, ..., "
    "or its rows do not form a trajectory",
}
"""Codes of reading a Parquet dataset back (``ng-traj validate``, ``ng-traj convert``)."""

EXPORT_CODES: dict[str, str] = {
    "export_refused": "--strict: a rollout NeMo Gym 0.7.0's ATIF exporter would refuse; not exported (the message says why)",
    "export_untimed": "a rollout with no timed model call or tool call: an OTLP trace has nothing to place, none written",
    "export_invalid": "an exported ATIF document the ATIF models reject (a defect of ng-traj); not written",
}
"""Codes of ``ng-traj export``."""

CODES: dict[str, str] = {**VALIDATE_CODES, **DATASET_CODES, **BUILD_CODES, **EXPORT_CODES}
"""Every diagnostic code, for ``docs/diagnostics.md`` and ``ng-traj validate``."""

LINE_SKIP_CODES = (
    "invalid_json",
    "truncated_line",
    "nul_byte",
    "invalid_utf8",
    "line_too_long",
    "not_an_object",
    "capture_record_invalid",
    "rollout_row_unrecognised",
    "compressed_stream_invalid",
)
"""Codes of diagnostics that mean an input line was skipped."""


def lines_skipped(sink: DiagnosticSink) -> int:
    """Input lines ``sink`` has been told were skipped as unreadable (:data:`LINE_SKIP_CODES`: not
    JSON, not an object, cut short, too long...): one diagnostic per line. The count every summary
    of ``build``, ``convert`` and ``export`` gives as ``N lines skipped``."""
    return sum(sink.by_code[code] for code in LINE_SKIP_CODES)


def safe_text(value: object) -> str:
    """``str(value)`` as valid UTF-8: each byte of a non-UTF-8 file name (a surrogate escape, ``\\udcff``)
    becomes one U+FFFD, as does any other lone surrogate; valid text is returned unchanged.

    The one rule for a path (or any text holding one) that becomes text for JSON, Parquet, HTML or the
    terminal: ``validate``, ``matrix``, ``build``, ``convert``, ``export``, ``report`` and ``show`` all
    write such a name so. Never raises.
    """
    text = str(value)
    if text.isascii():
        return text
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a surrogate no file name byte gives (U+D800..U+DC7F, U+DD00..U+DFFF)
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def safe_json(value: Any) -> Any:
    """``value`` (JSON: dicts, lists, strings, numbers) with every string :func:`safe_text`, for a
    value that may hold paths as given (a command's summary): orjson refuses surrogate escapes. A copy
    (tuples become lists, as JSON writes them); other values are kept."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {safe_text(key) if isinstance(key, str) else key: safe_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [safe_json(item) for item in value]
    return value


QUOTE_LIMIT = 200
"""Characters of a bad value a diagnostic quotes; the rest is counted, not shown."""

_SHALLOW = reprlib.Repr()
_SHALLOW.maxlevel = 4
_SHALLOW.maxstring = _SHALLOW.maxother = QUOTE_LIMIT


def quoted(value: object) -> str:
    """``repr(value)`` for a diagnostic, bounded in size and depth.

    At most :data:`QUOTE_LIMIT` characters are shown, followed by ``… (N bytes)`` giving the size of
    the whole quote in UTF-8. A value nested too deep for ``repr`` (it recurses once per level, and
    inputs may nest 1,024 levels) is shown to four levels (``reprlib``), ``[[[[...]]]]``, and marked.
    Never raises.
    """
    try:
        text = repr(value)
    except RecursionError:
        return f"{_SHALLOW.repr(value)[:QUOTE_LIMIT]}… (nested too deep to show)"
    if len(text) <= QUOTE_LIMIT:
        return text
    return f"{text[:QUOTE_LIMIT]}… ({len(text.encode('utf-8', 'replace'))} bytes)"


def json_quoted(value: object) -> str:
    """``value`` as JSON text for a diagnostic (``true``, ``1.5``, ``[1]``, ``"x"``), bounded as
    :func:`quoted` bounds it: the value as the input wrote it, not as Python shows it (``True``).
    A value orjson cannot write (nested deeper than 254 levels, a non-string key) falls back to
    :func:`quoted`. A float is written as Python's shortest round-trip form (``1e+30``), which orjson
    releases do not agree on (older ones write ``1e30``), so that a message is the same on every supported
    version. Never raises."""
    import orjson

    if isinstance(value, float):
        return repr(value)
    try:
        text = orjson.dumps(value).decode()
    except (TypeError, orjson.JSONEncodeError):
        return quoted(value)
    if len(text) <= QUOTE_LIMIT:
        return text
    return f"{text[:QUOTE_LIMIT]}… ({len(text.encode())} bytes)"


_CONTROLS = {code: repr(chr(code))[1:-1] for code in (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029)}
"""Control characters -> their escapes (``\\n``, ``\\x1b``), so that text taken from the data (ids, file
names) cannot break a diagnostic into two lines or drive the terminal."""


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` with ``noun`` agreeing: ``1 file``, ``0 files``, ``2 trajectories`` (``nouns``: the
    plural where it is not ``noun`` + ``s``). Every count in a message or a summary is written so."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def printable(text: str) -> str:
    """``text`` for the terminal: valid UTF-8 (:func:`safe_text`: a non-UTF-8 file name's bytes as
    U+FFFD) with control characters escaped (see :data:`_CONTROLS`)."""
    return safe_text(text).translate(_CONTROLS) if not text.isprintable() else text


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem found in the data.

    Attributes:
        severity: ``error`` (the record is invalid or was skipped), ``warning`` or ``info``.
        code: Stable identifier from :data:`CODES` or a source module's codes.
        message: One sentence; never contains payload text beyond a short quoted value.
        path: Input file, when the problem is in one.
        line: 1-based line number in ``path``.
        offset: Byte offset of the line's first byte in ``path``.
        pointer: Dotted field path inside the record (``invocations.0.conversation.3``).
    """

    severity: Severity
    code: str
    message: str
    path: str | None = None
    line: int | None = None
    offset: int | None = None
    pointer: str | None = None

    def render(self) -> str:
        """Render as ``path:line: severity[code] pointer: message``, on one line (control characters
        escaped); a diagnostic about the run, not an input (no path), starts at ``severity``."""
        head = f"{self.severity}[{self.code}]"
        if self.path or self.line is not None:
            where = safe_text(self.path) if self.path else "-"
            head = f"{where}: {head}" if self.line is None else f"{where}:{self.line}: {head}"
        if self.pointer:
            head = f"{head} {self.pointer}"
        return printable(f"{head}: {self.message}")

    def to_json(self) -> dict[str, object]:
        """Return the diagnostic as a JSON object (all keys present, nulls included)."""
        return {
            "path": safe_text(self.path) if self.path is not None else None,
            "line": self.line,
            "offset": self.offset,
            "severity": self.severity,
            "code": self.code,
            "pointer": self.pointer,
            "message": safe_text(self.message),
        }


@dataclass(slots=True)
class DiagnosticSink:
    """Counts diagnostics and hands each one to ``emit`` as it arrives (nothing is retained).

    Args:
        emit: Called once per diagnostic, e.g. to print it; ``None`` only counts.
    """

    emit: Callable[[Diagnostic], None] | None = None
    by_severity: Counter[str] = field(default_factory=Counter)
    by_code: Counter[str] = field(default_factory=Counter)

    def add(self, diagnostic: Diagnostic) -> None:
        """Count ``diagnostic`` and emit it."""
        self.by_severity[diagnostic.severity] += 1
        self.by_code[diagnostic.code] += 1
        if self.emit is not None:
            self.emit(diagnostic)

    @property
    def errors(self) -> int:
        """Number of error diagnostics so far."""
        return self.by_severity["error"]

    @property
    def warnings(self) -> int:
        """Number of warning diagnostics so far."""
        return self.by_severity["warning"]


class RunError(Exception):
    """A problem with the run itself (missing input, unwritable output, bad flags): exit code 2."""
