"""Control ops handed from `stream` processes to the daemon, answered exactly once.

A `stream` process (one per cockpit connection) appends each op it reads on stdin to
`STATE_DIR/control/inbox.ndjson`; the daemon, the journal's only writer, tails that file,
runs the op and journals its `control_ack`. The read position is checkpointed with the
journal seq it is valid at; after a crash the acks journaled since then are found in the
journal, so an op whose ack was written is not run a second time.

Entries the stream could not parse are written as `{"_malformed": ERROR, "_raw": TEXT}`
so the refusal is journaled like any other ack; `_rx` is when the stream received the op,
so ops that waited for a daemon too long are refused instead of run late.
"""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path
from typing import Callable, Dict, Optional, Set, Tuple

from agent.journal.journal import Journal, JournalReader
from agent.wire import atomic, ops, paths
from agent.wire.events import CONTROL_ACK
from agent.wire.op_error import OpError
from agent.wire.protocol import EVENT

# What a journal chunk, and then a line, holds when it is an ack: as the journal encodes it.
_ACK_WORD = ('"%s"' % CONTROL_ACK).encode()
_ACK_FIELD = ('"kind":"%s"' % CONTROL_ACK).encode()
INBOX_MAX_AGE = 120.0


Handler = Callable[[dict], Optional[dict]]


def inbox_path(state_dir: Path) -> Path:
    return paths.inbox_file(state_dir)


