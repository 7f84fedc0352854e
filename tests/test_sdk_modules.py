"""The ``openai`` SDK's Responses modules imported without the SDK's package initialisers
(``contract/sdk_modules.py``): no bare package is left behind, the real SDK imports afterwards as usual
with the very classes the conversation union holds, and a failing fast path falls back to the usual
import. Each case runs in a fresh interpreter, since it is about what a process has imported."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

PACKAGES = ("openai", "openai.types", "openai.types.responses")

_REPORT = """
import importlib, json, sys
from ng_traj.contract import conversation
from ng_traj.contract.sdk_modules import PACKAGES, _PackageLinker

def linkers():
    return sum(isinstance(finder, _PackageLinker) for finder in sys.meta_path)

def sdk_classes():
    return {name: value for name, value in vars(conversation).items()
            if isinstance(value, type) and value.__module__.startswith("openai.")}

def report():
    import openai
    import openai.types.responses
    sdk = {}
    for name, cls in sdk_classes().items():
        module = openai
        for part in cls.__module__.split(".")[1:]:
            module = getattr(module, part)  # the attribute chain, as `import a.b.c; a.b.c.X` reaches it
        exported = getattr(openai.types.responses, cls.__name__, None)
        sdk[name] = [getattr(module, cls.__name__) is cls, exported is None or exported is cls]
    unlinked = sorted(name for name, module in sys.modules.items() if name.startswith("openai.")
                      and getattr(sys.modules.get(name.rpartition(".")[0]), name.rpartition(".")[2], None) is not module)
    return {"client": openai.OpenAI.__name__, "sdk": sdk, "unlinked": unlinked, "linkers_after": linkers(),
            "executed": [hasattr(openai, "OpenAI"), hasattr(openai.types, "Batch"),
                         hasattr(openai.types.responses, "ResponseComputerToolCall")]}
"""


def _child(prelude: str, body: str) -> dict:
    code = prelude + "\n" + _REPORT + "\n" + body
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _assert_usual_sdk(result: dict) -> None:
    assert result["client"] == "OpenAI"
    assert result["executed"] == [True, True, True]  # the real packages, their __init__ run
    assert len(result["sdk"]) >= 20  # the union's hosted-tool models, MCP bases and reasoning parts
    assert all(same == [True, True] for same in result["sdk"].values()), result["sdk"]
    assert result["linkers_after"] == 0


def _usual_unlinked() -> list[str]:
    """Submodules that are not an attribute of their package when the SDK is imported the usual way."""
    return _child("import openai", "print(json.dumps(report()))")["unlinked"]


def test_no_bare_package_is_left_and_the_sdk_then_imports_as_usual():
    body = (
        "before = {'left': [p for p in PACKAGES if p in sys.modules], 'linkers': linkers(),"
        " 'items': 'openai.types.responses.response_input_item' in sys.modules}\n"
        "print(json.dumps({**before, **report()}))"
    )
    result = _child("", body)
    assert result["left"] == [] and result["items"] and result["linkers"] == 1
    _assert_usual_sdk(result)
    assert result["unlinked"] == _usual_unlinked()  # every loaded submodule is its package's attribute


def test_with_the_sdk_imported_first_the_usual_import_is_used():
    result = _child("import openai", "linked = linkers()\nprint(json.dumps({'linkers': linked, **report()}))")
    assert result["linkers"] == 0
    _assert_usual_sdk(result)


_FAIL_WITHOUT_INIT = """
import sys
attempts = {}
class NeedsInit:
    # A submodule that needs its package's __init__: it fails while `openai` is a bare package.
    def find_spec(self, name, path=None, target=None):
        if name != "openai.types.responses.response_output_item" or "bare" in attempts:
            return None
        if not hasattr(sys.modules["openai"], "OpenAI"):
            attempts["bare"] = id(sys.modules["openai.types.responses.response_apply_patch_tool_call"])
            raise ImportError("needs openai's __init__")
sys.meta_path.insert(0, NeedsInit())
"""


def test_a_failing_fast_path_falls_back_to_the_usual_import():
    body = (
        "module = sys.modules['openai.types.responses.response_apply_patch_tool_call']\n"
        "state = {'attempted': 'bare' in attempts, 'reloaded': id(module) != attempts.get('bare'),"
        " 'left': [p for p in PACKAGES if p in sys.modules], 'linkers': linkers()}\n"
        "print(json.dumps({**state, **report()}))"
    )
    result = _child(_FAIL_WITHOUT_INIT, body)
    assert result["attempted"] and result["reloaded"]  # what the attempt loaded was dropped, then imported again
    assert result["left"] == list(PACKAGES) and result["linkers"] == 0  # the usual import: the real packages
    _assert_usual_sdk(result)


_ITEM = {
    "type": "computer_call",
    "id": "c",
    "call_id": "k",
    "action": {"type": "wait"},
    "pending_safety_checks": [],
    "status": "completed",
}


def _pickled_item() -> bytes:
    code = (
        "import pickle, sys\nfrom ng_traj.contract.conversation import validate_items\n"
        f"items, dropped = validate_items([{_ITEM!r}])\n"
        "assert dropped == 0 and 'openai' not in sys.modules\n"
        "sys.stdout.buffer.write(pickle.dumps(items[0]))"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout


def test_a_validated_item_unpickles_in_a_fresh_process():
    data = _pickled_item()
    code = (
        "import pickle, sys\nitem = pickle.loads(sys.stdin.buffer.read())\n"
        "from openai.types.responses import ResponseComputerToolCall\n"
        "from ng_traj.contract import conversation\n"
        "assert type(item) is ResponseComputerToolCall is conversation.ResponseComputerToolCall\n"
        "print(item.model_dump_json())"
    )
    out = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, check=True).stdout
    assert json.loads(out)["action"] == {"type": "wait"} and json.loads(out)["call_id"] == "k"
    item = pickle.loads(data)  # in this process too, whatever it imported before
    assert type(item).__name__ == "ResponseComputerToolCall" and item.id == "c"
