"""One command on a host, run to its end: the seam a batch scheduler's client goes through.

A Slurm job is submitted, watched and cancelled with `sbatch`, `squeue`, `scontrol` and
`scancel` on a login node. The cockpit runs them through this seam: `LocalCommands` on
this machine (a login node itself, and the tests), `SshCommands` over the same SSH
transport, host keys and `~/.ssh/config` as the agents' links. Commands are argv lists;
over SSH they become one shell line with every word quoted (`shlex.join`), so no value
in them is ever shell syntax.

A command's output is untrusted and unbounded: both streams are read to their end side
by side (one left unread would fill its pipe or SSH window and stall the command), the
first `MAX_OUTPUT` bytes of each kept and the rest counted (`CommandResult.dropped`), and
the whole command is bounded by its timeout.
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Protocol

import paramiko

from cockpit.transport.inventory import HostSpec
from cockpit.transport.link import LinkOptions
from cockpit.transport.ssh_link import Connection, _ConnectFailed, connect

DEFAULT_TIMEOUT = 60.0
MAX_OUTPUT = 1 << 20  # bytes kept of a command's stdout or stderr
_CHUNK = 1 << 16


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    dropped: int = 0  # bytes past the first MAX_OUTPUT of either stream, not kept

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def describe(self) -> str:
        """What went wrong, for a message: the command, its status and its stderr's tail."""
        tail = (self.stderr.strip() or self.stdout.strip())[-500:]
        cut = (f" ({self.dropped} bytes of its output past the first {MAX_OUTPUT >> 20} MiB "
               "not kept)" if self.dropped else "")
        return (f"`{shlex.join(self.argv)}` exited {self.returncode}: "
                f"{tail or '(no output)'}{cut}")


class _Drain:
    """One output stream read to its end on a thread of its own: the first `MAX_OUTPUT`
    bytes kept, the others counted and let go, so a command that prints without end
    neither fills this process's memory nor stalls on a full pipe."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.kept = bytearray()
        self.dropped = 0
        self.error: BaseException | None = None
        self._stream = stream
        self._thread = threading.Thread(target=self._read, daemon=True,
                                        name="command-output")
        self._thread.start()

    def _read(self) -> None:
        try:
            while chunk := self._stream.read(_CHUNK):
                room = max(0, MAX_OUTPUT - len(self.kept))
                self.kept += chunk[:room]
                self.dropped += max(0, len(chunk) - room)
        except Exception as exc:  # a timed-out or broken read: told by the caller
            self.error = exc

    def join(self, deadline: float) -> bool:
        """Whether the stream ended by `deadline` (a `time.monotonic()` instant)."""
        self._thread.join(max(0.0, deadline - time.monotonic()))
        return not self._thread.is_alive()

    def text(self) -> str:
        return bytes(self.kept).decode("utf-8", "replace")


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
        line = shlex.join(argv)
        deadline = time.monotonic() + timeout
        try:
            proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=self.env, cwd=self.cwd)
        except OSError as exc:
            raise CommandError(f"`{line}`: {exc}") from exc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        with proc:
            out, err = _Drain(proc.stdout), _Drain(proc.stderr)
            with contextlib.suppress(BrokenPipeError):  # it may not read its input at all
                proc.stdin.write(stdin or b"")
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
            try:
                status = proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise CommandError(f"`{line}`: did not finish within {timeout:g} s; "
                                   "killed") from None
            if not (out.join(deadline) and err.join(deadline)):
                # Something it started holds its output open: what came so far is kept.
                raise CommandError(f"`{line}` exited {status}, but its output stayed open "
                                   f"past {timeout:g} s (a process it started holds it)")
        return CommandResult(tuple(argv), status, out.text(), err.text(),
                             out.dropped + err.dropped)


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
            deadline = time.monotonic() + timeout
            try:
                channel_in, out, err = self._client().exec_command(line, timeout=timeout)
                if stdin:
                    channel_in.write(stdin)
                channel_in.channel.shutdown_write()
                drains = (_Drain(out), _Drain(err))
                if not all(d.join(deadline) for d in drains):
                    with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
                        out.channel.close()  # ends the reads still waiting
                    self.close()
                    raise CommandError(f"{self.spec.name}: `{line}`: its output did not end "
                                       f"within {timeout:g} s: gave up on it and closed "
                                       "its channel")
                for drain in drains:
                    if drain.error is not None:
                        raise drain.error
                # The channel's timeout bounds each read, not the wait for the exit
                # status after the output ended: a command that closed its output and
                # runs on, or a link that died silently after it, would hold this lock
                # (every Slurm command through this host) for ever.
                if not out.channel.status_event.wait(max(0.0, deadline - time.monotonic())):
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
        return CommandResult(tuple(argv), status, drains[0].text(), drains[1].text(),
                             drains[0].dropped + drains[1].dropped)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
