"""Packaging as installed: the console entry point in a real process, the version, the dependency floors."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib

import pytest
from packaging.requirements import Requirement

import ng_traj
from conftest import ROOT

COMMANDS = ["build", "validate", "matrix", "convert", "schema", "export", "show", "report"]
CONSTRAINTS_MIN = ROOT / "ci" / "constraints-min.txt"


def _ng_traj(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m ng_traj`` with this interpreter, as a user's shell would."""
    return subprocess.run(
        [sys.executable, "-m", "ng_traj", *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_help_prints_its_usage_not_the_version(command):
    result = _ng_traj(command, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: ")
    assert f" {command} [OPTIONS]" in result.stdout.splitlines()[0]
    assert "--help" in result.stdout
    assert f"ng-traj {ng_traj.__version__}" not in result.stdout
    options = [line for line in result.stdout.splitlines() if line.lstrip().startswith("-")]
    typed = [line for line in options if re.search(r"<(str|int|float|path|list\[)", line)]
    assert typed == [], "every option that takes a value names it (metavar), not its Python type"


ARGUMENTS = {
    "build": "INPUT...",
    "validate": "FILE...",
    "matrix": "INPUT...",
    "convert": "SOURCE",
    "schema": "[NAME]",
    "export": "INPUT...",
    "show": "INPUT [ROLLOUT]",
    "report": "INPUT...",
}


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_names_its_arguments_by_metavar_not_by_type(command):
    """Typer 0.29 wrote ``{INPUT}...`` in the usage line and ``INPUT <list[Path]>`` in the help."""
    result = _ng_traj(command, "--help")
    lines = result.stdout.splitlines()
    assert lines[0].endswith(f" {command} [OPTIONS] {ARGUMENTS[command]}"), lines[0]
    section = lines[lines.index("Arguments:") + 1 : lines.index("Options:")]
    names = [line.split()[0] for line in section if line.startswith("  ") and not line.startswith("   ")]
    assert " ".join(names) == ARGUMENTS[command]
    assert not re.search(r"[{}]|<(str|int|float|path|list\[)", "\n".join([lines[0], *section]))


def test_version_flag_prints_the_version_only():
    result = _ng_traj("--version")
    assert (result.returncode, result.stdout) == (0, f"ng-traj {ng_traj.__version__}\n")


def test_validate_of_an_invalid_file_exits_1(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"not": "a trajectory"}\n')
    result = _ng_traj("validate", str(bad))
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert f"ng-traj {ng_traj.__version__}" not in result.stdout


def test_installed_metadata_version_is_the_package_version():
    assert importlib.metadata.version("ng-traj") == ng_traj.__version__


def _floors(requirements: list[str]) -> dict[tuple[str, str], str]:
    """``{(name, marker): version}`` for each ``name>=version`` requirement."""
    floors = {}
    for text in requirements:
        req = Requirement(text)
        lower = [spec.version for spec in req.specifier if spec.operator == ">="]
        assert len(lower) == 1, f"{text!r} has no single >= floor"
        floors[(req.name.lower().replace("_", "-"), str(req.marker or ""))] = lower[0]
    return floors


def _pins(lines: list[str]) -> dict[tuple[str, str], str]:
    """``{(name, marker): version}`` for each ``name==version`` line of a constraints file."""
    pins = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        exact = [spec.version for spec in req.specifier if spec.operator == "=="]
        assert len(exact) == 1, f"{line!r} is not one == pin"
        pins[(req.name.lower().replace("_", "-"), str(req.marker or ""))] = exact[0]
    return pins


def test_dependency_floors_equal_the_minimum_constraints():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = _floors(project["dependencies"] + project["optional-dependencies"]["test"])
    pinned = _pins(CONSTRAINTS_MIN.read_text().splitlines())
    assert declared == pinned
