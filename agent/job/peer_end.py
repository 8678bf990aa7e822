"""Tell the other hosts of a multi-host job that this host's part ended, and why.

A torchrun job cannot run with part of its nodes gone. When this host's part ends for
good or for a pause while another host's part goes on, that other part is left behind:

- this host's agent gave up (a launch that cannot start, a repeated out-of-memory, a
  restart budget spent): the others' torchrun waits in the rendezvous for a node that
  will never come (ten minutes by default), fails, is restarted into the same wait, and
  so spends its host's whole restart budget on a job that is already lost, holding the
  GPUs meanwhile;
- the operator paused or stopped the job while another host could not be reached (its
  link down): that host's part fails on the lost peers and restarts into the same wait,
  or, in an elastic job, regroups and trains on alone.

So each agent leaves a marker, `control/JOB.ended/HOST.json`, in the job's shared run dir
(the one every host of a multi-host job reads, docs/control.md) when its part ends that
way; the other hosts' agents look for markers while their part runs or waits to restart,
and end it the same way at once (failed, stopped, or paused at the step and checkpoint
the marker names), saying which host ended and why.

Which markers are an earlier part's is decided without the clocks where it can be. Every
start of a part by the operator (launch, resume, relaunch, fork, a scale that adds a
host) comes from one cockpit operation, sent to each host as `BASE-HOST`: BASE is the
part's *generation*, the same on every host it reached. A restart after a failure keeps
it; a spare that takes over gets it from the excluded host's claim; a restarted agent
reads it back with the job's state; a scale regroups every node, so the hosts it keeps
go on in its generation (agent.job.membership). A marker carries the generation of the part
it ends and counts, at once, for a host whose part began with the same one; it is an
earlier part's, and never counts, for a host that has since been started again. A
marker without one (an older agent's), or a host started without one (an older cockpit,
a hand-made op), or a generation this host never took part in (a start or a scale that
missed this host) falls back to the clocks: such a marker counts only if not older than
this host's latest operator start, less CLOCK_SKEW, and only from SETTLE after that
start, when a host started by the same operation has cleared its own.

A resume is followed the same way, the other way round. A host whose part the operator
resumes leaves `control/JOB.resumed/HOST.json`: the generation it resumed, the one it
resumed from, the hosts of the part. A host whose part ended in that same generation
(paused, stopped or failed with the others, and the resume did not reach it: its link
was down) resumes its part in the new generation as soon as its agent sees the marker;
otherwise the resumed parts would wait for it in the rendezvous until they time out, and
the operator would have to relaunch the whole job. Only the generations judge here, never
the clocks: a marker without them, of a part this host did not end with, of a
generation it already ran, or of a part that has ended again since (the resuming host's
end marker has its generation) is not followed. A host clears its resume marker at every
operator start, and writes it anew after a resume.

A marker of a host that is neither a host nor a spare of the job any more (a relaunch
left it out) is not acted on either; a host clears its own when the operator starts it
again. An elastic job (`nnodes = "MIN:MAX"`) goes on without a host that gave up
(torchrun regroups without it), so only its pauses and stops are followed.

The markers live on a shared filesystem, often a network mount; a hard-mounted NFS
whose server stopped answering blocks every listing, read and write in the kernel until
it is back. `Shared` runs them off the job's thread and waits ANSWER_WITHIN at most, so
the job's recovery loop goes on meanwhile (without the markers).

Over 500 lines because the end markers and the resume markers are one protocol: both are
read and written through the same shared-dir access (`Shared`, which keeps a hung mount
off the job's thread), and the same rules (generations, else the clocks) say whether a
marker counts.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, NamedTuple, Optional, Set, Tuple, TypeVar

from agent.job.generations import Generations, generation
from agent.job.launch import LaunchSpec
from agent.off_thread import OffThread
from agent.wire import atomic, paths, states
from agent.wire.events import PEER_ENDED, SAMPLER_ERROR

if TYPE_CHECKING:
    from agent.job.handle import JobHandle

GAVE_UP, STOPPED, PAUSED = "gave_up", "stopped", "paused"
# When several hosts ended differently, the most final ending is followed.
FINALITY = (GAVE_UP, STOPPED, PAUSED)
CHECK_EVERY = 2.0  # s between looks at the markers (a listing of a small shared dir)
# s after an operator's start before a marker without a generation in common counts: a
# host started by the same operation has cleared its own earlier marker by then. A paused
# host also waits this long after it first sees a stop before following it.
SETTLE = 5.0
# s a marker without a generation in common may predate the operator's start and still
# count: the hosts' clocks differ, and a host that fails to launch gives up at once.
CLOCK_SKEW = 30.0
# s a look at or a write into the shared marker dir may take before the job goes on
# without it: a local or healthy network filesystem answers in milliseconds.
ANSWER_WITHIN = 5.0

T = TypeVar("T")


class PeerEnded(NamedTuple):
    host: str
    why: str  # GAVE_UP, STOPPED or PAUSED
    cause: str
    reason: str
    step: Optional[int]
    checkpoint: Optional[str]
    at: float
    generation: Optional[str] = None  # the operator start that began the part it ends


def applies(spec: LaunchSpec, why: str) -> bool:
    """Whether the other hosts' parts must end too when one ends for `why`."""
    several = spec.nnodes > 1 or len(spec.hosts) > 1
    return several and not (why == GAVE_UP and spec.elastic)


