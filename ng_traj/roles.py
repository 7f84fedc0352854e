"""Model-server roles: which Gym model server plays policy, judge, user simulator, ...

NeMo Gym records no role on a model call: policy, tool-model, judge and user-simulator calls land
in one capture file and differ only by ``model_ref.name``, the model-server instance name from the
Gym config. The user names the roles with ``--role NAME=ROLE``; a call's
role is then a pure function of its ``model_ref.name`` and that map, so every consumer (the build
summary, the judge merge, a Parquet ``role`` column) resolves it the same way. ``ng_trajectory``
itself carries no role.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ng_traj.diagnostics import Diagnostic

JUDGE = "judge"
"""The role whose calls may be merged with the judge records of rollout rows."""

UNMAPPED = "unmapped"
"""Summary label of calls whose server no ``--role`` names (or that have no ``model_ref``)."""

ROLE_UNMATCHED = "role_unmatched"
"""Diagnostic code of a ``--role`` naming a model server no model call has (:func:`unmatched_roles`)."""

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


def unmatched_roles(roles: Mapping[str, str], seen: Iterable[str], scope: str) -> list[Diagnostic]:
    """One :data:`ROLE_UNMATCHED` warning per ``--role`` name that is no ``model_ref.name`` in
    ``seen``, in the order given: a misspelt name labels nothing and its calls stay :data:`UNMAPPED`.

    Each message names the closest server seen (``difflib``), if any is close, and lists the
    servers seen (the first ten, sorted), or says no call names one.

    Args:
        roles: The parsed ``--role`` map (:func:`parse_roles`).
        seen: The ``model_ref.name`` of every model call considered.
        scope: What was looked at, for the message (``"this build"``, ``"this rollout"``).
    """
    names = sorted(set(seen))
    messages = []
    for name, role in roles.items():
        if name in names:
            continue
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        if names:
            listed = ", ".join(repr(server) for server in names[:10])
            more = f" and {len(names) - 10} more" if len(names) > 10 else ""
            known = f"{hint}the model servers seen are {listed}{more}"
        else:
            known = "no model call of it names a model server (model_ref.name)"
        message = (
            f"--role {name}={role}: no model call of {scope} is served by {name!r}, so the role labels nothing; {known}"
        )
        messages.append(Diagnostic("warning", ROLE_UNMATCHED, message))
    return messages


def record_servers(record: Any) -> Iterator[str]:
    """The model servers (``model_ref.name``) a ``TrajectoryRecord``'s model calls name, in call order."""
    for call in record.model_calls:
        name = ref_name(call.response_metadata.model_ref)
        if name is not None:
            yield name


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


ServerUsage = tuple[str | None, int, int | None, int | None, int | None]
"""The model calls of one server in one trajectory: ``(model_ref.name, calls, prompt_tokens,
completion_tokens, total_tokens)``, each count summed over the calls that report it (``None`` when
none does)."""


def server_usage(calls: Iterable[Any]) -> tuple[ServerUsage, ...]:
    """The :data:`ServerUsage` of each server among ``calls`` (``TrajectoryModelCall``s), in the
    order of their first call: what :meth:`RoleTally.add` counts, summed per server where the
    trajectory is built (a ``--jobs`` worker) so that the process tallying the build adds one entry
    per server, not one per call."""
    totals: dict[str | None, list[Any]] = {}
    for name, *counts in map(call_usage, calls):
        entry = totals.get(name)
        if entry is None:
            totals[name] = [name, 1, *counts]
            continue
        entry[1] += 1
        for position, value in enumerate(counts, 2):
            if value is not None:
                entry[position] = value if entry[position] is None else entry[position] + value
    return tuple(tuple(entry) for entry in totals.values())  # type: ignore[misc]


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
    calls of servers no ``--role`` names are counted under :data:`UNMAPPED`. ``servers`` holds the
    ``model_ref.name`` of every call counted (for :func:`unmatched_roles`).
    """

    roles: Mapping[str, str] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    tokens: dict[str, dict[str, int | None]] = field(default_factory=dict)
    servers: set[str] = field(default_factory=set)

    def add(self, usages: Iterable[ServerUsage]) -> None:
        """Count model calls given by their servers' :func:`server_usage`."""
        for name, calls, *counts in usages:
            if name is not None:
                self.servers.add(name)
            role = role_of(name, self.roles) or UNMAPPED
            self.calls[role] += calls
            totals = self.tokens.setdefault(role, dict.fromkeys(_TOKENS))
            for key, value in zip(_TOKENS, counts, strict=True):
                if value is not None:
                    totals[key] = (totals[key] or 0) + value

    def to_json(self) -> dict[str, dict[str, int | None]]:
        """``{role: {calls, prompt_tokens, completion_tokens, total_tokens}}``, roles sorted."""
        return {role: {"calls": self.calls[role], **self.tokens[role]} for role in sorted(self.calls)}
