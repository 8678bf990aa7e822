"""One command over an open SSH connection, and what ssh-agent offers: the paramiko
calls the pre-flight check (`cockpit.control.preflight`) makes, kept here so that
paramiko stays inside the transport."""

from __future__ import annotations

from typing import Any

import paramiko

# What a probe over SSH may raise when the connection is lost midway.
SSH_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, paramiko.SSHException)


def exec_capture(client: Any, command: str, timeout: float, max_bytes: int
                 ) -> tuple[int | None, str, str]:
    """(exit status, stdout, the tail of stderr) of `command`, each read up to
    `max_bytes`; (None, "", why) when the connection failed."""
    try:
        _, stdout, stderr = client.exec_command(command, timeout=timeout)
        out = stdout.read(max_bytes).decode("utf-8", "replace")
        err = stderr.read(max_bytes)[-2000:].decode("utf-8", "replace")
        return stdout.channel.recv_exit_status(), out, err
    except SSH_ERRORS as exc:
        return None, "", str(exc) or type(exc).__name__


def agent_key_count() -> int:
    """How many keys ssh-agent ($SSH_AUTH_SOCK) offers: none is what a script run without
    the operator's agent sees."""
    try:
        agent = paramiko.Agent()
    except (OSError, paramiko.SSHException):
        return 0
    try:
        return len(agent.get_keys())
    finally:
        agent.close()
