"""Judge records inside rollout rows: the LLM-judge exchanges a resources server returns.

Reads: ``judge_evaluations[]`` (``{responses_create_params, response}``, optionally
``verdict_label``) and ``judge_response`` (one Responses-API response) as NeMo Gym's judging
resources servers write them into the rollout row.

Entry points:

* :func:`ng_traj.sources.judge.records.read_judge_calls` — a row's judge calls as model-call records.
"""
