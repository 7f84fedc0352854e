"""The names of the JSON Schemas ng-traj publishes, and what each describes, without the models.

``ng-traj schema --help`` is built from these at import time, so this module imports nothing heavy
(``ng_traj.contract.schemas`` builds the schemas from the pydantic models and checks that it has one
for every name here).
"""

from __future__ import annotations

EARLIER = "ng_trajectory_pre_0_7"
"""``ng_trajectory`` as nemo-gym releases before 0.7.0 accept it: without the fields 0.7.0 added."""

SCHEMAS: dict[str, str] = {
    "ng_trajectory": "a trajectory record",
    "ng_agent_observations": "an agent observation bundle",
    "ng_traj_output": "a line of --output-format json",
    EARLIER: "ng_trajectory as nemo-gym before 0.7.0 accepts it",
}
"""Schema name -> what one document it describes is, in the order ``ng-traj schema`` prints them;
each is written as ``schemas/<name>.schema.json``."""

SCHEMA_NAMES: tuple[str, ...] = tuple(SCHEMAS)
"""Every schema's name, in order."""


def names_help() -> str:
    """The schema names with what each describes, as one phrase: ``a (x), b (y) or c (z)``."""
    named = [f"{name} ({what})" for name, what in SCHEMAS.items()]
    return f"{', '.join(named[:-1])} or {named[-1]}"