def append_op(state_dir: Path, entry: dict, fresh_line: bool = False) -> None:
    """Append one entry with a single O_APPEND write, so concurrent writers never mix.

    A short write (a full disk) raises OSError: the entry is not there whole. Try again
    with `fresh_line`, which begins it with a newline so that what the short write left
    stays a line of its own (answered as malformed) and this one is whole."""
    path = inbox_path(state_dir)
    atomic.private_dir(state_dir)  # the ops in it are carried out: this user's alone
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(entry, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
    if fresh_line:
        data = b"\n" + data
    fd = os.open(str(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        written = os.write(fd, data)
    finally:
        os.close(fd)
    if written < len(data):
        raise OSError(errno.ENOSPC, "%s: only %d of %d bytes of a control op written"
                      % (path, written, len(data)))


# What the agent did with an `adjust`: the line is in the trainer's control file. The
# trainer applies it at a step boundary (a checkpoint once saved) and says so, or why it
# refused, in its own `control_ack` of the same op id (one with a rank): "done" here read
# as in force a knob the trainer had not applied yet, or never would.
WRITTEN = "written to the trainer's control file"


def ack_record(op_id: object, op: object, ok: bool, error: Optional[str],
               job: object = None, extra: Optional[dict] = None,
               what: Optional[str] = None) -> Tuple[str, dict]:
    """The `control_ack` event of one op. A handler whose op is not complete when it
    returns (an adjust kept for a job that is not running) says what happened instead of
    "done" in `extra["outcome"]`: an operator reading "done" would expect it in force.
    An op the job's own thread carries out after the ack (`ops.ACCEPTED_OPS`) is
    "accepted", and an adjust is never "done" here: the agent only wrote it for the
    trainer (`WRITTEN`)."""
    data = {"id": op_id, "op": op, "ok": ok, "error": error}
    extra = dict(extra or {})
    outcome = extra.pop("outcome", None)
    data.update(extra)
    name = what or (op if isinstance(op, str) else "?")
    if not ok:
        outcome = "refused: %s" % error
    if outcome is None:
        outcome = ("accepted" if op in ops.ACCEPTED_OPS else WRITTEN if op == ops.ADJUST
                   else "done")
    msg = "control op %s %s" % (name, outcome)
    return (EVENT, {"kind": CONTROL_ACK, "job": job if isinstance(job, str) else None,
                      "rank": None, "step": None, "msg": msg, "data": data})


def op_job(entry: dict) -> Optional[str]:
    """The job an op concerns: its `job`, or the name in a launch's spec. An ack without
    one is shown under every job."""
    job = entry.get("job")
    if isinstance(job, str):
        return job
    spec = entry.get("spec")
    name = spec.get("name") if isinstance(spec, dict) else None
    return name if isinstance(name, str) else None


def op_words(entry: dict) -> Optional[str]:
    """An adjust as the operator asked it: "adjust (checkpoint_now)", "adjust
    (lr_scale=0.5)", not just "adjust" for a checkpoint request."""
    knobs = entry.get("knobs")
    if entry.get("op") != ops.ADJUST or not isinstance(knobs, dict) or not knobs:
        return None
    parts = [k if v is True else "%s=%s" % (k, v) for k, v in sorted(knobs.items())]
    return "adjust (%s)" % ", ".join(parts)


def _daemon_ack_id(line: bytes) -> Optional[str]:
    """The op id a journaled line acknowledges, when it is the daemon's own ack."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or record.get("kind") != CONTROL_ACK or (
            "src" in record):
        return None
    data = record.get("data")
    op_id = data.get("id") if isinstance(data, dict) else None
    return op_id if isinstance(op_id, str) else None


class ControlInbox:
    """Runs inbox ops through `handlers` (op name -> handler) and journals the acks."""

    def __init__(self, journal: Journal, handlers: Dict[str, Handler],
                 max_age: float = INBOX_MAX_AGE, clock: Callable[[], float] = time.time
                 ) -> None:
        self.journal = journal
        self.handlers = handlers
        self.max_age = max_age
        self._clock = clock
        self.path = inbox_path(journal.state_dir)
        self.state_path = self.path.with_name("inbox.state.json")
        self.offset = 0
        self._acked: Set[str] = set()
        self.recover()

    def recover(self) -> None:
        """The read position, and the ids of the ops answered since it was saved.

        Whatever the state file or the journal holds, this returns: the journal carries
        records from trainer spools (untrusted, and before spool validation of any
        shape). Only the daemon's own acks count, not a trainer's `control_ack` (which
        has a `src`): a trainer naming a pending op's id must not have it skipped."""
        after = 0
        try:
            saved = json.loads(self.state_path.read_text(encoding="utf-8"))
            self.offset, after = int(saved["offset"]), int(saved["seq"])
            if self.offset < 0 or after < 0:
                raise ValueError("negative position")
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
            self.offset, after = 0, 0
        if after > self.journal.head:
            self.offset, after = 0, 0
        for chunk in JournalReader(self.journal.state_dir).chunks(after):
            if _ACK_WORD not in chunk:
                continue
            for line in chunk.splitlines():
                if _ACK_FIELD in line:
                    op_id = _daemon_ack_id(line)
                    if op_id is not None:
                        self._acked.add(op_id)

    def _save(self) -> None:
        atomic.write_text(self.state_path,
                          json.dumps({"offset": self.offset, "seq": self.journal.head}))

    def poll(self) -> int:
        """Handle every complete new inbox line; returns how many ops were answered."""
        try:
            with open(str(self.path), "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return 0
        end = data.rfind(b"\n")
        if end < 0:
            return 0
        answered = 0
        for raw in data[: end + 1].splitlines():
            record = self._handle(raw)
            if record is not None:
                self.journal.append(*record)
                answered += 1
        self.offset += end + 1
        self._save()
        self._acked.clear()  # only ops from before the checkpoint can be repeats
        return answered

    def _handle(self, raw: bytes) -> Optional[Tuple[str, dict]]:
        if not raw.strip():
            return None
        try:
            entry = json.loads(raw)
        except RecursionError:
            return ack_record(None, None, False, "inbox line is not JSON: nested too deeply")
        except ValueError as exc:
            return ack_record(None, None, False, "inbox line is not JSON: %s" % exc)
        if not isinstance(entry, dict):
            return ack_record(None, None, False, "control op is not a JSON object")
        op_id, op = entry.get("id"), entry.get("op")
        if isinstance(op_id, str) and op_id in self._acked:
            return None
        if "_malformed" in entry:
            return ack_record(op_id, op, False, str(entry["_malformed"]))
        if not isinstance(op, str) or not op:
            return ack_record(op_id, op, False, "control op has no 'op' name")
        job, what = op_job(entry), op_words(entry)
        received = entry.get("_rx")
        if isinstance(received, (int, float)) and self._clock() - received > self.max_age:
            return ack_record(op_id, op, False, "op %r expired: received %.0f s ago while no "
                              "agent daemon was running" % (op, self._clock() - received),
                              job, what=what)
        handler = self.handlers.get(op)
        if handler is None:
            return ack_record(op_id, op, False, "op %r is not supported by this agent" % op,
                              job, what=what)
        args = {k: v for k, v in entry.items() if not k.startswith("_")}
        try:
            extra = handler(args)
        except OpError as exc:
            return ack_record(op_id, op, False, str(exc), job, what=what)
        except Exception as exc:  # a failing handler must still be answered
            return ack_record(op_id, op, False, "op %r failed: %s: %s"
                              % (op, type(exc).__name__, exc), job, what=what)
        return ack_record(op_id, op, True, None, job, extra, what=what)
