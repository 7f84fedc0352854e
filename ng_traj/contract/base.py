"""Shared base classes and helpers of the contract models.

Every contract model forbids unknown fields and validates assignment, exactly as NeMo Gym's
``ObservationModel`` does. Field documentation is written as attribute
docstrings so that it reaches the generated JSON Schemas in ``schemas/``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticCustomError


class ContractModel(BaseModel):
    """Strict base: unknown fields rejected, assignments validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)


class ModelServerRef(BaseModel):
    """Reference to a NeMo Gym model server, as stored in capture lines and model-call refs.

    Mirrors ``nemo_gym.config_types.ModelServerRef``: extra keys are ignored, not rejected.
    """

    model_config = ConfigDict(use_attribute_docstrings=True)

    type: Literal["responses_api_models"]
    """Always ``responses_api_models``."""
    name: str
    """Model server instance name from the Gym config (for example ``policy_model``)."""


def contract_error(code: str, message: str, pointer: str | None = None, **context: Any) -> PydanticCustomError:
    """Build the validation error a contract validator raises.

    Args:
        code: Diagnostic code reported by ``ng-traj validate`` (for example ``duplicate_invocation_id``).
        message: Human-readable sentence; may use ``{name}`` placeholders filled from ``context``.
        pointer: Dotted path, relative to the validated model, of the offending field.
        **context: Values for the message placeholders.

    Returns:
        An error to ``raise`` inside a pydantic validator; its ``type`` is ``code``.
    """
    ctx = dict(context)
    if pointer is not None:
        ctx["pointer"] = pointer
    return PydanticCustomError(code, message, ctx)
