"""Generated JSON Schemas: committed copies match the models; they accept and reject like the models."""

from __future__ import annotations

import json

import jsonschema
import orjson
import pytest

from conftest import FIXTURES, ROOT, run_cli
from ng_traj.contract.schemas import SCHEMA_NAMES, file_name, render

VALIDATE = FIXTURES / "validate"

# Defects JSON Schema can express (types, required, unknown fields, enums, bounds). The others are
# cross-field invariants (unique ids, turn identity, timing order, join key, cycles, token metadata)
# that only `ng-traj validate` checks; for those the schema accepts the record, as documented.
SCHEMA_EXPRESSIBLE = {
    "negative_values",
    "unknown_fields",
    "missing_fields",
    "invalid_types",
    "invalid_values",
    "schema_version_unsupported",
    "invalid_conversation_items",
}
MODEL_ONLY = {
    "missing_join_key",
    "duplicate_invocation_id",
    "duplicate_model_call_id",
    "duplicate_turn",
    "turn_identity_mismatch",
    "tool_timing_reversed",
    "token_metadata_incomplete",
    "token_metadata_invalid",
    "invalid_input_video",
}


@pytest.mark.parametrize("name", list(SCHEMA_NAMES))
def test_committed_schema_matches_models(name):
    committed = (ROOT / "schemas" / file_name(name)).read_text(encoding="utf-8")
    assert committed == render(name), "schemas/ drifted: run `ng-traj schema --write` and review the diff"


def test_schema_check_command_reports_drift(tmp_path):
    assert run_cli("schema", "--check", "--dir", ROOT / "schemas").exit_code == 0
    (tmp_path / file_name("ng_trajectory")).write_text("{}")
    result = run_cli("schema", "ng_trajectory", "--check", "--dir", tmp_path)
    assert result.exit_code == 1 and "out of date" in result.stderr
    assert f"run `ng-traj schema --write --dir {tmp_path}`" in result.stderr
    assert run_cli("schema", "--check", "--write", "--dir", tmp_path).exit_code == 2
    assert (tmp_path / file_name("ng_trajectory")).read_text() == "{}"
    (tmp_path / file_name("ng_trajectory")).unlink()
    result = run_cli("schema", "ng_trajectory", "--check", "--dir", tmp_path)
    assert result.exit_code == 1 and f"missing: {tmp_path / file_name('ng_trajectory')}" in result.stderr
    assert "out of date" not in result.stderr


def _validator(name):
    schema = json.loads((ROOT / "schemas" / file_name(name)).read_text())
    return jsonschema.Draft202012Validator(schema)


def _records(path):
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def test_schemas_accept_every_valid_fixture():
    trajectory, bundle = _validator("ng_trajectory"), _validator("ng_agent_observations")
    for path in sorted((VALIDATE / "valid").glob("*.jsonl")):
        for record in _records(path):
            trajectory.validate(record.get("ng_trajectory", record))
            if "ng_agent_observations" in record:
                bundle.validate(record["ng_agent_observations"])


@pytest.mark.parametrize("stem", sorted(SCHEMA_EXPRESSIBLE))
def test_schema_rejects_expressible_defects(stem):
    validator = _validator("ng_trajectory")
    for record in _records(VALIDATE / "defects" / f"{stem}.jsonl"):
        assert list(validator.iter_errors(record)), f"{stem}: schema accepted {record}"


@pytest.mark.parametrize("stem", sorted(MODEL_ONLY))
def test_schema_cannot_express_cross_field_invariants(stem):
    validator = _validator("ng_trajectory")
    for record in _records(VALIDATE / "defects" / f"{stem}.jsonl"):
        assert not list(validator.iter_errors(record)), f"{stem}: now expressible; move it to SCHEMA_EXPRESSIBLE"


def test_bundle_schema_rejects_bundle_defects_it_can_express():
    validator = _validator("ng_agent_observations")
    rows = _records(VALIDATE / "defects" / "bundle_defects.jsonl")
    assert list(validator.iter_errors(rows[2]["ng_agent_observations"]))


