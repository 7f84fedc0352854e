"""Looking at built trajectories: the rollout view both viewers share (``tree``), its terminal rendering
(``terminal``, for ``ng-traj show``) and the self-contained HTML report (``html``, for ``ng-traj report``).
"""
