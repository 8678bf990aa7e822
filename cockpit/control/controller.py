"""Job operations as the operator asks for them, turned into control ops per host.

The agents do the work (and recover on their own); the controller decides which host
gets which op, so a multi-host job is paused, relaunched or forked consistently:

- rank 0 reads operator controls (LR scale, checkpoint now, evaluate now) and writes the
  checkpoints; the control file and the checkpoints live in the job's shared run dir, so
  adjustments and the cooperative pause go to the first host whichever host torchrun's
  rendezvous gave rank 0, and the other hosts are told to *follow* (their part ends when
  the first host's does, and that end is a pause, not a failure to recover from);
- everything else goes to every host of the job, each with its own node rank;
- an elastic job (`nnodes = "MIN:MAX"`) can be scaled: a host that joins starts torchrun
  with the job's rendezvous and the running torchrun processes admit it; a host that
  leaves stops its part and the others regroup without it. The members are told first,
  so their agents take the regroup for what it is, not for a failure. Its spares wait in
  standby on their hosts until an agent excludes a faulty host and claims one.

The controller starts from the spec's hosts and spares and follows its own scale and
relaunch operations once the agents accepted them (`settle`, with their acks: a host
whose join was refused, or is still unanswered, is not one of the job's hosts); `sync`
adopts what the agents report (after a spare took over, or when a command line starts
afresh from the spec).

`describe(action)` says exactly that before a destructive operation is confirmed. Each
method returns a one-line account of what was sent; hosts that could not be reached are
named in a `ControlError` (the ops that did go out stay sent: the agents acknowledge each
one with a `control_ack` event in the store).

Over 500 lines because every operation of the `Controller` is checked, described and
sent against the same membership (hosts, spares, the agents' views), which `sync` keeps
current: the operations share it rather than pass it around.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from agent.wire import ops, states
from cockpit.analysis.op_policy import CHECKPOINT, EVAL
from cockpit.analysis.text import counted
from cockpit.control.jobspec import JobSpec, JobSpecError, name_problem

# An operator's LR scale, relative to the configured schedule: wide enough for any
# rescue (a 1000x cut) or warm restart, narrow enough that a slip of the keyboard
# (1e6 for 1e-6) is refused before it turns the weights into NaN.
LR_SCALE_RANGE = (1e-3, 100.0)

Send = Callable[[str, dict], None]  # (host, op); raises when the host is not reachable
FORK_INFIX = "-fork-"  # a fork's default name: the parent's, this, a short id
# Agent job states of a host that is not (or no longer) one of the job's members.
OUTSIDE_STATES = frozenset(states.OUTSIDE)
# Agent job states of a host whose part has ended: its agent takes a new launch there.
ENDED_STATES = frozenset(states.ENDED)
# Operations that send the job's spec (its command, arguments, hosts) to the agents; the
# others name the job only, and the agents use the spec it was started with. Only these
# need the job file as it is now, so a file left broken mid-edit never blocks a pause.
SPEC_OPERATIONS = frozenset({ops.LAUNCH, ops.RELAUNCH, ops.FORK, ops.SCALE})
# Operations whose end of a host's part the job's other hosts' agents follow by
# themselves, through its shared run dir (agent.job.peer_end), reachable from here or not.
# (A resume is followed too, by the parts paused with the others: `missed_hosts_text`.)
FOLLOWED_OPS = frozenset({ops.PAUSE, ops.STOP})


def missed_hosts_text(op: str, count: int) -> str:
    """What the part of each of `count` hosts an operation could not reach does
    meanwhile, said alike by the confirmation, the screen's result and the command line:
    a pause or a stop it follows by itself, and a resume when it was paused or stopped
    with the others; any other operation it never gets, and what to do once it is back depends on
    what the operation left the others doing."""
    one = count == 1
    back = f"once {'it is' if one else 'they are'} back"
    if op == ops.LAUNCH:
        # Sent again, a launch would start the missed part afresh, setting aside the
        # checkpoints the started part writes meanwhile (check_launch refuses it).
        return (f"{'its' if one else 'their'} part of the job is not started; {back}, add "
                f"{'it' if one else 'them'} with scale --add (an elastic job), or stop the "
                "job and launch it again")
    if op == ops.RESUME:
        # A part paused with the others follows their resume by itself (agent.job.peer_end).
        # One left otherwise (or one whose agent does not see the shared dir) leaves the
        # resumed parts waiting in torchrun's rendezvous: a second resume finds the job
        # running and is refused, and a paused part cannot join by a scale; a relaunch
        # restarts every part together.
        return (("its agent resumes its part too once it sees" if one else
                 "their agents resume their part too once they see")
                + " in the job's shared run dir that the others resumed, if "
                + f"{'it was' if one else 'they were'} paused or stopped with them; check "
                + f"{'it' if one else 'them'} {back}: a part still not running leaves the "
                "others waiting for it in the rendezvous (an elastic job trains on without "
                "it), so relaunch the job then: every part starts again from the newest "
                "checkpoint")
    if op == ops.RELAUNCH:
        # As a resume's part left behind, but no agent follows a relaunch by itself: the
        # relaunch may change the job's spec and hosts.
        return (f"{'its' if one else 'their'} part is left as it was, and the others wait "
                f"for it in the rendezvous (an elastic job trains on without it); {back}, "
                "relaunch the job: every part starts again from the newest checkpoint")
    if op == ops.FORK:
        return (f"{'its' if one else 'their'} part of the fork is not started; {back}, "
                "stop the fork and fork again")
    if op in FOLLOWED_OPS:
        return (("its agent ends its part the same way once it sees" if one else
                  "their agents end their part the same way once they see")
                 + " in the job's shared run dir that the other hosts' parts ended; check "
                 + f"{'it' if one else 'them'} {back}")
    return (f"{'its' if one else 'their'} part of the job is left as it was; send the "
            f"{op or 'operation'} again {back}")


class ControlError(RuntimeError):
    """An operation that could not be sent (or only partly); the message says to whom.

    `sent` names the hosts it did reach and `unsent` why each other one was missed, so
    that a caller can still follow what was sent, and tell what the missed hosts do
    meanwhile, rather than report the whole operation as failed."""

    def __init__(self, message: str, sent: Sequence[str] = (),
                 unsent: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.sent = tuple(sent)
        self.unsent = dict(unsent or {})


@dataclasses.dataclass(frozen=True)
class MembershipChange:
    """A change of the job's hosts that was sent (a scale, a relaunch) and that the
    controller adopts only once the agents of `needs` accepted it (`Controller.settle`):
    the hosts whose part it starts, ends or restarts with the new membership."""

    op: str
    needs: Mapping[str, str]  # host -> id of the op sent there, whose ack decides
    hosts: tuple[str, ...]  # the job's hosts after it
    joins: str | None = None  # a host that joins: no longer a spare, if it was one
    respec: bool = False  # the spec's hosts become `hosts` too (a relaunch sends them)


class Controller:
    """Operations on one job; `send` is e.g. `Fleet.send`.

    `reload`, when given, is asked before each operation for the job spec as its file
    says now (None: unchanged). A cockpit stays open for days while the operator edits
    the file and launches or relaunches from the command line, which reads it afresh: an
    operation from the screen must not restart the job with the arguments of the file as
    it was when the cockpit opened (a checkpoint that no longer fits, a job that fails).
    """

    def __init__(self, spec: JobSpec, send: Send, new_id: Callable[[], str] | None = None,
                 reload: Callable[[], JobSpec | None] | None = None) -> None:  # fmt: skip
        self.spec = spec
        self._reload = reload
        self._file_hosts: tuple[tuple[str, ...], tuple[str, ...]] = (spec.hosts, spec.spares)
        self.hosts: tuple[str, ...] = spec.hosts
        self.spares: tuple[str, ...] = spec.spares
        self._send = send
        self._new_id = new_id or (lambda: uuid.uuid4().hex[:12])
        # host -> id of the op most recently sent there; acks echo it (control_ack).
        self.last_ops: dict[str, str] = {}
        # The one-line account of the operation most recently sent, as its method
        # returned it (a fork returns its controller, not this).
        self.last_sent = ""
        # Scales and relaunches sent whose acks are awaited, by op id (`settle`).
        self.pending: dict[str, MembershipChange] = {}
        self._lock = threading.Lock()  # the pending changes: sent and settled from threads
        self._forks: dict[str, Controller] = {}  # fork name -> its controller

    def __str__(self) -> str:
        return f"job {self.job} on {', '.join(self.hosts)}"

    @property
    def job(self) -> str:
        return self.spec.name

    @property
    def rank0_host(self) -> str:
        return self.hosts[0]

    # -- operations ------------------------------------------------------------------
    def refresh(self) -> None:
        """Adopt the job file's current contents, if it changed since it was last read.

        The hosts this controller follows (a scale, a relaunch excluding a host, what the
        agents reported) are kept unless the file's own hosts or spares changed: then the
        file says where the job runs, as it does for the command line."""
        if self._reload is None:
            return
        try:
            spec = self._reload()
        except JobSpecError as exc:
            raise ControlError(f"the job file changed and no longer reads: {exc}") from None
        if spec is None:
            return
        if spec.name != self.job:
            raise ControlError(f"the job file now names job {spec.name}, not {self.job}: "
                               f"start the cockpit again with it to control that job")
        if (spec.hosts, spec.spares) != self._file_hosts:
            self._file_hosts = (spec.hosts, spec.spares)
            self.hosts, self.spares = spec.hosts, spec.spares
            self.spec = spec
            with self._lock:  # the file says where the job runs now, not a change sent
                self.pending.clear()
        else:
            self.spec = dataclasses.replace(spec, hosts=self.spec.hosts)

    def launch(self) -> str:
        self.refresh()
        per_host: dict[str, dict[str, Any]] = {
            h: {"spec": self.spec.for_host(h, self.hosts)} for h in self.hosts}
        for spare in self.spares:
            per_host[spare] = {"spec": self.spec.for_host(spare, self.hosts),
                               "standby": True}
        return self._each(ops.LAUNCH, per_host)

    def check_launch(self, views: Mapping[str, Mapping[str, Any] | None]) -> None:
        """Refuse (ControlError, nothing sent) a launch of a job whose part some hosts'
        agents still run: `views` as for `sync`.

        Each agent refuses a launch of a job it runs, but a host that missed the first
        launch would take it: its part would start afresh and set aside, in the run dir
        the parts share, the checkpoints the running part writes, so that the next
        restart of the job would begin again from step 0."""
        live = {h: str(v.get("state")) for h, v in views.items()
                if v and v.get("state") not in ENDED_STATES | OUTSIDE_STATES}
        if not live:
            return
        where = ", ".join(f"{h} ({state})" for h, state in live.items())
        idle = [h for h in self.hosts if h not in live]
        if not idle and set(live.values()) == {states.PAUSED}:
            raise ControlError(f"job {self.job} is paused on {', '.join(live)}: resume it to "
                               "go on from its checkpoint, or stop it to launch it afresh")
        if not idle:
            raise ControlError(f"job {self.job} already runs on {where}: stop it to launch "
                               "it afresh, or relaunch it to restart every part from its "
                               "newest checkpoint")
        add = (f"add {idle[0]} to the running job with scale --add {idle[0]}, or "
               if self.spec.elastic and len(idle) == 1 else "")
        raise ControlError(
            f"job {self.job} already runs on {where} but not on {', '.join(idle)}: a launch "
            f"would start {'its' if len(idle) == 1 else 'their'} part afresh and set aside "
            f"the checkpoints the running part writes in {self.spec.run_dir}; {add}stop the "
            "job and launch it again")

    def scale(self, add: str | None = None, remove: str | None = None) -> str:
        """Add one host to the running job, or remove one; the others keep running.

        The controller's hosts change once the agent of the host that joins or leaves
        accepted (`settle`): until then, and for good when it refused, they are the
        hosts the job had."""
        self.refresh()
        self.check_scale(add, remove)
        per_host: dict[str, dict[str, Any]] = {}
        if add is not None:
            after = (*self.hosts, add)
            for host in self.hosts:
                per_host[host] = {"job": self.job, "change": "add", "host": add,
                                  "hosts": list(after)}
            per_host[add] = {"job": self.job, "spec": self.spec.for_host(add, after)}
        else:
            after = tuple(h for h in self.hosts if h != remove)
            for host in after:
                per_host[host] = {"job": self.job, "change": "remove", "host": remove,
                                  "hosts": list(after)}
            per_host[str(remove)] = {"job": self.job, "change": "remove", "host": remove,
                                     "hosts": list(after), "leave": True}
        change = MembershipChange(ops.SCALE, {}, after, joins=add)
        return self._each(ops.SCALE, per_host, change=(change, (str(add or remove),)))

    def check_scale(self, add: str | None, remove: str | None) -> None:
        """Refuse (ControlError) a change torchrun could not make; sends nothing."""
        spec = self.spec
        check_elastic(spec)
        if (add is None) == (remove is None):
            raise ControlError("scale takes one host to add or one host to remove")
        if add is not None:
            if add in self.hosts:
                raise ControlError(f"{add} already runs job {self.job}")
            if len(self.hosts) + 1 > int(spec.max_nodes or 0):
                raise ControlError(f"adding {add} would make {len(self.hosts) + 1} nodes, "
                                   f"above the job's nnodes maximum {spec.max_nodes}")
            return
        if remove not in self.hosts:
            raise ControlError(f"{remove} is not one of job {self.job}'s hosts "
                               f"({', '.join(self.hosts)})")  # fmt: skip
        if len(self.hosts) - 1 < int(spec.min_nodes or 0):
            left = counted(len(self.hosts) - 1, "node")
            raise ControlError(f"removing {remove} would leave {left}, "
                               f"below the job's nnodes minimum {spec.min_nodes}")
        if remove == spec.store_host(self.hosts):
            raise ControlError(f"{remove} serves the rendezvous store of job {self.job}: the "
                               "others cannot go on without it; relaunch excluding it instead")

    def sync(self, views: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
        """Adopt the membership the agents report: `views` maps each reachable host to
        its agent's entry for this job (`jobs` op), None where it has none. A member is a
        host whose agent runs its part (not in standby, not excluded) and counts itself
        among the job's hosts. Returns members reported by the agents but not in `views`
        (hosts this controller cannot reach)."""
        def member(host: str) -> bool:
            view = views.get(host)
            if not view:
                return False
            return view.get("state") not in OUTSIDE_STATES and host in (
                view.get("hosts") or (host,))
        members = [h for h in views if member(h)]
        if not members:
            return []
        order = {h: i for i, h in enumerate(dict.fromkeys((*self.spec.hosts,
                                                           *self.spec.spares, *views)))}
        self.hosts = tuple(sorted(members, key=order.__getitem__))
        self.spares = tuple(h for h in self.spec.spares if h not in members and (
            (views.get(h) or {}).get("state") in (None, states.STANDBY, states.STOPPED)))
        reported = {h for h in members for h in (views[h] or {}).get("hosts") or ()}
        return sorted(reported - set(views))

    def pause(self, freeze: bool = False, hold: float = 60.0) -> str:
        if freeze:
            return self._each(ops.PAUSE, {h: {"job": self.job, "freeze": True, "hold": hold}
                                          for h in self.hosts})  # fmt: skip
        per_host = {h: {"job": self.job, "follow": h != self.rank0_host} for h in self.hosts}
        return self._each(ops.PAUSE, per_host)

    def resume(self) -> str:
        return self._each(ops.RESUME, {h: {"job": self.job} for h in self.hosts})

    def relaunch(self, exclude: Iterable[str] = ()) -> str:
        self.refresh()
        excluded = tuple(dict.fromkeys(exclude))
        unknown = [h for h in excluded if h not in self.hosts]
        if unknown:
            raise ControlError(f"cannot exclude {', '.join(unknown)}: not hosts of job "
                               f"{self.job} ({', '.join(self.hosts)})")  # fmt: skip
        remaining = tuple(h for h in self.hosts if h not in excluded)
        if not remaining:
            raise ControlError(f"excluding {', '.join(excluded)} leaves job {self.job} no host")
        per_host: dict[str, dict[str, Any]] = {h: {"job": self.job, "exclude_self": True}
                                               for h in excluded}  # fmt: skip
        for host in remaining:
            spec = self.spec.for_host(host, remaining)
            if host == remaining[0] and self.rank0_host in excluded and spec["rendezvous"][
                    "endpoint"]:
                spec["rendezvous"]["endpoint"] = _move_endpoint(spec["rendezvous"]["endpoint"],
                                                                self.rank0_host, host)
            per_host[host] = {"job": self.job, "spec": spec}
        # Adopted once every remaining host's agent accepted to run the job on exactly
        # these hosts (`settle`); an excluded host that is down cannot answer.
        change = MembershipChange(ops.RELAUNCH, {}, remaining, respec=True)
        return self._each(ops.RELAUNCH, per_host, change=(change, remaining))

    def fork(self, overrides: dict[str, Any], name: str | None = None,
             step: int | None = None) -> Controller:  # fmt: skip
        """Start a copy of the job from a checkpoint with `overrides`; returns its controller.

        Sent is not started: each agent accepts the fork, then copies the checkpoint and
        starts its part, and its `fork` event says whether it did. `last_sent` says what
        was sent ("fork big-fork-1a2b3c sent to gpu1, gpu2 (op …)").

        The name and step are checked here, before anything is sent: the agents would
        refuse them one by one, after some hosts may already have started the fork."""
        self.refresh()
        check_finite("override", overrides)
        problem = None if name is None else name_problem(name)
        if problem is not None:
            raise ControlError(f"fork name: {problem}")
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)
                                 or step < 0):
            raise ControlError(f"fork step must be a step number >= 0, got {step!r}")
        child = self.forked(name or f"{self.job}{FORK_INFIX}{self._new_id()[:6]}")
        per_host = {}
        for host in self.hosts:
            op: dict[str, Any] = {"job": self.job, "name": child.job,
                                  "overrides": dict(overrides),
                                  "spec": child.spec.for_host(host, self.hosts)}  # fmt: skip
            if step is not None:
                op["step"] = step
            per_host[host] = op
        self._each(ops.FORK, per_host, what=f"fork {child.job}")
        return child

    def forked(self, name: str) -> Controller:
        """The controller of this job's fork `name`, as `fork` starts it; sends nothing.

        The fork's spec follows from the parent's (run dir beside it, the next rendezvous
        port, the parent's hosts now), so a fork started earlier, by another cockpit or
        the command line, can be operated without a spec file of its own. One controller
        per fork is kept, so what it learns (a scale, a relaunch) is not forgotten.
        """
        child = self._forks.get(name)
        if child is None:
            run_dir = f"{self.spec.run_dir.rstrip('/').rpartition('/')[0] or '.'}/{name}"
            endpoint = self.spec.rdzv_endpoint
            if endpoint is not None:  # the parent still holds its port
                host, _, port = endpoint.rpartition(":")
                # The next port, or the one below at the top of the range.
                endpoint = f"{host}:{int(port) + 1 if int(port) < 65535 else 65534}"
            spec = dataclasses.replace(self.spec, name=name, run_dir=run_dir,
                                       rdzv_endpoint=endpoint, hosts=self.hosts,
                                       spares=self.spares)  # fmt: skip
            child = self._forks[name] = Controller(spec, self._send, self._new_id)
        return child

    def controller_for(self, job: str | None) -> Controller | None:
        """The controller of `job`: this one (for None too: no job shown yet), a fork of
        this job or of one of its forks named as `fork` names them, or None for a job
        this controller cannot address (another job, a fork given its own name)."""
        if job is None or job == self.job:
            return self
        for child in self._forks.values():
            found = child.controller_for(job) if job.startswith(child.job) else None
            if found is not None:
                return found
        prefix = self.job + FORK_INFIX
        if not job.startswith(prefix):
            return None
        tag, infix, _ = job[len(prefix):].partition(FORK_INFIX)
        if not tag:
            return None
        child = self.forked(prefix + tag)
        return child.controller_for(job) if infix else child

    def adjust(self, **knobs: Any) -> str:
        if not knobs:
            raise ControlError("adjust needs at least one knob, e.g. lr_scale=0.5")
        if "lr_scale" in knobs:
            check_lr_scale(knobs["lr_scale"])
        check_finite("knob", knobs)
        return self._each(ops.ADJUST, {self.rank0_host: {"job": self.job, "knobs": knobs}},
                          what=_adjust_words(knobs))

    def checkpoint_now(self) -> str:
        return self.adjust(checkpoint_now=True)

    def eval_now(self) -> str:
        return self.adjust(eval_now=True)

    def stop(self, grace: float | None = None) -> str:
        extra = {} if grace is None else {"grace": grace}
        return self._each(ops.STOP, {h: {"job": self.job, **extra}
                                     for h in (*self.hosts, *self.spares)})  # fmt: skip

    # -- what will happen ------------------------------------------------------------
    def describe(self, action: str, add: str | None = None, remove: str | None = None) -> str:
        job, hosts, first = self.job, ", ".join(self.hosts), self.rank0_host
        others = [h for h in self.hosts if h != first]
        spares = (f" Spares {', '.join(self.spares)} wait in standby to replace a host "
                  f"excluded as faulty." if self.spares else "")
        nodes = counted(len(self.hosts), "node")
        procs = counted(self.spec.nproc_per_node, "process", "processes")
        texts = {
            ops.LAUNCH: f"Start job {job} with torchrun on {hosts} ({nodes} × {procs}); output "
                        f"and checkpoints in {self.spec.run_dir}.{spares}",
            ops.SCALE: self._describe_scale(add, remove),
            ops.PAUSE: f"Ask rank 0 (wherever torchrun placed it; {first} writes the job's "
                       f"control file) to write a checkpoint at the next step where the ranks "
                       f"agree, then stop job {job} on {hosts}: no job process stays on the "
                       f"GPUs. Steps after that checkpoint are discarded."
                       + (f" {', '.join(others)} {'stops' if len(others) == 1 else 'stop'} "
                          f"when {first}'s part does." if others else ""),
            "freeze": f"Stop every process of job {job} on {hosts} with SIGSTOP (GPU memory "
                      f"stays allocated) until resumed or the hold runs out.",
            ops.RESUME: f"Start job {job} again on {hosts} from its newest valid checkpoint "
                        f"(completion marker and checksum verified; a torn one is skipped).",
            ops.RELAUNCH: f"Stop job {job} now on {hosts} and start it again from its newest "
                          f"valid checkpoint; steps since that checkpoint are lost.",
            ops.FORK: f"Copy job {job}'s newest valid checkpoint into a new run dir next to "
                      f"{self.spec.run_dir} and start a new job from it on {hosts}; job {job} "
                      f"itself is left as it is.",
            ops.ADJUST: f"Write the new setting to job {job}'s control file through {first}; "
                        f"rank 0 applies it at the next step where the ranks agree, without a "
                        f"restart.",
            CHECKPOINT: f"Ask rank 0 of job {job} (through {first}, which writes its "
                        f"control file) to write a checkpoint at the next step where the "
                        f"ranks agree.",
            EVAL: f"Ask job {job} on {first} to evaluate at the next step where the ranks "
                  f"agree.",
            ops.STOP: f"Stop job {job} on {hosts}: SIGTERM, then SIGKILL after "
                      f"{self.spec.stop_grace:g} s. No automatic restart."
                      + (f" Spares {', '.join(self.spares)} leave standby." if self.spares
                         else ""),
        }  # fmt: skip
        try:
            return texts[action]
        except KeyError:
            raise ValueError(f"unknown job operation {action!r}; known: "
                             f"{', '.join(sorted(texts))}") from None  # fmt: skip

    def _describe_scale(self, add: str | None, remove: str | None) -> str:
        job, spec, hosts = self.job, self.spec, ", ".join(self.hosts)
        if not spec.elastic:
            return (f"Job {job} on {hosts} is not elastic (its spec has no nnodes = "
                    "\"MIN:MAX\"): it cannot be scaled; relaunch it on other hosts instead.")
        bounds = f"nnodes {spec.min_nodes}:{spec.max_nodes}"
        if add is not None:
            return (f"Add {add} to job {job}: torchrun starts on {add} with the job's "
                    f"rendezvous ({spec.rdzv_endpoint}). The torchrun processes on {hosts} "
                    f"keep running and admit it at their next membership check; every "
                    f"worker restarts from the newest valid checkpoint, then "
                    f"{counted(len(self.hosts) + 1, 'node')} train ({bounds}). Steps since that "
                    f"checkpoint are trained again.")
        if remove is not None:
            rest = ", ".join(h for h in self.hosts if h != remove) or "no host"
            return (f"Remove {remove} from job {job}: its torchrun and ranks on {remove} "
                    f"are stopped (SIGTERM). The torchrun processes on {rest} keep running; "
                    f"their workers restart in a new rendezvous round from the newest valid "
                    f"checkpoint with {counted(len(self.hosts) - 1, 'node')} ({bounds}).")
        return (f"Add a host to job {job} or remove one of {hosts} ({bounds}); the torchrun "
                f"processes of the others keep running.")

    # -- following what the agents accepted ------------------------------------------
    def settle(self, answers: Mapping[str, tuple[bool, str] | None]) -> list[str]:
        """Adopt the scales and relaunches the agents accepted: `answers` maps op ids
        (`last_ops`' values) to (accepted, what the agent said), as the acks say, or to
        None for an op not answered yet. A change whose deciding hosts
        (`MembershipChange.needs`) all accepted becomes the controller's hosts, and the
        changes sent before it and still waiting are dropped (it was sent from the
        membership they left unconfirmed; adopted late they would undo it). One that any
        of them refused is dropped, and the hosts stay as they were. One some of them
        have not answered yet stays pending: an agent whose link was reconnecting
        answers late, and a later call with its answer adopts the change then. Returns
        the op ids of the changes settled (adopted, refused or superseded)."""
        settled = []
        with self._lock:
            for op_id, change in list(self.pending.items()):
                if op_id not in self.pending:  # superseded by one adopted below
                    continue
                got = [answers.get(i) for i in change.needs.values() if i in answers]
                if any(a is not None and not a[0] for a in got):
                    del self.pending[op_id]
                    settled.append(op_id)
                    continue
                if len(got) < len(change.needs) or not all(a is not None for a in got):
                    continue  # some deciding host has not answered yet
                for earlier in list(self.pending):
                    del self.pending[earlier]
                    settled.append(earlier)
                    if earlier == op_id:
                        break
                self.hosts = change.hosts
                self.spares = tuple(s for s in self.spares if s != change.joins)
                if change.respec:
                    self.spec = dataclasses.replace(self.spec, hosts=change.hosts)
        return settled

    # -- sending ---------------------------------------------------------------------
    def _each(self, op: str, per_host: dict[str, dict[str, Any]],
              what: str | None = None,
              change: tuple[MembershipChange, Iterable[str]] | None = None) -> str:
        """Send `op` to each host; `what` names it in the result and errors (an adjust
        that asks for a checkpoint reads as a checkpoint request, not "adjust").
        `change`: the membership the op makes and the hosts whose acceptance decides it,
        kept pending (`settle`) when the op reached them all."""
        what = what or op
        op_id = self._new_id()
        failed: dict[str, str] = {}
        self.last_ops, self.last_sent = {}, ""
        for host, args in per_host.items():
            try:
                self._send(host, {"op": op, "id": f"{op_id}-{host}", **args})
                self.last_ops[host] = f"{op_id}-{host}"
            except Exception as exc:  # a link that is down must not hide the others
                failed[host] = str(exc) or type(exc).__name__
        sent = [h for h in per_host if h not in failed]
        if change is not None:
            made, deciding = change
            needs = {h: self.last_ops.get(h) for h in deciding}
            if all(needs.values()):  # one it missed cannot accept it: never adopted
                with self._lock:
                    self.pending[op_id] = dataclasses.replace(
                        made, needs={h: str(i) for h, i in needs.items()})
        if failed:
            detail = "; ".join(f"{h}: {why}" for h, why in failed.items())
            raise ControlError(f"{what} of job {self.job} not sent to {', '.join(failed)} "
                               f"({detail})" + (f"; sent to {', '.join(sent)}" if sent
                                                else ""), sent, failed)  # fmt: skip
        self.last_sent = f"{what} sent to {', '.join(sent)} (op {op_id})"
        return self.last_sent


def _adjust_words(knobs: Mapping[str, Any]) -> str:
    """What an adjust asks, as the operator asked it."""
    if set(knobs) == {"checkpoint_now"}:
        return "checkpoint request"
    if set(knobs) == {"eval_now"}:
        return "evaluation request"
    return "adjust (" + ", ".join(f"{k}={v}" for k, v in knobs.items()) + ")"


def check_finite(what: str, values: Mapping[str, Any]) -> None:
    """Refuse NaN and the infinities among values an operation hands the trainer: `nan`
    reads as a number, and a fork or an adjustment made with it turns the weights into
    NaN at its first step."""
    for key, value in values.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ControlError(f"{what} {key}={value}: not a finite number")


def check_elastic(spec: JobSpec) -> None:
    if not spec.elastic:
        raise ControlError(f"job {spec.name} is not elastic: its spec needs nnodes = "
                           f"\"MIN:MAX\" to add or remove hosts")  # fmt: skip


def check_lr_scale(value: Any) -> float:
    """The LR scale the UI allows (LR_SCALE_RANGE), whatever path the knob came by: the
    trainer multiplies its learning rate by it at once, so a negative, NaN or 1e6 factor
    ruins the weights (and every checkpoint after) within steps."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ControlError(f"lr_scale must be a number, got {value!r}")
    low, high = LR_SCALE_RANGE
    if not math.isfinite(value) or not low <= value <= high:
        raise ControlError(f"lr_scale must be a finite factor within {low:g}–{high:g} "
                           f"(1 = as configured), got {value:g}")
    return float(value)


def _move_endpoint(endpoint: str, old_host: str, new_host: str) -> str:
    """Rendezvous endpoint after its host was excluded: same port on the new first host."""
    host, _, port = endpoint.rpartition(":")
    return f"{new_host}:{port}" if host == old_host else endpoint
