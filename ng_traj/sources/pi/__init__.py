"""Pi coding-agent sessions (badlogic/pi-mono ``packages/coding-agent``).

Reads: ``~/.pi/agent/sessions/--<cwd>--/<time>_<id>.jsonl`` session files of every version (v1
without ids, v2 trees, v3 with ``custom`` messages; a newer version number reads as v3), header-less
files and ``pi --mode json`` event logs. ``kind: "header"`` files are recognised, not read.

Entry points:

* :data:`ng_traj.sources.pi.reader.READER` — the registered native reader (``sources/native.py``).
* :func:`ng_traj.sources.pi.session.read_session` — one file, migrated in memory, active path.
* :func:`ng_traj.sources.pi.observe.observe` — a session to invocation, tool calls and native calls.
"""
