"""Who takes part in an elastic job, as seen from this host: scale, spares, regroups.

torchrun's c10d rendezvous does the work. Started with `--nnodes MIN:MAX`, the torchrun
of each node admits a node that asks to join (at its next membership check it stops its
healthy workers and forms a new group with the newcomer) and survives a node that goes
away (the others' collectives fail, torchrun restarts its workers in a new round without
it, spending one of its own restarts). Either way the workers start again, from the
newest checkpoint the trainer finds itself, while the torchrun processes keep running.

The agent must not mistake such a *regroup* for a failure to recover from. When the
workers of this host end while torchrun stays up:

- the ranks failed for a reason of their own (out of memory, user code, a GPU fault,
  a kill...): a failure, recovered as before (torchrun is stopped at once, or it would
  restart them in place);
- they failed on the network (`nccl`: a peer node went away): torchrun regroups; it is
  an interruption (unless the operator announced the change with `scale`), counted
  against the job-wide restart budget for its cause like any restart (refused once that
  is spent: then a failure, which stops the job), and its recovery is recorded at the
  new group's first step;
- torchrun stopped them itself (no failure: a node joined): a regroup, confirmed when
  torchrun starts new workers; if torchrun exits instead, its exit code decides.

torchrun reports a failed worker with a `failed (exitcode: N) local_rank: ...` line; its
absence (with the workers' exit statuses) is what says the stop was torchrun's own.

Spares wait in `standby`, with no process. The agent of a host excluded as faulty claims
the first free spare with a file in the job's shared control dir
(`control/JOB.takeover/SPARE.json`, created whole and only where none is, so two hosts
never take the same spare); the spare's agent looks for that file, and starts torchrun
with the job's rendezvous, which the other nodes' torchrun admits in their regroup.

Over 500 lines because the regroup, the scale, the exclusion of a faulty host and the
takeover by a spare read and change one state of the job (its generation, the hosts
expected, the regroup pending) on the job's thread, each checked against the others.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Set, Tuple

from agent.job import gpu_history, peer_end
from agent.job.bounded_read import new_lines
from agent.job.launch import LaunchSpec
from agent.job.recovery import HINTS, Decision, Diagnosis, classify
from agent.job.supervisor import alive
from agent.wire import atomic, launch_reasons, paths
from agent.wire.causes import DATA, GPU_FAULT, HANG, KILLED, NCCL, OOM, UNKNOWN, USER_CODE
from agent.wire.events import MEMBERSHIP, SAMPLER_ERROR, SCALE, TAKEOVER
from agent.wire.op_error import OpError
from agent.wire.states import (
    EXCLUDED,
    FAILED,
    FINISHED,
    RUNNING,
    STANDBY,
    STARTING,
    STOPPED,
)

if TYPE_CHECKING:
    from agent.job.handle import JobHandle

FAILED_LINE = "failed (exitcode"  # torchrun's log line for a worker that failed
_FIRST_FAILED = re.compile(r"failed \(exitcode: -?\d+\) local_rank: \d+ \(pid: (\d+)\)")
# A collective that failed because its peer went away, in gloo's, NCCL's and c10d's words.
_PEER_GONE = re.compile(r"gloo/transport|Broken pipe|Connection (?:reset|closed) by peer|"
                        r"DistNetworkError|DistBackendError|NCCL", re.I)
# Causes that are this host's own even while its nodes change.
OWN_CAUSES = (OOM, GPU_FAULT, DATA, KILLED)
SETTLE = 0.3  # s for what torchrun and the ranks just wrote to reach the log
# States in which a host can be told to join an elastic job.
JOINABLE = (STANDBY, EXCLUDED, STOPPED, FINISHED, FAILED)
# Why a pause or a leave did not end this host's part: `Supervisor.stop` returns once its
# SIGKILL's wait ran out, and a process in uninterruptible sleep (a rank in D state on a
# hung driver or file system) outlives it.
NOT_EXITED = "processes did not exit after SIGKILL"
# Failures a faulty GPU often causes without naming itself: with GPU faults in this host's
# history (agent.job.gpu_history), they are taken as the GPU's in a job excluding on them.
SUSPECT_CAUSES = (HANG, KILLED, UNKNOWN)
HEALTH_EVERY = 60.0  # s between a spare's publications of its GPU fault history
# s after which an empty claim file is taken as abandoned: an older agent created it and
# was killed (or ran out of space) before writing it; a claim now appears whole at once.
CLAIM_ABANDONED = 300.0
# Why a hard link cannot be made where the claims are (a filesystem without them).
_NO_HARD_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS}


def takeover_dir(spec: LaunchSpec) -> Path:
    return paths.takeover_dir(spec.shared_dir, spec.name)


def claim_spare(spec: LaunchSpec, replaced: str, cause: str, hosts: Sequence[str],
                generation: Optional[str] = None) -> Optional[str]:
    """Take the first spare nobody has claimed: a claim file created only where none is
    (`_create_whole`) is the lock. The spare's part is the replaced host's: of its
    `generation` (agent.job.peer_end). Raises OSError (a full or unwritable shared dir):
    then no spare was claimed, and no claim file of this host's is left."""
    folder = takeover_dir(spec)
    folder.mkdir(parents=True, exist_ok=True)
    # A spare whose GPUs faulted lately (as it published) comes after the clean ones.
    for spare in sorted(spec.spares, key=lambda s: spare_faults(spec, s) > 0):
        if spare in hosts:
            continue
        claim = {"spare": spare, "replaced": replaced, "cause": cause, "ts": time.time(),
                 "hosts": [spare if h == replaced else h for h in hosts]}
        if generation is not None:
            claim["generation"] = generation
        if _create_whole(folder / ("%s.json" % spare), json.dumps(claim)):
            return spare
    return None


