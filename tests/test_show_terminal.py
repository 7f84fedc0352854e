"""``ng-traj show`` in a real terminal (a pseudo-terminal from Python's ``pty``) and through a pipe.

On a terminal the output goes through the pager (``$PAGER``: here a ``sed`` that marks each line it
pages) in colour; through a pipe it is plain text, not paged. The fixture is described in
``tests/test_views.py``.
"""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

from conftest import FIXTURES

PARALLEL = FIXTURES / "views" / "parallel_subagent.jsonl"
PAGER = "sed s/^/paged:/"


def _environment(pager: str = PAGER) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "MANPAGER", "LESS", "COLUMNS", "LINES")}
    return {**env, "PAGER": pager, "TERM": "xterm-256color"}


def _in_terminal(*args: str, pager: str = PAGER) -> tuple[int, str]:
    """Run ``ng-traj ARGS`` with a 140x40 pseudo-terminal as its standard streams; exit code and output."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 140, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "ng_traj", *args],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env=_environment(pager),
        start_new_session=True,
    )
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: every holder of the terminal has closed it
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(controller)
    return process.wait(timeout=120), b"".join(chunks).decode("utf-8", "replace")


def _piped(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ng_traj", *args], capture_output=True, text=True, env=_environment(), timeout=120
    )


def test_on_a_terminal_one_rollout_is_paged_in_colour():
    code, out = _in_terminal("show", str(PARALLEL), "1-0")
    assert code == 0, out
    lines = [line for line in out.replace("\r\n", "\n").split("\n") if line]
    assert lines and all(line.startswith("paged:") for line in lines), lines[:5]
    assert "\x1b[" in out  # styles reach the pager
    assert "spawned by call_spawn" in out and "tool_timing_unavailable" in out


def test_on_a_terminal_the_list_is_paged_and_no_pager_prints_directly():
    code, out = _in_terminal("show", str(PARALLEL))
    assert code == 0 and "paged:" in out and "task-1" in out
    code, out = _in_terminal("show", str(PARALLEL), "1-0", "--no-pager")
    assert code == 0 and "paged:" not in out and "spawned by call_spawn" in out


def test_a_pager_that_cannot_start_or_fails_falls_back_to_the_terminal(tmp_path):
    for pager in (str(tmp_path / "no-such-pager"), "false"):
        code, out = _in_terminal("show", str(PARALLEL), "1-0", pager=pager)
        assert code == 0, out
        text = " ".join(out.split())
        assert f"ng-traj show: the pager '{pager}' exited with status" in text, out
        assert "printing here instead" in text
        assert "spawned by call_spawn" in out and "tool_timing_unavailable" in out


def test_through_a_pipe_it_is_plain_and_not_paged():
    result = _piped("show", str(PARALLEL), "1-0")
    assert result.returncode == 0, result.stderr
    assert "paged:" not in result.stdout and "\x1b[" not in result.stdout
    assert "└── invocation root  completed  3500 ms" in result.stdout
    assert "            └── tool call read  call_c  completed  —  (no time recorded)" in result.stdout


def test_an_ambiguous_rollout_on_a_terminal_is_one_error_line_without_traceback(tmp_path):
    doubled = tmp_path / "doubled.jsonl"
    doubled.write_bytes(PARALLEL.read_bytes() * 2)
    code, out = _in_terminal("show", str(doubled), "1-0")
    assert code == 2
    message = " ".join(out.split())
    assert "2 rollouts are '1-0'" in message and "name one file" not in message
    assert "the id repeats within" in message and "no run or agent of their own tells these records apart" in message
    assert "pick one by its line with --line N" in message
    assert "Traceback" not in out and "paged:" not in out
