"""An interruption's cause as the cockpit names it: the agent's (`agent.wire.causes`),
the Slurm watcher's (`cockpit.control.slurm`, made here), or whatever else a host sent,
which is untrusted text. Alert codes and metric labels are built from it, so each has
its rule here: a code is an identifier, a label one of a fixed set."""

from __future__ import annotations

import re

from agent.wire.causes import CAUSES, LAUNCH_FAILED

SCANCEL = "scancel"  # the operator's stop of a Slurm job
SLURM_REQUEUE = "slurm_requeue"  # Slurm put the job back in the queue
_SLURM_PREFIX = "slurm_"
_SLURM_CAUSE = re.compile(r"slurm_[a-z_]{1,24}")
KNOWN_CAUSES = frozenset({*CAUSES, LAUNCH_FAILED, SCANCEL})
# Causes older recordings journaled as an interruption that were the operator's end of the
# job, not a failure (the cockpit's own `scancel` now journals a `job_exited` for a stop):
# read as that end, never counted as an outage.
OPERATOR_END_CAUSES = frozenset({SCANCEL})


def operator_end(cause: object) -> bool:
    """Whether an interruption's cause is really the operator's end of the job."""
    return cause in OPERATOR_END_CAUSES


def slurm_cause(state: str) -> str:
    """A Slurm job's end as a cause: `slurm_node_fail` for NODE_FAIL."""
    return _SLURM_PREFIX + state.lower()


def cause_code(cause: str) -> str:
    """The cause as the part of an alert code it names: the agent's and Slurm's causes
    are words already (`oom`, `slurm_node_fail`); anything else a host sends is made one
    (`rank 11 killed (SIGKILL)` → `rank_11_killed_sigkill`), so a code stays an
    identifier to filter, export and acknowledge by, while the alert's text keeps it."""
    return re.sub(r"[^a-z0-9]+", "_", cause.lower()).strip("_")[:40] or "unknown"


def cause_label(cause: str) -> str:
    """The cause as a metrics label, one of a small fixed set: the agent's causes and
    Slurm's; anything else a host names is "other" (a label's values must not grow with
    what hosts send, nor carry their text)."""
    if cause in KNOWN_CAUSES or _SLURM_CAUSE.fullmatch(cause):
        return cause
    return "other"