def test_both_revisions_have_a_schema_that_accepts_its_own_output(tmp_path):
    current = json.loads((ROOT / "schemas" / file_name("ng_trajectory")).read_text())
    earlier = json.loads((ROOT / "schemas" / file_name("ng_trajectory_pre_0_7")).read_text())
    for release, accepted_by_earlier in (("0.7", False), ("pre-0.7", True)):
        out = tmp_path / f"{release}.jsonl"
        assert (
            run_cli(
                "build", FIXTURES / "build" / "retained_run" / "input", "-o", out, "--gym-release", release
            ).exit_code
            == 0
        )
        for line in out.read_bytes().splitlines():
            record = orjson.loads(line)
            jsonschema.validate(record, current)  # the 0.7.0 models accept records of both revisions
            if accepted_by_earlier or not record["model_calls"]:
                jsonschema.validate(record, earlier)
            else:
                with pytest.raises(jsonschema.ValidationError, match="Additional properties"):
                    jsonschema.validate(record, earlier)


def test_schema_write_makes_a_missing_folder_and_check_does_not(tmp_path):
    folder = tmp_path / "new" / "schemas"
    assert run_cli("schema", "--check", "--dir", folder).exit_code == 2 and not folder.exists()
    result = run_cli("schema", "--write", "--dir", folder)
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in folder.iterdir()) == sorted(file_name(name) for name in SCHEMA_NAMES)
    assert run_cli("schema", "--check", "--dir", folder).exit_code == 0
    taken = tmp_path / "file"
    taken.write_text("mine")
    result = run_cli("schema", "--write", "--dir", taken)
    assert result.exit_code == 2 and f"schema folder {taken} is not a folder" in result.stderr
    assert taken.read_text() == "mine"


def test_schema_without_a_name_prints_each_document_headed_by_its_name_on_a_terminal():
    from test_show_terminal import _in_terminal

    result = run_cli("schema")  # not a terminal: the JSON documents alone, one after another
    assert result.exit_code == 0, result.stderr
    documents = [json.loads(text) for text in result.stdout.replace("}\n{", "}\n\0{").split("\0")]
    assert [document["title"] for document in documents] == [json.loads(render(name))["title"] for name in SCHEMA_NAMES]
    assert result.stderr == ""
    code, screen = _in_terminal("schema")
    assert code == 0
    heads = [line for line in screen.splitlines() if line.startswith("schema ")]
    assert heads == [
        f"schema {name} ({number} of {len(SCHEMA_NAMES)}; name one to print it alone):"
        for number, name in enumerate(SCHEMA_NAMES, start=1)
    ]
    titles = [json.loads(render(name))["title"] for name in SCHEMA_NAMES]
    places = [screen.index(head) for head in heads] + [len(screen)]
    for title, start, end in zip(titles, places, places[1:], strict=False):
        assert f'"title": "{title}"' in screen[start:end]
    one = run_cli("schema", "ng_trajectory")
    assert one.stdout == render("ng_trajectory") and one.stderr == ""


def test_field_descriptions_are_the_attribute_docstrings_read_by_the_schema_generator():
    """The models do not read their source for attribute docstrings when they are made (pydantic's
    ``use_attribute_docstrings`` costs about 0.15 s of CPU per process); the generator reads them."""
    from ng_traj.contract import TrajectoryToolCall
    from ng_traj.contract.conversation import EasyInputMessage

    assert TrajectoryToolCall.model_fields["tool_call_id"].description is None
    assert EasyInputMessage.model_fields["phase"].description is None
    definitions = json.loads(render("ng_trajectory"))["$defs"]
    tool_call = definitions["TrajectoryToolCall"]["properties"]
    assert (
        tool_call["tool_call_id"]["description"] == "Equals the ``call_id`` of the function call in that conversation."
    )
    assert tool_call["output"]["description"].startswith("Model-visible tool output")  # its own field
    assert "description" not in definitions["EasyInputMessage"]["properties"]["role"]  # no docstring
    text = definitions["ResponseInputTextParam"]["properties"]["text"]  # the SDK's typed dict, inside ours
    assert text["description"] == "The text input to the model."


def test_schema_help_names_every_schema_from_the_one_list_of_names():
    """``schema --help`` is built from ``SCHEMA_NAMES``: it named three of the four by hand, leaving
    out ``ng_trajectory_pre_0_7``; the list of names agrees with the models the schemas come from."""
    from ng_traj.contract.schemas import EARLIER, SCHEMA_MODELS

    assert (*SCHEMA_MODELS, EARLIER) == SCHEMA_NAMES
    result = run_cli("schema", "--help")
    assert result.exit_code == 0
    shown = " ".join(result.stdout.split())  # as wrapped, one space between words
    for name in SCHEMA_NAMES:
        assert f"{name} (" in shown, name