class PeerResumed(NamedTuple):
    host: str
    generation: str  # the operator's resume there
    resumed_from: str  # the generation of the part it resumed
    hosts: Tuple[str, ...]  # the hosts and spares of the part it resumed
    step: Optional[int]
    checkpoint: Optional[str]
    at: float


def marker_dir(spec: LaunchSpec) -> Path:
    return paths.ended_dir(spec.shared_dir, spec.name)


def resumed_dir(spec: LaunchSpec) -> Path:
    return paths.resumed_dir(spec.shared_dir, spec.name)


def _marker(spec: LaunchSpec) -> Path:
    return marker_dir(spec) / ("%s.json" % spec.host)


def _resumed_marker(spec: LaunchSpec) -> Path:
    return resumed_dir(spec) / ("%s.json" % spec.host)


def _write(path: Path, data: dict) -> Optional[str]:
    """Write a marker whole (a reader never sees half of one); the error, if any."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(path, json.dumps(data))
    except OSError as exc:
        return "cannot write %s: %s" % (path, exc)
    return None


def announce(spec: LaunchSpec, why: str, cause: str, reason: str,
             step: Optional[int] = None, checkpoint: Optional[str] = None,
             generation: Optional[str] = None) -> Optional[str]:
    """Leave this host's marker, of the part begun with `generation`; the error, when it
    cannot be written (the caller journals it: the other hosts then find out the slow
    way)."""
    if not spec.host or not applies(spec, why):
        return None
    marker = {"host": spec.host, "why": why, "cause": cause, "reason": reason, "step": step,
              "checkpoint": checkpoint, "at": time.time()}
    if generation is not None:
        marker["generation"] = generation  # absent, not null: as an older agent's reads
    return _write(_marker(spec), marker)


def announce_resumed(spec: LaunchSpec, generation: Optional[str],
                     resumed_from: Optional[str], step: Optional[int] = None,
                     checkpoint: Optional[str] = None) -> Optional[str]:
    """Leave this host's resume marker: the part of generation `resumed_from` goes on as
    `generation` here. Without both (an op of an older cockpit, or by hand) there is
    nothing the others could judge it by, so none is left."""
    if not spec.host or not applies(spec, PAUSED) or not generation or not resumed_from:
        return None
    return _write(_resumed_marker(spec), {
        "host": spec.host, "generation": generation, "resumed_from": resumed_from,
        "hosts": [*spec.hosts, *spec.spares], "step": step, "checkpoint": checkpoint,
        "at": time.time()})


def clear(spec: LaunchSpec) -> None:
    """The operator starts this host's part again: its earlier ending no longer holds,
    nor its earlier resume (a resume writes its marker anew after this)."""
    if spec.host:
        for path in (_marker(spec), _resumed_marker(spec)):
            try:
                path.unlink()
            except OSError:
                pass  # none there, or the dir is gone: nothing to take back


def _read(path: Path) -> PeerEnded:
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    host, why, at, step = data.get("host"), data.get("why"), data.get("at"), data.get("step")
    if not isinstance(host, str) or not host:
        raise ValueError("field 'host' missing or not a string")
    if why not in FINALITY:
        raise ValueError("field 'why' is %r, not one of %s" % (why, ", ".join(FINALITY)))
    if not isinstance(at, (int, float)) or isinstance(at, bool):
        raise ValueError("field 'at' missing or not a number")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
        raise ValueError("field 'step' is not an integer")
    checkpoint, gen = data.get("checkpoint"), data.get("generation")
    return PeerEnded(host, why, str(data.get("cause") or "unknown"),
                     str(data.get("reason") or ""), step,
                     checkpoint if isinstance(checkpoint, str) else None, float(at),
                     gen if isinstance(gen, str) and gen else None)


def _read_resumed(path: Path) -> PeerResumed:
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    fields = {}
    for name in ("host", "generation", "resumed_from"):
        value = data.get(name)
        if not isinstance(value, str) or not value:
            raise ValueError("field %r missing or not a string" % name)
        fields[name] = value
    hosts, at, step = data.get("hosts"), data.get("at"), data.get("step")
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise ValueError("field 'hosts' missing or not a list of names")
    if not isinstance(at, (int, float)) or isinstance(at, bool):
        raise ValueError("field 'at' missing or not a number")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
        raise ValueError("field 'step' is not an integer")
    checkpoint = data.get("checkpoint")
    return PeerResumed(fields["host"], fields["generation"], fields["resumed_from"],
                       tuple(hosts), step, checkpoint if isinstance(checkpoint, str) else None,
                       float(at))


def _listing(folder: Path) -> List[Path]:
    return sorted(folder.glob("*.json"))


M = TypeVar("M")


def _read_others(spec: LaunchSpec, folder: Path, read: Callable[[Path], M]
                 ) -> Tuple[List[M], List[str]]:
    """The other hosts' markers in `folder`, and those that could not be read (path and
    why); a listing that fails raises OSError."""
    markers: List[M] = []
    problems: List[str] = []
    for path in _listing(folder):
        if path.stem == spec.host:
            continue
        try:
            markers.append(read(path))
        except (OSError, ValueError) as exc:
            problems.append("%s: %s" % (path, exc))
    return markers, problems


def peers_ended(spec: LaunchSpec, since: Optional[float],
                generations: Optional[Generations] = None
                ) -> Tuple[List[PeerEnded], List[str]]:
    """The other hosts whose part ended in a way this host's part must follow, the most
    final first: of this part's generation, or, where `generations` cannot tell, at or
    after `since` (None: not yet); and the markers that could not be read (path and why),
    which the caller reports rather than acts on."""
    found: List[PeerEnded] = []
    try:
        peers, problems = _read_others(spec, marker_dir(spec), _read)
    except OSError as exc:
        return [], ["cannot list %s: %s" % (marker_dir(spec), exc)]
    for peer in peers:
        # A host the job no longer has (a relaunch left it out, maybe while it could not
        # be reached to take its marker back) ends nothing of the job any more.
        member = not spec.hosts or peer.host in (*spec.hosts, *spec.spares)
        counts = generations.judge(peer.generation) if generations is not None else None
        if counts is None:
            counts = since is not None and peer.at >= since
        if counts and peer.host != spec.host and member and applies(spec, peer.why):
            found.append(peer)
    found.sort(key=lambda p: (FINALITY.index(p.why), p.at))
    return found, problems


def peers_resumed(spec: LaunchSpec, generations: Generations
                  ) -> Tuple[List[PeerResumed], List[str]]:
    """The other hosts that resumed the part this host's idle part ended in, the earliest
    first, and the markers that could not be read (path and why). Judged by the
    generations alone: resumed from this part's generation, into one this host has not
    run, by a host of the job whose resumed part has not ended since and still counts
    this host among its hosts."""
    current = generations.current
    if current is None:
        return [], []
    folder = resumed_dir(spec)
    try:
        peers, problems = _read_others(spec, folder, _read_resumed)
        folder = marker_dir(spec)
        # An end marker that cannot be read is reported by the look for ends.
        ends, _unread = _read_others(spec, folder, _read)
    except OSError as exc:
        return [], ["cannot list %s: %s" % (folder, exc)]
    ended = {end.host: end.generation for end in ends}  # the generation each host ended
    found: List[PeerResumed] = []
    for peer in peers:
        member = not spec.hosts or peer.host in (*spec.hosts, *spec.spares)
        if (member and peer.host != spec.host and spec.host in peer.hosts
                and peer.resumed_from == current
                and generations.judge(peer.generation) is None
                and (peer.host not in ended or ended[peer.host] != peer.generation)):
            found.append(peer)
    found.sort(key=lambda p: p.at)
    return found, problems


class Shared:
    """The marker dir's file operations, one at a time, each waited for ANSWER_WITHIN at
    most: a filesystem that stopped answering must not stall the job's thread, which
    also watches and restarts its processes. An operation that did not answer goes on
    on a thread of its own; until it returns, no other is started (each would hang as
    well, one more thread at every look), and every call reports no answer at once."""

    def __init__(self, within: float = ANSWER_WITHIN) -> None:
        self.within = within
        self._lock = threading.Lock()
        self._pending: Optional[OffThread] = None

    @property
    def hung(self) -> bool:
        """Whether an operation that did not answer in time is still waiting."""
        pending = self._pending
        return pending is not None and pending.running

    def call(self, what: Callable[[], T]) -> Tuple[bool, Optional[T]]:
        """(True, what returned), or (False, None) when the dir did not answer in time;
        what raised is raised here."""
        with self._lock:
            if self.hung:
                return False, None
            pending = self._pending = OffThread(what, "shared-markers")
            if not pending.wait(self.within):
                return False, None
        return True, pending.result()

    def unanswered(self, spec: LaunchSpec) -> str:
        return "the shared dir %s did not answer within %g s" % (marker_dir(spec), self.within)

    def announce(self, spec: LaunchSpec, why: str, cause: str, reason: str,
                 step: Optional[int] = None, checkpoint: Optional[str] = None,
                 generation: Optional[str] = None) -> Optional[str]:
        """As `announce`. A write that did not answer may still land later, once the dir
        answers again; with its generation it is then an earlier part's to the others."""
        answered, error = self.call(lambda: announce(spec, why, cause, reason, step,
                                                     checkpoint, generation))
        if not answered:
            return "cannot write %s: %s" % (_marker(spec), self.unanswered(spec))
        return error

    def announce_resumed(self, spec: LaunchSpec, generation: Optional[str],
                         resumed_from: Optional[str], step: Optional[int] = None,
                         checkpoint: Optional[str] = None) -> Optional[str]:
        """As `announce_resumed`."""
        answered, error = self.call(lambda: announce_resumed(spec, generation, resumed_from,
                                                             step, checkpoint))
        if not answered:
            return "cannot write %s: %s" % (_resumed_marker(spec), self.unanswered(spec))
        return error

    def look_resumed(self, spec: LaunchSpec, generations: Generations
                     ) -> Optional[Tuple[List[PeerResumed], List[str]]]:
        """As `peers_resumed`; None when the dir did not answer."""
        mine = Generations.restore(generations.state())
        answered, found = self.call(lambda: peers_resumed(spec, mine))
        return found if answered else None

    def clear(self, spec: LaunchSpec) -> bool:
        """As `clear`; False when the dir did not answer (the marker may be left: its
        generation, if it has one, tells the others it is an earlier part's)."""
        return self.call(lambda: clear(spec))[0]

    def look(self, spec: LaunchSpec, since: Optional[float],
             generations: Optional[Generations] = None
             ) -> Optional[Tuple[List[PeerEnded], List[str]]]:
        """As `peers_ended`; None when the dir did not answer."""
        # A copy: a look left hanging must not read what a later operator start changes.
        mine = None if generations is None else Generations.restore(generations.state())
        answered, found = self.call(lambda: peers_ended(spec, since, mine))
        return found if answered else None


