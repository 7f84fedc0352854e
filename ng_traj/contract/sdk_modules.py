"""Importing the ``openai`` SDK's Responses type modules without running the SDK's package ``__init__``.

The conversation item union (``contract/conversation.py``) takes some twenty of the SDK's models from
seventeen modules of ``openai.types.responses``. Importing them the usual way runs three package
initialisers first: ``openai/__init__.py`` (the client, its resources and ``openai.types``),
``openai/types/__init__.py`` (every SDK type: batches, evals, graders, chat, ...) and
``openai/types/responses/__init__.py`` (every Responses type). ``python -c "import pydantic,
openai.types.responses"`` costs about 0.75–0.9 s of CPU (user + system) with openai 2.44.0, against
about 0.07 s for pydantic alone. With pydantic loaded, the seventeen modules cost about 0.3 s the
usual way and 0.12 s this way (``time.process_time``). About half of what is left is ``httpx``
(0.045 s; ``openai._types`` imports it at its top and uses its types in module-level aliases) and
``anyio`` (0.01 s; the ``openai._utils`` package, whose names ``openai._models`` imports), which the
SDK's models really import, so they are not avoided.

How: the three packages are entered in ``sys.modules`` as modules made from their specs
(``importlib.util.module_from_spec``) whose ``__init__`` is not run, the submodules are imported under
them, and the three entries are removed again before returning, whatever happens (``try``/``finally``).
The submodules stay in ``sys.modules`` under their own names, so a later ``import openai`` runs the
real initialisers, which reuse them: ``openai.types.responses.ResponseComputerToolCall`` is then the
very class the union holds, and pickles name the same module. Python sets a submodule as an attribute
of its package only when it loads the submodule, so the real packages would lack the attributes of the
ones loaded before them; a meta path finder (``_PackageLinker``) sets those attributes as soon as the
real package exists (at the next import that Python has to look for) and then removes itself.

It relies on the submodules importing without their packages' ``__init__`` (they import their
siblings and ``openai._models`` directly), which holds for openai 2.44.0, the only release in
``pyproject.toml``'s range (and for 3.57.0, the newest published). When it does not hold (any exception while importing under the bare
packages), every ``openai`` module the attempt loaded is dropped from ``sys.modules`` and the
submodules are imported the usual way, so the result is exactly that of the usual import. When any of
the three packages is already in ``sys.modules`` (the real SDK was imported, or is being imported),
the submodules are imported the usual way, never under a bare package.

Known limitation: another thread that imports ``openai`` while this runs (about 0.1 s, once per
process) would get the bare package, which Python cannot tell from a loaded one without taking its
private module locks. ng-traj imports the conversation models from one thread (its ``--jobs``
workers are processes, which inherit them loaded).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Sequence
from contextlib import suppress
from types import ModuleType

PACKAGES = ("openai", "openai.types", "openai.types.responses")
"""The packages whose ``__init__`` is not run, outermost first."""


def import_sdk_modules(names: Sequence[str]) -> None:
    """Import the ``openai`` submodules ``names`` (full dotted names), without the packages' ``__init__``.

    Args:
        names: Modules under ``openai.types.responses`` (for example
            ``openai.types.responses.response_input_item``).

    Raises:
        ImportError: The usual import of ``names`` failed too (the SDK is missing or broken), as it
            would have without this function.
    """
    if any(package in sys.modules for package in PACKAGES):
        _import_usually(names)
        return
    loaded = set(sys.modules)
    try:
        _import_under_bare_packages(names)
    except BaseException as error:
        for name in set(sys.modules) - loaded:
            if _is_sdk(name):
                del sys.modules[name]
        if not isinstance(error, Exception):
            raise
        _import_usually(names)
        return
    _PackageLinker.install()


def _import_usually(names: Sequence[str]) -> None:
    for name in names:
        importlib.import_module(name)


def _import_under_bare_packages(names: Sequence[str]) -> None:
    """Import ``names`` with the :data:`PACKAGES` entered as modules whose ``__init__`` has not run.

    Raises:
        ImportError: A package cannot be found.
        Exception: Whatever importing a submodule raised.
    """
    bare: dict[str, ModuleType] = {}
    try:
        for package in PACKAGES:
            spec = importlib.util.find_spec(package)
            if spec is None or spec.submodule_search_locations is None:
                raise ImportError(f"{package} is not a package", name=package)
            bare[package] = sys.modules[package] = importlib.util.module_from_spec(spec)
        for name in names:
            importlib.import_module(name)
    finally:
        for package, module in bare.items():
            if sys.modules.get(package) is module:
                del sys.modules[package]


def _is_sdk(name: str) -> bool:
    return name == PACKAGES[0] or name.startswith(PACKAGES[0] + ".")


class _PackageLinker:
    """Meta path finder that gives each real package of :data:`PACKAGES` its already-loaded submodules.

    It finds nothing itself (``find_spec`` returns ``None``, so Python asks the next finder); being
    asked is its cue to look whether a real package has appeared in ``sys.modules``, and to set on it
    (where the attribute is missing) each ``package.child`` already in ``sys.modules``, as Python
    would have had it loaded the child under it. Once all three packages are linked it leaves
    ``sys.meta_path``.
    """

    def __init__(self) -> None:
        self.waiting = set(PACKAGES)

    @classmethod
    def install(cls) -> None:
        if not any(isinstance(finder, cls) for finder in sys.meta_path):
            sys.meta_path.insert(0, cls())

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        """Link the packages that have appeared; find nothing (the next finder finds ``name``)."""
        for package in tuple(self.waiting):
            module = sys.modules.get(package)
            if module is not None:
                _link_children(module, package)
                self.waiting.discard(package)
        if not self.waiting:
            with suppress(ValueError):  # another thread removed it first
                sys.meta_path.remove(self)


def _link_children(module: ModuleType, package: str) -> None:
    prefix = package + "."
    for name, child in tuple(sys.modules.items()):
        attribute = name.removeprefix(prefix)
        if attribute != name and "." not in attribute and not hasattr(module, attribute):
            setattr(module, attribute, child)
