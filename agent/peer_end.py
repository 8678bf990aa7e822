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

A marker older than a host's latest start by the operator (launch, resume, relaunch) is
an earlier attempt's and is not acted on, and so is one of a host that is neither a host
nor a spare of the job any more (a relaunch left it out); a host clears its own when the
operator starts it again. An elastic job (`nnodes = "MIN:MAX"`) goes on without a host
that gave up (torchrun regroups without it), so only its pauses and stops are followed.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import List, NamedTuple, Optional, Tuple

from agent.launch import LaunchSpec

GAVE_UP, STOPPED, PAUSED = "gave_up", "stopped", "paused"
# When several hosts ended differently, the most final ending is followed.
FINALITY = (GAVE_UP, STOPPED, PAUSED)
CHECK_EVERY = 2.0  # s between looks at the markers (a listing of a small shared dir)
# s after an operator's start before the first look: a host started by the same operation
# has cleared its own earlier marker by then.
SETTLE = 5.0
# s a marker may predate the operator's start and still count: the hosts' clocks differ,
# and a host that fails to launch gives up within a second of the start.
CLOCK_SKEW = 30.0


class PeerEnded(NamedTuple):
    host: str
    why: str  # GAVE_UP, STOPPED or PAUSED
    cause: str
    reason: str
    step: Optional[int]
    checkpoint: Optional[str]
    at: float


def applies(spec: LaunchSpec, why: str) -> bool:
    """Whether the other hosts' parts must end too when one ends for `why`."""
    several = spec.nnodes > 1 or len(spec.hosts) > 1
    return several and not (why == GAVE_UP and spec.elastic)


def marker_dir(spec: LaunchSpec) -> Path:
    return spec.shared_dir / "control" / ("%s.ended" % spec.name)


def _marker(spec: LaunchSpec) -> Path:
    return marker_dir(spec) / ("%s.json" % spec.host)


def announce(spec: LaunchSpec, why: str, cause: str, reason: str,
             step: Optional[int] = None, checkpoint: Optional[str] = None) -> Optional[str]:
    """Leave this host's marker; the error, when it cannot be written (the caller
    journals it: the other hosts then find out the slow way)."""
    if not spec.host or not applies(spec, why):
        return None
    path = _marker(spec)
    tmp = path.with_name(".%s.%d.tmp" % (path.name, os.getpid()))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"host": spec.host, "why": why, "cause": cause,
                                   "reason": reason, "step": step, "checkpoint": checkpoint,
                                   "at": time.time()}))
        os.replace(str(tmp), str(path))
    except OSError as exc:
        return "cannot write %s: %s" % (path, exc)
    return None


def clear(spec: LaunchSpec) -> None:
    """The operator starts this host's part again: its earlier ending no longer holds."""
    if spec.host:
        try:
            _marker(spec).unlink()
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
    checkpoint = data.get("checkpoint")
    return PeerEnded(host, why, str(data.get("cause") or "unknown"),
                     str(data.get("reason") or ""), step,
                     checkpoint if isinstance(checkpoint, str) else None, float(at))


def peers_ended(spec: LaunchSpec, since: float) -> Tuple[List[PeerEnded], List[str]]:
    """The other hosts whose part ended at or after `since` in a way this host's part
    must follow, the most final first; and the markers that could not be read (path and
    why), which the caller reports rather than acts on."""
    found: List[PeerEnded] = []
    problems: List[str] = []
    try:
        paths = sorted(marker_dir(spec).glob("*.json"))
    except OSError as exc:
        return [], ["cannot list %s: %s" % (marker_dir(spec), exc)]
    for path in paths:
        if path.stem == spec.host:
            continue
        try:
            peer = _read(path)
        except (OSError, ValueError) as exc:
            problems.append("%s: %s" % (path, exc))
            continue
        # A host the job no longer has (a relaunch left it out, maybe while it could not
        # be reached to take its marker back) ends nothing of the job any more.
        member = not spec.hosts or peer.host in (*spec.hosts, *spec.spares)
        if peer.at >= since and peer.host != spec.host and member and applies(spec, peer.why):
            found.append(peer)
    found.sort(key=lambda p: (FINALITY.index(p.why), p.at))
    return found, problems
