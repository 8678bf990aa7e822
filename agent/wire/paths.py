"""Where things live in a run dir and in the agent's state dir: the one spelling of the
layout that the hook (spool, control file), the agent (logs, markers, claims, inbox) and
the cockpit (a Slurm node's control file) all use.

    RUN_DIR/spool/JOB/rank-R.<id>.ndjson    the ranks' records (agent.hook.spool_writer)
    RUN_DIR/logs/JOB.out, JOB.err           torchrun's output (agent.job.supervisor)
    RUN_DIR/logs/JOB.error.json             torchrun's error file of the failed rank
    RUN_DIR/logs/JOB.status.json            the wrapper's record of torchrun's exit
    RUN_DIR/logs/JOB.journaled.json         how far the journal has the logs
    RUN_DIR/logs/JOB.stacks.N.txt           the ranks' stacks dumped at a hang of attempt N
    RUN_DIR/control/JOB.ndjson              the operator's knobs (agent.hook.control)
    RUN_DIR/control/JOB.acked.json          how many of them rank 0 acknowledged
    SHARED/control/JOB.takeover/SPARE.json  a spare's claim (agent.job.membership)
    SHARED/control/JOB.ended/HOST.json      a host's part ended (agent.job.peer_end)
    SHARED/control/JOB.resumed/HOST.json    a host's part resumed (agent.job.peer_end)
    SHARED/control/JOB.health/HOST.json     a spare's GPU fault history (agent.job.membership)
    SHARED/nodes/HOST/                      a multi-host job's run dir of one host
    STATE_DIR/control/inbox.ndjson          the agent's control inbox
    STATE_DIR/jobs/                         the managed jobs' state (agent.wire.jobstate)
    STATE_DIR/gpu_history.json              this host's GPU faults across runs
                                            (agent.job.gpu_history)

SHARED is the run dir every host of a job sees; RUN_DIR is this host's own (the same
dir for a one-host job).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Union

PathLike = Union[str, "os.PathLike[str]"]

SPOOL = "spool"
LOGS = "logs"
CONTROL = "control"
NODES = "nodes"
JOBS = "jobs"
# The agent's state dir where nothing names another (`cockpit-agent --state-dir`, the
# inventory's `state_dir`), as the host's shell spells it: the daemon and the cockpit that
# streams from it must agree on it, so neither reads an environment the other cannot see.
DEFAULT_STATE_DIR = "~/.local/state/cockpit-agent"
# A rank's spool file, `rank-R.<file_id>.ndjson` (`spool_file`), and the pattern that reads
# its rank (group 1) and file id (group 2) back; an older writer's `rank-R.ndjson` has none.
SPOOL_FILE = re.compile(r"^rank-(\d+)(?:\.([0-9A-Za-z_-]+))?\.ndjson$")
CONTROL_SUFFIX = ".ndjson"
ACKED_SUFFIX = ".acked.json"


def spool_root(run_dir: PathLike) -> Path:
    return Path(run_dir) / SPOOL


def spool_dir(run_dir: PathLike, job: str) -> Path:
    return spool_root(run_dir) / job


def spool_file(spool: PathLike, rank: int, file_id: str) -> Path:
    """In the job's spool dir `spool` (`spool_dir`): the file `file_id` of rank `rank`,
    whose name `SPOOL_FILE` matches."""
    return Path(spool) / ("rank-%d.%s.ndjson" % (rank, file_id))


def logs_dir(run_dir: PathLike) -> Path:
    return Path(run_dir) / LOGS


def stdout_log(run_dir: PathLike, job: str) -> Path:
    return logs_dir(run_dir) / ("%s.out" % job)


def stderr_log(run_dir: PathLike, job: str) -> Path:
    return logs_dir(run_dir) / ("%s.err" % job)


def error_file(run_dir: PathLike, job: str) -> Path:
    return logs_dir(run_dir) / ("%s.error.json" % job)


def status_file(run_dir: PathLike, job: str) -> Path:
    """The wrapper's record of torchrun's exit (agent.job.jobwrap)."""
    return logs_dir(run_dir) / ("%s.status.json" % job)


def journaled_file(run_dir: PathLike, job: str) -> Path:
    """How far into each log file the journal has the output (agent.job.supervisor)."""
    return logs_dir(run_dir) / ("%s.journaled.json" % job)


def stacks_file(run_dir: PathLike, job: str, attempt: int) -> Path:
    return logs_dir(run_dir) / ("%s.stacks.%d.txt" % (job, attempt))


def control_dir(run_dir: PathLike) -> Path:
    return Path(run_dir) / CONTROL


def control_file(run_dir: PathLike, job: str) -> Path:
    return control_dir(run_dir) / (job + CONTROL_SUFFIX)


def acked_file(control: PathLike) -> Path:
    """Beside the control file `control`: how many of its lines rank 0 acknowledged."""
    text = str(control)
    base = text[: -len(CONTROL_SUFFIX)] if text.endswith(CONTROL_SUFFIX) else text
    return Path(base + ACKED_SUFFIX)


def takeover_dir(shared_dir: PathLike, job: str) -> Path:
    return control_dir(shared_dir) / ("%s.takeover" % job)


def ended_dir(shared_dir: PathLike, job: str) -> Path:
    return control_dir(shared_dir) / ("%s.ended" % job)


def resumed_dir(shared_dir: PathLike, job: str) -> Path:
    return control_dir(shared_dir) / ("%s.resumed" % job)


def restarts_dir(shared_dir: PathLike, job: str) -> Path:
    """Each host's restarts of the job, one file per host: the job-wide restart budget
    (agent.job.restart_budget) counts them all."""
    return control_dir(shared_dir) / ("%s.restarts" % job)


def health_dir(shared_dir: PathLike, job: str) -> Path:
    """The spares' GPU fault histories, one file per spare: the host that claims a spare
    takes one with a clean record first (agent.job.membership)."""
    return control_dir(shared_dir) / ("%s.health" % job)


def gpu_history_file(state_dir: PathLike) -> Path:
    """This host's GPU faults across runs (agent.job.gpu_history)."""
    return Path(state_dir) / "gpu_history.json"


def node_dir(shared_dir: PathLike, node: str) -> Path:
    return Path(shared_dir) / NODES / node


def inbox_file(state_dir: PathLike) -> Path:
    return Path(state_dir) / CONTROL / "inbox.ndjson"


def jobs_dir(state_dir: PathLike) -> Path:
    return Path(state_dir) / JOBS
