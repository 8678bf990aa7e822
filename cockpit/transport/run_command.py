"""One command on a host, run to its end: the seam a batch scheduler's client goes through.

A Slurm job is submitted, watched and cancelled with `sbatch`, `squeue`, `scontrol` and
`scancel` on a login node. The cockpit runs them through this seam: `LocalCommands` on
this machine (a login node itself, and the tests), `SshCommands` over the same SSH
transport, host keys and `~/.ssh/config` as the agents' links. Commands are argv lists;
over SSH they become one shell line with every word quoted (`shlex.join`), so no value
in them is ever shell syntax.
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import paramiko

from cockpit.transport.inventory import HostSpec
from cockpit.transport.link import LinkOptions
from cockpit.transport.ssh_link import Connection, _ConnectFailed, connect

DEFAULT_TIMEOUT = 60.0
MAX_OUTPUT = 1 << 20  # bytes kept of a command's stdout or stderr


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def describe(self) -> str:
        """What went wrong, for a message: the command, its status and its stderr's tail."""
        tail = (self.stderr.strip() or self.stdout.strip())[-500:]
        return f"`{shlex.join(self.argv)}` exited {self.returncode}: {tail or '(no output)'}"


class CommandError(RuntimeError):
    """A command could not be run at all (no connection, no such program, timeout)."""


class Commands(Protocol):
    def run(self, argv: Sequence[str], stdin: bytes | None = None,
            timeout: float = DEFAULT_TIMEOUT) -> CommandResult: ...


class LocalCommands:
    """Commands on this machine, in `env` (default: this process's) and `cwd`."""

    def __init__(self, env: Mapping[str, str] | None = None, cwd: str | None = None) -> None:
        self.env = dict(env) if env is not None else None
        self.cwd = cwd

    def run(self, argv: Sequence[str], stdin: bytes | None = None,
            timeout: float = DEFAULT_TIMEOUT) -> CommandResult:
        try:
            done = subprocess.run(list(argv), input=stdin or b"", capture_output=True,
                                  timeout=timeout, env=self.env, cwd=self.cwd)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CommandError(f"`{shlex.join(argv)}`: {exc}") from exc
        return CommandResult(tuple(argv), done.returncode,
                             done.stdout[:MAX_OUTPUT].decode("utf-8", "replace"),
                             done.stderr[:MAX_OUTPUT].decode("utf-8", "replace"))


class SshCommands:
    """Commands on one host over SSH; the connection is opened at first use and kept."""

    def __init__(self, spec: HostSpec, options: LinkOptions | None = None) -> None:
        self.spec, self.options = spec, options or LinkOptions()
        self._conn: Connection | None = None
        self._lock = threading.Lock()

    def _client(self):
        if self._conn is None:
            try:
                self._conn = connect(self.spec, self.options)
            except _ConnectFailed as exc:
                raise CommandError(f"{self.spec.name}: {exc.detail}") from exc
        return self._conn.client

    def run(self, argv: Sequence[str], stdin: bytes | None = None,
            timeout: float = DEFAULT_TIMEOUT) -> CommandResult:
        line = shlex.join(argv)
        with self._lock:
            try:
                channel_in, out, err = self._client().exec_command(line, timeout=timeout)
                if stdin:
                    channel_in.write(stdin)
                channel_in.channel.shutdown_write()
                stdout, stderr = out.read(MAX_OUTPUT), err.read(MAX_OUTPUT)
                # The channel's timeout bounds each read, not the wait for the exit
                # status after the output ended: a command that closed its output and
                # runs on, or a link that died silently after it, would hold this lock
                # (every Slurm command through this host) for ever.
                if not out.channel.status_event.wait(timeout):
                    with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
                        out.channel.close()
                    self.close()  # the link may be dead: the next command connects again
                    raise CommandError(
                        f"{self.spec.name}: `{line}`: its output ended but it did not exit "
                        f"within {timeout:g} s (it runs on with its output closed, or the "
                        "link died): gave up on it and closed its channel")
                status = out.channel.recv_exit_status()
            except (OSError, EOFError, paramiko.SSHException) as exc:
                self.close()
                raise CommandError(f"{self.spec.name}: `{line}`: {exc}") from exc
        return CommandResult(tuple(argv), status, stdout.decode("utf-8", "replace"),
                             stderr.decode("utf-8", "replace"))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
