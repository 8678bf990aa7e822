"""`cockpit-agent run`: the long-lived agent on a GPU host.

It samples the GPUs and the host, tails the trainer spools, runs control ops, and
(optionally) supervises the job, writing everything to the journal whether or not a
cockpit is connected. Two threads do the work: the sampler thread, whose NVML and psutil
calls may be slow, and the main loop (spools, control inbox, checkpoints), so a slow GPU
query never delays trainer records.

Longer than most modules: the daemon's op dispatch, its survival of faults in each part
of the main loop and its shutdown order are one piece of lifecycle that reads best whole.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from agent import __version__
from agent.hostinfo import boot_id, env_fingerprint, hostname, mem_total
from agent.job.generations import Generations
from agent.job.gpu_history import GpuHistory
from agent.job.launch import LaunchSpec
from agent.job.managed import ADOPTABLE_STATES, BACKOFF, FROZEN, IDLE_STATES, ManagedJob
from agent.job.supervisor import Supervisor, alive
from agent.journal.control_inbox import ControlInbox
from agent.journal.journal import DEFAULT_MAX_AGE, DEFAULT_MAX_BYTES, Journal, JournalFull
from agent.journal.spool import SpoolTailer
from agent.lockfile import StateLock
from agent.samplers.host import HostSampler
from agent.samplers.nvml import Nvml, XidWatcher, xid_records
from agent.samplers.sim import SimGpus
from agent.wire import atomic, jobstate, launch_reasons, ops, paths, states
from agent.wire.events import JOB_ADOPTED, SAMPLER_ERROR
from agent.wire.launch_spec import MAXIMUM, check_job_name
from agent.wire.op_error import OpError
from agent.wire.protocol import EVENT, GPU, HELLO, HOST, PROTOCOL_VERSION, RUN, TRAIN

MIN_INTERVAL = 0.25
POLL = 0.2  # s: spool and control-inbox polling (records reach the cockpit ~1 s later anyway)
RANKS_TTL = 5.0  # s between walks of /proc for the job's processes
POSITIONS_EVERY = 5.0  # s between saves of spool positions (the journal is the truth)
OWNER_EVERY = 1.0  # s between looks at the process given by --exit-with
# The longest SIGTERM-to-SIGKILL grace a stop op may ask for: the spec's own bound (a
# day; a longer wait, as `inf` would be, leaves a stop that never ends).
MAX_STOP_GRACE = float(MAXIMUM["stop_grace"])
COMMAND_STATE = "command.json"  # the `run -- CMD` job's identity, for a restarted daemon
# Managed-job states in which no trainer process reads the control file (a frozen one is
# stopped by SIGSTOP until resumed), and the event that starts one that will.
_ADJUST_APPLIES = {**{state: "resume" for state in (*IDLE_STATES, FROZEN)},
                   BACKOFF: "restart"}


class ObservedJournal:
    """The journal as the spool tailer sees it: every trainer record it journals is also
    shown to the managed job it belongs to, already parsed, so hang detection and recovery
    bookkeeping cost no second read of the journal. While the journal cannot write, a
    batch is refused (`JournalFull`) rather than held in memory: the spool files keep
    those records, and the tailer reads them again once it can.

    The append is the commit point: a job's bookkeeping that fails on a record after it
    is logged, never raised, since the tailer would then read the journaled lines again."""

    def __init__(self, journal: Journal, observe: Callable[[str, Mapping], None],
                 log: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr)
                 ) -> None:
        self._journal = journal
        self._observe = observe
        self._log = log
        self._logged: set = set()  # failures told once each

    def __getattr__(self, name: str) -> Any:
        return getattr(self._journal, name)

    @property
    def state_dir(self) -> Path:
        return self._journal.state_dir

    @property
    def head(self) -> int:
        return self._journal.head

    def append_many(self, records: Iterable[Tuple[str, Mapping]], ts: Optional[float] = None
                    ) -> List[int]:
        records = list(records)
        seqs = self._journal.append_many(records, ts=ts, hold=False)
        for t, fields in records:
            if t in (TRAIN, EVENT, RUN):
                try:
                    self._observe(t, fields)
                except Exception as exc:
                    text = "a job's bookkeeping failed on a %s record: %s: %s" % (
                        t, type(exc).__name__, exc)
                    if text not in self._logged and len(self._logged) < 100:
                        self._logged.add(text)
                        self._log(text)
        return seqs

    def append(self, t: str, fields: Mapping, ts: Optional[float] = None) -> int:
        return self.append_many([(t, fields)], ts=ts)[-1]


class DaemonConfig:
    def __init__(self, state_dir: Path, run_dirs: Sequence[Path] = (), interval: float = 1.0,
                 simulate_gpus: int = 0, job: Optional[str] = None,
                 cmd: Sequence[str] = (), max_bytes: int = DEFAULT_MAX_BYTES,
                 max_age: float = DEFAULT_MAX_AGE, stop_grace: float = 10.0,
                 spool_settle: float = 5.0, exit_with: Optional[int] = None,
                 exit_with_job: bool = False) -> None:
        if interval < MIN_INTERVAL:
            raise ValueError("--interval must be at least %.2f s (got %g)"
                             % (MIN_INTERVAL, interval))
        self.state_dir = Path(state_dir).resolve()
        self.run_dirs = [Path(p).resolve() for p in run_dirs]
        if cmd and not self.run_dirs:
            self.run_dirs = [self.state_dir / "run"]
        self.interval = interval
        self.simulate_gpus = simulate_gpus
        self.job = job or ("job-%s" % time.strftime("%Y%m%d-%H%M%S") if cmd else None)
        self.cmd = list(cmd)
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.stop_grace = stop_grace
        self.spool_settle = spool_settle
        # A program that starts this daemon for its own use (the cockpit's demo): the
        # daemon and its jobs end when it does, even killed or hung up on, when it
        # cannot stop them itself.
        self.exit_with = exit_with
        # A batch system's step (Slurm's srun) ends when its command does: the daemon
        # started for the `run -- CMD` job ends after it, with its exit status.
        self.exit_with_job = exit_with_job


class Daemon:
    def __init__(self, config: DaemonConfig, gpus: Any = None, host: Any = None,
                 log: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr)) -> None:
        self.config = config
        self.log = log
        self._stop = threading.Event()
        # Set by the SIGTERM/SIGINT handler (`StopSignal`), which must take no lock: the
        # main loop turns it into `_stop` after its next wait.
        self._stop_asked = False
        self._lock = StateLock(config.state_dir)
        self._lock.acquire()
        try:
            for run_dir in config.run_dirs:
                run_dir.mkdir(parents=True, exist_ok=True)
            self.journal = Journal(config.state_dir, max_bytes=config.max_bytes,
                                   max_age=config.max_age, log=log)
        except BaseException:
            self._lock.release()
            raise
        if self.journal.truncated_bytes:
            self.log("journal: cut a torn last write of %d bytes (previous run was killed)"
                     % self.journal.truncated_bytes)
        if gpus is None:
            follow = bool(config.cmd or config.run_dirs)
            gpus = (SimGpus(config.simulate_gpus, follow_job=follow) if config.simulate_gpus
                    else Nvml())
        self.gpus = gpus
        disk = config.run_dirs[0] if config.run_dirs else config.state_dir
        self.host = host if host is not None else HostSampler(disk)
        self.jobs: Dict[str, ManagedJob] = {}
        self.gpu_history = GpuHistory(config.state_dir)  # read in run(), said there
        self.spools = SpoolTailer(ObservedJournal(self.journal, self._observe, log),
                                  config.run_dirs, settle=config.spool_settle)
        for note in self.spools.notes:
            self.log("spool: %s" % note)
        self.inbox = ControlInbox(self.journal, {
            ops.PING: self._op_ping, ops.ADJUST: self._op_adjust, ops.STOP: self._op_stop,
            ops.LAUNCH: self._op_launch, ops.PAUSE: self._op_pause,
            ops.RESUME: self._op_resume, ops.THAW: self._op_thaw,
            ops.RELAUNCH: self._op_relaunch, ops.FORK: self._op_fork,
            ops.SCALE: self._op_scale, ops.JOBS: self._op_jobs, ops.SIM_XID: self._op_sim_xid})
        self.supervisor: Optional[Supervisor] = None
        self.xid: Optional[XidWatcher] = None
        self._sampler_errors: Dict[str, float] = {}
        self._gpu_pids: Dict[int, List[int]] = {}  # GPU -> its processes at the last sample
        self._io_errors: Dict[str, str] = {}  # main-loop step -> the error logged for it
        self._sampler: Optional[threading.Thread] = None
        self._ranks_cache: Optional[Tuple[float, Any, Dict[int, Optional[int]]]] = None

    # -- control ops -----------------------------------------------------------------
    def _op_ping(self, op: dict) -> dict:
        return {"agent_version": __version__, "head": self.journal.head}

    def _op_sim_xid(self, op: dict) -> dict:
        """A simulated GPU reports an XID, exactly as NVML's event thread would report a
        real one: journaled, and counted against the jobs running now. It rehearses the
        GPU-fault path (classification, exclusion, a spare's takeover) without a fault."""
        if not isinstance(self.gpus, SimGpus):
            raise OpError("sim_xid needs simulated GPUs (cockpit-agent run --simulate-gpus "
                          "N); this host's GPUs are real or absent")
        gpu, xid = op.get("gpu", 0), op.get("xid", 79)
        count = len(self.gpus.inventory())
        if not isinstance(gpu, int) or isinstance(gpu, bool) or not 0 <= gpu < count:
            raise OpError("'gpu' must be a simulated GPU index, 0 to %d" % (count - 1))
        if not isinstance(xid, int) or isinstance(xid, bool) or xid <= 0:
            raise OpError("'xid' must be a positive integer (an NVIDIA XID code)")
        self._on_xid(gpu, xid, time.time())
        return {"gpu": gpu, "xid": xid}

    def _job_run_dir(self, job: str) -> Path:
        if job in self.jobs:
            return self.jobs[job].spec.run_dir
        sup = self.supervisor
        if sup is not None and sup.job == job:
            return sup.run_dir
        for run_dir in self.config.run_dirs:
            if paths.spool_dir(run_dir, job).is_dir() or paths.control_file(
                    run_dir, job).exists():
                return run_dir
        raise OpError("no job %r under this agent's run dirs (%s)" % (
            job, ", ".join(str(p) for p in self.config.run_dirs) or "none given"))

    def _op_adjust(self, op: dict) -> dict:
        job, knobs = op.get("job"), op.get("knobs")
        if not isinstance(job, str) or not job:
            raise OpError("adjust needs 'job' (the job id)")
        check_job_name(job, "adjust 'job'")  # it names the control file: no path
        if not isinstance(knobs, dict) or not knobs:
            raise OpError("adjust needs 'knobs', a non-empty object of knob: value")
        path = paths.control_file(self._job_run_dir(job), job)
        path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"id": op.get("id"), "ts": time.time(), "knobs": knobs},
                          separators=(",", ":"), ensure_ascii=False, default=str)
        try:
            atomic.append_line(path, (line + "\n").encode("utf-8"))
        except OSError as exc:
            # Not whole in the file: the trainer will refuse what is there, not apply it.
            raise OpError("the adjust could not be written whole to the trainer's control "
                          "file %s: %s; the knobs are not set" % (path, exc)) from None
        reply: Dict[str, Any] = {"file": str(path)}
        managed = self.jobs.get(job)
        applies = _ADJUST_APPLIES.get(managed.state) if managed is not None else None
        if applies is not None:
            # No process reads the file now: the next one applies and acknowledges it.
            reply["applies_at"] = applies
            reply["outcome"] = "stored: applies when the job %s" % (
                "resumes" if applies == "resume" else "restarts")
        return reply

    def _op_stop(self, op: dict) -> dict:
        if op.get("job") is not None:
            check_job_name(op["job"], "stop 'job'")
        if op.get("job") in self.jobs:
            # A managed job stops with its spec's `stop_grace` unless the op names one:
            # the operator was told that grace (the stop dialog reads the spec), not the
            # daemon's `--stop-grace`, which is for jobs started without a spec.
            managed = self.jobs[op["job"]]
            grace = op.get("grace", managed.spec.stop_grace)
            if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not (
                    0 <= grace <= MAX_STOP_GRACE):
                raise OpError("'grace' must be a number of seconds from 0 to %g"
                              % MAX_STOP_GRACE)
            reply = managed.request(ops.STOP, {"grace": float(grace)})
            reply["grace"] = float(grace)
            return reply
        sup = self.supervisor
        if sup is None or not sup.running:
            raise OpError("no job is running under this agent")
        job = op.get("job")
        if job is not None and job != sup.job:
            raise OpError("job %r is not the one this agent runs (%r)" % (job, sup.job))
        grace = op.get("grace", self.config.stop_grace)
        if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not (
                0 <= grace <= MAX_STOP_GRACE):
            raise OpError("'grace' must be a number of seconds from 0 to %g" % MAX_STOP_GRACE)
        sup.ended_for = launch_reasons.FOR_STOP
        threading.Thread(target=sup.stop, args=(float(grace),), name="job-stop",
                         daemon=True).start()
        return {"pid": sup.pid, "grace": grace}

    # -- managed jobs ----------------------------------------------------------------
    def _observe(self, t: str, fields: Mapping) -> None:
        name = fields.get("job")
        job = self.jobs.get(name) if isinstance(name, str) else None
        if job is None:
            return
        if t == TRAIN:
            job.on_train(dict(fields))
        elif t == RUN:
            job.on_run(dict(fields))
        else:
            job.on_event(dict(fields))

    def _managed(self, op: dict) -> ManagedJob:
        name = op.get("job")
        if not isinstance(name, str) or not name:
            raise OpError("op %r needs 'job' (the job id)" % op.get("op"))
        check_job_name(name, "%s 'job'" % op.get("op"))
        job = self.jobs.get(name)
        if job is None:
            raise OpError("no job %r was launched by this agent (jobs: %s)" % (
                name, ", ".join(sorted(self.jobs)) or "none"))
        return job

    def _start_job(self, spec: LaunchSpec, overrides: Optional[dict] = None,
                   use_newest: bool = False,
                   fork_from: Optional[Tuple[Path, Optional[int]]] = None,
                   standby: bool = False, op_id: object = None) -> ManagedJob:
        current = self.jobs.get(spec.name)
        if current is not None and current.state not in states.ENDED:
            raise OpError("job %r is already %s on this host" % (spec.name, current.state))
        job = ManagedJob(spec, self.journal, overrides, log=self.log)
        if current is not None:  # its parts' markers are earlier parts' to the new one
            job.peers.generations = Generations.restore(current.peers.generations.state())
        # Registered once started: a start that raises (its run dir cannot be made) leaves
        # the op's refusal alone, not a job "starting" that has no thread.
        job.start(use_newest, fork_from, standby=standby, op_id=op_id)
        if current is not None:
            current.retire()
        self.jobs[spec.name] = job
        self.spools.add_run_dir(spec.run_dir)
        return job

    def _op_launch(self, op: dict) -> dict:
        spec = LaunchSpec(op.get("spec"))
        overrides = op.get("overrides") or {}
        if not isinstance(overrides, dict):
            raise OpError("'overrides' must be an object of key: value")
        standby = bool(op.get("standby", False))
        if standby and not spec.elastic:
            raise OpError("only an elastic job (nnodes \"MIN:MAX\") has spares in standby")
        job = self._start_job(spec, overrides, use_newest=bool(op.get("resume", False)),
                              standby=standby, op_id=op.get("id"))
        return {"job": job.name, "run_dir": str(spec.run_dir), "state": job.state}

    def _op_pause(self, op: dict) -> dict:
        args = {"id": op.get("id"), "freeze": bool(op.get("freeze", False)),
                "follow": bool(op.get("follow", False))}
        for key in ("hold", "timeout"):
            if key in op:
                value = op[key]
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                    raise OpError("'%s' must be a positive number of seconds" % key)
                args[key] = float(value)
        return self._managed(op).request(ops.PAUSE, args)

    def _op_resume(self, op: dict) -> dict:
        return self._managed(op).request(ops.RESUME, {"id": op.get("id")})

    def _op_thaw(self, op: dict) -> dict:
        return self._managed(op).request(ops.THAW)

    def _op_relaunch(self, op: dict) -> dict:
        job = self._managed(op)
        args: Dict[str, Any] = {"exclude_self": bool(op.get("exclude_self", False)),
                                "id": op.get("id")}
        if op.get("spec") is not None:
            spec = LaunchSpec(op["spec"])
            if spec.name != job.name:
                raise OpError("relaunch spec names job %r, not %r" % (spec.name, job.name))
            args["spec"] = spec
        return job.request(ops.RELAUNCH, args)

    def _op_scale(self, op: dict) -> dict:
        """An elastic job's membership changes: this host joins (`spec`), leaves
        (`leave`), or stays while `host` joins or leaves (`change`: add or remove)."""
        hosts = op.get("hosts")
        if hosts is not None and (not isinstance(hosts, list) or not all(
                isinstance(h, str) and h for h in hosts)):
            raise OpError("'hosts' must be the list of the job's hosts after the change")
        for host in hosts or ():
            check_job_name(host, "scale 'hosts' entry")  # host names name marker files
        if op.get("spec") is not None:
            spec = LaunchSpec(op["spec"])
            if spec.name != op.get("job"):
                raise OpError("scale spec names job %r, not %r" % (spec.name, op.get("job")))
            if not spec.elastic:
                raise OpError("job %r is not elastic (nnodes is not \"MIN:MAX\")" % spec.name)
            job = self.jobs.get(spec.name)
            if job is None or job.state in states.ENDED:
                job = self._start_job(spec, standby=True, op_id=op.get("id"))
            return job.request(ops.SCALE, {"id": op.get("id"), "join": spec, "change": "add",
                                         "host": spec.host, "hosts": spec.hosts})
        change = op.get("change")
        if change not in ("add", "remove"):
            raise OpError("'change' must be 'add' or 'remove'")
        if not isinstance(op.get("host"), str) or not op["host"]:
            raise OpError("'host' must name the host that joins or leaves")
        check_job_name(op["host"], "scale 'host'")
        return self._managed(op).request(ops.SCALE, {
            "id": op.get("id"), "change": change, "host": op["host"], "hosts": hosts,
            "leave": bool(op.get("leave", False))})

    def _op_fork(self, op: dict) -> dict:
        parent = self._managed(op)
        name = check_job_name(op.get("name"), "fork 'name'")
        overrides = op.get("overrides") or {}
        if not isinstance(overrides, dict):
            raise OpError("'overrides' must be an object of key: value")
        if op.get("spec") is not None:
            raw = dict(op["spec"])
        else:
            raw = dict(parent.spec.raw)
            run_dir = op.get("run_dir")
            if not isinstance(run_dir, str) or not run_dir:
                run_dir = str(parent.spec.run_dir.parent / name)
            raw.update({"name": name, "run_dir": run_dir})
            rdzv = dict(raw.get("rendezvous") or {})
            rdzv["id"] = name
            raw["rendezvous"] = rdzv
        raw["name"] = name
        step = op.get("step")
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
            raise OpError("'step' must be a checkpoint's step number")
        raw["parent"] = {"job": parent.name, "step": step}
        spec = LaunchSpec(raw)
        if spec.run_dir == parent.spec.run_dir:
            raise OpError("a fork needs its own run dir (%s is the parent's)" % spec.run_dir)
        # Finding, verifying and copying the checkpoint can take minutes for a big model:
        # the fork's own thread does it, so spool tailing here never stalls.
        job = self._start_job(spec, overrides, fork_from=(parent.spec.checkpoint_dir, step),
                              op_id=op.get("id"))
        return {"job": job.name, "parent": parent.name, "run_dir": str(spec.run_dir)}

    def _op_jobs(self, op: dict) -> dict:
        return {"jobs": [job.describe() for job in self.jobs.values()]}

    # -- records ---------------------------------------------------------------------
    def hello(self) -> dict:
        gpus = self.gpus
        ok = gpus.init()
        source = "sim" if isinstance(gpus, SimGpus) else ("nvml" if ok else "none")
        psutil_module = self.host.psutil if self.host.available else None
        return {
            "agent_version": __version__, "protocol": PROTOCOL_VERSION,
            "hostname": hostname(), "boot_id": boot_id(), "pid": os.getpid(),
            "python": platform.python_version(), "platform": platform.platform(),
            "cpu_count": os.cpu_count(), "mem_total": mem_total(psutil_module),
            "gpu_source": source, "gpu_state": gpus.state, "driver": gpus.driver,
            "gpus": self._inventory(), "env": env_fingerprint(),
            "psutil": bool(self.host.available),
            "state_dir": str(self.config.state_dir),
            "run_dirs": [str(p) for p in self.config.run_dirs],
            "interval": self.config.interval,
        }

    def _inventory(self) -> List[dict]:
        """The GPUs as the hello lists them, each saying whether its XIDs are seen
        (`xid_events`): NVML's event API, where the GPU takes it; a simulated GPU's
        come through `sim_xid`."""
        watched = set(self.xid.registered) if self.xid is not None else set()
        simulated = isinstance(self.gpus, SimGpus)
        return [{**g, "xid_events": simulated or g.get("index") in watched}
                for g in self.gpus.inventory()]

    def pid_ranks(self) -> Dict[int, Optional[int]]:
        """The job processes -> rank map, re-read at most every RANKS_TTL seconds: finding
        them walks all of /proc, and process trees change only when a job (re)starts."""
        now = time.monotonic()
        # New ranks announce their pids in their spool headers: a change there (or in the
        # jobs run here) re-reads at once, so a starting job is mapped without delay.
        key = (frozenset(self.spools.pid_ranks()), tuple(sorted(self.jobs)),
               self.supervisor is not None and self.supervisor.running)
        cached = self._ranks_cache
        if cached is not None and cached[1] == key and now - cached[0] < RANKS_TTL:
            ranks = cached[2]
        else:
            ranks = self._read_pid_ranks()
            self._ranks_cache = (now, key, ranks)
        # Spool headers outlive their ranks (a finished or relaunched job): a pid that is
        # gone must not keep its GPU "busy" or its row in the process table.
        return {pid: rank for pid, rank in ranks.items() if alive(pid)}

    def _read_pid_ranks(self) -> Dict[int, Optional[int]]:
        ranks: Dict[int, Optional[int]] = {}
        for pid, (_job, rank) in self.spools.pid_ranks().items():
            ranks[pid] = rank
        sources: List[Union[Supervisor, ManagedJob]] = (
            [self.supervisor] if self.supervisor is not None else [])
        sources.extend(self.jobs.values())
        for source in sources:
            for pid, known in source.pid_ranks().items():
                if known is not None or pid not in ranks:
                    ranks[pid] = known
        return ranks

    def sample_once(self) -> None:
        ranks = self.pid_ranks()
        records: List[tuple] = []
        host = self._guard("host", lambda: self.host.sample(ranks))
        if host is not None:
            records.append((HOST, host))
        activity = {p["pid"]: p.get("cpu") for p in (host or {}).get("procs", [])}
        if isinstance(self.gpus, SimGpus):
            gpus = self._guard("gpu", lambda: self.gpus.sample(ranks, activity))
        else:
            gpus = self._guard("gpu", lambda: self.gpus.sample(ranks))
        for record in gpus or ():
            records.append((GPU, record))
        if records:
            self.journal.append_many(records)
        if gpus is not None:
            self._note_gpu_pids(gpus)
        # After the samples are journaled: keeping the history may write a file (once
        # per GPU first seen, and per rise), which must not hold the samples back.
        for record in gpus or ():
            if isinstance(record.get("gpu"), int) and isinstance(record.get("ecc_agg_unc"),
                                                                 int):
                self._note_fault(functools.partial(
                    self.gpu_history.note_ecc, record["gpu"], record.get("uuid"),
                    record.get("ecc_agg_unc"), time.time(), list(self.jobs)))

    def _guard(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run a sampler; a failure is journaled (at most once a minute per message)."""
        try:
            return fn()
        except Exception as exc:
            self._sampler_error("%s sampler failed: %s: %s" % (name, type(exc).__name__, exc),
                                {"sampler": name})
            return None

    def _sampler_error(self, text: str, data: Dict[str, Any]) -> None:
        """Journal a sampler's or watcher's failure, at most once a minute per message
        (the sampler and XID threads both report here)."""
        now = time.monotonic()
        if now - self._sampler_errors.get(text, -1e9) >= 60.0:
            self._sampler_errors[text] = now
            self.journal.append(EVENT, {"kind": SAMPLER_ERROR, "job": None, "rank": None,
                                        "step": None, "msg": text, "data": data})

    def _note_gpu_pids(self, gpus: List[dict]) -> None:
        """Keep which processes each GPU runs (NVML's per-GPU process list) and tell the
        jobs, so that an XID is counted only against the job on that GPU."""
        gpu_pids = {record["gpu"]: [p["pid"] for p in record.get("procs") or []
                                    if isinstance(p, dict) and isinstance(p.get("pid"), int)]
                    for record in gpus if isinstance(record.get("gpu"), int)}
        self._gpu_pids = gpu_pids
        for job in list(self.jobs.values()):
            try:
                job.note_gpus(gpu_pids)
            except Exception as exc:
                self._sampler_error("job %s: its GPUs not known: %s: %s" % (
                    job.name, type(exc).__name__, exc), {"sampler": "gpu"})

    def _on_xid(self, gpu: int, xid: int, ts: float) -> None:
        uuid = None
        for item in self.gpus.inventory():
            if item["index"] == gpu:
                uuid = item["uuid"]
        self.journal.append_many(xid_records(gpu, xid, uuid, ts))
        self._note_fault(lambda: self.gpu_history.note_xid(gpu, xid, ts, list(self.jobs)))
        # Each job judges whether the GPU is its own, from the processes NVML listed on
        # it at the newest sample: another job's XID is not this one's failure.
        on_gpu = self._gpu_pids.get(gpu)
        for job in list(self.jobs.values()):
            try:  # one job's failure must not keep the XID from the others
                job.note_xid(gpu, xid, on_gpu)
            except Exception as exc:
                self._sampler_error("job %s: XID %d of GPU %d not counted: %s: %s" % (
                    job.name, xid, gpu, type(exc).__name__, exc),
                    {"sampler": "xid", "gpu": gpu, "xid": xid})

    def _note_fault(self, note: Callable[[], Any]) -> None:
        """Keep a GPU fault in this host's history (agent.job.gpu_history); a state dir
        that cannot be written is logged once, and the fault is journaled regardless."""
        try:
            note()
        except OSError as exc:
            self._io_error("GPU fault history", exc)

    def _load_gpu_history(self) -> None:
        """This host's GPU faults across runs; an unusable file is set aside and said,
        never a reason for the daemon to stop."""
        why = self.gpu_history.load()
        if why is None:
            return
        msg = "GPU fault history %s unusable: %s; it starts empty" % (
            self.gpu_history.path, why)
        self.log(msg)
        self.journal.append(EVENT, {"kind": SAMPLER_ERROR, "job": None, "rank": None,
                                    "step": None, "msg": msg,
                                    "data": {"sampler": "gpu_history",
                                             "set_aside": len(self.gpu_history.set_aside)}})

    # -- life ------------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()

    def request_stop(self) -> None:
        """Stop, asked from a signal handler: only a flag, which the main loop turns into
        `stop()` after its next wait (within POLL). A handler runs on the main thread,
        maybe inside `_stop.wait` with the Event's lock held: `stop()` there deadlocks."""
        self._stop_asked = True

    def _stopping(self) -> bool:
        """Whether the daemon is to stop (the main thread's check, after each wait)."""
        if self._stop_asked and not self._stop.is_set():
            self._stop.set()
        return self._stop.is_set()

    def _sampler_loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception as exc:  # a bad round must not end the sampling for good
                self._io_error("sampler", exc)
            else:
                self._io_errors.pop("sampler", None)
            next_at += self.config.interval
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (slow NVML): skip, never burst to catch up
                next_at = time.monotonic()
                delay = 0.0
            self._stop.wait(delay)

    def _survive(self, what: str, step: Callable[[], Any]) -> None:
        """One step of the main loop; an I/O error (a full disk) is logged once per spell
        and the step tried again next time round: it never ends the daemon, whose end
        would stop every job."""
        try:
            step()
        except JournalFull:
            pass  # what it would journal waits where it is; the journal says why
        except OSError as exc:
            self._io_error(what, exc)
        else:
            self._io_errors.pop(what, None)

    def _poll_spools(self) -> None:
        """Tail the spools. The tailer answers for each file itself; anything else that
        escapes it (a bug) is reported, and the read positions are taken from the
        journal again, so the daemon and its jobs carry on and no line is read twice.
        An I/O error is `_survive`'s (a full disk: tried again every round)."""
        try:
            self.spools.poll()
        except OSError:
            raise
        except Exception as exc:
            text = "spool reader failed: %s: %s; read positions taken from the journal " \
                   "again" % (type(exc).__name__, exc)
            now = time.monotonic()
            if now - self._sampler_errors.get(text, -1e9) >= 60.0:  # once a minute each
                self._sampler_errors[text] = now
                self.log("%s\n%s" % (text, traceback.format_exc()))
                self._survive("spool report", lambda: self.journal.append(EVENT, {
                    "kind": SAMPLER_ERROR, "job": None, "rank": None, "step": None,
                    "msg": text, "data": {"sampler": "spool"}}))
            try:
                self.spools.resync()
            except Exception as again:  # tried again after the next failure
                self.log("spool positions not re-read: %s: %s" % (type(again).__name__,
                                                                  again))

    def _io_error(self, what: str, exc: BaseException) -> None:
        text = "%s failed: %s: %s" % (what, type(exc).__name__, exc)
        if self._io_errors.get(what) != text:
            self._io_errors[what] = text
            self.log("%s (tried again every round; logged once)" % text)

    def _adopt_jobs(self) -> None:
        """Take over the jobs a previous agent on this state dir left running (killed
        with -9, crashed): before the first spool poll, so that what their ranks wrote
        meanwhile reaches the adopted jobs' bookkeeping as it is journaled."""
        for path, saved in jobstate.load_all(self.config.state_dir):
            if isinstance(saved, str):
                self._adopt_error(path.stem, "cannot adopt job from %s: %s" % (path, saved))
                continue
            if saved.get("state") not in ADOPTABLE_STATES:
                continue
            try:
                job = ManagedJob(LaunchSpec(saved.get("spec")), self.journal,
                                 saved.get("overrides"), log=self.log)
                job.adopt(saved)
            except Exception as exc:  # a bad saved state must not keep the agent down
                self._adopt_error(path.stem, "cannot adopt job %s from %s: %s: %s" % (
                    path.stem, path, type(exc).__name__, exc))
                continue
            self.jobs[job.name] = job
            self.spools.add_run_dir(job.spec.run_dir)

    def _command(self) -> Supervisor:
        """The `run -- CMD` job: the one a killed daemon left running with the same
        command, adopted, rather than a second copy of it; else started now."""
        cfg = self.config
        saved = jobstate.read(cfg.state_dir / COMMAND_STATE)
        if saved is not None and saved.get("cmd") == cfg.cmd:
            try:
                sup = Supervisor.adopt(saved, self.journal)
            except Exception as exc:  # a bad saved state must not keep the agent down
                self._adopt_error(str(saved.get("job")), "cannot adopt the command's job "
                                  "from %s: %s: %s" % (COMMAND_STATE, type(exc).__name__, exc))
                sup = None
            if sup is not None and sup.found_running:
                self.journal.append(EVENT, {
                    "kind": JOB_ADOPTED, "job": sup.job, "rank": None, "step": None,
                    "msg": "job %s adopted from the previous agent: pid %s still runs"
                           % (sup.job, sup.pid),
                    "data": {"ok": True, "running": True, "pid": sup.pid,
                             "wrapper_pid": saved.get("wrapper"), "attempt": None}})
                return sup
            if sup is not None:
                sup.wait(5.0)  # it ended meanwhile (its exit is journaled): start anew
        assert cfg.job is not None
        sup = Supervisor(cfg.cmd, cfg.job, cfg.run_dirs[0], self.journal)
        sup.start()
        return sup

    def _save_command(self) -> None:
        sup = self.supervisor
        if sup is None or not sup.running:
            return
        try:
            jobstate.write(self.config.state_dir / COMMAND_STATE, sup.identity())
        except OSError as exc:
            self.log("cannot save the job's identity for a restarted agent: %s" % exc)

    def _adopt_error(self, job: str, msg: str) -> None:
        self.log(msg)
        self.journal.append(EVENT, {"kind": JOB_ADOPTED, "job": job, "rank": None,
                                    "step": None, "msg": msg, "data": {"ok": False}})

    def run(self) -> int:
        cfg = self.config
        try:
            if isinstance(self.gpus, Nvml):  # registered first: the hello says which
                self.xid = XidWatcher(self.gpus, self._on_xid, on_error=self._sampler_error)
                self.xid.register()
            self.journal.append(HELLO, self.hello())
            self._load_gpu_history()
            self._adopt_jobs()
            if self.xid is not None:
                self.xid.start()
            if cfg.cmd and not self._stopping():
                self.supervisor = self._command()
                self._save_command()
            self._sampler = threading.Thread(target=self._sampler_loop, name="sampler",
                                             daemon=True)
            self._sampler.start()
            last_checkpoint = last_retention = last_owner = time.monotonic()
            job_ended: Optional[int] = None
            while not self._stopping():
                self._survive("spool", self._poll_spools)
                self._survive("control inbox", self.inbox.poll)
                now = time.monotonic()
                if now - last_checkpoint >= POSITIONS_EVERY:
                    self._survive("spool positions", self.spools.checkpoint)
                    self._save_command()
                    last_checkpoint = now
                if now - last_retention >= 60.0:
                    self._survive("journal retention", self.journal.enforce_retention)
                    last_retention = now
                if cfg.exit_with is not None and now - last_owner >= OWNER_EVERY:
                    last_owner = now
                    if not alive(cfg.exit_with):
                        self.log("process %d, which this daemon was started to serve, is "
                                 "gone: stopping, with its jobs" % cfg.exit_with)
                        break
                if cfg.exit_with_job and self.supervisor is not None:
                    if job_ended is not None:  # a spool poll ran since: its records are in
                        return job_ended
                    if not self.supervisor.running:
                        job_ended = _exit_status(self.supervisor.returncode)
                        self.log("job %s ended (exit status %d): stopping (--exit-with-job)"
                                 % (self.supervisor.job, job_ended))
                self._stop.wait(POLL)
            return 0
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        """Stop the jobs, then write down what is left. Each job is stopped whatever
        failed before it (a full disk, one job's error): none is left running unwatched."""
        self._stop.set()
        if self.supervisor is not None and self.supervisor.running:
            self.log("stopping job %s (SIGTERM, then SIGKILL after %g s)"
                     % (self.supervisor.job, self.config.stop_grace))
            self.supervisor.ended_for = launch_reasons.FOR_SHUTDOWN
            try:
                self.supervisor.stop(self.config.stop_grace)
            except Exception as exc:
                self.log("stopping job %s failed: %s: %s" % (
                    self.supervisor.job, type(exc).__name__, exc))
        if self.supervisor is not None and not self.supervisor.running:
            try:  # stopped with the daemon: nothing for the next one to adopt
                (self.config.state_dir / COMMAND_STATE).unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                self.log("cannot remove %s: %s" % (COMMAND_STATE, exc))
        for job in list(self.jobs.values()):
            if job.running:
                self.log("stopping job %s" % job.name)
            try:
                job.close(self.config.stop_grace)
            except Exception as exc:
                self.log("stopping job %s failed: %s: %s" % (job.name, type(exc).__name__, exc))
        if self._sampler is not None:
            self._sampler.join(timeout=max(5.0, 2 * self.config.interval))
        if self.xid is not None:
            self.xid.stop()
        try:
            self._survive("spool", self.spools.poll)
            self._survive("control inbox", self.inbox.poll)
            self._survive("spool positions", self.spools.checkpoint)
        finally:
            self.gpus.shutdown()
            self.journal.close()
            self._lock.release()


class StopSignal:
    """The SIGTERM / SIGINT handler. It only notes the stop, taking no lock: a handler
    runs on the main thread between two of its bytecodes, possibly inside `Event.wait`
    on the daemon's stop Event, whose (non-reentrant) lock it then holds; setting that
    Event from the handler would wait on that lock forever. The daemon's main loop sees
    the note after its next wait (`Daemon.request_stop`)."""

    def __init__(self) -> None:
        self.asked = False  # before the daemon exists: it stops as soon as it does
        self.daemon: Optional[Daemon] = None

    def __call__(self, signum: int, frame: Any) -> None:
        self.asked = True
        daemon = self.daemon
        if daemon is not None:
            daemon.request_stop()


def run_daemon(config: DaemonConfig) -> int:
    """Run until SIGTERM / SIGINT; the job this daemon started is stopped with it."""
    handler = StopSignal()
    # Installed before the (possibly slow) start so an early SIGTERM is a clean stop too.
    signal.signal(signal.SIGTERM, handler)
    # A job's watcher sleeps until its hang deadline; with the default 5 ms GIL switch
    # interval a busy sampler or spool poll could hold it back that long past it.
    sys.setswitchinterval(0.001)
    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # A block inherited through exec would keep SIGTERM pending: no clean stop, ever.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    daemon = Daemon(config)
    handler.daemon = daemon
    if handler.asked:
        daemon.request_stop()
    return daemon.run()


def _exit_status(returncode: Optional[int]) -> int:
    """A job's return code as a process exit status (killed by signal N: 128 + N, as a
    shell says it; unknown: 1)."""
    if returncode is None:
        return 1
    return 128 - returncode if returncode < 0 else min(returncode, 255)
