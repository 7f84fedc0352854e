"""Model-server roles: which Gym model server plays policy, judge, user simulator, ...

NeMo Gym records no role on a model call: policy, tool-model, judge and user-simulator calls land
in one capture file and differ only by ``model_ref.name``, the model-server instance name from the
Gym config. The user names the roles with ``--role NAME=ROLE``; a call's
role is then a pure function of its ``model_ref.name`` and that map, so every consumer (the build
summary, the judge merge, a Parquet ``role`` column) resolves it the same way. ``ng_trajectory``
itself carries no role.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

JUDGE = "judge"
"""The role whose calls may be merged with the judge records of rollout rows."""

UNMAPPED = "unmapped"
"""Summary label of calls whose server no ``--role`` names (or that have no ``model_ref``)."""

_ROLE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def parse_roles(values: Iterable[str]) -> dict[str, str]:
    """Parse ``--role NAME=ROLE`` values into ``{model server name: role}``.

    ``NAME`` is a model-server instance name (``model_ref.name``); ``ROLE`` is any identifier
    (``policy``, ``judge``, ``user_simulator``, ``tool_model``, ...). The split is at the last ``=``.

    Raises:
        ValueError: A value without ``=``, an empty name, a role that is not an identifier, or one
            name given two different roles.
    """
    roles: dict[str, str] = {}
    for value in values:
        name, sep, role = value.rpartition("=")
        if not sep or not name:
            raise ValueError(f"--role {value!r}: expected NAME=ROLE, for example judge_model=judge")
        if not _ROLE.match(role):
            raise ValueError(f"--role {value!r}: the role must be an identifier (letters, digits, _ . -)")
        if roles.get(name, role) != role:
            raise ValueError(f"--role: {name!r} is given two roles ({roles[name]}, {role})")
        roles[name] = role
    return roles


def role_of(name: str | None, roles: Mapping[str, str]) -> str | None:
    """The role of a call served by model server ``name`` (its ``model_ref.name``), else ``None``."""
    return roles.get(name) if name is not None else None


def judge_server(roles: Mapping[str, str]) -> str | None:
    """The model server named as the judge when exactly one is; ``None`` for none or several."""
    names = [name for name, role in roles.items() if role == JUDGE]
    return names[0] if len(names) == 1 else None


def may_be_judge(name: str | None, roles: Mapping[str, str]) -> bool:
    """Whether a call of server ``name`` can be a judge call under ``roles``.

    A server mapped to another role never is. When some server is mapped to ``judge``, only those
    are; otherwise any server is. A call without ``model_ref`` contradicts nothing.
    """
    if name is None:
        return True
    if any(role == JUDGE for role in roles.values()):
        return roles.get(name) == JUDGE
    return roles.get(name) in (None, JUDGE)


def ref_name(model_ref: Any) -> str | None:
    """``model_ref.name`` of a model ref given as a ``ModelServerRef`` or as a plain mapping."""
    name = model_ref.get("name") if isinstance(model_ref, Mapping) else getattr(model_ref, "name", None)
    return name if isinstance(name, str) else None


_TOKENS = ("prompt_tokens", "completion_tokens", "total_tokens")

CallUsage = tuple[str | None, int | None, int | None, int | None]
"""One model call's ``(model_ref.name, prompt_tokens, completion_tokens, total_tokens)``."""


def call_usage(call: Any) -> CallUsage:
    """The :data:`CallUsage` of a ``TrajectoryModelCall`` (token counts as its ``token_stats`` reports them)."""
    stats = call.token_stats
    return (
        ref_name(call.response_metadata.model_ref),
        stats.prompt_tokens,
        stats.completion_tokens,
        stats.total_tokens,
    )


@dataclass
class RoleTally:
    """Model calls and token totals per role, for the build summary.

    Token totals are sums of the reported counts (``None`` when no call of the role reported one);
    calls of servers no ``--role`` names are counted under :data:`UNMAPPED`.
    """

    roles: Mapping[str, str] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    tokens: dict[str, dict[str, int | None]] = field(default_factory=dict)

    def add(self, usages: Iterable[CallUsage]) -> None:
        """Count model calls given by their :func:`call_usage`."""
        for name, *counts in usages:
            role = role_of(name, self.roles) or UNMAPPED
            self.calls[role] += 1
            totals = self.tokens.setdefault(role, dict.fromkeys(_TOKENS))
            for key, value in zip(_TOKENS, counts, strict=True):
                if value is not None:
                    totals[key] = (totals[key] or 0) + value

    def to_json(self) -> dict[str, dict[str, int | None]]:
        """``{role: {calls, prompt_tokens, completion_tokens, total_tokens}}``, roles sorted."""
        return {role: {"calls": self.calls[role], **self.tokens[role]} for role in sorted(self.calls)}
