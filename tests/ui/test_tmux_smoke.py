"""The installed `cockpit replay` in a real terminal: run it under tmux on the recorded
run, read the screen back, quit with q."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.ui.recorded import recording_facts

pytestmark = pytest.mark.starts  # a real terminal (tmux) and the installed console script

TITLES = ("1 Progress", "2 Effect", "3 Efficiency", "4 Health")
WAIT_S = 60  # bounds a hang only: a loaded machine takes a while to start Textual


def cockpit_command() -> str:
    """The console script of this environment (the venv's, not one found elsewhere)."""
    beside = Path(sys.executable).parent / "cockpit"
    found = str(beside) if beside.is_file() else shutil.which("cockpit")
    if found is None:
        pytest.fail("the `cockpit` console script is not installed (pip install -e .)")
    return found


def require_tmux() -> None:
    if shutil.which("tmux") is not None:
        return
    if os.environ.get("CI"):
        pytest.fail("tmux is not installed, and CI must run the real-terminal test")
    pytest.skip("tmux is not installed")


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True).stdout


def session_alive(session: str) -> bool:
    return subprocess.run(["tmux", "has-session", "-t", session],
                          capture_output=True).returncode == 0


def test_replay_shows_the_four_instruments_in_a_real_terminal(
        recorded_store: Path, tmp_path: Path) -> None:
    require_tmux()
    facts = recording_facts()
    session = f"cockpit-smoke-{uuid.uuid4().hex[:8]}"
    status = tmp_path / "exit-status"
    replay = shlex.join([cockpit_command(), "replay", str(recorded_store), "--speed", "1000"])
    command = f"{replay}; echo $? > {shlex.quote(str(status))}"
    # Start a shell first and type the command: the window has its final size by then,
    # as it would for an operator's terminal. TERM and the socket come from tmux.
    tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "48", "-c", str(tmp_path))
    try:
        tmux("send-keys", "-t", session, f"exec sh -c {shlex.quote(command)}", "Enter")
        screen = ""
        expected = (*TITLES, facts.host, f"step {facts.last_step:,} / {facts.total_steps:,}")
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            screen = tmux("capture-pane", "-p", "-t", session)
            if all(part in screen for part in expected):
                break
            time.sleep(0.3)
        assert all(title in screen for title in TITLES), screen
        assert facts.host in screen and "REPLAY" in screen, screen
        assert ("SIM" in screen) == facts.simulated, screen
        assert f"step {facts.last_step:,} / {facts.total_steps:,}" in screen, screen
        assert "Traceback" not in screen, screen
        tmux("send-keys", "-t", session, "q")
        deadline = time.monotonic() + WAIT_S
        while session_alive(session) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not session_alive(session), "the cockpit did not quit on q"
        assert status.read_text().strip() == "0"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
