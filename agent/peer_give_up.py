"""Tell the other hosts of a multi-host job that this host's agent stopped retrying.

A torchrun job of a fixed number of nodes cannot form without every one of them. When
the agent of one host gives up (a launch that cannot start, a repeated out-of-memory, a
restart budget spent), the others' torchrun waits in the rendezvous for a node that will
never come (its join timeout is ten minutes by default), fails, is restarted into the
same wait, and so spends the whole restart budget of its host on a job that is already
lost, while its processes hold the GPUs.

So the agent that gives up leaves a marker, `control/JOB.gave-up/HOST.json`, in the
job's shared run dir (the one every host of a multi-host job reads, docs/control.md);
the other hosts' agents look for markers while their part runs or waits to restart, and
stop it at once, saying which host gave up and why. A marker older than a host's latest
start by the operator (launch, resume, relaunch) belongs to an earlier attempt of the
job and is not acted on; a host clears its own marker when the operator starts it again.

An elastic job (`nnodes = "MIN:MAX"`) goes on without a node: torchrun regroups with the
others, so no marker is acted on there.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import List, NamedTuple, Optional, Tuple

from agent.launch import LaunchSpec

CHECK_EVERY = 2.0  # s between looks at the markers (a listing of a small shared dir)
# s after an operator's start before the first look: a host started by the same operation
# has cleared its own earlier marker by then.
SETTLE = 5.0
# s a marker may predate the operator's start and still count: the hosts' clocks differ,
# and a host that fails to launch gives up within a second of the start.
CLOCK_SKEW = 30.0


class PeerGaveUp(NamedTuple):
    host: str
    cause: str
    reason: str
    at: float


def applies(spec: LaunchSpec) -> bool:
    """Whether the job stands or falls with each of its hosts."""
    return not spec.elastic and spec.nnodes > 1


def marker_dir(spec: LaunchSpec) -> Path:
    return spec.shared_dir / "control" / ("%s.gave-up" % spec.name)


def _marker(spec: LaunchSpec) -> Path:
    return marker_dir(spec) / ("%s.json" % spec.host)


def announce(spec: LaunchSpec, cause: str, reason: str) -> Optional[str]:
    """Leave this host's marker; the error, when it cannot be written (the caller
    journals it: the other hosts then wait for their rendezvous to time out)."""
    if not applies(spec) or not spec.host:
        return None
    path = _marker(spec)
    tmp = path.with_name(".%s.%d.tmp" % (path.name, os.getpid()))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"host": spec.host, "cause": cause, "reason": reason,
                                   "at": time.time()}))
        os.replace(str(tmp), str(path))
    except OSError as exc:
        return "cannot write %s: %s" % (path, exc)
    return None


def clear(spec: LaunchSpec) -> None:
    """The operator starts this host's part again: its earlier give-up no longer holds."""
    if spec.host:
        try:
            _marker(spec).unlink()
        except OSError:
            pass  # none there, or the dir is gone: nothing to take back


def _read(path: Path) -> PeerGaveUp:
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    host, at = data.get("host"), data.get("at")
    if not isinstance(host, str) or not host:
        raise ValueError("field 'host' missing or not a string")
    if not isinstance(at, (int, float)) or isinstance(at, bool):
        raise ValueError("field 'at' missing or not a number")
    return PeerGaveUp(host, str(data.get("cause") or "unknown"),
                      str(data.get("reason") or ""), float(at))


def peers_given_up(spec: LaunchSpec, since: float) -> Tuple[List[PeerGaveUp], List[str]]:
    """The other hosts that gave up at or after `since`, and the markers that could not
    be read (path and why), which the caller reports rather than acts on."""
    found: List[PeerGaveUp] = []
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
        if peer.at >= since and peer.host != spec.host:
            found.append(peer)
    return found, problems
