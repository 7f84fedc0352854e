"""Exports of built trajectories to other tools' formats: ATIF documents and OTLP/JSON traces.

``common`` holds what both formats share (the rollout's identity and derived ids, times, model-call
resolution, the completeness entries); ``atif`` and ``otlp`` map one trajectory each; ``run`` is the
driver behind ``ng-traj export`` (reading, redaction, atomic outputs, the completeness report).
"""
