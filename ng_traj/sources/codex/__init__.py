"""Codex CLI rollouts (openai/codex ``codex-rs``): one JSONL file per thread, sub-agent threads included.

Reads: ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<local time>-<thread id>.jsonl`` and
``archived_sessions/rollout-*.jsonl`` of every format in use: pre-envelope rollouts (mid-2025), the
``{timestamp, type, payload}`` envelope (0.2x to 0.144), and paginated history (0.145 to 0.151,
turns only in ``event_msg/item_completed``); spawned and forked sub-agent threads (two
``session_meta`` records, the parent's history replayed). A rollout of cli_version 1.x or later is
recognised, not read.

Entry points:

* :data:`ng_traj.sources.codex.reader.READER` — the registered native reader (``sources/native.py``).
* :func:`ng_traj.sources.codex.rollout.read_rollout` — one file: its thread, records and copied prefix.
* :func:`ng_traj.sources.codex.observe.observe` — a thread to invocation, tool calls and native calls.
"""
