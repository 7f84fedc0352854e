"""What users read never cites internal decision numbers or documents that are not in the repository."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import typer

import ng_traj
from ng_traj.cli import app
from ng_traj.diagnostics import CODES

PACKAGE = Path(ng_traj.__file__).parent
CITATION = re.compile(
    r"PRODUCT\.md|§|gym-reference|producer-formats?\b|fuzz-findings|style\.md|\bdecision \d|\.\./shared|/work/shared",
    re.IGNORECASE,
)


def _help_texts() -> dict[str, str]:
    """Every command's help and every option's and argument's help, by ``command option``."""
    group = typer.main.get_command(app)
    texts = {"ng-traj": group.help or ""}
    for name, command in group.commands.items():
        texts[name] = command.help or ""
        for param in command.params:
            texts[f"{name} {param.name}"] = getattr(param, "help", None) or ""
    return texts


def _docstrings(tree: ast.AST) -> list[ast.Constant]:
    """The strings standing alone as statements: module, class and function docstrings, attribute docstrings."""
    found = []
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        for statement in body if isinstance(body, list) else ():
            if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                found.append(statement.value)
    return found


def _runtime_strings() -> dict[str, str]:
    """String literals of the package that are not docstrings (messages, help texts, formats), by place."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node) for node in _docstrings(tree)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                found[f"{path.relative_to(PACKAGE)}:{node.lineno}"] = node.value
    return found


def _shipped_data() -> dict[str, str]:
    return {str(path.name): path.read_text(encoding="utf-8") for path in sorted((PACKAGE / "data").glob("*.json"))}


def test_no_diagnostic_description_help_text_or_message_cites_internal_documents():
    texts = {
        **{f"code {code}": text for code, text in CODES.items()},
        **_help_texts(),
        **_runtime_strings(),
        **_shipped_data(),
    }
    assert len(_help_texts()) > 40 and len(CODES) > 60  # the scan reaches every command and code
    assert {place: text for place, text in texts.items() if CITATION.search(text)} == {}


def test_the_scan_finds_a_citation_where_there_is_one():
    assert CITATION.search("session not read (decision 6)")
    assert CITATION.search("see PRODUCT.md §10.15") and CITATION.search("gym-reference section 8.4")
    assert not CITATION.search("no reader recognises the input; skipped")
    assert json.loads(json.dumps(_shipped_data()))  # the data files are read as text, whole
