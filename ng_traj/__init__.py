"""ng-traj: assemble NeMo Gym ``ng_trajectory`` records offline from retained rollout artifacts."""

__version__ = "0.1.0"
