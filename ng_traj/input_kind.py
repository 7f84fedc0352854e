"""Telling a file that holds no trajectory records from a trajectory file with bad lines.

``validate``, ``show``, ``report`` and ``export`` read trajectory records (bare ``ng_trajectory``
records or rollout rows carrying one). A file of another kind named to them (a session transcript, a
capture store, any other JSON Lines) would otherwise be one contract error per line; instead it is
said once what the file looks like and what to run. The first :data:`LOOK_LINES` non-blank lines
decide, as ``build``'s sniffers do (``sources/detect.py``): a file one of whose first records has two
of a trajectory's fields or carries ``ng_trajectory`` is a trajectory file, whatever its other lines
hold, and its bad lines are reported one by one as before; so is one whose first records have one
such field, unless a reader of another kind claims the file (a Hermes gateway transcript's assistant
lines have ``tool_calls``).
"""

from __future__ import annotations

import itertools
import shlex
from contextlib import closing
from pathlib import Path
from typing import Any

from ng_traj.checks import ROLLOUT_KEYS
from ng_traj.io.lines import DEFAULT_MAX_LINE_BYTES, iter_json_lines

LOOK_LINES = 16
"""Non-blank lines looked at to tell what a file holds."""

TRAJECTORY_FIELDS = frozenset(
    {"schema_version", "task_id", "rollout_id", "invocations", "turns", "model_calls", "tool_calls", "gaps"}
)
"""The fields of an ``ng_trajectory`` record (``contract.TrajectoryRecord``)."""

ROLLOUT_KEYS_SET = frozenset(ROLLOUT_KEYS)

CODE = "input_not_trajectories"


def not_trajectories(path: Path, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> str | None:
    """Why ``path`` holds no trajectory records, or ``None`` when it may hold some.

    Returns:
        The message of one ``input_not_trajectories`` error: the kind ``build`` would read the file as
        and the build command to run, or that its first JSON objects have none of a trajectory's
        fields, or that a ``.json`` file is one JSON document nothing reads. ``None`` for a trajectory
        or rollout-row file, another file whose first lines hold no JSON object (its lines are
        reported one by one), and a file that cannot be read.
    """
    objects = [value for value in _first_values(path, max_line_bytes) if isinstance(value, dict)]
    if any(_trajectory_shaped(value) for value in objects):
        return None
    from ng_traj.sources.detect import TRAJECTORIES, claims

    found = claims(path)
    if any(claim.kind == "rollouts" or claim == TRAJECTORIES for claim in found):
        return None
    if not found and any(_trajectory_like(value) for value in objects):
        return None
    if found:
        looks = " or ".join(_with_article(claim.description) for claim in found)
        if any(claim.kind != "unsupported" for claim in found):
            command = f"ng-traj build {shlex.quote(str(path))} -o trajectories.jsonl"
            return f"looks like {looks}, not trajectory records; build it first: {command}"
        return f"looks like {looks}, not trajectory records"
    if not objects:
        return _json_document(path)
    if any(not ROLLOUT_KEYS_SET.isdisjoint(value) for value in objects):
        return None
    return (
        f"holds no trajectory records: none of its first {len(objects)} JSON objects has a trajectory's fields "
        "(schema_version, task_id, rollout_id, ...) or ng_trajectory"
    )


def holds_trajectories(path: Path, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> bool:
    """Whether one of the first :data:`LOOK_LINES` records of ``path`` is a trajectory or carries one."""
    return any(isinstance(value, dict) and _trajectory_like(value) for value in _first_values(path, max_line_bytes))


def _json_document(path: Path) -> str | None:
    """For a ``.json`` file that is one JSON document (spread over lines), that it is no JSON Lines."""
    from ng_traj.io.compression import logical_path
    from ng_traj.sources.sniff import first_record

    if logical_path(path).suffix != ".json" or first_record(path) is None:
        return None
    return "holds one JSON document, not JSON Lines of trajectory records"


def _first_values(path: Path, max_line_bytes: int) -> list[Any]:
    try:
        with closing(iter_json_lines(path, max_line_bytes=max_line_bytes)) as lines:
            return [line.value for line in itertools.islice(lines, LOOK_LINES) if line.ok]
    except OSError:
        return []


def _trajectory_like(value: dict[str, Any]) -> bool:
    return "ng_trajectory" in value or not TRAJECTORY_FIELDS.isdisjoint(value)


def _trajectory_shaped(value: dict[str, Any]) -> bool:
    """A trajectory (two of its fields at least) or a row carrying one. One field alone is not
    enough where a reader claims the file: a chat message's ``tool_calls`` (a Hermes gateway
    transcript's assistant lines) is one of a trajectory's field names too."""
    return "ng_trajectory" in value or len(TRAJECTORY_FIELDS.intersection(value)) >= 2


def _with_article(description: str) -> str:
    """``pi session`` → ``a pi session``; plural descriptions (``Hermes ShareGPT trajectories``) stay."""
    head = description.split(" (")[0]
    if head.startswith(("a ", "an ")) or head.endswith(("s", "lines")) or " lines " in head:
        return description
    return ("an " if head[:1].lower() in "aeiou" else "a ") + description
