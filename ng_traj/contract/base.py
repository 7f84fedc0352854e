"""Shared base classes and helpers of the contract models.

Every contract model forbids unknown fields and validates assignment, exactly as NeMo Gym's
``ObservationModel`` does. Field documentation is written as attribute docstrings; the JSON Schema
generator (``contract/schemas.py``) reads them into the schemas' descriptions. The models
themselves do not (pydantic's ``use_attribute_docstrings`` finds each class's source with
``inspect`` when the class is made, about 0.15 s of CPU per process that loads the conversation
models, and nothing but the JSON Schemas uses the descriptions).
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticCustomError

M = TypeVar("M", bound=BaseModel)


class ContractModel(BaseModel):
    """Strict base: unknown fields rejected, assignments validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelServerRef(BaseModel):
    """Reference to a NeMo Gym model server, as stored in capture lines and model-call refs.

    Mirrors ``nemo_gym.config_types.ModelServerRef``: extra keys are ignored, not rejected.
    """

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


def built_model(cls: type[M], values: dict[str, Any], fields_set: set[str] | None = None) -> M:
    """An instance of ``cls`` holding ``values`` as they are, without validating them.

    For values ng-traj derived itself and has already checked against every constraint of ``cls``
    (types exact, bounds held, validators' conditions met), where validating again would only cost
    time: the instance is the one ``cls(**values)`` makes, field for field. Faster than pydantic's
    ``model_construct``, which looks up defaults and aliases per field.

    Args:
        cls: A model class without private attributes or extra fields.
        values: Every field of ``cls``, in declaration order (the order the JSON writers follow).
        fields_set: The fields given explicitly (``model_fields_set``); all of ``values`` when ``None``.
    """
    model = _new(cls)
    _set_dict(model, values)
    _set_fields_set(model, set(values) if fields_set is None else fields_set)
    _set_extra(model, None)
    _set_private(model, None)
    return model


_new = object.__new__
# The setters of the four slots every pydantic model has (``BaseModel.__slots__``), called directly
# rather than through ``object.__setattr__``, which finds each by name first: 0.98 -> 0.70 us a model.
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__
