"""The native readers of this build: importing a reader module registers it (``sources/native.py``).

A new producer is one package in ``sources/`` whose ``reader`` module calls ``register`` at import,
plus one import here.
"""

from __future__ import annotations

from ng_traj.sources.claude_code import reader as claude_code  # noqa: F401
from ng_traj.sources.codex import reader as codex  # noqa: F401
from ng_traj.sources.hermes import reader as hermes  # noqa: F401
from ng_traj.sources.openclaw import reader as openclaw  # noqa: F401
from ng_traj.sources.opencode import reader as opencode  # noqa: F401
from ng_traj.sources.pi import reader as pi  # noqa: F401