def _create_whole(target: Path, text: str) -> bool:
    """Create `target` holding `text`, unless it exists (False): the text goes to a file
    of its own first, which is then linked at `target` (an atomic create-if-absent), so
    the claim appears whole or not at all. A full disk or a kill midway leaves no claim
    file (an empty one would read as "still being written" forever, and keep everyone
    else from claiming the spare); one that an older agent left empty so is set aside
    once older than CLAIM_ABANDONED. A filesystem without hard links gets the claim
    created exclusively and written after, as before. Raises OSError."""
    tmp = target.with_name(".%s.%d.%d.tmp" % (target.name, os.getpid(),
                                              threading.get_ident()))
    try:
        with open(str(tmp), "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        for _ in range(2):  # again only after setting an abandoned empty claim aside
            try:
                os.link(str(tmp), str(target))
                return True
            except FileExistsError:
                if not _set_aside_abandoned(target):
                    return False
            except OSError as exc:
                if exc.errno not in _NO_HARD_LINKS:
                    raise
                return _create_exclusively(target, text)
        return False
    finally:
        try:
            os.unlink(str(tmp))
        except OSError:
            pass


def _create_exclusively(target: Path, text: str) -> bool:
    """`_create_whole` where hard links are not supported: O_EXCL, then the text; a write
    that fails takes the file away again (a kill midway still leaves it empty)."""
    try:
        fd = os.open(str(target), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
    except BaseException:
        try:
            os.unlink(str(target))
        except OSError:
            pass
        raise
    return True


def _set_aside_abandoned(target: Path) -> bool:
    """Whether `target` is out of the way now: gone meanwhile, or an empty claim older
    than CLAIM_ABANDONED, moved aside (then deleted). An older agent created its claim
    file first and wrote it after; killed, or out of space, in between, it left the
    file empty, which no reader takes (`read_claim`) and which would keep the spare
    from everyone for good. Should the move take a whole claim another host linked in
    the meantime, that claim is put back, and the spare stays its."""
    try:
        status = os.stat(str(target))
    except FileNotFoundError:
        return True
    if status.st_size or time.time() - status.st_mtime < CLAIM_ABANDONED:
        return False
    aside = target.with_name(".%s.abandoned.%d.%d" % (target.name, os.getpid(),
                                                      threading.get_ident()))
    try:
        os.rename(str(target), str(aside))
    except FileNotFoundError:
        return True  # another host set it aside first
    try:
        if os.stat(str(aside)).st_size:
            try:
                os.link(str(aside), str(target))
            except FileExistsError:
                pass
            return False
    finally:
        try:
            os.unlink(str(aside))
        except OSError:
            pass
    return True


def health_file(spec: LaunchSpec, host: str) -> Path:
    return paths.health_dir(spec.shared_dir, spec.name) / ("%s.json" % host)


def spare_faults(spec: LaunchSpec, spare: str) -> int:
    """The GPU faults the spare published (`Membership.publish_health`); 0 when it
    published none or the file is unusable (the spare is then taken in its turn)."""
    try:
        data = json.loads(health_file(spec, spare).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    faults = data.get("faults") if isinstance(data, dict) else None
    return faults if isinstance(faults, int) and not isinstance(faults, bool) and (
        faults > 0) else 0


def read_claim(spec: LaunchSpec, spare: str) -> Optional[dict]:
    try:
        raw = (takeover_dir(spec) / ("%s.json" % spare)).read_text(encoding="utf-8")
        claim = json.loads(raw)
    except (OSError, ValueError):  # absent, or left empty by an older agent
        return None
    return claim if isinstance(claim, dict) else None


def worker_facts(pids: Sequence[int]) -> Dict[str, Optional[int]]:
    """Group size (nodes), world size and torchrun's restart count from a worker's
    environment: what the rendezvous decided, read where torchrun wrote it."""
    wanted = {b"GROUP_WORLD_SIZE": "nodes", b"WORLD_SIZE": "world_size",
              b"TORCHELASTIC_RESTART_COUNT": "torchrun_restarts"}
    facts: Dict[str, Optional[int]] = dict.fromkeys(wanted.values())
    for pid in pids:
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                items = f.read().split(b"\0")
        except OSError:
            continue
        for item in items:
            key, _, value = item.partition(b"=")
            if key in wanted:
                try:
                    facts[wanted[key]] = int(value)
                except ValueError:
                    pass
        if facts["nodes"] is not None:
            break
    return facts


def _change_unseen(expect: Optional[dict], nodes: Optional[int]) -> Optional[str]:
    """Why a regroup after a scale does not show its change, or None: a host added leaves
    the group larger than before it, one removed smaller. A regroup of any other cause in
    the window (a node that failed and came back) is not the operator's change. Unknown
    sizes (a joining host's, an agent older than the count) are not held against it."""
    before = expect.get("nodes_before") if expect is not None else None
    if not isinstance(before, int) or nodes is None:
        return None
    change = expect.get("change") if expect is not None else None
    if change == "add" and nodes <= before:
        return "the new group has %d node(s), %d before the change" % (nodes, before)
    if change == "remove" and nodes >= before:
        return "the new group has %d node(s), %d before the change" % (nodes, before)
    return None


class Membership:
    """The elastic side of one `ManagedJob`; runs on the job's thread except `first_step`
    (the daemon's thread, under `Progress.lock`, agent.job.progress)."""

    def __init__(self, job: JobHandle) -> None:
        self.job = job
        self.expect: Optional[dict] = None  # a change the operator announced (scale)
        self.between: Optional[dict] = None  # workers gone, torchrun's next move awaited
        self.regroup: Optional[dict] = None  # new group formed, its first step awaited
        self.failure: Optional[Diagnosis] = None  # why this host's ranks failed, when they did
        self._offset = 0  # where this worker generation's output starts in the .err log
        self._gone: Set[int] = set()  # workers of earlier generations (torchrun reaps them late)
        self._standby_since = 0.0
        self._health_at: Optional[float] = None  # when the spare last published its health

    # -- generations -----------------------------------------------------------------
    def started(self) -> None:
        """A new torchrun attempt: nothing is pending from the previous one."""
        self.between = self.regroup = self.failure = None
        self._gone = set()
        self._offset = self._err_size()

    def _err_path(self) -> Path:
        return paths.stderr_log(self.job.spec.run_dir, self.job.name)

    def _err_size(self) -> int:
        try:
            return self._err_path().stat().st_size
        except OSError:
            return 0

    def _new_lines(self) -> List[str]:
        # The last `LOG_TAIL_BYTES` since the generation began: what a diagnosis reads.
        return new_lines(self._err_path(), self._offset)

    def workers_ended(self, ended: Sequence[Tuple[int, int, Optional[int], int]], now: float
                      ) -> Optional[bool]:
        """Workers of this host ended (ended: (order, pid, rank, status)). True: a regroup,
        keep watching; False: a failure of this host's ranks, recover now; None: torchrun
        is ending, its exit code decides."""
        job = self.job
        sup = job.supervisor
        ended = [e for e in ended if e[1] not in self._gone]
        if sup is None or not ended:
            return None if sup is None else True
        self._gone.update(p for _o, p, _r, _s in ended)
        time.sleep(SETTLE)
        if not sup.running:
            return None
        # The old group's last records may be stamped after `now` (a rank can step between
        # the start of this look and its end); the new group needs seconds to start.
        seen = time.time()
        lines = self._new_lines()
        failed = any(s not in (0, -1, -signal.SIGTERM) for _o, _p, _r, s in ended) or any(
            FAILED_LINE in line for line in lines)
        if not failed:
            if self.between is None and self.regroup is None:
                old = set(job.watched_pids()) | {p for _o, p, _r, _s in ended}
                self.between = {"since": seen, "old": old}
                self._new_generation(seen)
                job.save()
            return True
        diagnosis = _diagnose(ended, lines, job.progress.telemetry())
        expected = self._expected(now)
        # Announced, a change makes the peers' collectives fail in any words; only a cause
        # of this host's own is a failure then.
        if diagnosis.cause == NCCL or (expected is not None and diagnosis.cause not in
                                       OWN_CAUSES):
            last_seen = [job.last_alive(p, now) for _o, p, _r, _s in ended]
            if self._begin(seen, "scale" if expected is not None else "peer_lost",
                           diagnosis, failure_at=min(last_seen) if last_seen else now):
                return True
        self.failure = diagnosis
        return False

    def tick(self, now: float) -> None:
        """Once per look at a running attempt: confirm a pending regroup when torchrun has
        started new workers; close an announced change that never came."""
        job = self.job
        sup = job.supervisor
        if self.between is not None and sup is not None and sup.running:
            fresh = [p for p in sup.rank_pids() if p not in self.between["old"]]
            if fresh:
                why = "scale" if self._expected(now) is not None else "joined"
                self._begin(self.between["since"], why)
        expect = self.expect
        if expect is not None and now > expect["until"] and self.regroup is None and (
                self.between is None):
            self.expect = None
            job.event(SCALE, "job %s: scale (%s %s) not seen here within %.0f s; the job "
                      "keeps running as it was" % (job.name, expect["change"],
                                                    expect["host"], expect["window"]), {
                "ok": False, "id": expect["id"], "change": expect["change"],
                "host": expect["host"], "hosts": job.spec.hosts,
                "error": "no membership change within %g s" % expect["window"]})
            job.save()

    def _expected(self, now: float) -> Optional[dict]:
        expect = self.expect
        return expect if expect is not None and now <= expect["until"] else None

    def _begin(self, since: float, why: str, diagnosis: Optional[Diagnosis] = None,
               failure_at: Optional[float] = None) -> bool:
        """torchrun is forming a new group: this attempt goes on with new workers."""
        job = self.job
        now = time.time()
        sup = job.supervisor
        decision = None
        if why == "peer_lost" and diagnosis is not None:
            # A regroup after a lost peer is a restart of the job as much as one the agent
            # makes: it is counted against the same job-wide budget, per cause, and refused
            # once that is spent. Refused, it is this host's failure (`workers_ended`
            # False): the job's own decision then stops it and its alert names the budget.
            decision = job.decide_restart(diagnosis, failure_at or now)
            if not decision.retry:
                return False
        last = self._new_generation(since)
        if decision is not None and diagnosis is not None:
            self._interruption(diagnosis, decision, now, failure_at or now, last)
        job.forget_workers()
        if sup is not None:
            sup.tail.clear()  # a later failure is classified by the new group's output only
        self.between = None
        self.regroup = {"since": since, "why": why, "pid": sup.pid if sup else None,
                        "last_step": last}
        self._offset = self._err_size()
        job.save()
        return True

    def _new_generation(self, since: float) -> Optional[int]:
        """Steps from `since` on belong to the next worker group: the old group's records
        that the spools still deliver count as before it (they must not look like
        progress to the hang check, which keeps start-up rules until the new group's
        first step). Returns the old group's newest step."""
        return self.job.progress.new_generation(since, time.time())

    def _interruption(self, diagnosis: Diagnosis, decision: Decision, now: float,
                      failure_at: float, last_step: Optional[int]) -> None:
        job = self.job
        budget = decision.budget or {}
        reason = ("a peer node went away; torchrun forms a new group in place (restart %d "
                  "of %d%s)" % (job.policy.restarts, job.policy.restart_budget,
                                "; %s: %s of %s job-wide" % (
                                    budget["cause"], budget.get("used"), budget["limit"])
                                if budget.get("limit") is not None else ""))
        job.interrupted(diagnosis, Decision(decision.retry, 0.0, reason, decision.hint,
                                            decision.budget),
                        now, failure_at, last_step, in_place=True)
        newest, skipped = job.newest_checkpoint()
        job.progress.await_recovery({
            "failure_at": failure_at, "cause": diagnosis.cause,
            "checkpoint": str(newest.path) if newest is not None else None,
            "checkpoint_step": newest.step if newest is not None else 0,
            "restart_count": job.policy.restarts, "skipped": skipped,
            "last_step": last_step})

    def first_step(self, ts: float) -> Optional[dict]:
        """Under `Progress.lock`, for each train record: the regroup this step completes."""
        regroup = self.regroup
        if regroup is None or ts < regroup["since"]:
            return None
        self.regroup = None
        return regroup

    def completed(self, regroup: dict, step: int, ts: float) -> None:
        """The new group trained its first step here: say what it is."""
        job = self.job
        sup = job.supervisor
        self._offset = self._err_size()  # what torchrun logged about the old group is old
        facts = worker_facts(list(sup.rank_pids()) if sup is not None else [])
        claimed = self._hosts_after_takeovers()
        if claimed != job.spec.hosts:
            job.spec.with_hosts(claimed)
        data: Dict[str, Any] = {"ok": True, "hosts": job.spec.hosts, "torchrun_pid":
                                regroup["pid"], "in_place": True, "first_step": step,
                                "seconds": round(ts - regroup["since"], 3), **facts}
        why = regroup["why"]
        if why == "scale":
            expect, self.expect = self.expect, None
            if expect is not None:
                data.update({"id": expect["id"], "change": expect["change"],
                             "host": expect["host"]})
            unseen = _change_unseen(expect, facts["nodes"])
            if unseen is not None:
                data.update(ok=False, error=unseen)
                job.event(SCALE, "job %s: regrouped, but %s %s is not seen: %s; %s node(s) "
                          "train from step %d" % (job.name, data["change"], data["host"],
                                                  unseen, facts["nodes"], step), data,
                          step=step)
            else:
                job.event(SCALE, "job %s: %s %s done; %s node(s) train from step %d, "
                          "torchrun kept running" % (
                              job.name, data.get("change", "membership change"),
                              data.get("host", ""), facts["nodes"], step), data, step=step)
        elif why == "joined":
            job.event(MEMBERSHIP, "job %s: torchrun admitted a node; %s node(s) train from "
                      "step %d" % (job.name, facts["nodes"], step),
                      dict(data, change="join"), step=step)
        elif why == "takeover":
            job.event(TAKEOVER, "job %s: the spare %s trains from step %d with %s node(s)"
                      % (job.name, job.spec.host, step, facts["nodes"]),
                      dict(data, spare=job.spec.host, started=True), step=step)
        job.save()  # said: an agent restarted from here on must not say it again

    def _hosts_after_takeovers(self) -> List[str]:
        job = self.job
        hosts = list(job.spec.hosts)
        for spare in job.spec.spares:
            claim = job.looking_in(takeover_dir(job.spec),
                                   functools.partial(read_claim, job.spec, spare),
                                   "a look for a spare's claim in", "a hung network mount?")
            if claim and claim.get("replaced") in hosts and spare not in hosts:
                hosts[hosts.index(claim["replaced"])] = spare
        return hosts

    # -- operations ------------------------------------------------------------------
    def check(self, state: str, args: dict) -> None:
        """Refuse a scale op that cannot apply in `state` (called before it is queued)."""
        if args.get("join") is not None:
            if state not in JOINABLE:
                raise OpError("job %r is %s on this host: it cannot join again"
                              % (self.job.name, state))
        elif state not in (RUNNING, STARTING):
            raise OpError("job %r is %s: only a running elastic job can be scaled"
                          % (self.job.name, state))
        if not self.job.spec.elastic and args.get("join") is None:
            raise OpError("job %r is not elastic (nnodes is not \"MIN:MAX\")" % self.job.name)

    def scale(self, args: dict) -> None:
        """The operator's change, on the job's thread: join, leave, or expect a regroup."""
        job = self.job
        now = time.time()
        hosts = args.get("hosts") or job.spec.hosts
        if args.get("join") is not None:
            spec: LaunchSpec = args["join"]
            job.spec = spec
            checkpoint, _skipped = job.newest_checkpoint()
            job.launch(checkpoint, reason=launch_reasons.SCALE)
            if job.running:  # this host training in the new group is its join seen
                self.expect = self._window(args, now, count=False)
                self.regroup = {"since": now, "why": "scale", "pid": job.supervisor.pid
                                if job.supervisor else None, "last_step": None}
                job.save()
            else:
                job.event(SCALE, "job %s: this host could not join" % job.name, {
                    "ok": False, "id": args.get("id"), "change": "add", "host": spec.host,
                    "error": "torchrun did not start (see the launch_failed alert)"})
            return
        job.spec.with_hosts(list(hosts))
        if args.get("leave"):
            job.stop_attempt(why=launch_reasons.FOR_SCALE)
            job.state = EXCLUDED  # out of the job either way: nothing here restarts it
            self.expect = self.between = self.regroup = None
            data = {"ok": True, "id": args.get("id"), "change": "remove",
                    "host": job.spec.host, "left": True, "hosts": list(hosts)}
            # Whether the other hosts go on is theirs to say (their regroup), not this one's.
            if job.running:  # the stop's SIGKILL wait ran out (a rank in D state)
                data.update(ok=False, error=NOT_EXITED)
                job.event(SCALE, "job %s: this host left the job, but its part did not stop: "
                          "its %s" % (job.name, NOT_EXITED), data)
                return
            job.event(SCALE, "job %s: this host left; its processes have exited" % job.name,
                      data)
            return
        # The regroup restarts this host's workers with the others, the joining host's
        # too: the part goes on as the scale's generation, which the joining host starts
        # with, so that the markers between it and the hosts that stay need no clocks.
        # A scale sent with an op id of another shape keeps the part's generation.
        scaled = peer_end.generation(args.get("id"), job.spec.host)
        if scaled is not None:
            job.peers.generations.begin(scaled)
        self.expect = self._window(args, now)
        job.save()  # an agent restarted in the window still knows the change is expected

    def _window(self, args: dict, now: float, count: bool = True) -> dict:
        # A regroup shows its first step within the start-up allowance of an attempt. With
        # `count`, the group's size now is what the regroup's must differ from for the
        # change to be seen (`_change_unseen`).
        window = float(self.job.spec.hang_startup)
        sup = self.job.supervisor
        before = (worker_facts(list(sup.rank_pids()))["nodes"]
                  if count and sup is not None and sup.running else None)
        return {"id": args.get("id"), "change": args.get("change"), "host": args.get("host"),
                "window": window, "until": now + window, "nodes_before": before}

    def follow_end(self, timeout: float) -> None:
        """A pause on a host without rank 0: rank 0's host stops its part, and this host's
        workers fail on the lost peer. A fixed-size job's torchrun then exits; an elastic
        job's would form a new group instead, so its part is stopped here once its
        workers have ended. The wait gives up when the agent stops (`closing`)."""
        job = self.job
        sup = job.supervisor
        if sup is None:
            return
        deadline = time.time() + timeout
        workers = list(sup.rank_pids())
        while sup.running and time.time() < deadline and not job.closing:
            if workers and not any(alive(p) for p in workers):
                sup.stop(job.spec.stop_grace)
                return
            time.sleep(0.1)

    # -- spares and exclusion ----------------------------------------------------------
    # -- adoption (agent.wire.jobstate) ----------------------------------------------------
    def state(self) -> dict:
        """What a change under way needs after an agent restart: the announced scale (its
        op id and window), the workers gone with torchrun's next move awaited, and the
        regroup awaiting its first step. Without them the adopting agent would diagnose
        the regroup as a failure and never say the scale was done."""
        between = self.between
        return {"expect": self.expect, "regroup": self.regroup,
                "between": None if between is None else {
                    "since": between["since"], "old": sorted(between["old"])}}

    def restore(self, saved: object) -> None:
        """As `state` left it; anything unusable (a state saved by an older agent) is
        taken as no change under way. A window that ran out meanwhile is closed at the
        next look (`tick`), with the event the operator waits for."""
        if not isinstance(saved, dict):
            return
        expect = saved.get("expect")
        if isinstance(expect, dict) and isinstance(expect.get("until"), (int, float)) and (
                isinstance(expect.get("window"), (int, float))):
            self.expect = dict(expect)
        regroup = saved.get("regroup")
        if isinstance(regroup, dict) and isinstance(regroup.get("since"), (int, float)) and (
                isinstance(regroup.get("why"), str)):
            self.regroup = dict(regroup)
        between = saved.get("between")
        if isinstance(between, dict) and isinstance(between.get("since"), (int, float)) and (
                isinstance(between.get("old"), list)):
            self.between = {"since": float(between["since"]),
                            "old": {p for p in between["old"] if isinstance(p, int)}}

    @property
    def standby_since(self) -> float:
        """When this spare started waiting: claims made since then are for it."""
        return self._standby_since

    def resume_standby(self, since: float) -> None:
        """Wait as a spare again after an agent restart, still answering the claims
        made since `since`: one made while no agent was running is taken up now."""
        self._standby_since = since

    def standby(self) -> None:
        """Wait as a spare; a claim left from an earlier run of the job is not for us."""
        self._standby_since = time.time()
        job = self.job
        claim = job.looking_in(takeover_dir(job.spec),
                               lambda: read_claim(job.spec, str(job.spec.host)),
                               "a look for its claim in", "a hung network mount?")
        if claim is not None and float(claim.get("ts") or 0) < self._standby_since:
            try:
                (takeover_dir(self.job.spec) / ("%s.json" % self.job.spec.host)).unlink()
            except OSError:
                pass

    def publish_health(self, now: float) -> None:
        """A spare leaves its GPU fault history (agent.job.gpu_history) where the hosts
        that claim spares read it, at most every HEALTH_EVERY s. Best effort: a shared
        dir that cannot be written leaves the spare taken in its turn."""
        if self._health_at is not None and now - self._health_at < HEALTH_EVERY:
            return
        self._health_at = now
        job = self.job
        found = gpu_history.read_summary(job.journal.state_dir, now)
        target = health_file(job.spec, str(job.spec.host))
        text = json.dumps(dict(found, host=job.spec.host, at=now), separators=(",", ":"))

        def write() -> None:
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                atomic.write_text(target, text, durable=False)
            except OSError:
                pass  # said nowhere else: the history stays in this host's state dir

        job.looking_in(target.parent, write, "publishing its GPU fault history in",
                       "a hung network mount?")

    def poll_takeover(self) -> None:
        job = self.job
        self.publish_health(time.time())
        me = str(job.spec.host)
        claim = job.looking_in(takeover_dir(job.spec), lambda: read_claim(job.spec, me),
                               "a look for its claim in", "a hung network mount?")
        if claim is None or float(claim.get("ts") or 0) < self._standby_since:
            return
        hosts = claim.get("hosts")
        if isinstance(hosts, list) and all(isinstance(h, str) for h in hosts):
            job.spec.with_hosts(hosts)
        generation = claim.get("generation")
        job.peers.generations.take_over(
            generation if isinstance(generation, str) and generation else None)
        checkpoint, skipped = job.newest_checkpoint()
        job.event(TAKEOVER, "job %s: spare %s takes over from %s (%s)" % (
            job.name, me, claim.get("replaced"), claim.get("cause")), {
            "ok": True, "spare": me, "replaced": claim.get("replaced"),
            "cause": claim.get("cause"), "claimed_at": claim.get("ts"), "hosts": job.spec.hosts,
            "checkpoint": str(checkpoint.path) if checkpoint else None,
            "step": checkpoint.step if checkpoint else 0, "skipped": skipped})
        job.launch(checkpoint, reason=launch_reasons.TAKEOVER)
        if job.running:
            self.regroup = {"since": time.time(), "why": "takeover", "pid": job.supervisor.pid
                            if job.supervisor else None, "last_step": None}

    def exclusion(self, diagnosis: Diagnosis) -> Optional[Tuple[dict, Decision]]:
        """Whether this host leaves the job after `diagnosis`, and who takes its place.

        Only a cause the job lists in `recovery.exclude_on` (or, in a job that lists
        `gpu_fault`, a hang, a kill or an unknown failure on a host whose GPUs faulted
        within gpu_history.WINDOW_S, this run or an earlier one), only in an elastic job,
        never the host serving the rendezvous store (the others would lose the rendezvous
        with it), and only when the job can go on: with a spare, or with MIN nodes left.
        """
        spec = self.job.spec
        if not spec.elastic:
            return None
        history = self._fault_history(diagnosis)
        if diagnosis.cause not in spec.exclude_on and history is None:
            return None
        if spec.rdzv_is_host is not False:
            return None
        me = str(spec.host)
        remaining = [h for h in spec.hosts if h != me]
        spare = self._claim_spare(diagnosis.cause)
        if spare is None and len(remaining) < spec.min_nodes:
            return None
        hosts = [spare if h == me else h for h in spec.hosts] if spare else remaining
        suspect = (", whose %s" % gpu_history.describe(history)) if history else ""
        if spare:
            reason = "%s on this host%s: excluded, the spare %s takes its place" % (
                diagnosis.cause, suspect, spare)
        else:
            reason = "%s on this host%s: excluded, the job goes on with %d node(s)" % (
                diagnosis.cause, suspect, len(remaining))
        info: Dict[str, Any] = {"host": me, "spare": spare, "hosts": hosts,
                                "cause": diagnosis.cause}
        if history:
            info["gpu_history"] = history  # this host's faults across runs that bore on it
        return info, Decision(False, 0.0, reason, diagnosis.hint)

    def _claim_spare(self, cause: str) -> Optional[str]:
        """`claim_spare` for this host, off the job's thread (`looking_in`: a hung mount
        is said while the job waits for it). A shared dir that cannot be written (full,
        read-only) claims no spare: the exclusion goes on as if none were free, and an
        event says why."""
        job = self.job
        spec = job.spec
        folder = takeover_dir(spec)
        claim = functools.partial(claim_spare, spec, str(spec.host), cause, list(spec.hosts),
                                  job.peers.generations.current)
        try:
            return job.looking_in(folder, claim, "claiming a spare in",
                                  "a hung network mount?")
        except OSError as exc:
            error = "%s: %s" % (type(exc).__name__, exc)
            job.event(SAMPLER_ERROR, "job %s: cannot claim a spare in %s (%s); going on as "
                      "if none were free" % (job.name, folder, error),
                      {"job_state": job.state, "dir": str(folder), "error": error,
                       "claimed": None})
            return None

    def _fault_history(self, diagnosis: Diagnosis) -> Optional[dict]:
        """This host's GPU faults across runs (agent.job.gpu_history.summary), when there
        are any and they decide the exclusion: a failure of an unclear cause in a job
        that excludes a host on GPU faults; else None (a cause the job excludes on is
        reason enough by itself)."""
        exclude_on = self.job.spec.exclude_on
        if GPU_FAULT not in exclude_on or diagnosis.cause not in SUSPECT_CAUSES or (
                diagnosis.cause in exclude_on):
            return None
        found = gpu_history.read_summary(self.job.journal.state_dir, time.time())
        return found if found["faults"] else None

    def excluded(self, info: dict) -> None:
        job = self.job
        job.spec.with_hosts(info["hosts"])
        job.state = EXCLUDED
        spare = info["spare"]
        history = info.get("gpu_history")
        job.alert("resource", "warning", "host_excluded", "job %s: host %s excluded after %s%s%s"
                  % (job.name, info["host"], info["cause"],
                      " (its %s)" % gpu_history.describe(history) if history else "",
                      "; spare %s takes its place" % spare if spare else ""),
                  "check host %s before it rejoins (cockpit scale --add): %s"
                  % (info["host"], HINTS.get(info["cause"], HINTS[UNKNOWN])),
                  {"host": info["host"]})


def _diagnose(ended: Sequence[Tuple[int, int, Optional[int], int]], lines: Sequence[str],
              telemetry: dict) -> Diagnosis:
    """The cause, read in the output of the rank that failed first (torchrun names its pid;
    else the first failing exit status seen): another rank of this host failing on the
    collective afterwards is a consequence. A collective that failed on a lost peer is a
    network cause even when only its exception line names it."""
    first = None
    for line in lines:
        match = _FIRST_FAILED.search(line)
        if match:
            first = int(match.group(1))
            break
    if first is None:  # a rank killed by a signal is never a peer's consequence
        failing = sorted((s >= 0, o, p) for o, p, _r, s in ended
                         if s not in (0, -1, -signal.SIGTERM))
        first = failing[0][2] if failing else None
    rank = next((r for _o, p, r, _s in ended if p == first), None)
    own = list(lines) if rank is None else [
        line for line in lines if line.startswith("[rank%d]:" % rank)]
    diagnosis = classify(None, own, None, telemetry)
    if diagnosis.cause in (USER_CODE, UNKNOWN):
        gone = [line.strip()[:500] for line in own if _PEER_GONE.search(line)]
        if gone:
            return Diagnosis(NCCL, gone[-3:], {"rank": rank} if rank is not None else {})
    return _own_failure(diagnosis, [e for e in ended if e[1] == first] or ended)


def _own_failure(diagnosis: Diagnosis, ended: Sequence[Tuple[int, int, Optional[int], int]]
                 ) -> Diagnosis:
    """The cause of a failure of this host's ranks. torchrun is stopped before it writes
    its root-cause report, so a rank ended by a signal is named from its exit status."""
    if diagnosis.cause != UNKNOWN:
        return diagnosis
    for _o, pid, rank, status in ended:
        if status < -1 and status != -signal.SIGTERM:
            try:
                name = signal.Signals(-status).name
            except ValueError:
                name = "signal %d" % -status
            return Diagnosis(KILLED, ["rank %s (pid %d) killed by %s" % (rank, pid, name)],
                             {"rank": rank})
    return diagnosis
