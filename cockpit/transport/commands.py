"""Every command the cockpit runs on a host, built from fixed templates.

An SSH exec request is a shell command line, so any address, path or name that reaches
it from an inventory could inject shell syntax. Nothing else in the transport builds
command strings: each template here quotes every argument with `shlex.quote`, and a
path starting with `~/` becomes `"$HOME"/…` so that it still expands remotely.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

DEFAULT_AGENT_ARGV = ("cockpit-agent",)
# Exit statuses a POSIX shell gives for "command not found" / "found but not executable".
MISSING_STATUSES = (126, 127)


def remote_path(path: str) -> str:
    """One shell word for a host path, keeping `~` and `~/…` relative to $HOME."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        rest = path[2:]
        return '"$HOME"/' + shlex.quote(rest) if rest else '"$HOME"'
    return shlex.quote(path)


def agent_argv(agent: str) -> list[str]:
    """argv of the configured agent command (`auto` means `cockpit-agent` on PATH)."""
    if agent == "auto":
        return list(DEFAULT_AGENT_ARGV)
    argv = shlex.split(agent)
    if not argv:
        raise ValueError("empty agent command")
    return argv


def _join(words: Sequence[str]) -> str:
    return " ".join(words)


def _program(argv: Sequence[str]) -> list[str]:
    return [remote_path(word) for word in argv]


def stream(argv: Sequence[str], state_dir: str, from_seq: int) -> str:
    """`AGENT stream --state-dir DIR --from SEQ`: records on stdout, control ops on stdin."""
    return _join(
        [
            *_program(argv),
            "stream",
            "--state-dir",
            remote_path(state_dir),
            "--from",
            str(int(from_seq)),
        ]
    )


def start_daemon(
    python: str, zipapp: str, state_dir: str, run_dirs: Sequence[str], log_path: str
) -> str:
    """Start the pushed agent's daemon detached from the SSH session.

    `nohup … &` with every stream redirected lets the exec channel close while the
    daemon keeps sampling; the daemon itself refuses to run twice on one state dir.
    """
    words = [remote_path(python), remote_path(zipapp), "run", "--state-dir", remote_path(state_dir)]
    for run_dir in run_dirs:
        words += ["--run-dir", remote_path(run_dir)]
    daemon = _join(words)
    # The braces keep `&` on the daemon alone: backgrounding the whole `&&` list would
    # leave a subshell holding the channel's stdout, and the exec would never finish.
    return (
        f"mkdir -p {remote_path(state_dir)} && "
        f"{{ nohup {daemon} >>{remote_path(log_path)} 2>&1 </dev/null & }} && echo started"
    )


def daemon_status(python: str, zipapp: str, state_dir: str) -> str:
    """`PYTHON ZIPAPP status --json --state-dir DIR` (fails when no journal is there)."""
    return _join([remote_path(python), remote_path(zipapp), "status", "--json",
                  "--state-dir", remote_path(state_dir)])


def deployed_argv(python: str, zipapp: str) -> list[str]:
    """argv that runs a pushed zipapp agent (used in place of `cockpit-agent`)."""
    return [python, zipapp]


def zipapp_path(deploy_dir: str, version: str) -> str:
    return f"{deploy_dir.rstrip('/')}/agent-{version}.pyz"


def python_script(python: str, script: str, argument: str, *, workdir: str | None = None,
                  env: Sequence[tuple[str, str]] = ()) -> str:
    """`[cd DIR &&] [env K=V …] PYTHON -c SCRIPT ARGUMENT`: the pre-flight check's probes
    (the script is the cockpit's own text; the argument is one JSON word)."""
    words = [remote_path(python), "-c", shlex.quote(script), shlex.quote(argument)]
    if env:
        words = ["env", *(shlex.quote(f"{key}={value}") for key, value in env), *words]
    line = _join(words)
    return f"cd {remote_path(workdir)} && {line}" if workdir else line