class Peers:
    """The other hosts of one multi-host `ManagedJob`, as its part sees them and tells
    them of its own end; runs on the job's thread. It decides which other host's end the
    part follows; what the part then does (its processes stopped or paused, its state)
    stays the job's, as for the operator's own stop or pause."""

    def __init__(self, job: JobHandle) -> None:
        self.job = job
        self.operator_start = time.time()  # the latest launch, resume or relaunch here
        self.generations = Generations()  # of this part, and the parts it left
        self.shared = Shared()  # the marker dir, never waited on for long
        self._stalled: Optional[float] = None  # since when it has not answered
        self._checked = 0.0
        self._problems: Set[str] = set()
        self._stops_seen: Dict[Tuple[str, float], float] = {}  # (host, at): first seen
        self._resumes_checked = 0.0

    def started(self, op_id: object) -> None:
        """The operator starts this host's part again (`op_id`, the op that says so): an
        earlier end of its own is taken back, and only the other hosts' ends of the part
        begun now end it."""
        spec = self.job.spec
        self.operator_start = time.time()
        self.generations.begin(generation(op_id, spec.host))
        self._checked = self.operator_start
        self._stops_seen = {}
        self.shared.clear(spec)  # not answering: the next look says so

    def announce(self, why: str, cause: str, reason: str, step: Optional[int] = None,
                 checkpoint: Optional[str] = None) -> None:
        job = self.job
        error = self.shared.announce(job.spec, why, cause, reason, step, checkpoint,
                                     self.generations.current)
        self._written(error, "ended", "their part goes on until it fails by itself")

    def _written(self, error: Optional[str], what: str, meanwhile: str) -> None:
        """After a marker's write: a dir that did not answer is said now (the next look
        need not say it again), a write that failed is journaled with what it leaves."""
        if self.shared.hung and self._stalled is None:
            self._stalled = time.time()
        if error is not None:
            job = self.job
            job.event(SAMPLER_ERROR, "job %s: cannot tell the job's other hosts that this "
                      "host's part %s (%s); %s" % (job.name, what, error, meanwhile),
                      {"job_state": job.state})

    def to_follow(self, at_once: bool = False) -> Optional[PeerEnded]:
        """The other host whose part's end this part must follow now, said in the journal;
        None when there is none, or no look is due. `at_once`: look now, not only every
        CHECK_EVERY. A marker the generations cannot place counts only from SETTLE after
        the operator's start, when an earlier one may no longer await its host's
        clearing."""
        job = self.job
        if not applies(job.spec, PAUSED):
            return None  # a single host has no other part to follow
        now = time.time()
        if not at_once and now - self._checked < CHECK_EVERY:
            return None
        self._checked = now
        since = (self.operator_start - CLOCK_SKEW
                 if now >= self.operator_start + SETTLE else None)
        looked = self.shared.look(job.spec, since, self.generations)
        if not self._answered(looked is not None):
            return None
        assert looked is not None
        peers, problems = looked
        now = time.time()
        self._report(problems, "ending")
        if job.state == states.PAUSED:
            # Paused, this part follows a stop only (a paused job's processes are gone
            # already), and only one the stop itself has had time to reach here: the
            # operator's stop of the whole job reaches every host at about the same time.
            # Timed from when this host first saw it, on its own clock.
            for p in peers:
                self._stops_seen.setdefault((p.host, p.at), now)
            peers = [p for p in peers if p.why == STOPPED
                     and now - self._stops_seen[(p.host, p.at)] >= SETTLE]
        if not peers:
            return None
        peer = peers[0]
        happened = {
            GAVE_UP: "gave up (%s: %s); this host's part stops, as the job cannot "
                     "run without it" % (peer.cause, peer.reason),
            STOPPED: "was stopped; this host's part, which the stop did not reach, "
                     "stops too",
            PAUSED: "was paused%s; this host's part, which the pause did not reach, "
                    "stops too" % ("" if peer.step is None else " at step %d" % peer.step),
        }[peer.why]
        job.event(PEER_ENDED, "job %s: host %s %s" % (job.name, peer.host, happened),
                  {"host": peer.host, "why": peer.why, "cause": peer.cause,
                    "reason": peer.reason, "step": peer.step, "checkpoint": peer.checkpoint,
                    "at": peer.at, "state": job.state}, step=job.progress.newest_step)
        return peer

    def announce_resumed(self, resumed_from: Optional[str], step: Optional[int],
                         checkpoint: Optional[str]) -> None:
        """Tell the other hosts that this host's part, which ended in generation
        `resumed_from`, goes on in the current one: a host the resume did not reach
        follows it (`resume_to_follow`)."""
        error = self.shared.announce_resumed(self.job.spec, self.generations.current,
                                             resumed_from, step, checkpoint)
        self._written(error, "resumed", "a host the resume did not reach keeps its part as "
                      "it is until it is sent one")

    def resume_to_follow(self) -> Optional[PeerResumed]:
        """The other host whose resume of the part this idle part (paused, stopped,
        failed) belongs to it must follow now; None when there is none, or no look is due
        (every CHECK_EVERY)."""
        job = self.job
        if not applies(job.spec, PAUSED) or self.generations.current is None:
            return None  # a single host, or a part no generation names: nothing to judge by
        now = time.time()
        if now - self._resumes_checked < CHECK_EVERY:
            return None
        self._resumes_checked = now
        looked = self.shared.look_resumed(job.spec, self.generations)
        if not self._answered(looked is not None):
            return None
        assert looked is not None
        peers, problems = looked
        self._report(problems, "resume")
        return peers[0] if peers else None

    def _report(self, problems: List[str], what: str) -> None:
        """Say each marker that cannot be read once, not at every look."""
        job = self.job
        for problem in problems:
            if problem not in self._problems:
                self._problems.add(problem)
                job.event(SAMPLER_ERROR, "job %s: a marker of another host's part's %s "
                          "cannot be read, so it is not acted on: %s"
                          % (job.name, what, problem), {"job_state": job.state})

    def _answered(self, answered: bool) -> bool:
        """Say once that the shared dir stopped answering, and once that it answers
        again: a look every CHECK_EVERY would otherwise say it every time."""
        job = self.job
        if not answered:
            if self._stalled is None:
                self._stalled = time.time() - self.shared.within
                job.event(SAMPLER_ERROR, "job %s: %s (a hung network mount?); until it "
                          "answers, this host's part does not follow the ends of the job's "
                          "other hosts' parts" % (job.name,
                                                   self.shared.unanswered(job.spec)), {
                               "job_state": job.state, "answered": False,
                               "dir": str(marker_dir(job.spec)),
                               "within": self.shared.within})
            return False
        if self._stalled is not None:
            seconds = time.time() - self._stalled
            self._stalled = None
            job.event(SAMPLER_ERROR, "job %s: the shared dir %s answers again, after about "
                      "%.0f s; the ends of the job's other hosts' parts are followed again"
                      % (job.name, marker_dir(job.spec), seconds), {
                           "job_state": job.state, "answered": True,
                           "dir": str(marker_dir(job.spec)),
                           "seconds": round(seconds, 1)})
        return True

    # -- adoption (agent.wire.jobstate) ----------------------------------------------------
    def state(self) -> dict:
        """Kept at the top level of the job's saved state, where older agents saved them
        and newer ones read them."""
        return {"operator_start": self.operator_start,
                "generations": self.generations.state()}

    def restore(self, saved: dict) -> None:
        """As `state` left them in the job's saved state; a state saved by an older agent
        may lack either."""
        started = saved.get("operator_start")
        if isinstance(started, (int, float)) and not isinstance(started, bool):
            self.operator_start = float(started)  # the peers' give-ups it must heed
        self.generations = Generations.restore(saved.get("generations"))
