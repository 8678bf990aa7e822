"""`LocalLink`: the same link interface for an agent on this machine (demo, one host).

The agent's `stream` command runs as a child process instead of over SSH; states,
framing, stale detection and reconnection behave exactly as for a remote host, so the
rest of the cockpit cannot tell the two apart.
"""

from __future__ import annotations

import os
import subprocess
import sys

from cockpit.transport import commands
from cockpit.transport.inventory import AUTO_AGENT
from cockpit.transport.link import BaseLink
from cockpit.transport.pump import READ_SIZE
from cockpit.transport.states import AGENT_MISSING, CONNECTING, Backoff


class ProcessSource:
    """A child process's stdout and stderr pipes seen as a `StreamSource`."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self._out = proc.stdout.fileno()
        self._err = proc.stderr.fileno()
        os.set_blocking(self._out, False)
        os.set_blocking(self._err, False)
        self._out_eof = False
        self._err_eof = False

    def filenos(self) -> list[int]:
        fds = []
        if not self._out_eof:
            fds.append(self._out)
        if not self._err_eof:
            fds.append(self._err)
        return fds

    def _read(self, fd: int) -> bytes | None:
        try:
            data = os.read(fd, READ_SIZE)
        except BlockingIOError:
            return None
        except OSError:
            data = b""
        if not data:
            if fd == self._out:
                self._out_eof = True
            else:
                self._err_eof = True
            return None
        return data

    def read_out(self) -> bytes | None:
        return None if self._out_eof else self._read(self._out)

    def read_err(self) -> bytes | None:
        return None if self._err_eof else self._read(self._err)

    def finished(self) -> bool:
        return self._out_eof and (self._err_eof or self.proc.poll() is not None)

    def exit_status(self) -> int | None:
        try:
            return self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            return None

    def write(self, data: bytes) -> None:
        stdin = self.proc.stdin
        if stdin is None:
            raise OSError("agent stdin is closed")
        stdin.write(data)
        stdin.flush()


class LocalLink(BaseLink):
    """Streams from `agent stream` run as a local child process."""

    _proc: subprocess.Popen[bytes] | None = None

    def _argv(self) -> list[str]:
        if self.spec.agent == AUTO_AGENT:
            # The agent ships with the cockpit: run the copy next to this interpreter.
            return [sys.executable, "-m", "agent"]
        return commands.agent_argv(self.spec.agent)

    def _interrupt(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()

    def _attempt(self, backoff: Backoff) -> float:
        self._set_state(CONNECTING, "local agent")
        from_seq = self._from_seq()
        argv = [
            *self._argv(),
            "stream",
            "--state-dir",
            os.path.expanduser(self.spec.state_dir),
            "--from",
            str(from_seq),
        ]
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                bufsize=0,
            )
        except OSError as exc:
            self._set_state(
                AGENT_MISSING, f"cannot run local agent `{' '.join(argv[:-5])}`: {exc.strerror}"
            )
            return backoff.slowest()
        self._proc = proc
        if self._stopping_now():
            proc.terminate()
        self.connections += 1
        try:
            result = self._pump(ProcessSource(proc), from_seq)
        finally:
            self._set_writer(None)
            self._reap(proc)
            self._proc = None
        if (
            result.reason == "eof"
            and not result.got_data
            and result.exit_status in (commands.MISSING_STATUSES)
        ):
            self._set_state(
                AGENT_MISSING,
                f"local agent `{' '.join(argv[:-5])}` could not run: {self.stderr.summary(1)}",
            )
            return backoff.slowest()
        return self._after_stream(result, backoff, from_seq)

    @staticmethod
    def _reap(proc: subprocess.Popen[bytes]) -> None:
        """Close stdin (the agent exits on EOF) and make sure the child is gone."""
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
