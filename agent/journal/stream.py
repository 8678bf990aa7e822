"""`cockpit-agent stream --from SEQ`: the journal on stdout, control ops from stdin.

This is what the cockpit runs over its SSH exec channel. After the `stream` header it
copies journal bytes to stdout as they are on disk, in large writes (no per-record
decoding: a backlog of millions of records must go out at wire speed), then keeps
following the journal. Control ops read on stdin are handed to the daemon through the
control inbox. The process ends when stdin reaches EOF or stdout is closed, so closing
the SSH channel ends it.
"""

from __future__ import annotations

import json
import os
import select
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional, TextIO

from agent import __version__
from agent.journal.control_inbox import append_op
from agent.journal.journal import JournalReader, JournalReplaced
from agent.lockfile import running_daemon
from agent.wire.protocol import MAX_LINE_BYTES, PROTOCOL_VERSION, STREAM_HEADER, encode

# A control op the inbox's disk cannot take now is tried again this often, this long
# (well within the inbox's INBOX_MAX_AGE, past which the daemon would refuse it).
OP_RETRY_EVERY = 0.25
OP_RETRY_FOR = 60.0


def stream_header(reader: JournalReader, after: int, daemon_pid: Optional[int],
                  first: Optional[int] = None) -> bytes:
    """The header of a stream of `reader`'s journal from `after`. A header sent where
    retention dropped records before the stream reached them gives the `first` seq sent
    next, so the cockpit counts the ones between as lost."""
    held, head = reader.bounds()
    first = held if first is None else first
    return encode(STREAM_HEADER, 0, {
        "protocol": PROTOCOL_VERSION, "agent_version": __version__,
        "journal_id": reader.journal_id, "from": after, "first": first, "head": head,
        "daemon": daemon_pid is not None,
    })


def _gap_headers(reader: JournalReader, daemon_pid: Optional[int]) -> Callable[[int, int], bytes]:
    """What a stream sends where retention dropped records it had not reached yet."""
    return lambda sent, following: stream_header(reader, sent, daemon_pid, first=following)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _ascii(text: str, limit: int = 1000) -> str:
    """`text` as one line of printable ASCII (what a client or the disk put into it
    reaches the operator's terminal escaped), at most `limit` characters of it."""
    return "".join(ch if " " <= ch <= "~" else ascii(ch)[1:-1] for ch in text[:limit])


def _fd_lines(fd: int) -> Iterator[bytes]:
    """Lines from a raw fd. Not `sys.stdin.buffer`: a thread blocked inside a buffered
    reader holds its lock, and the interpreter aborts at exit when it finds it taken.
    A descriptor left non-blocking (shared with a process that set it so) is waited on;
    any other read error is raised: nothing more can come through it."""
    pending = b""
    while True:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            select.select([fd], [], [], 1.0)
            continue
        if not data:
            if pending:
                yield pending
            return
        pending += data
        while True:
            nl = pending.find(b"\n")
            if nl < 0:
                if len(pending) > MAX_LINE_BYTES:
                    yield pending
                    pending = b""
                break
            yield pending[: nl + 1]
            pending = pending[nl + 1 :]


