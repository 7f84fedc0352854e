"""OpenClaw sessions: stores, pi-format transcripts, archives, sub-agent trees and PinchBench runs.

Reads: ``agents/<agentId>/sessions/sessions.json`` stores with their ``<sessionId>.jsonl``
transcripts (pi v3 format plus OpenClaw's own entries) and rotated ``.reset.<ts>`` /
``.deleted.<ts>`` archives; PinchBench ``<task>_<run_id>/`` folders. The SQLite transcript era is
recognised, not read.

Entry points:

* :data:`ng_traj.sources.openclaw.reader.READER` — the registered native reader.
* :mod:`ng_traj.sources.openclaw.store` — reading a store and its session trees.
"""
