"""The code's layout: one package per producer, and no import cycles between modules."""

from __future__ import annotations

import ast
import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ng_traj
from conftest import FIXTURES

ROOT = Path(ng_traj.__file__).parent
PRODUCERS = ("capture", "rollouts", "judge", "pi", "openclaw", "hermes", "codex", "claude_code", "opencode")


def _modules() -> dict[str, Path]:
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Modules of ng_traj that ``path`` imports anywhere (function-local imports included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ng_traj"):
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & modules.keys()
            found |= submodules or ({node.module} & modules.keys())
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names} & modules.keys()
    return found


def _cycle_from(start: str, graph: dict[str, set[str]]) -> list[str] | None:
    stack = [(start, [start])]
    seen = set()
    while stack:
        node, path = stack.pop()
        for target in sorted(graph[node]):
            if target == start:
                return [*path, start]
            if target not in seen:
                seen.add(target)
                stack.append((target, [*path, target]))
    return None


def test_no_import_cycles() -> None:
    modules = _modules()
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    cycles = [cycle for name in sorted(graph) if (cycle := _cycle_from(name, graph))]
    assert cycles == []


@pytest.mark.parametrize("producer", PRODUCERS)
def test_each_producer_is_a_package_stating_its_format(producer: str) -> None:
    package = importlib.import_module(f"ng_traj.sources.{producer}")
    assert package.__file__ is not None and package.__file__.endswith("__init__.py")
    doc = package.__doc__ or ""
    assert "Reads:" in doc and "Entry points:" in doc
    targets = [line.split("`")[1] for line in doc.splitlines() if line.startswith("* :")]
    assert targets, "the docstring names no entry point"
    for target in targets:
        assert _resolve(target) is not None, target


def _resolve(dotted: str) -> object:
    """The module or module attribute a dotted name in a docstring names."""
    module, _, attribute = dotted.rpartition(".")
    try:
        return importlib.import_module(dotted)
    except ModuleNotFoundError:
        return getattr(importlib.import_module(module), attribute, None)


def test_sources_has_no_loose_producer_modules() -> None:
    shared = {"__init__", "detect", "sniff", "native", "registry", "lineage", "manifest", "sqlite_copy"}
    assert {path.stem for path in (ROOT / "sources").glob("*.py")} == shared


def test_the_command_line_loads_without_the_heavy_libraries():
    """``--help`` stays fast: the contract models (pydantic, openai), pyarrow and Ray load when a command runs."""
    code = "import sys, ng_traj.cli; print(sorted({m.split('.')[0] for m in sys.modules} & {'pydantic', 'openai', 'pyarrow', 'ray'}))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_the_as_help_names_every_kind():
    from ng_traj.cli.build import KINDS_HELP
    from ng_traj.sources.detect import KINDS
    from ng_traj.sources.native import READERS

    named = set(KINDS_HELP.split(": ", 1)[1].rstrip(".").replace(" or ", ", ").split(", "))
    assert named == {*KINDS, *READERS}


_BUILD_AND_LIST_MODULES = """
import json, sys
from ng_traj.cli import main
sys.argv = ["ng-traj", "build", *sys.argv[1:], "-q"]
try:
    main()
except SystemExit as exc:
    code = exc.code
heavy = ("openai", "openai.types.responses.response_input_item", "ng_traj.contract.conversation", "pyarrow")
loaded = [m for m in heavy if m in sys.modules]
print(json.dumps({"code": code, "loaded": loaded}))
"""


def _build_in_child(tmp_path: Path, row: dict, *options: str) -> tuple[dict, list[dict]]:
    """Build one rollout row and its capture file in a fresh interpreter: its exit code, the heavy
    modules it imported, and the trajectories it wrote."""
    inputs = tmp_path / "in"
    (inputs / "capture").mkdir(parents=True)
    (inputs / "rollouts.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    capture = FIXTURES / "build" / "retained_run" / "input" / "capture" / "2-1.capture.jsonl"
    shutil.copy(capture, inputs / "capture" / "0-0.capture.jsonl")
    out = tmp_path / "out.jsonl"
    child = [sys.executable, "-c", _BUILD_AND_LIST_MODULES, str(inputs), "-o", str(out), *options]
    result = json.loads(subprocess.run(child, capture_output=True, text=True, check=True).stdout)
    return result, [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def test_a_build_without_conversations_does_not_import_the_conversation_models(tmp_path):
    """The conversation union (the openai SDK's models) loads with the first conversation item, not
    with the trajectory models: a row without request input or response output has none."""
    result, records = _build_in_child(tmp_path, {"_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 1.0})
    assert result == {"code": 0, "loaded": []}
    assert [len(r["model_calls"]) for r in records] == [1] and records[0]["invocations"] == []


def test_a_build_with_a_conversation_imports_and_validates_it(tmp_path):
    row = {
        "_ng_task_index": 0,
        "_ng_rollout_index": 0,
        "reward": 1.0,
        "responses_create_params": {"input": [{"role": "user", "content": "What is 6*7?"}]},
        "response": {"id": "r", "output": [{"type": "bogus"}, {"type": "reasoning", "id": "rs", "summary": []}]},
    }
    result, records = _build_in_child(tmp_path, row)
    assert result == {
        "code": 0,
        "loaded": ["openai.types.responses.response_input_item", "ng_traj.contract.conversation"],
    }
    (invocation,) = records[0]["invocations"]
    assert [item["type"] for item in invocation["conversation"]] == ["message", "reasoning"]  # the bogus one dropped
    assert {"code": "conversation_from_rollout_record", "invocation_id": None, "detail": "dropped_items=1"} in records[
        0
    ]["gaps"]


def test_workers_are_forked_with_the_conversation_models_loaded(tmp_path):
    """With ``--jobs`` the parent loads them before forking, so the workers do not load them each."""
    result, records = _build_in_child(tmp_path, {"_ng_task_index": 0, "_ng_rollout_index": 0}, "--jobs", "2")
    assert result == {
        "code": 0,
        "loaded": ["openai.types.responses.response_input_item", "ng_traj.contract.conversation"],
    }
    assert [len(r["model_calls"]) for r in records] == [1]


@pytest.mark.parametrize("page", sorted((ROOT.parent / "docs").glob("*.md")), ids=lambda page: page.name)
def test_every_table_of_the_docs_is_whole(page: Path) -> None:
    """A table row after a paragraph is no row of the table above it (Markdown renders it as text):
    the exit-code table of commands.md had its 141 row so, cut off under a paragraph."""
    lines = page.read_text(encoding="utf-8").splitlines()
    fenced = False
    cut_off = []
    for number, (before, line) in enumerate(zip(["", *lines], lines, strict=False), start=1):
        fenced ^= line.lstrip().startswith("```")
        if not fenced and line.startswith("|") and before.strip() and not before.lstrip().startswith("|"):
            cut_off.append(f"{page.name}:{number}: {line[:60]}")
    assert cut_off == [], "a table row follows a paragraph: " + "; ".join(cut_off)
