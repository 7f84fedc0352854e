"""Rollout records: the rows a NeMo Gym collector writes, one run per rollouts file and its sidecar.

Reads: ``<name>.jsonl`` rollout rows and their ``<name>_failures.jsonl`` sidecar, with or without
``_ng_rollout_id`` (rows written before and after it was added), with or without the observability
keys (``ng_model_call_capture``, ``ng_agent_observations``, ``ng_trajectory``).

Entry points:

* :func:`ng_traj.sources.rollouts.rows.identity` — a row's rollout id, task id and indices.
* :func:`ng_traj.sources.rollouts.rows.is_rollout_row` — whether a record is a rollout row.
* :func:`ng_traj.sources.rollouts.rows.load_row` — re-read one row by its byte offset.
"""
