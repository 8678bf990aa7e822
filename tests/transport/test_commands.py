"""Remote command templates: every argument stays one shell word."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from cockpit.transport import commands

ECHO_ARGV = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]


def run_shell(command: str, home: Path) -> list[str]:
    """Run a command line the way sshd does (through a POSIX shell) and decode its argv."""
    env = {**os.environ, "HOME": str(home)}
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout)


def test_hostile_state_dir_stays_one_argument(tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    hostile = f"/tmp/x; touch {canary}; rm -rf /nonexistent $(touch {canary}) `id`"
    argv = run_shell(commands.stream(ECHO_ARGV, hostile, 42), tmp_path)
    assert argv == ["stream", "--state-dir", hostile, "--from", "42"]
    assert not canary.exists()


def test_home_relative_paths_expand_on_the_host_only(tmp_path: Path) -> None:
    argv = run_shell(commands.stream(ECHO_ARGV, "~/state dir; x", 0), tmp_path)
    assert argv[2] == f"{tmp_path}/state dir; x"
    assert commands.remote_path("~") == '"$HOME"'
    assert commands.remote_path("a'b") == shlex.quote("a'b")


def test_agent_command_words_are_quoted_individually(tmp_path: Path) -> None:
    script = tmp_path / "my agent; rm -rf x.py"
    script.write_text("import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    agent = shlex.join([sys.executable, str(script)])
    argv = run_shell(commands.stream(commands.agent_argv(agent), "/s", 7), tmp_path)
    assert argv == ["stream", "--state-dir", "/s", "--from", "7"]
    assert commands.agent_argv("auto") == ["cockpit-agent"]


def test_daemon_start_template_quotes_every_path(tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    state = tmp_path / f"st;touch {canary}"
    line = commands.start_daemon(
        sys.executable,
        "/nonexistent/agent.pyz",
        str(state),
        [f"/r;touch {canary}"],
        str(tmp_path / "log"),
    )
    env = {**os.environ, "HOME": str(tmp_path)}
    out = subprocess.run(["sh", "-c", line], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "started"
    assert state.is_dir()
    assert not canary.exists()
