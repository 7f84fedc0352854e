"""JSON Schemas of the records ng-traj writes, generated from the contract models.

``ng_traj_output`` describes one line of the commands' own JSON output (``--output-format json``).
The committed copies live in ``schemas/`` (``ng-traj schema --write``); a test regenerates them and
fails on drift. JSON Schema cannot express the cross-field invariants (unique ids, turn identity,
tool timing order, the ref join key, parent cycles, complete token metadata); ``ng-traj validate``
checks those.
"""

from __future__ import annotations

import json

from pydantic import BaseModel

from ng_traj.contract.observations import AgentObservationBundle
from ng_traj.contract.output import OutputLine
from ng_traj.contract.trajectory import TrajectoryRecord

DIALECT = "https://json-schema.org/draft/2020-12/schema"

SCHEMA_MODELS: dict[str, type[BaseModel]] = {
    "ng_trajectory": TrajectoryRecord,
    "ng_agent_observations": AgentObservationBundle,
    "ng_traj_output": OutputLine,
}
"""Schema name -> model; written as ``schemas/<name>.schema.json``."""


def schema_document(name: str) -> dict[str, object]:
    """Return the JSON Schema of ``SCHEMA_MODELS[name]`` with its ``$schema`` dialect.

    Raises:
        KeyError: ``name`` is not a known schema.
    """
    schema = SCHEMA_MODELS[name].model_json_schema(mode="validation")
    return {"$schema": DIALECT, **schema}


def render(name: str) -> str:
    """Render one schema as stable, indented JSON text ending with a newline."""
    return json.dumps(schema_document(name), indent=2, ensure_ascii=False) + "\n"


def file_name(name: str) -> str:
    """File name of schema ``name`` inside ``schemas/``."""
    return f"{name}.schema.json"
