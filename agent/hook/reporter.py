"""The trainer-side reporting API: what a training loop calls to be seen by the cockpit.

Design constraint: `step()` runs in the hot loop of a GPU job, so it must never call
`.item()`, never force a device synchronisation and cost about as much as a list append.
It therefore stores the raw arguments (tensors included) in a deque; a flusher thread
resolves them to numbers later, encodes JSON and appends whole lines to the rank's spool
file in batches. The agent daemon tails the spool (see `spool_writer`).

The module is standard library only and imports torch nowhere: tensors are handled by
duck typing (`lazy_values`), so the hook works the same for any array library.

It is one long module because it is the one class a training script imports: the hot
path, the records, the operator controls and their truthful acknowledgements (their
bookkeeping lives in `control`), and the flusher share its state and its locks.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
import uuid
from collections import deque
from typing import Any, Deque, Dict, Iterable, List, Optional, Set, Tuple

from agent.hook.control import (
    ControlError,
    ControlFile,
    ControlState,
    OpenLine,
    OpenLines,
    acked_path,
    control_path,
    parse_line,
    read_acked,
    split_honoured,
    write_acked,
)
from agent.hook.lazy_values import NotAScalar, split_nonfinite, wire_number
from agent.hook.spool_writer import DEFAULT_MAX_FILE_BYTES, SpoolWriter, encode_line
from agent.wire.checkpoints import RESUME_ENV
from agent.wire.events import CHECKPOINT_SAVED, CONTROL_ACK, DROPPED, RESUMED, STAGE
from agent.wire.knobs import ONE_SHOT_KNOBS
from agent.wire.ops import ADJUST
from agent.wire.protocol import (
    ALERT,
    ALERT_KINDS,
    EVAL,
    EVENT,
    LOG,
    MAX_LINE_BYTES,
    MAX_LOG_LINE,
    RUN,
    SEVERITIES,
    TRAIN,
)

PHASES = ("data", "compute", "comm", "checkpoint")
_PHASE_FIELDS = ("data_time", "compute_time", "comm_time", "ckpt_time")
_PHASE_INDEX = {name: i for i, name in enumerate(PHASES)}


# Buffer entry kinds (first tuple element).
_TRAIN = 0
_EVAL = 1
_READY = 2  # a record dict that needs no resolution; a third element, when present, is
# the control-file line the record acknowledges (rank 0 ledgers it once it is written)

# The newest this-many train records stay buffered for one more flush, so a value that
# is still being computed on a device is read only once a later step has been issued.
_HOLDBACK_STEPS = 2

_perf = time.perf_counter
_wall = time.time


class _ClosedQueue(Deque[tuple]):
    """Stands in for the buffer after close(): reporting then fails loudly, at no cost before.
    An empty deque to whatever drains it."""

    def append(self, _item: tuple) -> None:
        raise RuntimeError("this Reporter is closed; create a new one to keep reporting")


class _Phase:
    __slots__ = ("_index", "_reporter", "_start")

    def __init__(self, reporter: Reporter, index: int) -> None:
        self._reporter = reporter
        self._index = index
        self._start = 0.0

    def __enter__(self) -> _Phase:
        self._start = _perf()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self._reporter._add_phase(self._index, _perf() - self._start)


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError("environment variable %s=%r is not an integer" % (name, raw)) from None


def _check_job(job: str) -> str:
    if not job or job in (".", "..") or "/" in job or "\\" in job or "\0" in job:
        raise ValueError(
            "job id %r cannot name a spool folder: use letters, digits, '-', '_' or '.'" % job
        )
    return job


def _check_control_every(every: Any) -> None:
    if every is not None and (isinstance(every, bool) or not isinstance(every, int)
                              or every < 1):
        raise ValueError("control_every must be a whole number of steps >= 1, or None")


def resume_checkpoint() -> Optional[str]:
    """The checkpoint (file or folder) the agent restarted this job from, or None on a
    fresh start: `trainer.train(resume_from_checkpoint=resume_checkpoint())`."""
    return os.environ.get(RESUME_ENV) or None


def _default_job() -> Tuple[str, bool]:
    """(job id, generated?): COCKPIT_JOB, else torchrun's run id (shared by all ranks)."""
    job = os.environ.get("COCKPIT_JOB")
    if job:
        return job, False
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if run_id and run_id != "none":
        return "torchrun-" + run_id, True
    return time.strftime("job-%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6], True


class Reporter:
    """One trainer rank's connection to the cockpit: metrics, events and operator controls.

    Where it writes: `run_dir` (or env `COCKPIT_RUN_DIR`, else `./runs/JOB`), job `job`
    (or env `COCKPIT_JOB`, else torchrun's run id, else a generated id recorded in a `run`
    record), rank `rank` (or env `RANK`, else 0). Safe to create before or without the
    agent daemon: the spool simply waits on disk.
    """

    def __init__(
        self,
        run_dir: Optional[str] = None,
        job: Optional[str] = None,
        rank: Optional[int] = None,
        *,
        world_size: Optional[int] = None,
        control: bool = True,
        flush_interval: float = 0.5,
        flush_records: int = 512,
        control_interval: float = 0.5,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        register_atexit: bool = True,
        control_every: Optional[int] = 1,
        honours: Optional[Iterable[str]] = None,
        honoured_by: str = "this trainer",
    ) -> None:
        # Over 80 lines: the Reporter's whole state, declared in one place; the hot path
        # (`log`, `step`) reads these attributes, and helpers that set them would hide
        # what one call touches.
        generated = False
        if job is None:
            job, generated = _default_job()
        self.job = _check_job(str(job))
        self.rank = _env_int("RANK", 0) if rank is None else int(rank)
        self.world_size = _env_int("WORLD_SIZE", 1) if world_size is None else int(world_size)
        if run_dir is None:
            run_dir = os.environ.get("COCKPIT_RUN_DIR") or os.path.join("runs", self.job)
        self.run_dir = os.path.abspath(run_dir)
        if flush_interval <= 0 or control_interval <= 0:
            raise ValueError("flush_interval and control_interval must be positive")
        _check_control_every(control_every)
        # A trainer that adopts controls only every N steps (agreeing them across ranks
        # there) has them applied at those steps, and acknowledged at the next: an ack
        # at the step it arrived would put the chart's marker up to N steps before the
        # change. None: only `poll_control` applies them (see `control_every`).
        self._control_every = control_every

        self._flush_interval = float(flush_interval)
        self._flush_records = max(1, int(flush_records))
        self._control_interval = float(control_interval)
        self._holdback_age = 2.0 * self._flush_interval
        self._q: Deque[tuple] = deque()
        self._phases: Optional[List[Optional[float]]] = None
        self._stage: Optional[str] = None
        self._last_step: Any = None
        self._prev_perf = _perf()
        self._stepped = False  # no step yet: the first has no step time of its own
        self._declared: Dict[str, Any] = {}
        self._warned: Set[str] = set()
        self._dropped = 0
        self._drop_reason = ""
        self._write_lock = threading.Lock()
        self._pid = os.getpid()
        self._closed = False

        self._control_state = ControlState()
        self._honoured: Optional[Set[str]] = None
        self._honoured_by = honoured_by
        if honours is not None:
            self.honour_controls(honours, honoured_by)
        self._open = OpenLines()  # applied, not yet acknowledged (see control.OpenLine)
        self._control_file: Optional[ControlFile] = None
        self._control_lock = threading.Lock()
        self._incoming: Deque[Tuple[Optional[str], Any, str, int]] = deque()
        # Lines found at start that no process acknowledged (set while the job had none):
        # already in force, announced at the first step.
        self._unannounced: List[Tuple[Optional[str], Any, str, int]] = []
        self._pending = False
        self._acked_path: Optional[str] = None
        self._acked_lines = 0
        if control:
            self._control_file = ControlFile(control_path(self.run_dir, self.job))
            self._acked_path = acked_path(self._control_file.path)
            self._restore_controls()

        self._writer = SpoolWriter(self.run_dir, self.job, self.rank, max_file_bytes)
        if generated:
            self._q.append((_READY, self._base(RUN, world_size=self.world_size)))

        self._stop = False
        self._wake = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="cockpit-reporter-%d" % self.rank, daemon=True
        )
        self._thread.start()
        if register_atexit:
            atexit.register(self.close)
            self._flush_on_sigterm()

    # ------------------------------------------------------------------ hot path

    def step(
        self,
        step: Any,
        loss: Any = None,
        lr: Any = None,
        samples: Any = None,
        tokens: Any = None,
        loss_scale: Any = None,
        grad_norm: Any = None,
        epoch: Any = None,
        **extra: Any,
    ) -> None:
        """Record one optimizer step. Values may be tensors: they are read later, off-thread.

        A tensor passed here must not be modified in place afterwards (pass a fresh loss,
        not a running accumulator). `step_time` is the wall time since the previous call;
        the first step of a process has none (null): the time since the Reporter was
        created is start-up (data, a checkpoint's load, a first evaluation, compilation),
        and counted as a step it would stretch the ETA and thin the throughput for every
        step of the window after each start and restart.
        """
        phases = self._phases
        if phases is not None:
            self._phases = None
        self._q.append(
            (_TRAIN, _perf(), _wall(), step, loss, lr, samples, tokens, loss_scale, grad_norm,
             epoch, self._stage, phases, extra)
        )  # fmt: skip
        self._last_step = step
        if self._pending and self._unannounced and step is not None:
            self._announce_restored(step)  # restored at start: in force since then
        if self._open.lasting_waiting:
            # This step ran with what was applied before it: now it is in force.
            self._acks(self._open.in_effect(step, only_before=True))
        every = self._control_every
        if self._pending and every is not None and (every == 1 or (
                isinstance(step, int) and step % every == 0)):
            self._apply_pending(step)
        if len(self._q) >= self._flush_records:
            self._wake.set()

    def phase(self, name: str) -> _Phase:
        """`with rep.phase("data"):` adds the block's wall time to this step's `data_time`.

        Phases: data, compute, comm, checkpoint. Time spent in a phase between two
        `step()` calls is attributed to the later step. Do not nest phases.
        """
        index = _PHASE_INDEX.get(name)
        if index is None:
            raise ValueError("unknown phase %r: use one of %s" % (name, ", ".join(PHASES)))
        return _Phase(self, index)

    def phase_time(self, name: str, seconds: float) -> None:
        """Attribute an externally measured duration to a phase of the current step."""
        index = _PHASE_INDEX.get(name)
        if index is None:
            raise ValueError("unknown phase %r: use one of %s" % (name, ", ".join(PHASES)))
        self._add_phase(index, float(seconds))

    def _add_phase(self, index: int, seconds: float) -> None:
        acc = self._phases
        if acc is None:
            acc = self._phases = [None, None, None, None]
        previous = acc[index]
        acc[index] = seconds if previous is None else previous + seconds

    # ------------------------------------------------------------------ other records

    def eval(self, step: Any, loss: Any = None, **metrics: Any) -> None:
        """Record an evaluation: `loss` is the validation loss, the rest go to `metrics`."""
        self._q.append((_EVAL, _wall(), step, loss, metrics))
        self._wake.set()
        self.request_done("eval_now", step)

    def declare(
        self,
        total_steps: Optional[int] = None,
        total_epochs: Optional[int] = None,
        total_samples: Optional[int] = None,
        total_tokens: Optional[int] = None,
        stages: Optional[Iterable[str]] = None,
        config: Optional[Dict[str, Any]] = None,
        seed: Optional[int] = None,
        data_version: Optional[str] = None,
        git_commit: Optional[str] = None,
        flops_per_step: Optional[float] = None,
        peak_flops: Optional[float] = None,
        world_size: Optional[int] = None,
        tags: Optional[Iterable[str]] = None,
    ) -> None:
        """Describe the run (totals for progress/ETA, config, seed...). Call on rank 0.

        Repeated calls accumulate: each `run` record carries everything declared so far.
        """
        for name, names in (("stages", stages), ("tags", tags)):
            if isinstance(names, (str, bytes)):
                # Iterating it would declare one tag per character.
                raise TypeError("declare(%s=...) must be a list of strings, not the string %r"
                                % (name, names))
        given = {
            "total_steps": total_steps,
            "total_epochs": total_epochs,
            "total_samples": total_samples,
            "total_tokens": total_tokens,
            "stages": None if stages is None else [str(s) for s in stages],
            "config": None if config is None else dict(config),
            "seed": seed,
            "data_version": data_version,
            "git_commit": git_commit,
            "flops_per_step": flops_per_step,
            "peak_flops": peak_flops,
            "world_size": world_size,
            "tags": None if tags is None else [str(s) for s in tags],
        }
        for name in ("total_steps", "total_epochs", "total_samples", "total_tokens", "seed",
                     "world_size"):  # fmt: skip
            value = given[name]
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise TypeError("declare(%s=...) must be an int, got %r" % (name, value))
        for name, value in given.items():
            if value is not None:
                self._declared[name] = value
        fields = {"world_size": self.world_size}
        fields.update(self._declared)
        self._q.append((_READY, self._base(RUN, **fields)))
        self._wake.set()

    def stage(self, name: str) -> None:
        """Enter a named stage (pretrain, finetune...): later train records carry it."""
        self._stage = str(name)
        self.event(STAGE, "stage %s started" % name, stage=self._stage)

    def event(self, kind: str, msg: str = "", *, step: Any = None, **data: Any) -> None:
        """Record that something happened; `data` holds kind-specific details."""
        self._q.append(
            (_READY, self._base(EVENT, kind=str(kind), step=self._step_value(step),
                                msg=str(msg), data=data))
        )  # fmt: skip
        self._wake.set()

    def checkpoint_saved(
        self, path: str, step: Any, seconds: Optional[float], bytes: Optional[int] = None
    ) -> None:
        """A checkpoint is complete on disk (call after the rename, not before)."""
        seconds = self._non_negative("checkpoint_saved seconds", seconds)
        measured = self._non_negative("checkpoint_saved bytes", bytes, integer=True)
        if measured is None and os.path.isfile(path):  # a folder's size is its files'
            try:
                measured = os.path.getsize(path)
            except OSError:
                measured = None
        size = "" if measured is None else ", %.1f MB" % (measured / 1e6)
        took = "" if seconds is None else " in %.2f s" % seconds
        self.event(
            CHECKPOINT_SAVED,
            "checkpoint at step %s saved%s%s" % (step, took, size),
            step=step,
            path=str(path),
            seconds=seconds,
            bytes=measured,
        )
        self.request_done("checkpoint_now", step)

    def alert(
        self,
        kind: str,
        code: str,
        what: str,
        hint: str,
        severity: str = "warning",
        **where: Any,
    ) -> None:
        """Raise an alert from inside the trainer (kind: resource, data or parameter)."""
        if kind not in ALERT_KINDS:
            raise ValueError("alert kind %r: use one of %s" % (kind, ", ".join(ALERT_KINDS)))
        if severity not in SEVERITIES:
            raise ValueError("alert severity %r: use one of %s" % (severity, ", ".join(SEVERITIES)))
        where.setdefault("rank", self.rank)
        if self._last_step is not None:
            where.setdefault("step", self._step_value(None))
        record = {"t": ALERT, "ts": _wall(), "job": self.job, "kind": kind,
                  "severity": severity, "code": str(code), "where": where, "what": str(what),
                  "hint": str(hint)}  # fmt: skip
        self._q.append((_READY, record))
        self._wake.set()

    def log(self, line: str, stream: str = "stdout") -> None:
        """Forward one line of trainer output (at most 4 KiB are kept)."""
        self._q.append((_READY, self._base(LOG, stream=stream, line=str(line)[:MAX_LOG_LINE])))

    # ------------------------------------------------------------------ control

    @property
    def control_every(self) -> Optional[int]:
        """Steps at which `step()` applies new control lines: every one (1), multiples of N,
        or never (None: the trainer applies them itself with `poll_control(step)`, as an
        adapter that agrees controls across ranks at steps of its own does; applied by
        `step()` in between, a knob would be acknowledged before the ranks used it)."""
        return self._control_every

    @control_every.setter
    def control_every(self, every: Optional[int]) -> None:
        _check_control_every(every)
        self._control_every = every

    @property
    def lr_scale(self) -> float:
        """Multiplier the operator set on the learning rate (1.0 until adjusted)."""
        return self._control_state.lr_scale

    @property
    def knobs(self) -> Dict[str, Any]:
        """Every lasting knob applied so far (`lr_scale` and user knobs)."""
        return dict(self._control_state.knobs)

    def honour_controls(self, knobs: Iterable[str], trainer: str = "this trainer") -> None:
        """Declare the controls this trainer carries out (`lr_scale`, `checkpoint_now`,
        `eval_now`, user knobs); any other knob of a control line is acknowledged as
        refused, "`trainer` does not apply KNOB", instead of as applied and ignored.

        A framework adapter calls it before the first step. Without it (a plain loop),
        every knob counts as the loop's own: it reads `lr_scale`, `knobs` and
        `take_request` itself."""
        if isinstance(knobs, (str, bytes)):
            raise TypeError("honour_controls takes a list of knob names, not the string %r"
                            % (knobs,))
        self._honoured = {str(k) for k in knobs}
        self._honoured_by = str(trainer)

    def take_request(self, name: str) -> bool:
        """True once per pending one-shot request (`checkpoint_now`, `eval_now`).

        Taking it promises to do it: its acknowledgement says "applied" once it is done,
        which the Reporter learns from the next `checkpoint_saved` (for `checkpoint_now`)
        or `eval` (for `eval_now`), or from `request_done`; `refuse_request` says it
        cannot be. A rank that never takes a request never acknowledges it."""
        requests = self._control_state.requests
        if name in requests:
            requests.discard(name)
            self._open.taken(name)
            return True
        return False

    def request_done(self, name: str, step: Any = None) -> None:
        """The one-shot request `name` taken earlier is done (at `step`): acknowledge it.
        `checkpoint_saved` and `eval` call this themselves."""
        if self._open.lines:
            self._acks(self._open.done(name, self._step_value(step)))

    def refuse_request(self, name: str, why: str, step: Any = None) -> None:
        """The trainer cannot carry out the one-shot request `name` (taken or not): its
        lines are acknowledged as refused, with `why`."""
        self._control_state.requests.discard(name)
        if self._open.lines:
            self._acks(self._open.refuse(name, str(why), self._step_value(step)))

    def controls_in_effect(self, step: Any) -> None:
        """The trainer has trained `step` with every lasting knob (`lr_scale`, user knobs)
        applied so far: acknowledge them at `step`.

        `step()` does this by itself for knobs applied at an earlier step; an adapter
        whose records are sparser than its steps (one per logging interval) calls it
        once the optimizer has stepped with the new learning rate."""
        if self._open.lines:
            self._acks(self._open.in_effect(self._step_value(step)))

    def resumed(self, step: Any, path: Optional[str] = None) -> None:
        """Say that this run resumed from the checkpoint `path` at `step` (call on rank 0,
        once the checkpoint is loaded): the cockpit's restart marker and its recovery
        record come from this event."""
        name = os.path.basename(os.path.normpath(str(path))) if path else None
        self.event(RESUMED, "resumed from %s at step %s" % (name or "a checkpoint", step),
                   step=step, path=None if path is None else str(path))

    def poll_control(self, step: Any = None) -> List[Dict[str, Any]]:
        """Read the control file now and apply what is new (at `step`, by default the last
        one reported); returns the controls applied or refused.

        `step()` does this by itself (the file is checked every `control_interval`), so
        calling it is only needed where a loop wants a control applied at a precise point
        (an adapter agreeing controls across ranks at a chosen step).
        """
        self._read_control_file()
        return self._apply_pending(self._last_step if step is None else step)

    def _restore_controls(self) -> None:
        """Put the operator's lasting knobs in force before the first step.

        Lines an earlier process acknowledged (the ledger says how many) are restored
        silently; later ones were written while no process ran (an adjust during a pause),
        so this process owes their acknowledgement, given at its first step.
        """
        control_file = self._control_file
        assert control_file is not None and self._acked_path is not None
        lines = control_file.read_new()
        acked = read_acked(self._acked_path)
        if lines and acked > lines[-1][0]:
            acked = 0  # the ledger counts lines of a file since replaced
        self._acked_lines = acked
        for lineno, raw in lines:
            where = "%s line %d" % (control_file.path, lineno)
            try:
                ident, knobs = parse_line(raw, where)
            except ControlError as exc:
                if lineno > acked:
                    self._unannounced.append((exc.ident, exc, where, lineno))
                continue  # else refused by the process that first read it, which said so
            try:
                self._control_state.apply(
                    split_honoured(knobs, self._honoured, self._honoured_by)[0],
                    one_shots=False)
            except ControlError as exc:
                if lineno > acked:
                    self._unannounced.append((ident, ControlError("%s: %s" % (where, exc)),
                                              where, lineno))
                continue
            if lineno > acked:
                self._unannounced.append((ident, knobs, where, lineno))
        if self._unannounced:
            self._pending = True

    def _read_control_file(self) -> None:
        control_file = self._control_file
        if control_file is None:
            return
        with self._control_lock:
            lines = control_file.read_new()
        for lineno, raw in lines:
            where = "%s line %d" % (control_file.path, lineno)
            try:
                ident, knobs = parse_line(raw, where)
            except ControlError as exc:
                self._incoming.append((exc.ident, exc, where, lineno))
            else:
                self._incoming.append((ident, knobs, where, lineno))
        if lines:
            self._pending = True

    def _apply_pending(self, step: Any) -> List[Dict[str, Any]]:
        self._pending = False
        if self._unannounced:
            if step is None:
                self._pending = True  # no step to place them at yet: the first step() will
            else:
                self._announce_restored(step)
        applied = []
        incoming = self._incoming
        while incoming:
            ident, knobs, where, lineno = incoming.popleft()
            error = None
            refused: Dict[str, str] = {}
            if isinstance(knobs, ControlError):
                error = str(knobs)
                knobs = {}
            else:
                accepted, refused = split_honoured(knobs, self._honoured, self._honoured_by)
                try:
                    self._control_state.apply(accepted)
                except ControlError as exc:
                    error = "%s: %s" % (where, exc)
            if error is not None:
                data = {"id": ident, "op": ADJUST, "ok": False, "applied_step": None,
                        "error": error}
                self._ack("refused control: %s" % error, step, lineno, data)
            else:
                self._acks(self._open.add(OpenLine(ident, lineno, accepted, refused,
                                                   self._step_value(step))))
            applied.append({"id": ident, "knobs": knobs, "ok": error is None and (
                bool(accepted) or not refused), "error": error or (
                "; ".join("%s: %s" % kv for kv in sorted(refused.items())) or None)})
        return applied

    def _announce_restored(self, step: Any) -> None:
        """Acknowledge the lines set while no process ran, exactly as a line applied
        while running is: the cockpit's chart marker, the knob its prompt shows and the
        report's adjustments all come from these acks. Their lasting knobs are in force
        since the start, so the next step (or `controls_in_effect`) confirms them.

        Their one-shot requests are dropped (a checkpoint or eval asked of a process
        that no longer runs is stale). Beside a lasting knob the ack says so; a line of
        one-shot requests alone gets no ack: it is most often the pause's own checkpoint
        request, done by the stopped process before it could write its ack, and the
        cockpit refuses a one-shot request of a job with no process up front.
        """
        unannounced, self._unannounced = self._unannounced, []
        for ident, knobs, _where, lineno in unannounced:
            if isinstance(knobs, ControlError):
                data = {"id": ident, "op": ADJUST, "ok": False, "applied_step": None,
                        "at_start": True, "error": str(knobs)}
                self._ack("refused control: %s" % knobs, step, lineno, data)
                continue
            lasting = {k: v for k, v in knobs.items() if k not in ONE_SHOT_KNOBS}
            dropped = tuple(sorted(k for k, v in knobs.items() if k in ONE_SHOT_KNOBS and v))
            if not lasting:
                continue
            accepted, refused = split_honoured(lasting, self._honoured, self._honoured_by)
            self._acks(self._open.add(OpenLine(ident, lineno, accepted, refused, None,
                                               at_start=True, dropped=dropped)))

    def _acks(self, lines: List[OpenLine]) -> None:
        for line in lines:
            msg, data = line.ack()
            self._ack(msg, line.step, line.lineno, data)

    def _ack(self, msg: str, step: Any, lineno: int, data: Dict[str, Any]) -> None:
        """A `control_ack` event that, once written, counts line `lineno` as acknowledged."""
        record = self._base(EVENT, kind=CONTROL_ACK, step=self._step_value(step),
                            msg=msg, data=data)
        self._q.append((_READY, record, lineno))
        self._wake.set()

    # ------------------------------------------------------------------ flushing

    def flush(self) -> None:
        """Resolve and write everything buffered now (this may wait for device values)."""
        self._drain(holdback=False)

    def close(self) -> None:
        """Flush and close the spool file; also run at interpreter exit."""
        self._close(join_timeout=10.0)

    def _close(self, join_timeout: float) -> None:
        if self._closed or os.getpid() != self._pid:
            return  # a forked child (e.g. a DataLoader worker) does not own the spool
        self._closed = True
        self._stop = True
        self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=join_timeout)
        try:
            self._drain(holdback=False)
            self._drain(holdback=False)  # whatever the last drain itself had to report
        finally:
            self._q = _ClosedQueue()
            self._writer.close()
            atexit.unregister(self.close)

    def _flush_on_sigterm(self) -> None:
        """Flush before a SIGTERM ends the process, then die of it as before.

        torchrun stops its workers with SIGTERM (a pause, a stop, a relaunch, a peer's
        failure), and the default action ends the process without running atexit: the
        last buffered steps and the `checkpoint_saved` of the checkpoint a pause waited
        for were lost, so the cockpit showed a pause at a step it never saw saved. Only
        the default action is replaced: a trainer with its own handler keeps it (and a
        handler that exits normally runs atexit, which flushes)."""
        if threading.current_thread() is not threading.main_thread():
            return
        try:
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
                return
            signal.signal(signal.SIGTERM, self._on_sigterm)
        except (ValueError, OSError):  # no signals here (an embedded interpreter)
            return

    def _on_sigterm(self, signum: int, _frame: Any) -> None:
        # The main thread may itself be inside a flush (holding the write lock): then
        # the handler cannot flush without deadlocking, and ends the process as before.
        if self._write_lock.acquire(timeout=2.0):
            self._write_lock.release()
            try:
                self._close(join_timeout=2.0)  # the stopper's grace is short
            except Exception as exc:  # dying anyway: say why the records may be short
                sys.stderr.write("cockpit reporter: flush at SIGTERM failed: %r\n" % exc)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()

    @property
    def spool_path(self) -> str:
        """The spool file being written now."""
        return self._writer.path

    def _run(self) -> None:
        next_poll = 0.0
        while not self._stop:
            self._wake.wait(self._flush_interval)
            self._wake.clear()
            if self._stop:
                break
            try:
                now = _perf()
                if self._control_file is not None and now >= next_poll:
                    next_poll = now + self._control_interval
                    self._read_control_file()
                self._drain(holdback=True)
            except Exception as exc:  # the flusher must outlive any single bad record
                self._warn("flusher:%s" % type(exc).__name__, "reporter flusher: %r" % exc)

    def _drain(self, holdback: bool) -> None:
        with self._write_lock:
            q = self._q
            items = [q.popleft() for _ in range(len(q))]
            if not items:
                return
            if holdback:
                cut = len(items)
                recent = _perf() - self._holdback_age
                seen = 0
                for i in range(len(items) - 1, -1, -1):
                    item = items[i]
                    if item[0] == _TRAIN:
                        if item[1] < recent:
                            break
                        cut = i
                        seen += 1
                        if seen == _HOLDBACK_STEPS:
                            break
                for item in reversed(items[cut:]):
                    q.appendleft(item)
                del items[cut:]
            lines: List[bytes] = []
            acked = None
            if self._dropped:
                lines.append(encode_line(self._base(
                    EVENT, kind=DROPPED, step=None,
                    msg="%d spool records lost: %s" % (self._dropped, self._drop_reason),
                    data={"count": self._dropped, "reason": self._drop_reason})))  # fmt: skip
            for item in items:
                line = self._encode(item)
                if line is not None:
                    lines.append(line)
                if item[0] == _READY and len(item) > 2:
                    # Mostly in line order; a request's ack waits for its effect, so a
                    # later line's may come first: the ledger counts the newest.
                    acked = item[2] if acked is None else max(acked, item[2])
            try:
                self._writer.write_lines(lines)
            except OSError as exc:
                self._dropped += len(lines)
                self._drop_reason = "cannot write %s: %s" % (self._writer.path, exc)
                self._warn("write:%s" % exc.errno, self._drop_reason)
            else:
                self._dropped = 0
                if acked is not None:
                    self._ledger(acked)

    def _ledger(self, lines: int) -> None:
        """Rank 0 records that lines 1..`lines` were acknowledged (their acks are in the
        spool now), so the next process of the job does not announce them again."""
        if self.rank != 0 or self._acked_path is None or lines == self._acked_lines:
            return
        try:
            write_acked(self._acked_path, lines)
        except OSError as exc:
            self._warn("ledger:%s" % exc.errno,
                       "cannot record acknowledged controls in %s: %s; the next start "
                       "announces them again" % (self._acked_path, exc))
            return
        self._acked_lines = lines

    def _encode(self, item: tuple) -> Optional[bytes]:
        try:
            if item[0] == _TRAIN:
                record = self._train_record(item)
            elif item[0] == _EVAL:
                record = self._eval_record(item)
            else:
                record = item[1]
            if record is None:
                return None
            line = encode_line(record)
        except Exception as exc:
            self._warn("encode:%s" % type(exc).__name__, "a record could not be encoded: %r" % exc)
            return None
        if len(line) > MAX_LINE_BYTES:
            self._warn(
                "toolong:%s" % record.get("t"),
                "a %s record of %d bytes exceeds the %d-byte line limit and was not written"
                % (record.get("t"), len(line), MAX_LINE_BYTES),
            )
            return None
        return line

    def _train_record(self, item: tuple) -> Optional[Dict[str, Any]]:
        (_k, perf, wall, step, loss, lr, samples, tokens, loss_scale, grad_norm, epoch, stage,
         phases, extra) = item  # fmt: skip
        step_time = perf - self._prev_perf if self._stepped else None
        self._prev_perf = perf
        self._stepped = True
        step_value = self._record_step(TRAIN, step)
        if step_value is None:
            return None
        num = self._number
        loss_value, nonfinite = split_nonfinite(num("loss", loss, nonfinite=True))
        record = {
            "t": TRAIN, "ts": wall, "job": self.job, "rank": self.rank,
            "step": step_value, "epoch": num("epoch", epoch),
            "stage": stage, "loss": loss_value, "nonfinite": nonfinite, "lr": num("lr", lr),
            "samples": num("samples", samples, integer=True),
            "tokens": num("tokens", tokens, integer=True), "step_time": step_time,
        }  # fmt: skip
        for i, name in enumerate(_PHASE_FIELDS):
            record[name] = None if phases is None else phases[i]
        record["loss_scale"] = num("loss_scale", loss_scale)
        record["grad_norm"] = num("grad_norm", grad_norm)
        record["extra"] = {k: num(k, v) for k, v in extra.items()}
        return record

    def _eval_record(self, item: tuple) -> Optional[Dict[str, Any]]:
        _k, wall, step, loss, metrics = item
        step_value = self._record_step(EVAL, step)
        if step_value is None:
            return None
        num = self._number
        return {
            "t": EVAL, "ts": wall, "job": self.job, "rank": self.rank,
            "step": step_value, "loss": num("loss", loss),
            "metrics": {k: num(k, v) for k, v in metrics.items()},
        }  # fmt: skip

    def _number(self, field: str, value: Any, integer: bool = False,
                nonfinite: bool = False) -> Optional[float]:
        try:
            return wire_number(value, integer, nonfinite)
        except NotAScalar as exc:
            self._warn("field:%s:%s" % (field, exc.problem),
                       "reported value %r %s; recorded as null" % (field, exc))
            return None

    def _record_step(self, t: str, step: Any) -> Optional[int]:
        """The step of a train or eval record, or None (warned) when it has none.

        The protocol's step is an int and the cockpit places these records by it: one
        with a null step would be stored where no chart or query finds it, so it is not
        written at all.
        """
        try:
            value = wire_number(step, integer=True)
            problem, what = "missing", "is None"
        except NotAScalar as exc:
            value, problem, what = None, exc.problem, str(exc)
        if value is None:
            self._warn("%s:step:%s" % (t, problem),
                       "reported value 'step' %s; the %s record was not written (it needs "
                       "an integer step)" % (what, t))
        return value

    def _non_negative(self, field: str, value: Any, integer: bool = False
                      ) -> Optional[float]:
        """A duration or size the caller measured: unknown (None, warned) unless >= 0."""
        number = self._number(field, value, integer)
        if number is not None and number < 0:
            self._warn("field:%s:negative" % field,
                       "reported value %r is %s, below 0; recorded as null" % (field, number))
            return None
        return number

    # ------------------------------------------------------------------ helpers

    def _base(self, t: str, **fields: Any) -> Dict[str, Any]:
        record = {"t": t, "ts": _wall(), "job": self.job, "rank": self.rank}
        record.update(fields)
        return record

    def _step_value(self, step: Any) -> Optional[int]:
        if step is None:
            step = self._last_step
        try:
            return wire_number(step, integer=True)
        except NotAScalar as exc:
            self._warn("event:step:%s" % exc.problem,
                       "an event's step %s; recorded as null" % exc)
            return None

    def _warn(self, key: str, message: str) -> None:
        """Tell the user once per kind of problem, on stderr and in the spool.

        `key` names the field and the problem both: a second, different problem with
        the same field is news and is told too.
        """
        if key in self._warned:
            return
        self._warned.add(key)
        text = "agent.hook (job %s, rank %d): %s" % (self.job, self.rank, message)
        print(text, file=sys.stderr, flush=True)
        self._q.append((_READY, self._base(LOG, stream="stderr", line=text[:MAX_LOG_LINE])))
