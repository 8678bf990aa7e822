"""One job operation from the command line: connect, send, wait for every host's ack.

The operation goes through the same live session as `cockpit watch` — the records the
hosts stream while it runs (the acks included) land in the job's recording — so the
command line and the UI have one control path. The command returns only when each host
has acknowledged (or refused, or not answered in time), and says which.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.control.controller import ControlError, Controller
from cockpit.control.jobspec import JobSpec, JobSpecError, load_jobspec
from cockpit.errors import CockpitError
from cockpit.live import LiveSession
from cockpit.store.queries import StoreReader
from cockpit.transport.inventory import (
    LOCAL_ADDRESS,
    HostSpec,
    Inventory,
    InventoryError,
    load_inventory,
)
from cockpit.transport.link import LinkOptions
from cockpit.transport.states import AUTH_FAILED, HOSTKEY_CHANGED, HOSTKEY_UNKNOWN, STREAMING

# States no retry can fix (a missing agent is pushed, so it is not among them).
_HOPELESS = frozenset({AUTH_FAILED, HOSTKEY_UNKNOWN, HOSTKEY_CHANGED})

ACTIONS = ("launch", "pause", "resume", "relaunch", "fork", "adjust", "stop")


@dataclass(frozen=True)
class Outcome:
    host: str
    ok: bool
    detail: str


def job_hosts(spec_path: Path, inventory_path: Path | None) -> tuple[JobSpec, list[HostSpec]]:
    """The checked job spec and the inventory entries of its hosts.

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
        return spec, [HostSpec(name="local", address=LOCAL_ADDRESS)]
    by_name = inventory.by_name()
    return spec, [by_name[h] for h in spec.hosts]


def wait_streaming(session: LiveSession, hosts: Sequence[str], timeout: float) -> None:
    """Block until every host streams; fail early on states only the operator can fix."""
    deadline = time.monotonic() + timeout
    while True:
        status = session.fleet.status()
        blocked = {h: status[h] for h in hosts if status[h].state in _HOPELESS}
        if blocked:
            raise CockpitError("; ".join(f"{h}: {s.state}: {s.detail}" for h, s in blocked.items()))
        waiting = [h for h in hosts if status[h].state != STREAMING]
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise CockpitError(
                f"not connected after {timeout:g} s: "
                + "; ".join(f"{h} is {status[h].state}"
                            + (f" ({status[h].detail})" if status[h].detail else "")
                            for h in waiting)
            )
        time.sleep(0.1)


def wait_acks(session: LiveSession, ops: Mapping[str, str], timeout: float) -> list[Outcome]:
    """Each host's acknowledgement of the op sent to it (ops: host -> op id)."""
    reader = StoreReader(session.store)
    deadline = time.monotonic() + timeout
    acks: dict[str, dict[str, Any]] = {}
    while len(acks) < len(ops) and time.monotonic() < deadline:
        time.sleep(0.2)
        session.writer.flush()
        acks = reader.control_acks(list(ops.values()))
    outcomes = []
    for host, op_id in ops.items():
        ack = acks.get(op_id)
        if ack is None:
            outcomes.append(Outcome(host, False, f"no acknowledgement within {timeout:g} s: "
                                                  "is the agent daemon running there?"))
            continue
        data = ack["data"]
        detail = ack.get("msg") or ""
        if not data.get("ok"):
            detail = str(data.get("error") or detail or "refused")
        outcomes.append(Outcome(host, bool(data.get("ok")), detail))
    return outcomes


def perform(controller: Controller, action: str, **kw: Any) -> Controller:
    """Send one operation; returns the controller of the job it concerns (a fork's own)."""
    try:
        if action == "launch":
            controller.launch()
        elif action == "pause":
            controller.pause(freeze=kw.get("freeze", False), hold=kw.get("hold", 60.0))
        elif action == "resume":
            controller.resume()
        elif action == "relaunch":
            controller.relaunch(exclude=kw.get("exclude", ()))
        elif action == "fork":
            return controller.fork(kw.get("overrides", {}), name=kw.get("name"),
                                   step=kw.get("step"))
        elif action == "adjust":
            controller.adjust(**kw.get("knobs", {}))
        elif action == "stop":
            controller.stop(grace=kw.get("grace"))
        else:
            raise CockpitError(f"unknown operation {action!r}; one of {', '.join(ACTIONS)}")
    except (ControlError, ValueError) as exc:
        raise CockpitError(str(exc)) from None
    return controller


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
    from cockpit.live import default_recording_path

    spec, hosts = job_hosts(spec_path, inventory_path)
    store_path = store_path or default_recording_path(f"job-{spec.name}")
    with LiveSession(hosts, store_path, options) as session:
        wait_streaming(session, spec.hosts, connect_timeout)
        controller = Controller(spec, session.fleet.send)
        echo(controller.describe("freeze" if kw.get("freeze") else action))
        sender = perform(controller, action, **kw)
        ops = dict(controller.last_ops)
        outcomes = wait_acks(session, ops, ack_timeout)
    for o in outcomes:
        echo(f"{o.host}: {'ok' if o.ok else 'FAILED'}" + (f" — {o.detail}" if o.detail else ""))
    if action == "fork":
        echo(f"fork: job {sender.job} in {sender.spec.run_dir}")
    echo(f"recording: {store_path}")
    return 0 if all(o.ok for o in outcomes) else 1
