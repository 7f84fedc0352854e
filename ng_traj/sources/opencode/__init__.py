"""OpenCode sessions (anomalyco/opencode, formerly sst/opencode): exports and the SQLite store.

Reads: ``opencode export <id>`` JSON documents of 1.x and 2.x (checked against a real 1.17.11
export), the 1.x SQLite store ``opencode.db`` (1.2.0 and later: ``session``/``message``/``part``)
and the 2.x store (``session_v2``/``session_message``, with forks), each through a private read-only
copy. The JSON storage tree of 1.1 and earlier and exports of other major versions are recognised,
not read.

Entry points:

* :data:`ng_traj.sources.opencode.reader.READER` — the registered native reader.
* :func:`ng_traj.sources.opencode.store.read_database` — a database's sessions, messages and parts.
* :func:`ng_traj.sources.opencode.observe.observe` — one session to invocation, tools, calls, turns.
* :func:`ng_traj.sources.opencode.turns.turn` — one assistant message's producer turn, as upstream.
"""
