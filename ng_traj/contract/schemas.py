"""JSON Schemas of the records ng-traj writes, generated from the contract models.

``ng_traj_output`` describes one line of the commands' own JSON output (``--output-format json``).
The committed copies live in ``schemas/`` (``ng-traj schema --write``); a test regenerates them and
fails on drift. JSON Schema cannot express the cross-field invariants (unique ids, turn identity,
tool timing order, the ref join key, parent cycles, complete token metadata); ``ng-traj validate``
checks those.
"""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
from functools import cache
from itertools import pairwise
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue

from ng_traj.contract.observations import AgentObservationBundle
from ng_traj.contract.output import OutputLine
from ng_traj.contract.revisions import ITEM_KEYS_0_7, ITEM_TYPES_0_7, METADATA_KEYS_0_7
from ng_traj.contract.trajectory import TrajectoryRecord
from ng_traj.schema_names import EARLIER
from ng_traj.schema_names import SCHEMA_NAMES as SCHEMA_NAMES  # re-exported: the callers import it from here

DIALECT = "https://json-schema.org/draft/2020-12/schema"

SCHEMA_MODELS: dict[str, type[BaseModel]] = {
    "ng_trajectory": TrajectoryRecord,
    "ng_agent_observations": AgentObservationBundle,
    "ng_traj_output": OutputLine,
}
"""Schema name -> model; written as ``schemas/<name>.schema.json``. With :data:`EARLIER` (derived
from ``ng_trajectory``), these are :data:`ng_traj.schema_names.SCHEMA_NAMES`, in that order (a test checks it)."""


def schema_document(name: str) -> dict[str, object]:
    """Return the JSON Schema named ``name`` (one of :data:`SCHEMA_NAMES`) with its ``$schema`` dialect.

    Raises:
        KeyError: ``name`` is not a known schema.
    """
    if name == EARLIER:
        return _earlier(schema_document("ng_trajectory"))
    schema = SCHEMA_MODELS[name].model_json_schema(mode="validation", schema_generator=_Generator)
    return {"$schema": DIALECT, **schema}


_EARLIER_OWNERS = {
    "TrajectoryResponseMetadata": METADATA_KEYS_0_7,
    "EasyInputMessage": ITEM_KEYS_0_7["message"],
    "OutputMessage": ITEM_KEYS_0_7["message"],
    "FunctionCall": ITEM_KEYS_0_7["function_call"],
}
"""Definition -> the 0.7.0 keys it loses in the earlier schema (with its ``...ForTraining`` twin); only
ng-traj's own definitions: the SDK's tool items keep fields of the same names (``custom_tool_call``'s
``namespace``)."""


class _Generator(GenerateJsonSchema):
    """Pydantic's generator, with two changes.

    A union routed by a function (the conversation item's) is ``anyOf``: the function picks one
    member, while an item often fits several of them in JSON Schema (a message fits both message
    models), which ``oneOf`` would reject.

    Fields are described by their attribute docstrings, read here rather than when the models are
    made: those of ng-traj's own contract models (``ng_traj.contract``), and those of the typed
    dicts inside them (the SDK's input parts among them), as pydantic's ``use_attribute_docstrings``
    describes them. A field declared again in a subclass without a docstring has no description.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._documented = [True]  # whether the model being generated is one of ours

    def tagged_union_schema(self, schema: Any) -> JsonSchemaValue:
        result = super().tagged_union_schema(schema)
        if "oneOf" in result and "discriminator" not in result:
            result["anyOf"] = result.pop("oneOf")
        return result

    def model_schema(self, schema: Any) -> JsonSchemaValue:
        ours = _is_contract_model(schema["cls"])
        self._documented.append(ours)
        try:
            result = super().model_schema(schema)
        finally:
            self._documented.pop()
        if ours:
            _describe(result, _model_field_docs(schema["cls"]))
        return result

    def typed_dict_schema(self, schema: Any) -> JsonSchemaValue:
        result = super().typed_dict_schema(schema)
        cls = schema.get("cls")
        if cls is not None and self._documented[-1]:
            _describe(result, _attribute_docstrings(cls))
        return result


def _is_contract_model(cls: type) -> bool:
    return cls.__module__.startswith("ng_traj.contract.")


def _describe(json_schema: JsonSchemaValue, docs: dict[str, str]) -> None:
    """Set ``description`` of each property of ``json_schema`` that ``docs`` documents."""
    for name, property_schema in json_schema.get("properties", {}).items():
        if name in docs:
            property_schema["description"] = docs[name]


@cache
def _model_field_docs(cls: type) -> dict[str, str]:
    """Field name -> attribute docstring of a contract model, inherited fields included: a field takes
    the docstring of the class that last declared it (none when that declaration has none)."""
    docs: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if not _is_contract_model(base):
            continue
        for name in inspect.get_annotations(base):
            docs.pop(name, None)
        docs.update(_attribute_docstrings(base))
    return docs


@cache
def _attribute_docstrings(cls: type) -> dict[str, str]:
    """Field name -> the string literal written right after its annotated assignment in the body of
    ``cls`` (its attribute docstring, cleaned as ``inspect.cleandoc`` cleans docstrings)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    body = next(node for node in ast.parse(source).body if isinstance(node, ast.ClassDef)).body
    docs = {}
    for statement, following in pairwise(body):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[statement.target.id] = inspect.cleandoc(following.value.value)
    return docs


def _earlier(schema: dict[str, Any]) -> dict[str, Any]:
    """The trajectory schema without the 0.7.0 fields and item types: a record carrying the
    response-metadata fields or such an item fails it (those definitions forbid extra keys, and the
    item union has no member for the type), as it fails the earlier models. Definitions only those
    items used are dropped."""
    for name, definition in schema["$defs"].items():
        properties = definition.get("properties", {})
        for key in _EARLIER_OWNERS.get(name.removesuffix("ForTraining"), ()):
            properties.pop(key, None)
    defs = schema["$defs"]
    added = {
        f"#/$defs/{name}"
        for name, d in defs.items()
        if d.get("properties", {}).get("type", {}).get("const") in ITEM_TYPES_0_7
    }
    conversation = defs["AgentInvocation"]["properties"]["conversation"]["items"]
    conversation["anyOf"] = [member for member in conversation["anyOf"] if member.get("$ref") not in added]
    for name in [ref.removeprefix("#/$defs/") for ref in added]:
        if f'"#/$defs/{name}"' not in json.dumps(schema):
            del defs[name]
    schema["title"] = "TrajectoryRecord (nemo-gym before 0.7.0)"
    return schema


def render(name: str) -> str:
    """Render one schema as stable, indented JSON text ending with a newline."""
    return json.dumps(schema_document(name), indent=2, ensure_ascii=False) + "\n"


def file_name(name: str) -> str:
    """File name of schema ``name`` inside ``schemas/``."""
    return f"{name}.schema.json"