class _ControlReader(threading.Thread):
    """Reads ops from stdin into the inbox; sets `eof` when stdin closes, or when it
    cannot be read any more (`error` then says why, and the stream ends non-zero: ops
    sent after that would reach no agent). One line's failure is said on stderr, handed
    over as malformed where it can be (so that its op is answered), and reading goes on."""

    def __init__(self, state_dir: Path, stdin_fd: int, stderr: TextIO) -> None:
        super().__init__(name="control-in", daemon=True)
        self.state_dir = state_dir
        self.stdin_fd = stdin_fd
        self.stderr = stderr
        self.eof = threading.Event()
        self.error: Optional[str] = None

    def run(self) -> None:
        try:
            for lineno, raw in enumerate(_fd_lines(self.stdin_fd), 1):
                if raw.strip():
                    self._take(raw, lineno)
        except Exception as exc:  # stdin cannot be read: the stream says so as it ends
            self.error = "reading control ops from stdin failed: %s: %s" % (
                type(exc).__name__, exc)
        finally:
            self.eof.set()

    def _take(self, raw: bytes, lineno: int) -> None:
        try:
            self._accept(raw, lineno)
        except Exception as exc:
            error = "control line %d could not be handed to the agent: %s: %s" % (
                lineno, type(exc).__name__, _ascii(str(exc), 300))
            self._say(error)
            entry: Dict[str, Any] = {"_malformed": error, "_rx": time.time(),
                                     "_raw": raw[:200].decode("utf-8", "replace")}
            try:
                parsed = json.loads(raw)
                for key in ("id", "op"):  # its op is refused by name, and answered
                    value = parsed.get(key) if isinstance(parsed, dict) else None
                    if isinstance(value, str):
                        value.encode("utf-8")  # no lone surrogate: it can be written
                        entry[key] = value
            except Exception:
                pass  # refused without them: the error is on stderr
            try:
                self._hand_over(entry)
            except Exception as again:
                self._say("control line %d is lost: %s: %s" % (
                    lineno, type(again).__name__, again))

    def _say(self, text: str) -> None:
        try:
            self.stderr.write("cockpit-agent stream: %s\n" % _ascii(text))
            self.stderr.flush()
        except (OSError, ValueError):
            pass  # no stderr left to say it on; the ops still go on to the agent

    def _accept(self, raw: bytes, lineno: int) -> None:
        error = None
        entry = None
        try:
            entry = json.loads(raw)
        except RecursionError:
            error = "control line %d is not JSON: nested too deeply" % lineno
        except ValueError as exc:
            error = "control line %d is not JSON: %s" % (lineno, exc)
        if error is None and not isinstance(entry, dict):
            error = "control line %d is not a JSON object" % lineno
        if error is not None or entry is None:
            self._say(str(error))
            entry = {"_malformed": error, "_raw": raw[:200].decode("utf-8", "replace")}
        entry["_rx"] = time.time()
        self._hand_over(entry)

    def _hand_over(self, entry: dict) -> None:
        """Into the inbox, retried while its disk is full (the daemon gives back room
        for that when it finds the disk full); an op that still cannot be written is
        said to be lost on stderr. Neither ends the stream."""
        deadline = time.monotonic() + OP_RETRY_FOR
        attempt = 0
        while True:
            try:
                append_op(self.state_dir, entry, fresh_line=attempt > 0)
                return
            except OSError as exc:
                if attempt == 0 or time.monotonic() >= deadline:
                    self._say("cannot hand control op %r (id %r) to the agent: %s; %s" % (
                        entry.get("op"), entry.get("id"), exc,
                        "retrying" if attempt == 0 else "it is lost"))
                if time.monotonic() >= deadline:
                    return
            attempt += 1
            time.sleep(OP_RETRY_EVERY)


def run_stream(state_dir: Path, after: int, stdin_fd: int = 0, stdout_fd: int = 1,
               stderr: Optional[TextIO] = None, poll: float = 0.05) -> int:
    """Serve the journal from `after`; returns the exit code (0 on a closed channel)."""
    if after < 0:
        raise ValueError("--from must be >= 0 (got %d)" % after)
    stderr = stderr if stderr is not None else sys.stderr
    state_dir = Path(state_dir)
    reader = JournalReader(state_dir)
    daemon_pid = running_daemon(state_dir)
    if daemon_pid is None:
        stderr.write("cockpit-agent stream: no agent daemon is running for %s; serving the "
                     "journal and waiting for one\n" % state_dir)
        stderr.flush()
    control = _ControlReader(state_dir, stdin_fd, stderr)
    control.start()
    try:
        while True:
            first = reader.bounds()[0]
            _write_all(stdout_fd, stream_header(reader, after, daemon_pid, first=first))
            # What the header reports lost (below its `first`) is not reported again.
            try:
                for chunk in reader.chunks(max(after, first - 1), follow=True, poll=poll,
                                           stop=control.eof.is_set,
                                           on_gap=_gap_headers(reader, daemon_pid)):
                    _write_all(stdout_fd, chunk)
                if control.error is not None:
                    stderr.write("cockpit-agent stream: %s; ending the stream, as no "
                                 "control op could reach the agent through it\n"
                                 % _ascii(control.error))
                    stderr.flush()
                    return 1
                return 0
            except JournalReplaced as replaced:
                # The state dir was wiped and a new journal begun. Its records are sent
                # whole, after a header of their own: the cockpit keys them apart from
                # the old journal's, whose seqs the new ones repeat.
                stderr.write("cockpit-agent stream: %s; serving the new journal from its "
                             "start\n" % replaced)
                stderr.flush()
                reader = JournalReader(state_dir)
                after = 0
                daemon_pid = running_daemon(state_dir)
    except BrokenPipeError:
        return 0
