"""Hermes Agent sessions (NousResearch/hermes-agent): every form a Hermes home keeps of a session.

Reads: ``state.db`` (SQLite, schema versions 1–23; a newer one by its known columns),
``session_<id>.json`` snapshots of both eras, gateway ``<id>.jsonl`` transcripts with their
``sessions.json`` store, and ShareGPT ``trajectory_samples.jsonl`` / ``failed_trajectories.jsonl``
lines. ``request_dump_*.json`` files are recognised, not read.

Entry points:

* :data:`ng_traj.sources.hermes.reader.READER` — the registered native reader.
* :mod:`ng_traj.sources.hermes.db` — the private read-only copy of a ``state.db``.
* :func:`ng_traj.sources.hermes.messages.normalise` — one session's messages to observations.
"""
