"""One job operation from the command line: connect, send, wait for every host's ack.

The operation goes through the same live session as `cockpit watch` — the records the
hosts stream while it runs (the acks included) land in the job's recording — so the
command line and the UI have one control path. The command returns only when each host
has acknowledged (or refused, or not answered in time), and says which. An ack says what
the agent did with the op, not always its end: a pause then waits for its `pause` event,
a fork for its `fork` event (the checkpoint copied) and an adjust for the trainer's own
ack (applied or refused), each found by the op's id.

(Over 500 lines: the operation and its four waits — streaming, acks, a pause's, a
fork's and an adjust's outcome — read the same session and report in one voice.)

A spec file says which hosts a job started on; a scale operation or a spare's takeover
may have changed that since. Every operation but `launch` therefore first asks the
agents of the spec's hosts and spares (`jobs`) who takes part now, and addresses those.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.wire import ops
from agent.wire.events import CONTROL_ACK, FORK, PAUSE
from agent.wire.protocol import STREAM_HEADER
from cockpit.control.acks import ack_outcome
from cockpit.control.controller import (
    FORK_INFIX,
    ControlError,
    Controller,
    check_elastic,
    missed_hosts_text,
)
from cockpit.control.jobspec import (
    JobSpec,
    JobSpecError,
    load_jobspec,
    name_problem,
    with_inventory_spares,
)
from cockpit.errors import CockpitError
from cockpit.printable import printable
from cockpit.sessions.live import LiveSession
from cockpit.store.queries import StoreReader
from cockpit.transport.inventory import (
    LOCAL_ADDRESS,
    HostSpec,
    Inventory,
    InventoryError,
    load_inventory,
)
from cockpit.transport.link import LinkOptions
from cockpit.transport.states import (
    AUTH_FAILED,
    HOSTKEY_CHANGED,
    HOSTKEY_UNKNOWN,
    STREAMING,
)

# States no retry can fix (a missing agent is pushed, so it is not among them).
_HOPELESS = frozenset({AUTH_FAILED, HOSTKEY_UNKNOWN, HOSTKEY_CHANGED})

ACTIONS = ops.JOB_OPERATIONS
# How many of a job's newest events of one kind are looked through for those of the ops
# just sent: they are among the newest, however long the recording.
_LOOK_BACK = 500
# How a stream header's line starts (`agent.wire.protocol.encode` writes `t` first).
_STREAM_MARK = b'"t":"' + STREAM_HEADER.encode() + b'"'


@dataclass(frozen=True)
class Outcome:
    host: str
    ok: bool
    detail: str


def job_hosts(spec_path: Path, inventory_path: Path | None, extra: Sequence[str] = ()
              ) -> tuple[JobSpec, list[HostSpec]]:  # fmt: skip
    """The checked job spec and the inventory entries of its hosts, its spares (for an
    elastic job that names none: the inventory's `spare = true` hosts) and `extra` hosts
    (the one `scale` adds or removes, those `relaunch` excludes).

    Without an inventory, a host named "local" means this machine's agent.
    """
    inventory: Inventory | None = None
    if inventory_path is not None:
        if not inventory_path.is_file():
            raise CockpitError(f"{inventory_path}: no such inventory file")
        try:
            inventory = load_inventory(inventory_path)
        except InventoryError as exc:
            raise CockpitError(str(exc)) from None
    known = [h.name for h in inventory.hosts] if inventory else ["local"]
    try:
        spec = load_jobspec(spec_path, known_hosts=known)
    except JobSpecError as exc:
        raise CockpitError(str(exc)) from None
    if inventory is None:
        if any(h != "local" for h in extra):
            raise CockpitError(f"no host {', '.join(extra)} without an inventory (--inventory)")
        return spec, [HostSpec(name="local", address=LOCAL_ADDRESS)]
    spec = with_inventory_spares(spec, [h.name for h in inventory.spares])
    by_name = inventory.by_name()
    unknown = [h for h in extra if h not in by_name]
    if unknown:
        raise CockpitError(f"{', '.join(unknown)}: not in the inventory {inventory_path} "
                           f"(known: {', '.join(by_name) or 'none'})")  # fmt: skip
    names = dict.fromkeys((*spec.hosts, *spec.spares, *extra))
    return spec, [by_name[h] for h in names]


def wait_streaming(session: LiveSession, hosts: Sequence[str], timeout: float,
                   optional: Sequence[str] = (), say: Callable[[str], None] | None = None,
                   say_every: float = 10.0) -> dict[str, str]:
    """Block until every host streams; fail early on states only the operator can fix.
    Hosts in `optional` may stay out (a host excluded as broken, a spare that is down):
    returns those that did not connect, each with why.

    Once the required hosts and at least one other stream, an optional host whose
    connection has failed (unreachable, no agent …) is not waited for until the timeout:
    a pause must not wait a minute for a host that is down (its agent follows the others'
    pause by itself, docs/control.md), and the link keeps retrying in the background.

    `say` is told every `say_every` s which hosts are still awaited and why: a command
    that waits a minute in silence reads as hung."""
    started = time.monotonic()
    deadline = started + timeout
    next_say = started + say_every
    while True:
        status = session.fleet.status()
        blocked = {h: status[h] for h in hosts if status[h].state in _HOPELESS}
        if blocked:
            raise CockpitError("; ".join(f"{h}: {s.state}: {s.detail}" for h, s in blocked.items()))
        waiting = [h for h in (*hosts, *optional) if status[h].state != STREAMING]
        if not waiting:
            return {}
        missing = [h for h in waiting if h not in optional]
        settled = not missing and optional and all(
            status[h].failed for h in waiting) and any(
            status[h].state == STREAMING for h in (*hosts, *optional))
        if time.monotonic() > deadline or settled or (not missing and optional and all(
                status[h].state in _HOPELESS for h in waiting)):
            if missing:
                raise CockpitError(
                    f"not connected after {timeout:g} s: "
                    + "; ".join(f"{h} is {status[h].reading()}" for h in missing))
            return {h: status[h].reading() for h in waiting}
        now = time.monotonic()
        if say is not None and now >= next_say:
            next_say = now + say_every
            say("still waiting for " + "; ".join(
                f"{h}: {status[h].reading()}" for h in waiting)
                + f" (retrying; up to {max(0.0, deadline - now):.0f} s more)")
        time.sleep(0.1)


class DaemonWatch:
    """Whether each host's agent daemon runs, as its stream header said on connecting.

    Without a daemon the stream serves the journal but nothing takes the ops: they wait
    in the host's inbox and expire unanswered, so a command would wait its whole ack
    timeout for nothing. The header's `daemon` field says so at once (docs/protocol.md).
    """

    def __init__(self, session: LiveSession) -> None:
        self._lock = threading.Lock()
        self._daemon: dict[str, bool] = {}
        session.add_chunk_tap(self._look)

    def _look(self, host: str, chunk: bytes) -> None:
        # A connection's first line is its header: only a chunk's first line can be one.
        first = chunk[: chunk.find(b"\n") + 1 or len(chunk)]
        if _STREAM_MARK not in first:
            return
        try:
            header = json.loads(first)
        except (ValueError, RecursionError):  # a host's header is untrusted input
            return
        if isinstance(header, dict) and header.get("t") == STREAM_HEADER and isinstance(
                header.get("daemon"), bool):
            with self._lock:
                self._daemon[host] = header["daemon"]

    def without_daemon(self, hosts: Sequence[str], wait: float = 5.0) -> list[str]:
        """Of `hosts` (streaming), those whose header said no daemon runs; a header not
        seen within `wait` s (an agent too old to say) counts as a daemon running."""
        deadline = time.monotonic() + wait
        while True:
            with self._lock:
                known = dict(self._daemon)
            if all(h in known for h in hosts) or time.monotonic() > deadline:
                return [h for h in hosts if known.get(h) is False]
            time.sleep(0.05)


def no_daemon_text(host: HostSpec) -> str:
    return (f"no agent daemon is running on {host.name}: start one there with "
            f"`cockpit-agent run --state-dir {host.state_dir}`")


def _poll_store(session: LiveSession, look: Callable[[StoreReader], dict[str, Any]],
                wanted: int, timeout: float) -> dict[str, Any]:
    """What `look` finds in the store, looked at until it finds `wanted` items or
    `timeout` passes: the writer is flushed on each look, so a record counts once stored."""
    reader = StoreReader(session.store)
    deadline = time.monotonic() + timeout
    found: dict[str, Any] = {}
    while len(found) < wanted and time.monotonic() < deadline:
        time.sleep(0.2)
        session.writer.flush()
        found = look(reader)
    return found


def _collect_acks(session: LiveSession, op_ids: list[str],
                  timeout: float) -> dict[str, dict[str, Any]]:
    """The stored acknowledgements of `op_ids` (id -> ack event), as many as arrive
    within `timeout`."""
    return _poll_store(session, lambda reader: reader.control_acks(op_ids), len(op_ids),
                       timeout)


def wait_acks(session: LiveSession, ops: Mapping[str, str], timeout: float) -> list[Outcome]:
    """Each host's acknowledgement of the op sent to it (ops: host -> op id)."""
    return _ack_outcomes(ops, _collect_acks(session, list(ops.values()), timeout), timeout)


def _ack_outcomes(ops: Mapping[str, str], acks: Mapping[str, Any],
                  timeout: float) -> list[Outcome]:
    """Each host's outcome of the op sent to it, from the agents' acks by op id."""
    outcomes = []
    for host, op_id in ops.items():
        ack = acks.get(op_id)
        if ack is None:
            outcomes.append(Outcome(host, False, f"no acknowledgement within {timeout:g} s: "
                                                  "is the agent daemon running there?"))
            continue
        ok, detail = ack_outcome(ack)
        outcomes.append(Outcome(host, ok, detail))
    return outcomes


def _data(event: Mapping[str, Any]) -> dict[str, Any]:
    data = event.get("data")
    return data if isinstance(data, dict) else {}


def _events_of_ops(reader: StoreReader, kind: str, job: str, ops: Mapping[str, str],
                   since: float) -> dict[str, Any]:
    """Each host's `kind` event of the op sent to it (ops: host -> op id), the first one.

    Agents name the op in the event's `data.id`: a pause or a fork found by its time
    instead (the host's clock against this machine's) is missed on a host whose clock is
    behind, or is an earlier one on a host whose clock is ahead. Only an event without
    `id` (an agent from before it said it) is taken by its time, at or after `since`."""
    hosts = {op_id: host for host, op_id in ops.items()}
    found: dict[str, Any] = {}
    untold: dict[str, Any] = {}
    for e in reader.events(kinds=[kind], job=job, limit=_LOOK_BACK):
        data = _data(e)
        if "id" in data:
            host = hosts.get(data["id"]) if isinstance(data["id"], str) else None
            if host is not None:
                found.setdefault(host, e)
        elif e["host"] in ops and e["ts"] >= since:
            untold.setdefault(e["host"], e)
    return {**untold, **found}


def wait_paused(session: LiveSession, job: str, ops: Mapping[str, str], since: float,
                timeout: float) -> list[Outcome]:
    """Each host's `pause` event of the op sent to it (ops: host -> op id): an accepted
    pause is complete only once the checkpoint is written and the processes are gone,
    which takes until the ranks next agree on a step (the job's control cadence) and the
    save."""
    found = _poll_store(session, lambda reader: _events_of_ops(reader, PAUSE, job, ops, since),
                        len(ops), timeout)
    outcomes = []
    for host in ops:
        event = found.get(host)
        if event is None:
            outcomes.append(Outcome(host, False, f"no pause event within {timeout:g} s: the "
                                                 "job may still be reaching its checkpoint; "
                                                 "the events list shows when it does"))
            continue
        outcomes.append(Outcome(host, bool(_data(event).get("ok")), str(event.get("msg") or "")))
    return outcomes


def wait_forked(session: LiveSession, fork: str, ops: Mapping[str, str], since: float,
                timeout: float) -> list[tuple[Outcome, str]]:
    """Each host's `fork` event of the op sent to it (ops: host -> op id), with the word
    for it: an accepted fork has yet to find and copy its checkpoint (minutes for a large
    model), which can fail after the ack; the event says whether it did."""
    found = _poll_store(session, lambda reader: _events_of_ops(reader, FORK, fork, ops, since),
                        len(ops), timeout)
    outcomes = []
    for host in ops:
        event = found.get(host)
        if event is None:
            outcomes.append((Outcome(host, False, f"no fork event within {timeout:g} s: its "
                                                  "checkpoint may still be being copied; the "
                                                  "events list shows when it is"),
                             "NOT CONFIRMED"))
            continue
        data = _data(event)
        ok = data.get("ok") is True
        detail = str(event.get("msg") or data.get("error") or "")
        outcomes.append((Outcome(host, ok, detail), "forked" if ok else "FORK FAILED"))
    return outcomes


def _adjust_acks(reader: StoreReader, job: str, op_ids: Sequence[str]
                 ) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """The acks of the adjusts `op_ids`: the agent's own (no rank: it wrote the control
    file), and the trainer's (a rank: what it applied or refused), oldest first."""
    wanted = set(op_ids)
    agent: dict[str, Any] = {}
    trainer: dict[str, list[Any]] = {}
    for e in reader.events(kinds=[CONTROL_ACK], job=job, limit=_LOOK_BACK):
        op_id = _data(e).get("id")
        if not isinstance(op_id, str) or op_id not in wanted:
            continue
        if e.get("rank") is None:
            agent.setdefault(op_id, e)
        else:
            trainer.setdefault(op_id, []).append(e)
    return agent, trainer


def _stored(ack: Mapping[str, Any]) -> bool:
    """An adjust the agent kept for the job's next start (no process reads it now)."""
    data = _data(ack)
    return bool(data.get("ok")) and data.get("applies_at") is not None


def wait_adjusted(session: LiveSession, job: str, ops: Mapping[str, str],
                  timeout: float) -> tuple[list[Outcome], list[tuple[Outcome, str]]]:
    """The agents' acks of an adjust (ops: host -> op id), as `wait_acks` gives them, and
    then the trainer's: (each host's ack, [(the trainer's outcome, its word)]).

    The agent's ack says only that it wrote the knobs into the job's control file. The
    trainer (rank 0, on whichever host torchrun placed it) applies them at a step boundary
    (a lasting knob once a step ran with it, a checkpoint once saved) or refuses them (a
    knob its framework adapter does not apply), and says which in its own ack of the same
    op id. Each phase waits up to `timeout`; an adjust the agent kept for the job's next
    start is not waited for (no process reads it now: its ack says when it applies)."""
    op_ids = list(ops.values())

    def agents(reader: StoreReader) -> dict[str, Any]:
        return _adjust_acks(reader, job, op_ids)[0]

    acks = _poll_store(session, agents, len(op_ids), timeout)
    outcomes = _ack_outcomes(ops, acks, timeout)
    waiting = [(o.host, ops[o.host]) for o in outcomes
               if o.ok and not _stored(acks[ops[o.host]])]
    if not waiting:
        return outcomes, []

    def trainers(reader: StoreReader) -> dict[str, Any]:
        return _adjust_acks(reader, job, [op_id for _host, op_id in waiting])[1]

    found = _poll_store(session, trainers, len(waiting), timeout)
    applied: list[tuple[Outcome, str]] = []
    for host, op_id in waiting:
        said = found.get(op_id)
        if not said:
            applied.append((Outcome(host, False, f"no acknowledgement from the trainer within "
                                                 f"{timeout:g} s: it applies a knob at a step "
                                                 "boundary and acknowledges a checkpoint "
                                                 "request once saved; the events list shows "
                                                 "its answer when it comes (--ack-timeout to "
                                                 "wait longer)"), "NOT ACKNOWLEDGED"))
            continue
        for ack in said:
            data = _data(ack)
            refused = data.get("refused")
            ok = data.get("ok") is True and not refused
            word = "applied" if ok else "PARTLY REFUSED" if data.get("ok") is True else "REFUSED"
            where = f"rank {ack.get('rank')}"
            applied.append((Outcome(str(ack.get("host") or host), ok,
                                    f"{where}: {ack.get('msg') or data.get('error') or word}"),
                            word))
    return outcomes, applied


def ask_jobs(session: LiveSession, job: str, hosts: Sequence[str], timeout: float
             ) -> tuple[dict[str, dict[str, Any] | None], list[str]]:
    """Ask each host's agent about `job` (`jobs`): its entry for the job, None where it
    has none, for the hosts that answered; and warnings naming those that did not."""
    ids: dict[str, str] = {}
    warnings = []
    for host in hosts:
        op_id = f"jobs-{uuid.uuid4().hex[:10]}-{host}"
        try:
            session.fleet.send(host, {"op": ops.JOBS, "id": op_id})
            ids[host] = op_id
        except Exception as exc:  # a link that is down: the others still count
            warnings.append(f"{host}: not asked who runs job {job} ({exc})")
    acks = _collect_acks(session, list(ids.values()), timeout)
    views: dict[str, dict[str, Any] | None] = {}
    for host, op_id in ids.items():
        ack = acks.get(op_id)
        if ack is None:
            warnings.append(f"{host}: no answer about job {job} within {timeout:g} s")
            continue
        jobs = (ack["data"] or {}).get("jobs") or []
        views[host] = next((j for j in jobs if isinstance(j, dict)
                            and j.get("job") == job), None)  # fmt: skip
    return views, warnings


def sync_membership(session: LiveSession, controller: Controller, hosts: Sequence[str],
                    timeout: float, action: str = "") -> tuple[list[str], list[str]]:
    """Let the controller adopt who takes part now, as the agents say (`ask_jobs`);
    returns warnings (hosts that did not answer, members out of reach) and the members
    out of reach, which the operation misses."""
    views, warnings = ask_jobs(session, controller.job, hosts, timeout)
    unreached = controller.sync(views)
    warnings += [out_of_reach_text(controller, host, action) for host in unreached]
    return warnings, unreached


def out_of_reach_text(controller: Controller, host: str, action: str = "") -> str:
    """Why a host the agents count among the job's members gets nothing from this command.

    A host of the spec (or a spare) that is merely not connected now is not "neither a
    host nor a spare". Its agent follows a pause or a stop of the others by itself, and
    their resume when it was paused or stopped with them, from the job's shared run dir
    (agent.job.peer_end), which this command cannot confirm; any other operation it does not
    get at all, and `missed_hosts_text` says what to do once
    the host is back."""
    spec = controller.spec
    if host in (*spec.hosts, *spec.spares):
        return (f"{host} takes part in job {controller.job} but is not connected: the "
                f"{action or 'operation'} is not sent there; {missed_hosts_text(action, 1)}")
    return (f"{host} takes part in job {controller.job} but is neither a host nor a spare "
            "of its spec: this command cannot reach it")


def check_fork_target(spec: JobSpec, target: str) -> None:
    """Refuse, before any host is dialled, a `--fork-of-job` that the spec's job cannot
    address: only its forks (named JOB-fork-… by `cockpit fork` or the screen) share
    its hosts and run dir layout, so only they can be operated without a spec file."""
    problem = name_problem(target)
    if problem is not None:  # the agent makes folders and files of a job's name
        raise CockpitError(f"--fork-of-job: {problem}")
    probe = Controller(spec, lambda _host, _op: None)
    if target == spec.name or probe.controller_for(target) is None:
        raise CockpitError(f"--fork-of-job {target}: not a fork of job {spec.name} (its forks "
                           f"are named {spec.name}{FORK_INFIX}…); give that job's own spec "
                           "file instead")


def perform(controller: Controller, action: str, **kw: Any) -> Controller:
    """Send one operation; returns the controller of the job it concerns (a fork's own)."""
    try:
        if action == ops.LAUNCH:
            controller.launch()
        elif action == ops.PAUSE:
            controller.pause(freeze=kw.get("freeze", False), hold=kw.get("hold", 60.0))
        elif action == ops.RESUME:
            controller.resume()
        elif action == ops.RELAUNCH:
            controller.relaunch(exclude=kw.get("exclude", ()))
        elif action == ops.FORK:
            return controller.fork(kw.get("overrides", {}), name=kw.get("name"),
                                   step=kw.get("step"))
        elif action == ops.ADJUST:
            controller.adjust(**kw.get("knobs", {}))
        elif action == ops.STOP:
            controller.stop(grace=kw.get("grace"))
        elif action == ops.SCALE:
            controller.scale(add=kw.get("add"), remove=kw.get("remove"))
        else:
            raise CockpitError(f"unknown operation {action!r}; one of {', '.join(ACTIONS)}")
    except (ControlError, ValueError) as exc:
        raise CockpitError(str(exc)) from None
    return controller


def _as_text(echo: Callable[[str], None]) -> Callable[[str], None]:
    """`echo` of what a line says with no character a terminal would act on."""
    return lambda line: echo(printable(line, multiline=True))


def run_operation(
    action: str,
    spec_path: Path,
    *,
    inventory_path: Path | None,
    store_path: Path | None,
    options: LinkOptions | None = None,
    connect_timeout: float = 60.0,
    ack_timeout: float = 120.0,
    echo: Callable[[str], None] = print,
    **kw: Any,
) -> int:
    """`cockpit ACTION JOB.toml …`: 0 when every host acknowledged, 1 otherwise."""
    # Over 80 lines: one operation in the order its output reads (connect, check, send,
    # acknowledgements), so that every refusal visibly comes before the first op leaves.
    from cockpit.app.paths import default_recording_path

    echo = _as_text(echo)  # its lines quote the hosts: acks, events, link details

    # Hosts beside the spec's: the one a scale adds or removes, and those a relaunch
    # excludes (one added by an earlier scale is not in the spec, and its part must be
    # reached to be stopped); one the inventory does not know is refused before dialling.
    extra = ([h for h in (kw.get("add"), kw.get("remove")) if h] if action == ops.SCALE
             else list(kw.get("exclude", ())) if action == ops.RELAUNCH else [])
    spec, hosts = job_hosts(spec_path, inventory_path, extra)
    target = kw.pop("target", None)
    if target is not None:
        check_fork_target(spec, target)
    if action == ops.SCALE:  # what the spec alone refuses is told before any host is dialled
        try:
            check_elastic(spec)
        except ControlError as exc:
            raise CockpitError(str(exc)) from None
    store_path = store_path or default_recording_path(f"job-{spec.name}")
    names = [h.name for h in hosts]
    # Launching needs every host and spare; later, a host may be out (excluded as broken,
    # a spare that is down): the operation goes to those that take part.
    required = names if action == ops.LAUNCH else [h for h in extra if h == kw.get("add")]
    session = LiveSession(hosts, store_path, options)
    daemons = DaemonWatch(session)
    with session:
        echo(f"connecting to {', '.join(names)} (up to {connect_timeout:g} s) …")
        missing = wait_streaming(session, required, connect_timeout, say=echo,
                                 optional=[h for h in names if h not in required])
        by_name = {h.name: h for h in hosts}
        if missing and all(h in missing for h in names):
            raise CockpitError(
                f"no host of job {spec.name} is connected after {connect_timeout:g} s ("
                + "; ".join(f"{h}: {why}" for h, why in missing.items())
                + f"): nothing was sent; the {action} needs at least one")
        idle = daemons.without_daemon([h for h in names if h not in missing])
        blocked = [h for h in idle if h in required]
        if blocked:
            raise CockpitError("; ".join(no_daemon_text(by_name[h]) for h in blocked)
                               + f". Nothing was sent: {action} needs every host.")
        for host, why in missing.items():
            echo(f"warning: not connected to {host}: {why}")
        for host in idle:
            echo(f"warning: {no_daemon_text(by_name[host])}")
        def send(host: str, op: dict) -> None:
            if host in idle:  # its op would only expire in the inbox, unanswered
                raise ControlError(no_daemon_text(by_name[host]))
            session.fleet.send(host, op)

        controller = Controller(spec, send)
        if target is not None:
            controller = controller.controller_for(target) or controller
        unreached: list[str] = []
        streaming = [h for h in names if h not in missing and h not in idle]
        if action == ops.LAUNCH:
            views, warnings = ask_jobs(session, controller.job, streaming, ack_timeout)
            try:
                controller.check_launch(views)
            except ControlError as exc:
                raise CockpitError(f"{exc}. Nothing was sent.") from None
        else:
            warnings, unreached = sync_membership(session, controller, streaming, ack_timeout,
                                                  action)
        for warning in warnings:
            echo(f"warning: {warning}")
        echo(controller.describe("freeze" if kw.get("freeze") else action,
                                 add=kw.get("add"), remove=kw.get("remove")))
        sent_at = time.time()
        sender = perform(controller, action, **kw)
        sent_ops = dict(controller.last_ops)
        applied: list[tuple[Outcome, str]] = []
        if action == ops.ADJUST:
            outcomes, applied = wait_adjusted(session, controller.job, sent_ops, ack_timeout)
        else:
            outcomes = wait_acks(session, sent_ops, ack_timeout)
        for o in outcomes:
            echo(f"{o.host}: {'ok' if o.ok else 'FAILED'}"
                 + (f" — {o.detail}" if o.detail else ""))
        accepted = {o.host: sent_ops[o.host] for o in outcomes if o.ok}
        # What the trainer did with an adjust: the agent's ack says only that it wrote it.
        for o, word in applied:
            echo(f"{o.host}: {word} — {o.detail}")
            outcomes.append(o)
        if action == ops.PAUSE:
            for o in wait_paused(session, controller.job, accepted, sent_at, ack_timeout):
                echo(f"{o.host}: {'paused' if o.ok else 'NOT PAUSED'} — {o.detail}")
                outcomes.append(o)
        if action == ops.FORK:
            for o, word in wait_forked(session, sender.job, accepted, sent_at, ack_timeout):
                echo(f"{o.host}: {word} — {o.detail}")
                outcomes.append(o)
        # A member the operation never reached still runs its part: not a success.
        for host in unreached:
            echo(f"{host}: NOT SENT — not connected; {missed_hosts_text(action, 1)}")
            outcomes.append(Outcome(host, False, "not connected"))
    failed = [o.host for o in outcomes if not o.ok]
    if action == ops.FORK:
        # The fork is in its run dir once every host copied its checkpoint there (each
        # host's fork event says so); an ack says only that the host took the op.
        if not failed:
            echo(f"fork: job {sender.job} in {sender.spec.run_dir}")
        else:
            echo(f"fork: job {sender.job} not confirmed on {', '.join(dict.fromkeys(failed))} "
                 "(see above)")
    echo(f"recording: {store_path}")
    return 0 if not failed else 1
