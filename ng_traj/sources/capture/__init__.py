"""Model-call capture: the raw request/response of every model call, as NeMo Gym's capture store writes it.

Reads: ``<rollout_id>.capture.jsonl`` files (one raw exchange per line, three API dialects:
``responses``, ``chat_completions``, ``messages``; streamed responses kept as SSE text in
``response_raw``) and ``<rollout_id>.capture.incomplete`` markers, every capture line version NeMo
Gym has written (with and without ``response_raw``, ``latency_total_ms`` or ``latency_ms``).

Entry points:

* :func:`ng_traj.sources.capture.store.collect_capture` — every captured call of one rollout.
* :func:`ng_traj.sources.capture.store.capture_rollout_id` — the rollout id a file name names.
* :func:`ng_traj.sources.capture.record.derive_record` — one exchange to a ``ModelCallRecord``.
* :func:`ng_traj.sources.capture.sse.reassemble` — one streamed response to its final body.
"""
