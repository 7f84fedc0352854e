"""The native readers of this build: importing a reader module registers it (``sources/native.py``).

A new producer is one module in ``sources/`` that calls ``register`` at import, plus one import here.
"""

from __future__ import annotations

from ng_traj.sources import hermes, openclaw, pi  # noqa: F401
