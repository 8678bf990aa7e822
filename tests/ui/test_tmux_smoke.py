"""The cockpit in a real terminal: run it under tmux and read the screen back."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TITLES = ("1 Progress", "2 Effect", "3 Efficiency", "4 Health")
COMMAND = [sys.executable, "-m", "cockpit.ui.demo_static"]


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_four_instruments_in_a_real_terminal() -> None:
    session = f"cockpit-smoke-{uuid.uuid4().hex[:8]}"
    env = {"PYTHONPATH": str(REPO), "TERM": "xterm-256color"}
    command = " ".join(f"{k}={v}" for k, v in env.items()) + " " + " ".join(COMMAND)
    # Start a shell first and type the command: the window has its final size by then,
    # as it would for an operator's terminal.
    tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "48", "-c", str(REPO))
    tmux("send-keys", "-t", session, f"exec env {command}", "Enter")
    try:
        screen = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            screen = tmux("capture-pane", "-p", "-t", session)
            if all(title in screen for title in TITLES) and "demo-7b" in screen:
                break
            time.sleep(0.3)
        assert all(title in screen for title in TITLES), screen
        assert "SIM" in screen and "step 12,000 / 50,000" in screen
        tmux("send-keys", "-t", session, "q")
        for _ in range(50):
            alive = subprocess.run(["tmux", "has-session", "-t", session], capture_output=True)
            if alive.returncode != 0:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the cockpit did not quit on q")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
