"""Processes a test left running, found by its temporary folder: in their command line,
their environment (a job's run dir, an agent's state dir) or their working directory.

A job orphaned by a test (an agent killed before the stop it acknowledged took effect,
a test that failed half-way) would otherwise train on for the rest of the suite on the
machine's two cores, slowing every later test. The suite ends such processes after each
test that starts processes, and warns, naming them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

# A remote `agent stream` ends when sshd closes its session, a moment after the test's
# own teardown: such a process is on its way out, not left running.
SETTLE_S = 3.0


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def left_running(folder: str) -> dict[int, str]:
    """{pid: command line} of every live process (not this one) that names `folder`."""
    mark = folder.encode()
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        cmdline = _read(entry / "cmdline")
        if not cmdline:
            continue  # a kernel thread or a zombie
        try:
            cwd = os.readlink(entry / "cwd").encode()
        except OSError:
            cwd = b""
        if mark in cmdline or mark in cwd or mark in _read(entry / "environ"):
            found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return found


def settled(folder: str, wait: float = SETTLE_S) -> dict[int, str]:
    """`left_running(folder)` once those ending by themselves have had `wait` seconds."""
    deadline = time.monotonic() + wait
    left = left_running(folder)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = left_running(folder)
    return left


def end(pids: list[int]) -> None:
    """SIGKILL each process and its process group (a job's ranks share torchrun's)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
