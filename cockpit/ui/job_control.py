"""What the job-control keys do with `source.controller`, without any widget code.

The controller is whatever the source attaches (None for a replay or a read-only view).
Destructive operations are described by the controller first, so the confirmation names
exactly what will happen on which hosts. Operator input (LR scale, fork overrides,
hosts to exclude, the host to add or remove) is parsed here, each parser raising
`ValueError` with the reason.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from textual.notifications import SeverityLevel

from agent.wire import ops, states
from cockpit.analysis.op_policy import CHECKPOINT, EVAL, Futile, futile, starts_idle_job
from cockpit.control.controller import LR_SCALE_RANGE, missed_hosts_text
from cockpit.read.source import Controller
from cockpit.transport.states import STALE, STREAMING

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, packaged separately
    import tomli as tomllib

NO_CONTROLLER = "No controllable job is attached (this is a replay / read-only view)"
# A fork is acknowledged as accepted; it exists once each host's agent copied the
# checkpoint and started its part, which its `fork` event says (or why it failed).
FORK_NOT_YET = ("not started yet: each host's agent copies the checkpoint, then starts "
                "its part, and its fork event (events list, a) says whether it did")


@runtime_checkable
class TellsSent(Protocol):
    """A controller that keeps its account of the op it sent last (`Controller.
    last_sent`), for an operation whose method returns something else (a fork: the
    fork's controller)."""

    @property
    def last_sent(self) -> str: ...


def fork(controller: Controller, kwargs: dict[str, Any]) -> object:
    """Send the fork, and say so: what was sent (with its op id), not a job that exists
    (the controller `fork` returns is the one it will have)."""
    result = controller.fork(kwargs.get("overrides", {}))
    sent = controller.last_sent if isinstance(controller, TellsSent) else ""
    if sent:
        return f"{sent}; {FORK_NOT_YET}"
    return result if isinstance(result, str) else f"fork sent; {FORK_NOT_YET}"


@dataclass(frozen=True)
class Operation:
    # What `controller.describe` is asked about: the op it sends (agent.wire.ops), or
    # CHECKPOINT and EVAL (cockpit.analysis.op_policy), adjusts the screen offers as
    # operations of their own.
    name: str
    title: str
    destructive: bool
    # The operator's parameters are of the operation's own types (hosts, overrides, knobs).
    call: Callable[[Controller, dict[str, Any]], object]


OPERATIONS = {
    op.name: op
    for op in (
        Operation(ops.PAUSE, "Pause the job", True, lambda c, kw: c.pause()),
        Operation(ops.RESUME, "Resume the job", False, lambda c, kw: c.resume()),
        Operation(ops.RELAUNCH, "Relaunch the job", True,
                  lambda c, kw: c.relaunch(exclude=kw.get("exclude", ()))),
        Operation(ops.FORK, "Fork the job", True, fork),
        Operation(ops.ADJUST, "Adjust the learning rate", False,
                  lambda c, kw: c.adjust(**kw)),
        Operation(CHECKPOINT, "Checkpoint now", False,
                  lambda c, kw: c.checkpoint_now()),
        Operation(EVAL, "Evaluate now", False, lambda c, kw: c.eval_now()),
        Operation(ops.SCALE, "Scale the job", True,
                  lambda c, kw: c.scale(add=kw.get("add"), remove=kw.get("remove"))),
        # On every host, whatever each one's state: a host that gave up and its peer
        # that keeps restarting into a rendezvous nobody joins are both ended.
        Operation(ops.STOP, "Stop the job", True, lambda c, kw: c.stop()),
    )
}


def plan_text(controller: Controller, op: Operation, kwargs: dict[str, Any]) -> str:
    """The controller's own account of the operation, plus the operator's parameters."""
    if op.name == ops.SCALE:
        return str(controller.describe(ops.SCALE, add=kwargs.get("add"),
                                       remove=kwargs.get("remove")))
    text = str(controller.describe(op.name))
    if kwargs.get("exclude"):
        text += "\nExcluded hosts: " + ", ".join(map(str, kwargs["exclude"]))
    if kwargs.get("overrides"):
        pairs = kwargs["overrides"].items()
        text += "\nOverrides: " + ", ".join(f"{k}={v!r}" for k, v in pairs)
    return text


def refusal(op: str, job: str | None, state: str, eta_note: str | None) -> str | None:
    """Why `op` cannot do anything for a job in `state` (`op_policy.futile`), in the
    operator's words and with the key that does instead, or None: the operator is told
    at once rather than by an acknowledgement that only says it was sent."""
    why = futile(op, state, eta_note)
    if why is Futile.NO_PROCESS:
        shown = eta_note if eta_note and eta_note.startswith(state) else state + (
            f" ({eta_note})" if eta_note and eta_note != state else "")
        return (f"job {job} is {shown}"
                + f": no process to {op}" + ("; resume it first (r)" if state == states.PAUSED
                                             else ""))
    if why is Futile.FINISHED:
        return (f"job {job} finished: resuming it would exit at once; fork it (f) with new "
                "settings to train on")
    if why is Futile.NOTHING_TO_RESUME:
        return f"job {job} is {state}: there is nothing to resume"
    return None


def link_warning(hosts: Iterable[str], links: dict[str, str], op: str = "") -> str:
    """A line for the confirmation when some of the job's hosts cannot be reached now:
    the operation will not get there; their agents follow a pause or a stop of the
    others by themselves (and a resume, when paused or stopped with them), and any other
    operation not at all."""
    out = [f"{h} ({links[h]})" for h in hosts
           if links.get(h, STREAMING) not in (STREAMING, STALE)]
    if not out:
        return ""
    return (f"\nNot reachable now: {', '.join(out)}. The operation cannot be sent there; "
            f"{missed_hosts_text(op, len(out))}.")


def partly_sent_text(op: str, sent: Iterable[str], unsent: Mapping[str, str]) -> str:
    """What an operation that reached some of the job's hosts only did, and what each
    missed host's part does meanwhile: a pause or a stop it follows by itself, through
    the job's shared run dir, and a resume when it was paused or stopped with the
    others; any other operation it never gets."""
    why = "; ".join(f"{host}: {reason}" for host, reason in unsent.items())
    return (f"sent to {', '.join(sent)}; not to {', '.join(unsent)} ({why}): "
            f"{missed_hosts_text(op, len(unsent))}")


def state_warning(name: str, job: str | None, state: str) -> str:
    """A line for the confirmation of starting again a job that is not running: a failed
    one repeats its failure unless its cause was fixed, and a relaunch stops nothing."""
    if not starts_idle_job(name, state):
        return ""
    text = ""
    if name == ops.RELAUNCH:
        text += f"\nJob {job} runs no process now ({state}): nothing is stopped."
    if state == states.FAILED:
        text += (f"\nJob {job} failed and the agent stopped retrying: the same spec fails "
                 "the same way unless its cause is fixed (the job log, L, says what it was; "
                 "a fork with corrected settings, f, is the other way).")
    return text


def not_controlled(shown: str | None, controlled: str) -> str:
    return (f"Job {shown} is on screen, but this cockpit controls job {controlled} and its "
            f"forks only: press j to show job {controlled}, or start the cockpit with "
            f"{shown}'s job spec to control it")


def result_text(op: Operation, result: object) -> str:
    return f"{op.title}: {result}" if result not in (None, "", True) else f"{op.title}: done"


def ack_text(op: Operation, answers: dict[str, tuple[bool, str] | None],
             waited: float, followed: float) -> tuple[str, SeverityLevel]:
    """(text, severity) of the agents' answers to a sent op; no text when every host
    accepted (the "sent" toast said so, and the job's panes show the rest). A silent
    host's answer is still followed for `followed` s (`late_ack_text` says it then)."""
    refused = [f"{host}: {answer[1]}" for host, answer in answers.items()
               if answer is not None and not answer[0]]
    silent = [host for host, answer in answers.items() if answer is None]
    lines = []
    if refused:
        lines.append(f"{op.title}: refused by " + "; ".join(refused))
    if silent:
        lines.append(f"{op.title}: no answer from {', '.join(silent)} within {waited:g} s "
                     "(its link or agent daemon may be down); an answer that comes within "
                     f"{followed / 60:g} min more is told here, and the events list (a) "
                     "shows it whenever it comes")
    return "\n".join(lines), ("warning" if lines else "information")


def late_ack_text(op: Operation, answers: dict[str, tuple[bool, str] | None],
                  after: float) -> tuple[str, SeverityLevel]:
    """(text, severity) of answers that came after the wait, `after` s from the send."""
    said = [f"{host} {'accepted' if answer[0] else 'refused'}"
            + ("" if answer[0] or not answer[1] else f" ({answer[1]})")
            for host, answer in answers.items() if answer is not None]
    refused = any(answer is not None and not answer[0] for answer in answers.values())
    return (f"{op.title}: late answer, {after:.0f} s after it was sent: " + "; ".join(said),
            "warning" if refused else "information")


def parse_lr_scale(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(
            f"{text.strip()!r} is not a number; enter a factor such as 0.5") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError("the LR scale must be a positive, finite factor (1 = as configured)")
    if not LR_SCALE_RANGE[0] <= value <= LR_SCALE_RANGE[1]:
        low, high = LR_SCALE_RANGE
        raise ValueError(f"{value:g} is outside {low:g}–{high:g}: a factor that far from the "
                         "configured schedule wrecks a run within steps (and the checkpoints "
                         "written after it); change the config and relaunch instead")
    return value


def parse_overrides(text: str) -> dict[str, object]:
    """`key=value` pairs separated by commas or newlines; values read as TOML literals
    (numbers, booleans, quoted strings), bare words as strings."""
    overrides: dict[str, object] = {}
    for part in text.replace("\n", ",").split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, raw = part.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not key or not raw:
            raise ValueError(f"{part!r}: write overrides as key=value")
        try:
            overrides[key] = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            overrides[key] = raw
    return overrides


def parse_hosts(text: str, known: Iterable[str]) -> tuple[str, ...]:
    names = tuple(n for n in text.replace(",", " ").split() if n)
    known_set = set(known)
    unknown = [n for n in names if n not in known_set]
    if unknown:
        raise ValueError(f"unknown host(s): {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(known_set)) or 'none'}")
    return names


def parse_exclusions(text: str, known: Iterable[str], members: Iterable[str]
                     ) -> tuple[str, ...]:  # fmt: skip
    """Hosts to leave out of a relaunch: known hosts, and not every host of the job."""
    names = parse_hosts(text, known)
    members = tuple(members)
    if members and set(members) <= set(names):
        raise ValueError(f"excluding {', '.join(members)} leaves the job no host: relaunch "
                         "without exclusions, or add a host first (s)")
    return names


def parse_scale(text: str, members: Iterable[str], known: Iterable[str]) -> dict[str, str]:
    """`+HOST` adds a host (one of `known`, not yet a member), `-HOST` removes a member."""
    entry = text.strip()
    sign, host = entry[:1], entry[1:].strip()
    members_set = set(members)
    if sign not in ("+", "-") or not host or " " in host:
        raise ValueError("write +HOST to add a host or -HOST to remove one")
    if sign == "-":
        if host not in members_set:
            raise ValueError(f"{host} is not one of the job's hosts: "
                             f"{', '.join(sorted(members_set)) or 'none'}")
        return {"remove": host}
    if host in members_set:
        raise ValueError(f"{host} already runs the job")
    known_set = set(known)
    if host not in known_set:
        raise ValueError(f"unknown host {host}; connected: "
                         f"{', '.join(sorted(known_set)) or 'none'}")
    return {"add": host}


def check_scale(controller: Controller, kwargs: dict[str, str]) -> None:
    """The controller's own refusal (below MIN or above MAX nodes, the host serving the
    rendezvous store) reported as an input error, before anything is confirmed."""
    try:
        controller.check_scale(kwargs.get("add"), kwargs.get("remove"))
    except Exception as exc:  # the controller says why in its message
        raise ValueError(str(exc)) from None
