"""The job spec's fields as the agent's `launch` op takes them: their defaults, their
least and greatest values and the checks both sides apply.

The cockpit checks the operator's TOML (`cockpit.control.jobspec`) and the agent checks
the JSON again (`agent.job.launch.LaunchSpec`), because it arrives over a channel. Both
read the defaults and bounds here, so a spec that leaves a field out means the same on
both sides and a value one side accepts is never refused by the other.
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, Optional

from agent.wire.causes import (
    CAUSES,
    DATA,
    GPU_FAULT,
    HANG,
    KILLED,
    NCCL,
    OOM,
    UNKNOWN,
    USER_CODE,
)
from agent.wire.op_error import OpError

# An environment variable name, as `[env]` and `resume.env` may set one.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Where `resume.args` puts the checkpoint's path.
CHECKPOINT_FIELD = "{checkpoint}"
# What `override_args` is filled with, by plain string replacement (LaunchSpec.argv).
OVERRIDE_PLACEHOLDERS = ("{key}", "{value}")
# Processes torchrun starts per host: one per GPU, or per CPU for a CPU job. A count past
# any host's is a typo that would fork until the host ran out of memory.
MAX_NPROC_PER_NODE = 1024
# Hosts in one job: as many as a Slurm job's `[launcher] nodes` (cockpit.control.slurm),
# past the largest clusters' node counts.
MAX_NODES = 100000
MAX_NAME = 128  # characters in a job or host name

# A field left out of a spec, by its dotted name (`hang.k` is `k` in `[hang]`). Lists
# are tuples here: callers copy them into their own.
DEFAULTS: Dict[str, Any] = {
    "python": "python3",
    "module": False,
    "args": (),
    "nproc_per_node": 1,
    "nnodes": 1,
    "node_rank": 0,
    "checkpoint_dir": "checkpoints",
    "override_args": ("--set", "{key}={value}"),
    "rendezvous.backend": "c10d",
    "max_restarts": 0,
    "recovery.restart_budget": 10,
    "recovery.backoff": 1.0,  # s, doubled per consecutive failure
    "recovery.backoff_max": 60.0,
    "recovery.exclude_on": (GPU_FAULT,),
    # The job-wide restart budget per cause: at most N restarts for a cause within
    # `recovery.window` seconds, counted over all the job's hosts (one failure that each
    # host restarts from is one restart); past it the job stops and says so instead of
    # restarting in a loop. `[recovery.per_cause]` in a spec sets the causes it names.
    "recovery.window": 3600.0,  # s
    "recovery.per_cause": ((OOM, 3), (GPU_FAULT, 3), (NCCL, 5), (DATA, 3), (USER_CODE, 3),
                           (HANG, 5), (KILLED, 5), (UNKNOWN, 5)),
    "hang.k": 3.0,  # × the median step time
    "hang.floor": 10.0,  # s
    "hang.startup": 600.0,  # s allowed before the first step
    "pg_timeout": 1800.0,  # s
    "pause_timeout": 300.0,  # s
    "stop_grace": 10.0,  # s
}

# The least value of each number, by dotted name (a number not listed: 0).
MINIMUM: Dict[str, float] = {
    "nproc_per_node": 1, "recovery.restart_budget": 0, "recovery.backoff": 0.0,
    "recovery.backoff_max": 0.0, "recovery.window": 1.0, "hang.k": 0.001, "hang.floor": 0.001,
    "hang.startup": 0.001, "pg_timeout": 1.0, "pause_timeout": 0.1, "stop_grace": 0.0,
    "rendezvous.keep_alive": 1,
}

HOUR, DAY = 3600.0, 86400.0
# The greatest value of each number, by dotted name: every number a spec gives is bounded,
# so that none reaches torchrun, the trainer's environment or a timer as one they cannot
# take (Python's waits stop at threading.TIMEOUT_MAX, about 9.2e9 s: `stop_grace = 1e10`
# made the stop's wait raise and SIGKILL was never sent). Each is past what a demanding
# job asks for; docs/control.md lists them.
MAXIMUM: Dict[str, float] = {
    "nproc_per_node": MAX_NPROC_PER_NODE,
    "nnodes": MAX_NODES,  # a fixed size, and MAX of "MIN:MAX"
    # torchrun's own restarts: an elastic job spends one per membership change.
    "max_restarts": 10000,
    # The agent's back-off doubles per failure in a row (backoff × 2**streak, capped by
    # backoff_max), and past 1023 failures that product is no float: the budget, which
    # bounds the streak, stays below. A thousand restarts is long past where a person
    # should look at the job.
    "recovery.restart_budget": 1000,
    "recovery.per_cause": 1000,  # each cause's count
    "recovery.backoff": HOUR,  # the first wait: longer is a stopped job
    "recovery.backoff_max": DAY,  # doubling may wait out a night's outage
    "recovery.window": 7 * DAY,
    "hang.k": 1000.0,  # × the median step time
    "hang.floor": DAY,  # and below pg_timeout (checked)
    "hang.startup": DAY,  # loading, compiling, a first data pass before the first step
    "pg_timeout": DAY,  # no collective waits a day; TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC too
    "pause_timeout": DAY,  # the pause checkpoint of the largest model to slow storage
    # A day, as the daemon's stop op allows (agent.daemon.MAX_STOP_GRACE): a managed
    # job's stop takes the spec's grace where the op names none.
    "stop_grace": DAY,
    # torchrun's rendezvous (elastic jobs): the round's join must complete within its
    # join timeout, 600 s (the agent leaves it at torch's default); the last call and
    # three missed heartbeats (a node counted gone) must end well within it.
    "rendezvous.last_call": 300,
    "rendezvous.keep_alive": 120,
}


def per_cause_problem(cause: Any, count: Any) -> Optional[str]:
    """What is wrong with one `recovery.per_cause` entry (a cause not in agent.wire.causes,
    a count that is not a whole number from 0 to its maximum), or None."""
    if cause not in CAUSES:
        return "unknown cause %r; known: %s" % (cause, ", ".join(CAUSES))
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        return "must be a whole number >= 0, got %r" % (count,)
    most = int(MAXIMUM["recovery.per_cause"])
    if count > most:
        return "must be at most %d, got %d" % (most, count)
    return None


def per_cause_budget(value: Any) -> Dict[str, int]:
    """`recovery.per_cause` over the defaults: {cause: restarts allowed per window}, or
    OpError naming the entry that is wrong (`per_cause_problem`)."""
    budget = dict(DEFAULTS["recovery.per_cause"])
    if value is None:
        return budget
    if not isinstance(value, dict):
        raise OpError("spec field 'recovery.per_cause' must be a table of cause = restarts")
    for cause, count in value.items():
        problem = per_cause_problem(cause, count)
        if problem is not None:
            raise OpError("spec field %r: %s" % ("recovery.per_cause.%s" % cause, problem))
        budget[cause] = count
    return budget


def check_job_name(name: Any, field: str = "name") -> str:
    """A job or host name the agent can make folders and files of, or OpError."""
    if not isinstance(name, str) or not name.strip():
        raise OpError("%s must be a non-empty string" % field)
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in name):
        # A job name is shown in every cockpit and report: no terminal controls in it.
        raise OpError("%s %r has control characters" % (field, name))
    if name in (".", "..") or any(c in name for c in "/\\\0") or name.startswith("-"):
        raise OpError("%s %r cannot name a folder: no '/', '\\', NUL or leading '-'"
                      % (field, name))
    if len(name) > MAX_NAME:
        raise OpError("%s is longer than %d characters" % (field, MAX_NAME))
    return name


def finite(value: Any) -> Optional[float]:
    """The value as a float, or None: nan passes every comparison (a hang limit of nan is
    never reached), and an integer past a float's range (JSON and TOML read any) is none."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def nul_field(value: Any, name: str = "") -> Optional[str]:
    """The field whose text holds a NUL byte, which no path, argument or environment value
    can carry: found here, not as a bare "embedded null byte" when the job starts."""
    if isinstance(value, str):
        return name if "\0" in value else None
    if isinstance(value, list):
        pairs = [(name, item) for item in value]
    elif isinstance(value, dict):
        pairs = [("%s.%s" % (name, key) if name else str(key), item)
                 for key, item in value.items()]
    else:
        return None
    for dotted, item in pairs:
        found = dotted if "\0" in dotted else nul_field(item, dotted)
        if found is not None:
            return found
    return None
