"""Claude Code sessions (``~/.claude/projects/<project dir>/``).

Reads: session transcripts ``<session>.jsonl`` of CLI 1.x and 2.x (one line per content block,
lines of one response sharing ``message.id``; CLI 2.1 files without ``agentId``, with empty
``thinking`` text and ``thinking_tokens`` usage), their ``<session>/subagents/`` trees (nested up to
five levels, ``agent-<id>.jsonl`` with ``agent-<id>.meta.json``, forked sub-agents that repeat the
parent's history), externalised outputs in ``<session>/tool-results/``, compaction boundaries and
older in-file sidechains. Transcripts of another CLI major version are recognised, not read.

Entry points:

* :data:`ng_traj.sources.claude_code.reader.READER` — the registered native reader (``sources/native.py``).
* :func:`ng_traj.sources.claude_code.transcript.read_transcript` — one session file, line by line.
* :func:`ng_traj.sources.claude_code.layout.discover` — the files of one session folder.
* :func:`ng_traj.sources.claude_code.observe.observe_lines` — one invocation's lines to observations.
"""
