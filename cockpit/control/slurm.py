"""Jobs on a Slurm cluster: the batch script, its submission, and its life in the queue.

A job spec with `[launcher] kind = "slurm"` is not started by the cockpit's agents over
SSH: Slurm owns allocation, queueing, requeue and cancellation. The cockpit generates
two scripts, kept in `RUN_DIR/slurm/` (and their text in the recording):

- the batch script (`sbatch`): `#SBATCH` options from the spec, the rendezvous on the
  first allocated node (`scontrol show hostnames`, that node's `NodeAddr`), the newest
  valid checkpoint when resuming (a `resume`, or Slurm's own requeue), then one
  `srun --ntasks-per-node=1` step running the node script on every node. A `USR1` to the
  batch shell (`--signal=B:USR1@N` before the time limit or a preemption, or the
  cockpit's pause: `scancel --batch --signal=USR1`) asks the trainer for a checkpoint
  (`checkpoint_now` in the job's control file), waits for its completion marker, then
  ends the step: the allocation is released with the job's state saved. With no
  marker within the spec's `pause_timeout` it ends the step all the same but exits
  `NO_CHECKPOINT_EXIT` (Slurm: FAILED), and writes which it was beside the scripts
  (`pause_files`) for the cockpit's pause to read.
- the node script: this node's run dir (`RUN_DIR/nodes/NODE`, its checkpoint and control
  dirs linked to the shared ones, as `agent.job.launch` does for SSH hosts), then
  `python -m agent run --exit-with-job … -- torchrun …`: the agent samples, journals
  and supervises exactly as on an SSH host, and the step ends with the job.

Every value from the spec reaches the scripts through `shlex.quote` and is validated
first (names against Slurm's own character set, no control character anywhere), so a
hostile job name, partition or extra `#SBATCH` value cannot run anything.

`SlurmJob` runs the Slurm clients through a `Commands` seam (this machine, or a login
node over SSH) and turns what they say into `event` wire records for a pseudo host
(`slurm:JOB`), which the store ingests like any agent's: submitted, pending (with the
reason and `squeue --start`'s estimate), running (nodes, queue wait), finished (state,
exit code, reason, and an interruption with Slurm's state as its cause when the job
did not finish its work), a node drained under the running job, paused, cancelled,
relaunched without bad nodes (`--exclude`), requeued by Slurm.

This module is over 500 lines because the script generator, its validation and the
queue watcher share one set of names and are read together when either changes.
"""

from __future__ import annotations

import json
import re
import shlex
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from agent.wire import launch_reasons, paths
from agent.wire.checkpoints import CHECKPOINT_DIR_ENV, MARKER_SUFFIX, RESUME_ENV
from agent.wire.events import (
    INTERRUPTION,
    JOB_EXITED,
    PAUSE,
    RELAUNCH,
    RESUME,
    SLURM_FINISHED,
    SLURM_NODE_UNAVAILABLE,
    SLURM_PENDING,
    SLURM_RUNNING,
    SLURM_SUBMITTED,
)
from agent.wire.launch_spec import MAX_NODES as LAUNCH_MAX_NODES
from agent.wire.protocol import EVENT, PROTOCOL_VERSION, STREAM_HEADER, encode
from cockpit.analysis.causes import SLURM_REQUEUE, slurm_cause
from cockpit.control.jobspec import JobSpec, JobSpecError
from cockpit.transport.inventory import Inventory
from cockpit.transport.link import LinkOptions
from cockpit.transport.run_command import (
    CommandError,
    CommandResult,
    Commands,
    LocalCommands,
    SshCommands,
)

KIND = "slurm"
# Slurm's names (partition, account, QoS, node): letters, digits and a few marks.
SLURM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$")
# Slurm's time formats: MIN, MIN:SEC, H:MIN:SEC, D-H, D-H:MIN, D-H:MIN:SEC, UNLIMITED.
TIME_LIMIT = re.compile(r"^(UNLIMITED|INFINITE|\d{1,7}(:\d{1,2}){0,2}|\d{1,5}-\d{1,2}"
                        r"(:\d{1,2}){0,2})$")
EXTRA_OPTION = re.compile(r"^--([a-z][a-z0-9-]*)(=(.*))?$", re.S)
# Options the launcher sets itself, or that would change what the job runs.
OWNED_OPTIONS = frozenset({
    "job-name", "nodes", "ntasks-per-node", "ntasks", "signal", "output", "error",
    "partition", "time", "account", "qos", "gpus-per-node", "wrap", "chdir", "export",
    "export-file", "get-user-env", "input", "open-mode", "array", "parsable",
})
MAX_NODES = LAUNCH_MAX_NODES  # a job spec's bound, the agent's too
MAX_GPUS_PER_NODE = 64
DEFAULT_SIGNAL_SECONDS = 120
# squeue/scontrol states.
PENDING, RUNNING = "PENDING", "RUNNING"
ACTIVE_STATES = frozenset({PENDING, RUNNING, "CONFIGURING", "COMPLETING", "SUSPENDED",
                           "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING",
                           "SIGNALING", "STAGE_OUT"})
# Ends Slurm gives a job that did not finish its work: each is an interruption, its
# cause the state (NODE_FAIL: a node died; TIMEOUT: the time limit; PREEMPTED …).
FAILED_ENDS = frozenset({"FAILED", "NODE_FAIL", "TIMEOUT", "PREEMPTED", "OUT_OF_MEMORY",
                         "BOOT_FAIL", "DEADLINE"})
# A person's `scancel` (the cockpit's own stop, or anyone's with the rights to): the
# operator's end of the job, journaled as a stop (`job_exited`, ended for a stop), never
# as a failure; who, where Slurm's accounting says ("CANCELLED by 1000": a uid).
CANCELLED = "CANCELLED"
# The rendezvous port: BASE + job id % SPAN, distinct per job, and below Linux's
# ephemeral ports (32768 on): an outgoing connection of anything on the head node can
# hold a port from that range, and torchrun's store then fails to bind. On the head
# node the batch script still steps past a port some other program holds (RDZV_PROBE).
RDZV_PORT_BASE = 20000
RDZV_PORT_SPAN = 12000
# Run by the batch script's Python with the computed port: prints the first port from
# it on (wrapping within the span) that can be bound as torchrun's store binds it.
RDZV_PROBE = (
    "import socket, sys\n"
    "port, base, span = (int(a) for a in sys.argv[1:4])\n"
    "for i in range(256):\n"
    "    candidate = base + (port - base + i) % span\n"
    "    with socket.socket() as s:\n"
    "        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "        try:\n"
    "            s.bind(('', candidate))\n"
    "        except OSError:\n"
    "            continue\n"
    "    print(candidate)\n"
    "    break\n")
_JOB_ID = re.compile(r"^(\d{1,12})(;.*)?$")
# A pause's files in RUN_DIR/slurm/ (`pause_files`), and the batch shell's words in
# the outcome's first line: a checkpoint newer than the USR1 was found, or none in time.
PAUSE_FILE, SIGNAL_SUFFIX, OUTCOME_SUFFIX = "pause-", ".signal", ".outcome"
OUTCOME_SAVED, OUTCOME_NONE = "saved", "none"
# The batch shell's exit status when no checkpoint came within the spec's pause_timeout
# after a USR1: the step is ended all the same, and Slurm says FAILED (exit 75), never
# COMPLETED as after a checkpoint (75: EX_TEMPFAIL, "try again later").
NO_CHECKPOINT_EXIT = 75


@dataclass(frozen=True)
class SlurmLauncher:
    """The `[launcher]` table of a Slurm job, checked."""

    nodes: int
    partition: str | None = None
    gpus_per_node: int = 0
    time_limit: str | None = None
    account: str | None = None
    qos: str | None = None
    extra_sbatch: tuple[str, ...] = ()
    signal_seconds: int = DEFAULT_SIGNAL_SECONDS
    login: str | None = None  # the inventory host that runs sbatch; None: this machine


def is_slurm(spec: JobSpec) -> bool:
    return spec.launcher.get("kind") == KIND


def _printable(value: str) -> bool:
    return all(c.isprintable() for c in value)


def launcher_of(spec: JobSpec) -> SlurmLauncher:
    """The spec's Slurm launcher, or `JobSpecError` naming the field that is wrong."""
    table = spec.launcher

    def fail(key: str, what: str) -> JobSpecError:
        return JobSpecError(spec.source, None, f"launcher.{key}", what)

    if table.get("kind") != KIND:
        raise fail("kind", f"must be \"{KIND}\" for a Slurm job, got {table.get('kind')!r}")
    if "\\" in spec.run_dir:  # it goes into #SBATCH --output, where '\\' escapes
        raise JobSpecError(spec.source, None, "run_dir", "a Slurm job's run dir may not "
                           "hold a backslash (sbatch's #SBATCH reader takes it as an escape)")
    if spec.elastic:
        raise fail("kind", "an elastic job (nnodes = \"MIN:MAX\") is not offered on Slurm: "
                   "an allocation has a fixed set of nodes; give a fixed node count")
    nodes = table.get("nodes", 1)
    if not 1 <= nodes <= MAX_NODES:
        raise fail("nodes", f"must be between 1 and {MAX_NODES}, got {nodes}")
    gpus = table.get("gpus_per_node", 0)
    if not 0 <= gpus <= MAX_GPUS_PER_NODE:
        raise fail("gpus_per_node", f"must be between 0 and {MAX_GPUS_PER_NODE}, got {gpus}")
    signal_seconds = table.get("signal_seconds", DEFAULT_SIGNAL_SECONDS)
    if not 1 <= signal_seconds <= 65535:  # Slurm's own bound for --signal's @TIME
        raise fail("signal_seconds", f"must be between 1 and 65535, got {signal_seconds}")
    names: dict[str, str | None] = {}
    for key in ("partition", "account", "qos", "login"):
        value = table.get(key)
        if value is not None and not SLURM_NAME.match(value):
            raise fail(key, f"{value!r} is not a Slurm name (letters, digits, '_.+-', "
                       "starting with a letter or digit)")
        names[key] = value
    limit = table.get("time_limit")
    if limit is not None and not TIME_LIMIT.match(limit):
        raise fail("time_limit", f"{limit!r} is not a Slurm time (MIN, H:MM:SS, D-H:MM, "
                   "UNLIMITED…)")
    extras = table.get("extra_sbatch", [])
    for extra in extras:
        problem = extra_problem(extra)
        if problem is not None:
            raise fail("extra_sbatch", problem)
    return SlurmLauncher(nodes=nodes, partition=names["partition"], gpus_per_node=gpus,
                         time_limit=limit, account=names["account"], qos=names["qos"],
                         extra_sbatch=tuple(extras), signal_seconds=signal_seconds,
                         login=names["login"])


def commands_for(launcher: SlurmLauncher, inventory: Inventory | None = None,
                 options: LinkOptions | None = None) -> Commands:
    """Where the Slurm clients run: the `login` host over SSH (the agents' transport,
    host keys and ~/.ssh/config), or this machine when the spec names none."""
    if launcher.login is None:
        return LocalCommands()
    hosts = inventory.by_name() if inventory is not None else {}
    if launcher.login not in hosts:
        raise JobSpecError("<spec>", None, "launcher.login",
                           f"{launcher.login!r} is not in the inventory (known: "
                           f"{', '.join(hosts) or 'none'})")
    return SshCommands(hosts[launcher.login], options)


def extra_problem(extra: Any) -> str | None:
    """What is wrong with one extra `#SBATCH` option, or None."""
    if not isinstance(extra, str):
        return f"each entry must be a string, got {type(extra).__name__}"
    if not _printable(extra):
        return f"{extra!r} holds a control character (a newline would start a new line " \
               "of the script)"
    if "\\" in extra:
        return f"{extra!r} holds a backslash, which sbatch's #SBATCH reader takes as an " \
               "escape (even in quotes): the value would not arrive as written"
    match = EXTRA_OPTION.match(extra)
    if match is None:
        return f"{extra!r} is not one long option (--name or --name=value)"
    if match.group(1) in OWNED_OPTIONS:
        return f"--{match.group(1)} is set by the launcher (or would change what the job " \
               "runs); use the [launcher] keys"
    return None


def _sbatch_line(option: str, value: str | int | None = None) -> str:
    """One `#SBATCH` line; sbatch strips the quotes that `shlex.quote` adds."""
    if value is None:
        return f"#SBATCH {option}"
    text = str(value)
    if not _printable(text) or "\\" in text:
        raise ValueError(f"{option} value {text!r} holds a control character or a "
                         "backslash (an escape to sbatch's #SBATCH reader)")
    return f"#SBATCH {option}={shlex.quote(text)}"


@dataclass(frozen=True)
class ScriptPaths:
    """Where a submission's files live on the cluster (shared storage: the run dir)."""

    run_dir: str
    stamp: str

    @property
    def folder(self) -> str:
        return str(PurePosixPath(self.run_dir) / "slurm")

    @property
    def batch(self) -> str:
        return f"{self.folder}/{self.stamp}.sbatch"

    @property
    def node(self) -> str:
        return f"{self.folder}/{self.stamp}.node.sh"

    @property
    def output(self) -> str:
        return f"{self.folder}/slurm-%j.out"


def checkpoint_dir(spec: JobSpec) -> str:
    if spec.checkpoint_dir.startswith(("/", "~")):
        return spec.checkpoint_dir
    return str(PurePosixPath(spec.run_dir) / spec.checkpoint_dir)


def current_file(spec: JobSpec) -> str:
    return str(PurePosixPath(spec.run_dir) / "slurm" / "current-job")


def pause_files(spec: JobSpec, job_id: str) -> tuple[str, str]:
    """(signal stamp, outcome) of a pause of Slurm job `job_id`, beside the scripts: the
    cockpit writes the stamp just before its USR1 (a checkpoint whose completion marker
    is newer was saved after the signal), the batch shell writes the outcome
    (`OUTCOME_SAVED` and the marker it found, or `OUTCOME_NONE` and the seconds it
    waited)."""
    base = PurePosixPath(spec.run_dir) / "slurm" / f"{PAUSE_FILE}{job_id}"
    return f"{base}{SIGNAL_SUFFIX}", f"{base}{OUTCOME_SUFFIX}"


def control_file(spec: JobSpec) -> str:
    return str(paths.control_file(spec.run_dir, spec.name))


def _q(value: str) -> str:
    """One shell word; `~/…` keeps expanding on the node (as the agent's paths do)."""
    if value == "~":
        return '"$HOME"'
    if value.startswith("~/"):
        return '"$HOME"/' + shlex.quote(value[2:])
    return shlex.quote(value)


def _with_checkpoint(arg: str) -> str:
    """A resume argument as a shell word, `{checkpoint}` replaced by the variable."""
    parts = arg.split("{checkpoint}")
    return f'"${RESUME_ENV}"'.join(shlex.quote(p) if p else "" for p in parts) or "''"


def render_batch(spec: JobSpec, launcher: SlurmLauncher, paths: ScriptPaths,
                 resume: bool, exclude: Sequence[str] = ()) -> str:
    """The batch script `sbatch` runs on the first node of the allocation; `exclude`
    (a relaunch's bad nodes) joins the spec's own `--exclude` in one option. (Over 80
    lines: the script is one text, read top to bottom as bash will run it.)"""
    for node in exclude:
        if not SLURM_NAME.match(node):
            raise ValueError(f"{node!r} is not a Slurm node name")
    lines = ["#!/bin/bash",
             _sbatch_line("--job-name", spec.name),
             _sbatch_line("--nodes", launcher.nodes),
             _sbatch_line("--ntasks-per-node", 1),
             _sbatch_line("--signal", f"B:USR1@{launcher.signal_seconds}"),
             _sbatch_line("--output", paths.output)]
    for option, value in (("--partition", launcher.partition),
                          ("--time", launcher.time_limit),
                          ("--account", launcher.account), ("--qos", launcher.qos)):
        if value is not None:
            lines.append(_sbatch_line(option, value))
    if launcher.gpus_per_node:
        lines.append(_sbatch_line("--gpus-per-node", launcher.gpus_per_node))
    excluded: list[str] = []
    for extra in launcher.extra_sbatch:
        name, _, value = extra.partition("=")
        if exclude and name == "--exclude":
            excluded += [v for v in value.split(",") if v]
            continue
        lines.append(_sbatch_line(name, value) if "=" in extra else _sbatch_line(name))
    if exclude:
        excluded += [n for n in exclude if n not in excluded]
        lines.append(_sbatch_line("--exclude", ",".join(excluded)))
    ckpt, control = checkpoint_dir(spec), control_file(spec)
    wait_s = max(1, round(spec.pause_timeout))
    newest = ("import sys; from pathlib import Path; from agent.wire.checkpoints import "
              "newest_valid; c, _ = newest_valid(Path(sys.argv[1])); "
              "print(c.path if c else '')")
    lines += [
        "# Generated by the training cockpit. Every value above and below was quoted",
        "# (shlex) when it was written: none of it is shell syntax.",
        "set -u",
        *(f"export {key}={_q(value)}" for key, value in sorted(spec.env.items())),
        f"export {CHECKPOINT_DIR_ENV}={_q(ckpt)}",
        "export PYTHONUNBUFFERED=1",
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "addr=$(scontrol show node \"$head\" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p'"
        " | head -n 1)",
        'export COCKPIT_SLURM_HEAD="$head"',
        f"port=$(( {RDZV_PORT_BASE} + SLURM_JOB_ID % {RDZV_PORT_SPAN} ))",
        # The batch script runs on the allocation's first node, the rendezvous host.
        f"free=$({_q(spec.python)} -c {shlex.quote(RDZV_PROBE)} \"$port\" "
        f"{RDZV_PORT_BASE} {RDZV_PORT_SPAN} 2>/dev/null)",
        'case "$free" in ""|*[!0-9]*) ;; *) port="$free" ;; esac',
        'export COCKPIT_SLURM_RDZV="${addr:-$head}:$port"',
        f"resume={1 if resume else 0}",
        f"unset {RESUME_ENV}",
        'if [ "$resume" = 1 ] || [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then',
        f"  found=$({_q(spec.python)} -c {shlex.quote(newest)} {_q(ckpt)})",
        f'  if [ -n "$found" ]; then export {RESUME_ENV}="$found"; fi',
        "fi",
        'echo "cockpit: slurm job $SLURM_JOB_ID on $SLURM_JOB_NODELIST (restart '
        '${SLURM_RESTART_COUNT:-0}), rendezvous $COCKPIT_SLURM_RDZV, resume from '
        f'${{{RESUME_ENV}:-nothing}}"',
        "step=",
        # Where the batch shell says what its USR1 came to (`PauseOutcome` reads it).
        f'outcome={_q(str(PurePosixPath(spec.run_dir) / "slurm" / PAUSE_FILE))}'
        f'"$SLURM_JOB_ID"{OUTCOME_SUFFIX}',
        "checkpoint_then_end() {",
        '  echo "cockpit: USR1: checkpoint, then end the allocation"',
        '  stamp=$(mktemp)',
        f"  mkdir -p {_q(str(PurePosixPath(control).parent))}",
        "  printf '{\"id\":\"slurm-%s-usr1-%s\",\"ts\":%s,\"knobs\":{\"checkpoint_now\":true}}"
        f"\\n' \"$SLURM_JOB_ID\" \"$SECONDS\" \"$(date +%s)\" >> {_q(control)}",
        # As long as a pause waits for its checkpoint (the spec's pause_timeout).
        f"  deadline=$((SECONDS + {wait_s}))",
        "  saved=",
        f"  until saved=$(find -L {_q(ckpt)} -name '*.done' -newer \"$stamp\" -print "
        "-quit 2>/dev/null); [ -n \"$saved\" ]; do",
        '    if [ "$SECONDS" -ge "$deadline" ]; then break; fi',
        "    sleep 0.5",
        "  done",
        '  rm -f "$stamp"',
        # "saved" only when a completion marker newer than the signal was found; else
        # the step still ends (the time limit is near, or the operator wants the nodes
        # back) but the job ends with NO_CHECKPOINT_EXIT, never as a clean COMPLETED.
        '  if [ -n "$saved" ]; then',
        '    echo "cockpit: checkpoint saved ($saved); ending the job step"',
        f"    printf '{OUTCOME_SAVED}\\n%s\\n' \"$saved\" > \"$outcome\" 2>/dev/null",
        "    code=0",
        "  else",
        f'    echo "cockpit: no checkpoint within {wait_s} s of the USR1; ending the job '
        f'step without one (exit {NO_CHECKPOINT_EXIT})"',
        f"    printf '{OUTCOME_NONE}\\n{wait_s}\\n' > \"$outcome\" 2>/dev/null",
        f"    code={NO_CHECKPOINT_EXIT}",
        "  fi",
        '  if [ -n "$step" ]; then kill -TERM "$step" 2>/dev/null; wait "$step"; fi',
        '  exit "$code"',
        "}",
        "trap checkpoint_then_end USR1",
        f"srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash {_q(paths.node)} &",
        "step=$!",
        'wait "$step"',
        "rc=$?",
        'echo "cockpit: job step ended with status $rc"',
        'exit "$rc"',
    ]
    return "\n".join(lines) + "\n"


def render_node(spec: JobSpec, launcher: SlurmLauncher) -> str:
    """The script `srun` runs once on every node: the agent, supervising torchrun."""
    shared = spec.run_dir
    ckpt = checkpoint_dir(spec)
    links = [f'link {_q(shared)}/{paths.CONTROL} "$mine"/{paths.CONTROL}']
    if not spec.checkpoint_dir.startswith(("/", "~")):
        links.append(f'link {_q(ckpt)} "$mine"/{_q(spec.checkpoint_dir)}')
    torchrun = [_q(spec.python), "-m", "torch.distributed.run",
                '--nnodes "$SLURM_JOB_NUM_NODES"', f"--nproc-per-node {spec.nproc_per_node}",
                f"--max-restarts {spec.max_restarts}", "--rdzv-backend c10d",
                '--rdzv-endpoint "$COCKPIT_SLURM_RDZV"',
                f'--rdzv-id {_q(spec.name)}-"$SLURM_JOB_ID"', '--rdzv-conf "is_host=$is_host"']
    if spec.module:
        torchrun.append("--module")
    torchrun += [_q(spec.script), *(_q(a) for a in spec.args), '"${resume[@]}"']
    agent = [_q(spec.python), "-m", "agent", "run", "--state-dir", '"$shared"/agents/"$node"',
             "--run-dir", '"$mine"', "--job", _q(spec.name),
             "--stop-grace", f"{max(spec.stop_grace, 0.5):g}", "--exit-with-job", "--"]
    resume_args = " ".join(_with_checkpoint(a) for a in spec.resume_args)
    lines = [
        "#!/bin/bash",
        "# Generated by the training cockpit: runs once on each node of the Slurm job",
        "# (srun --ntasks-per-node=1). Every value was quoted (shlex) when written.",
        "set -u",
        'node="${SLURMD_NODENAME:?not started by srun}"',
        f"shared={_q(shared)}",
        f'mine="$shared/{paths.NODES}/$node"',  # agent.wire.paths.node_dir
        f'mkdir -p "$mine" "$shared/{paths.CONTROL}" "$shared/agents" {_q(ckpt)}',
        'link() { if [ -L "$2" ] || [ ! -e "$2" ]; then ln -sfn "$1" "$2"; fi; }',
        *links,
        'is_host=0; if [ "$node" = "$COCKPIT_SLURM_HEAD" ]; then is_host=1; fi',
        "resume=()",
        f'if [ -n "${{{RESUME_ENV}:-}}" ]; then resume=({resume_args}); fi',
    ]
    if spec.resume_env and spec.resume_env != RESUME_ENV:
        lines.append(f'if [ -n "${{{RESUME_ENV}:-}}" ]; then export '
                     f'{spec.resume_env}="${RESUME_ENV}"; fi')
    if spec.workdir:
        lines.append(f"cd {_q(spec.workdir)} || exit 1")
    lines.append("exec " + " ".join(agent + torchrun))
    return "\n".join(lines) + "\n"


@dataclass
class QueueState:
    """What Slurm says about a job at one look."""

    job_id: str
    state: str
    reason: str = ""
    nodes: str = ""
    partition: str = ""
    submit_time: str = ""
    start_time: str = ""
    end_time: str = ""
    exit_code: str = ""
    restarts: int = 0
    estimate: str = ""  # squeue --start, while pending
    # Who said it: scontrol; sacct (accounting) or jobcomp (the completion record of
    # `JobCompType=jobcomp/filetxt`) once slurmctld forgot the job; none when no one knew.
    source: str = "scontrol"
    cancelled_by: str = ""  # sacct's "CANCELLED by 1000": who (a uid) cancelled it

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def elapsed(self) -> float | None:
        """Seconds the job ran (start to end), once it ended."""
        start, end = _slurm_time(self.start_time), _slurm_time(self.end_time)
        if self.active or start is None or end is None or end < start:
            return None
        return end - start


def parse_scontrol(text: str) -> dict[str, str]:
    """`scontrol show job -o ID`'s KEY=VALUE words (values without spaces but Reason's
    may hold some: a word without '=' continues the value before it)."""
    fields: dict[str, str] = {}
    last = None
    for word in text.split():
        key, eq, value = word.partition("=")
        if eq and key and key.replace("/", "").replace(":", "").isalnum():
            fields[key], last = value, key
        elif last is not None:
            fields[last] += " " + word
    return fields


def _slurm_time(text: str) -> float | None:
    """Seconds since the epoch of a Slurm time (local time, YYYY-MM-DDTHH:MM:SS)."""
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def _step_in_name(path: str) -> int | None:
    """The last number in a checkpoint's (or its marker's) name, as the agent reads a
    step from a name when the marker gives none."""
    numbers = re.findall(r"\d+", PurePosixPath(path).name)
    return int(numbers[-1]) if numbers else None


def marker_step(checkpoint: str, marker_text: str) -> int | None:
    """A checkpoint's step: its completion marker's `step`, else its name's."""
    try:
        marker = json.loads(marker_text)
    except ValueError:
        marker = None
    step = marker.get("step") if isinstance(marker, dict) else None
    if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
        return step
    return _step_in_name(checkpoint)


def _no_nodes(nodes: str) -> bool:
    """Whether Slurm's node list names none (scontrol's "(null)", sacct's "None
    assigned")."""
    return nodes.strip() in ("", "(null)", "None", "None assigned")


@dataclass(frozen=True)
class PauseOutcome:
    """What a pause came to: Slurm's look at the ended job and whether a checkpoint
    newer than the USR1 was saved (`ok`; its path and step, where known)."""

    state: QueueState
    ok: bool
    how: str  # "usr1": the batch shell was signalled; "scancel": the job was pending
    checkpoint: str | None = None
    step: int | None = None
    why: str = ""  # why nothing was checkpointed, when not `ok`

    def describe(self) -> str:
        """What happened, in one line: the command's output, the screen's toast and the
        end event's message."""
        s = self.state
        if self.how == "scancel":
            if _no_nodes(s.nodes):
                return (f"Slurm job {s.job_id} was cancelled before it started "
                        f"({s.state}): nothing was checkpointed")
            return (f"Slurm job {s.job_id} was cancelled as it started on {s.nodes} "
                    f"({s.state}): nothing was checkpointed")
        released = f"; its allocation ({'none' if _no_nodes(s.nodes) else s.nodes}) " \
                   "is released"
        if self.ok:
            at = f" at step {self.step}" if self.step is not None else ""
            return f"Slurm job {s.job_id} checkpointed{at} and ended ({s.state}){released}"
        return (f"Slurm job {s.job_id} ended ({s.state}) without a checkpoint: {self.why}"
                f"{released}")

    def data(self) -> dict[str, Any]:
        """The end event's data (`ok`: the job is paused, as `cockpit.analysis.lifecycle`
        reads a pause event)."""
        data: dict[str, Any] = {"how": self.how, "ok": self.ok, "state": self.state.state,
                                "nodes": self.state.nodes,
                                "exit_code": self.state.exit_code,
                                "checkpoint": self.checkpoint, "step": self.step}
        if not self.ok:
            data["error"] = self.why
        return data


class SlurmError(RuntimeError):
    """A Slurm command failed; the message says which and what it printed."""


@dataclass
class SlurmJob:
    """One cockpit job on Slurm, across its submissions (a resume is a new Slurm job).

    `emit(host, chunk)` receives the wire lines of every event (a store's `ingest`, or a
    live session's writer); `next_seq` continues the pseudo host's numbering (the store's
    high-water mark for it, when the job was recorded before)."""

    spec: JobSpec
    commands: Commands
    emit: Callable[[str, bytes], Any] = lambda host, chunk: None
    next_seq: int = 1
    job_id: str | None = None
    submissions: list[str] = field(default_factory=list)
    last: QueueState | None = None
    launcher: SlurmLauncher = field(init=False)

    def __post_init__(self) -> None:
        self.launcher = launcher_of(self.spec)
        self._sent_header = False
        # The operator's own pause/stop is under way: the job's end is no interruption.
        self._ending = False
        # ((job id, Slurm's node list), node names): a requeued job keeps its id but
        # may start on other nodes.
        self._allocated: tuple[tuple[str, str], tuple[str, ...]] | None = None
        self._unavailable: dict[str, tuple[str, str]] = {}  # node -> (state, reason)
        # Held by a watcher's look and by a screen's control, which share this object
        # (one numbering of its events): never one inside the other's half-done poll.
        self.lock = threading.RLock()
        self._jobcomp: tuple[str | None, str] | None = None  # (file, why none)
        # Set when the cockpit closes (`abandon`): a control waiting on Slurm (a pause's
        # checkpoint, a stop's end) gives up at once rather than hold the exit for minutes.
        self.closing = threading.Event()

    def abandon(self) -> None:
        """The cockpit is closing: stop waiting on Slurm; the job goes on as Slurm has it."""
        self.closing.set()

    @property
    def host(self) -> str:
        return f"slurm:{self.spec.name}"

    # -- records ---------------------------------------------------------------------

    def event(self, kind: str, msg: str, **data: Any) -> dict[str, Any]:
        """One `event` record of this job, emitted as a wire line at once."""
        data = {"slurm_job_id": self.job_id, **data}
        fields = {"kind": kind, "job": self.spec.name, "rank": None, "step": None,
                  "msg": msg, "data": data}
        chunk = b""
        if not self._sent_header:
            chunk += encode(STREAM_HEADER, 0, {
                "protocol": PROTOCOL_VERSION, "agent_version": "cockpit-slurm",
                "journal_id": f"slurm-{self.spec.name}", "from": self.next_seq - 1,
                "first": 1, "head": self.next_seq})
            self._sent_header = True
        chunk += encode(EVENT, self.next_seq, fields)
        self.next_seq += 1
        self.emit(self.host, chunk)
        return fields

    # -- commands --------------------------------------------------------------------

    def _run(self, argv: Sequence[str], stdin: bytes | None = None) -> CommandResult:
        try:
            done = self.commands.run(argv, stdin=stdin)
        except CommandError as exc:
            raise SlurmError(str(exc)) from exc
        if done.dropped:
            # What was kept ends mid-line: read as the whole answer it would misstate
            # the job (a state, an id, a node list cut short).
            raise SlurmError(f"{done.describe()}: too much output to read as an answer")
        return done

    def _must(self, argv: Sequence[str], stdin: bytes | None = None) -> CommandResult:
        done = self._run(argv, stdin)
        if not done.ok:
            raise SlurmError(done.describe())
        return done

    def _write(self, path: str, text: str) -> None:
        # Whole or not at all: another cockpit reading `current-job` meanwhile (attach)
        # must never find it empty.
        folder = str(PurePosixPath(path).parent)
        self._must(["sh", "-c", 'mkdir -p "$1" && cat > "$2.$$.tmp" && mv -f "$2.$$.tmp" "$2"',
                    "sh", folder, path], stdin=text.encode("utf-8"))

    def submit(self, resume: bool = False, exclude: Sequence[str] = ()) -> str:
        """Write the scripts beside the run and `sbatch` them; returns the Slurm job id."""
        stamp = f"{self.spec.name}-{time.strftime('%Y%m%d-%H%M%S')}-{len(self.submissions) + 1}"
        paths = ScriptPaths(self.spec.run_dir, stamp)
        try:
            batch = render_batch(self.spec, self.launcher, paths, resume, exclude)
        except ValueError as exc:
            raise SlurmError(str(exc)) from None
        node = render_node(self.spec, self.launcher)
        self._write(paths.node, node)
        self._write(paths.batch, batch)
        done = self._must(["sbatch", "--parsable", paths.batch])
        match = _JOB_ID.match(done.stdout.strip())
        if match is None:
            raise SlurmError(f"sbatch printed no job id: {done.stdout.strip()[:200]!r}")
        self.job_id = match.group(1)
        self.submissions.append(self.job_id)
        # The cluster side remembers the job's current Slurm id for later commands.
        self._write(current_file(self.spec), self.job_id + "\n")
        self.last = None
        self.event(SLURM_SUBMITTED, f"submitted as Slurm job {self.job_id}"
                   + (" (resuming from the newest checkpoint)" if resume else ""),
                   resume=resume, script=paths.batch, node_script=paths.node,
                   batch_text=batch, node_text=node, nodes=self.launcher.nodes,
                   partition=self.launcher.partition, exclude=list(exclude))
        return self.job_id

    def attach(self) -> str:
        """The Slurm id of this job's newest submission (kept in RUN_DIR/slurm/)."""
        done = self._must(["cat", current_file(self.spec)])
        match = _JOB_ID.match(done.stdout.strip())
        if match is None:
            raise SlurmError(f"{current_file(self.spec)} holds no Slurm job id")
        self.job_id = match.group(1)
        return self.job_id

    def current_id(self) -> str | None:
        """The Slurm id in RUN_DIR/slurm/current-job (a later launch or resume changes
        it), or None while nothing was submitted."""
        done = self._run(["cat", current_file(self.spec)])
        match = _JOB_ID.match(done.stdout.strip()) if done.ok else None
        return match.group(1) if match else None

    def hostnames(self, nodelist: str) -> tuple[str, ...]:
        """A Slurm node list (`n[1-2]`) as node names, by `scontrol show hostnames`."""
        if not nodelist or nodelist in ("(null)", "None"):
            return ()
        done = self._run(["scontrol", "show", "hostnames", nodelist])
        names = done.stdout.split() if done.ok else []
        return tuple(n for n in names if SLURM_NAME.match(n))

    def allocated(self, state: QueueState) -> tuple[str, ...]:
        """The nodes of a started job (asked once per allocation of a Slurm job)."""
        key = (state.job_id, state.nodes)
        if self._allocated is None or self._allocated[0] != key:
            nodes = self.hostnames(state.nodes)
            if not nodes:
                return ()
            self._allocated = (key, nodes)
        return self._allocated[1]

    def failed_nodes(self, state: QueueState) -> list[dict[str, str]]:
        """The nodes `state`'s allocation held that are down, drained or failing now,
        with the reason an admin (or Slurm: "Not responding") gave: why Slurm ended or
        requeued the job (NODE_FAIL)."""
        mine = set(self.allocated(state))
        if not mine:
            return []
        return [d for d in self.unavailable_nodes(state.partition) if d["node"] in mine]

    def look(self) -> QueueState:
        """The job's state now (scontrol; squeue --start's estimate while pending)."""
        if self.job_id is None:
            raise SlurmError("no Slurm job submitted yet")
        done = self._run(["scontrol", "show", "job", "-o", self.job_id])
        if not done.ok:  # gone from slurmctld's memory (MinJobAge): ask accounting
            return self._from_sacct()
        f = parse_scontrol(done.stdout)
        restarts = f.get("Restarts", "0")
        state = QueueState(self.job_id, f.get("JobState", "UNKNOWN"), f.get("Reason", ""),
                           f.get("NodeList", ""), f.get("Partition", ""),
                           f.get("SubmitTime", ""), f.get("StartTime", ""),
                           f.get("EndTime", ""), f.get("ExitCode", ""),
                           int(restarts) if restarts.isdigit() else 0)
        if state.state == PENDING:  # squeue words the reason for people (no '_')
            start = self._run(["squeue", "--start", "-h", "-j", self.job_id, "-o", "%S|%r"])
            if start.ok and "|" in start.stdout:
                estimate, _, reason = start.stdout.strip().partition("|")
                state.estimate, state.reason = estimate, reason or state.reason
        return state

    def unavailable_nodes(self, partition: str) -> list[dict[str, str]]:
        """The partition's drained, down or failed nodes with the reason an admin (or
        Slurm) gave: why a pending job cannot start."""
        argv = ["sinfo", "-h", "-N", "-t", "drain,draining,down,fail", "-o", "%N|%t|%E"]
        if partition:
            argv[1:1] = ["-p", partition]
        done = self._run(argv)
        nodes = []
        for line in done.stdout.splitlines() if done.ok else ():
            name, _, rest = line.partition("|")
            state, _, reason = rest.partition("|")
            if name:
                nodes.append({"node": name, "state": state, "reason": reason})
        return nodes

    def _from_sacct(self) -> QueueState:
        """A job slurmctld forgot (MinJobAge after its end): Slurm's accounting, else
        the cluster's job completion record, else UNKNOWN saying why."""
        done = self._run(["sacct", "-n", "-P", "-X", "-j", str(self.job_id), "-o",
                          "State,ExitCode,NodeList,Partition,Submit,Start,End,Reason"])
        row = done.stdout.strip().splitlines()[0].split("|") if done.ok and \
            done.stdout.strip() else []
        if len(row) >= 8:
            words = row[0].split()
            by = " ".join(words[2:]) if words[1:2] == ["by"] else ""
            return QueueState(str(self.job_id), words[0] if words else "UNKNOWN", row[7],
                              row[2], row[3], row[4], row[5], row[6], row[1],
                              source="sacct", cancelled_by=by)
        sacct = (done.stdout + done.stderr).strip().splitlines()
        no_sacct = f"sacct: {sacct[-1] if sacct else 'no record of the job'}"
        found, no_jobcomp = self._from_jobcomp()
        if found is not None:
            return found
        return QueueState(str(self.job_id), "UNKNOWN", f"gone from scontrol; {no_sacct}; "
                          f"{no_jobcomp}", source="none")

    def _jobcomp_file(self) -> tuple[str | None, str]:
        """The cluster's job completion file (`JobCompType=jobcomp/filetxt`, at
        `JobCompLoc`), or None and why not; asked once."""
        if self._jobcomp is None:
            done = self._run(["scontrol", "show", "config"])
            conf = {}
            for line in done.stdout.splitlines() if done.ok else ():
                key, eq, value = line.partition("=")
                if eq:
                    conf[key.strip()] = value.strip()
            kind = conf.get("JobCompType", "unknown")
            if kind != "jobcomp/filetxt" or not conf.get("JobCompLoc", "").startswith("/"):
                self._jobcomp = (None, f"no job completion file (JobCompType={kind})")
            else:
                self._jobcomp = (conf["JobCompLoc"], "")
        return self._jobcomp

    def _from_jobcomp(self) -> tuple[QueueState | None, str]:
        """The job's last completion record (a requeued job has one per end), read
        where the Slurm clients run; or None and why not."""
        path, why = self._jobcomp_file()
        if path is None:
            return None, why
        head = f"JobId={self.job_id} "
        done = self._run(["grep", "-a", "-F", "-e", head, path])
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith(head)] \
            if done.ok else []
        if not lines:
            problem = done.stderr.strip().splitlines()
            return None, (f"no completion record in {path}"
                          + (f" ({problem[-1]})" if problem else ""))
        f = parse_scontrol(lines[-1])
        return QueueState(str(self.job_id), f.get("JobState", "UNKNOWN"), "",
                          f.get("NodeList", ""), f.get("Partition", ""),
                          f.get("SubmitTime", ""), f.get("StartTime", ""),
                          f.get("EndTime", ""), f.get("ExitCode", ""),
                          source="jobcomp"), ""

    def poll(self) -> QueueState:
        """Look once and record what changed since the last look."""
        now = self.look()
        before = self.last
        self.last = now
        common = {"state": now.state, "reason": now.reason, "partition": now.partition,
                  "submitted_at": _slurm_time(now.submit_time)}  # Slurm's, for a watch
        if before is None or (now.state, now.reason) != (before.state, before.reason):
            if now.state == PENDING:
                down = self.unavailable_nodes(now.partition)
                self.event(SLURM_PENDING, f"Slurm job {now.job_id} pending: {now.reason}"
                           + (f", expected start {now.estimate}" if now.estimate else "")
                           + "".join(f"; {d['node']} {d['state']}: {d['reason']}"
                                     for d in down),
                           estimate=now.estimate, unavailable=down, **common)
            elif now.state == RUNNING and (before is None or before.state != RUNNING):
                wait = queue_wait(now)
                self.event(SLURM_RUNNING, f"Slurm job {now.job_id} running on "
                           f"{now.nodes}" + (f" after {wait:.0f} s in the queue"
                                             if wait is not None else ""),
                           nodes=now.nodes, queue_wait=wait,
                           restarts=now.restarts, **common)
            elif not now.active:
                said = now.reason not in ("", "None")
                self.event(SLURM_FINISHED, f"Slurm job {now.job_id} {now.state} (exit "
                           f"{now.exit_code or '?'}" + (f", {now.reason}" if said else "")
                           + f"; from {now.source})", nodes=now.nodes,
                           exit_code=now.exit_code, queue_wait=queue_wait(now),
                           elapsed=now.elapsed, exit_source=now.source, **common)
                if now.state in FAILED_ENDS and not self._ending:
                    failed = self.failed_nodes(now) if now.state == "NODE_FAIL" else []
                    self.event(INTERRUPTION, f"Slurm job {now.job_id} ended {now.state} "
                               f"on {now.nodes or 'no node'} (exit {now.exit_code or '?'})"
                               + (f": {now.reason}" if said else "") + _nodes_text(failed),
                               cause=slurm_cause(now.state), nodes=now.nodes,
                               exit_code=now.exit_code, failed_nodes=failed, **common)
                elif now.state == CANCELLED and not self._ending:
                    who = f" by {now.cancelled_by}" if now.cancelled_by else ""
                    self._stopped(now, f"Slurm job {now.job_id} cancelled{who} (scancel, "
                                       "not by this cockpit)")
        if now.state == RUNNING:
            self._check_nodes(now)
        if before is not None and now.restarts > before.restarts:
            # The nodes it ran on, as they are now: a node failure names its node and
            # reason (an admin's `state=down reason=…`, Slurm's "Not responding").
            failed = self.failed_nodes(before) if before.nodes else []
            self.event(INTERRUPTION, f"Slurm requeued job {now.job_id} (restart "
                       f"{now.restarts}"
                       + (f", was on {before.nodes}" if before.nodes else "") + "): "
                       + (now.reason or "no reason given") + _nodes_text(failed),
                       cause=SLURM_REQUEUE, restarts=now.restarts,
                       previous_nodes=before.nodes, failed_nodes=failed, **common)
        return now

    def _check_nodes(self, now: QueueState) -> None:
        """A running job's node drained, failing or down (an admin's or Slurm's reason
        said once per change): the node to exclude when the job is relaunched."""
        mine = set(self.allocated(now))
        if not mine:
            return
        bad = {d["node"]: (d["state"], d["reason"])
               for d in self.unavailable_nodes(now.partition) if d["node"] in mine}
        for node, (state, reason) in sorted(bad.items()):
            if self._unavailable.get(node) != (state, reason):
                self.event(SLURM_NODE_UNAVAILABLE, f"node {node} of Slurm job "
                           f"{now.job_id} is {state}: {reason or 'no reason given'} "
                           f"(relaunch excluding it: cockpit relaunch JOB.toml --exclude "
                           f"{node})", node=node, node_state=state, reason=reason,
                           nodes=now.nodes)
        self._unavailable = bad

    def wait(self, until: Callable[[QueueState], bool], timeout: float,
             every: float = 0.5) -> QueueState:
        deadline = time.monotonic() + timeout
        while True:
            state = self.poll()
            if until(state):
                return state
            if time.monotonic() > deadline:
                raise SlurmError(f"Slurm job {self.job_id} still {state.state} "
                                 f"({state.reason}) after {timeout:g} s")
            if self.closing.wait(every):
                raise SlurmError(f"the cockpit closed while it waited on Slurm job "
                                 f"{self.job_id} ({state.state}): the job goes on as Slurm "
                                 "has it; `cockpit watch` or squeue says how it ends")

    def wait_ended(self, timeout: float) -> QueueState:
        return self.wait(lambda s: not s.active, timeout)

    # -- controls --------------------------------------------------------------------

    def pause(self, timeout: float = 300.0) -> PauseOutcome:
        """Checkpoint, then end the allocation: USR1 to the batch shell (it asks the
        trainer for a checkpoint and ends the step once it is saved, or once the spec's
        pause_timeout ran out without one). A pending job is cancelled: nothing ran.

        Two events say it: the request (`ok: false`, `pending: true`: the job is not
        paused yet, and reads as it did until the job ends) and the end, `ok: true`
        only when a checkpoint newer than the signal was saved (its path and step)."""
        state = self.poll()
        self._ending = True
        if state.state == PENDING:  # nothing runs: there is nothing to checkpoint
            self._must(["scancel", str(self.job_id)])
            ended = self.wait_ended(timeout)
            outcome = PauseOutcome(ended, False, "scancel",
                                   why="it was cancelled before it started")
            self.event(PAUSE, "pause: " + outcome.describe(), cancelled_pending=True,
                       **outcome.data())
            return outcome
        if not state.active:
            raise SlurmError(f"Slurm job {self.job_id} is not running ({state.state})")
        signal, said = pause_files(self.spec, str(self.job_id))
        # The stamp just before the signal (a checkpoint whose marker is newer was saved
        # after it); an outcome left by an earlier USR1 of this job id is not this one's.
        self._must(["sh", "-c", 'mkdir -p "$1" && rm -f "$2" && : > "$3"', "sh",
                    str(PurePosixPath(signal).parent), said, signal])
        self._must(["scancel", "--batch", "--signal=USR1", str(self.job_id)])
        self.event(PAUSE, f"pause requested: USR1 sent to Slurm job {self.job_id}'s batch "
                   "shell (checkpoint, then end the allocation); not paused until it ends "
                   "with a checkpoint", how="usr1", ok=False, pending=True)
        try:
            ended = self.wait_ended(timeout)
        except SlurmError as exc:
            self.event(PAUSE, f"pause not done: {exc}", how="usr1", ok=False,
                       error=str(exc))
            raise
        outcome = self._pause_outcome(ended, signal, said)
        self.event(PAUSE, "pause: " + outcome.describe(), **outcome.data())
        return outcome

    def _pause_outcome(self, ended: QueueState, signal: str, said: str) -> PauseOutcome:
        """What a USR1 came to, once the job ended: the completion marker the batch shell
        found, else one newer than the cockpit's stamp (`signal`); none: why."""
        done = self._run(["cat", said])
        lines = done.stdout.splitlines() if done.ok else []
        verdict = lines[0].strip() if lines else ""
        marker = lines[1] if verdict == OUTCOME_SAVED and len(lines) > 1 else ""
        if not marker.endswith(MARKER_SUFFIX):
            ckpt = checkpoint_dir(self.spec)
            found = self._run(["find", "-L", ckpt, "-name", "*" + MARKER_SUFFIX, "-newer",
                               signal, "-print"])
            newer = [m for m in found.stdout.splitlines() if m.endswith(MARKER_SUFFIX)]
            marker = max(newer, key=lambda m: _step_in_name(m) or -1, default="")
        if not marker:
            if verdict == OUTCOME_NONE:
                waited = lines[1].strip() if len(lines) > 1 else "?"
                why = (f"none was saved within {waited} s of the USR1 (the spec's "
                       f"pause_timeout); the batch shell ended the step (exit "
                       f"{NO_CHECKPOINT_EXIT})")
            else:
                why = ("none newer than the USR1, and the batch shell said nothing of it "
                       "(the job ended before it handled the signal, or was killed)")
            return PauseOutcome(ended, False, "usr1", why=why)
        checkpoint = marker[:-len(MARKER_SUFFIX)]
        text = self._run(["cat", marker])
        return PauseOutcome(ended, True, "usr1", checkpoint,
                            marker_step(checkpoint, text.stdout if text.ok else ""))

    def resume(self) -> str:
        """A new allocation resuming from the newest valid checkpoint."""
        previous = self.job_id
        self._ending = False
        job_id = self.submit(resume=True)
        self.event(RESUME, f"resume: Slurm job {job_id} (after {previous}) resumes from "
                   "the newest valid checkpoint", previous=previous)
        return job_id

    def relaunch(self, exclude: Sequence[str], timeout: float = 300.0) -> str:
        """Resubmit without the bad nodes (`--exclude`), from the newest valid
        checkpoint; a job still running is paused first (checkpoint, allocation ended)."""
        for node in exclude:
            if not SLURM_NAME.match(node):
                raise SlurmError(f"{node!r} is not a Slurm node name")
        previous = self.job_id
        paused = None
        if previous is not None and self.poll().active:
            paused = self.pause(timeout)
        self._ending = False
        job_id = self.submit(resume=True, exclude=exclude)
        # The newest valid checkpoint is an older one when the pause saved none.
        unsaved = paused is not None and paused.how == "usr1" and not paused.ok
        self.event(RELAUNCH, f"relaunch: Slurm job {job_id} (after {previous}) excludes "
                   f"{', '.join(exclude) or 'no node'} and resumes from the newest valid "
                   "checkpoint" + ("; the pause before it saved none, so that checkpoint "
                                   "predates it" if unsaved else ""),
                   previous=previous, exclude=list(exclude),
                   pause_ok=None if paused is None else paused.ok)
        return job_id

    def stop(self, timeout: float = 120.0) -> QueueState:
        """`scancel`: Slurm ends the job (its agents stop torchrun on SIGTERM)."""
        self._ending = True
        self._must(["scancel", str(self.job_id)])
        ended = self.wait_ended(timeout)
        self._stopped(ended, f"Slurm job {self.job_id} cancelled by the operator "
                             f"(scancel): {ended.state}")
        return ended

    def _stopped(self, state: QueueState, msg: str) -> None:
        """The job ended by a person's `scancel`: a stop, as an agent journals the
        operator's stop of its part (`job_exited`, ended for a stop), not a failure."""
        self.event(JOB_EXITED, msg, ended_for=launch_reasons.FOR_STOP, returncode=None,
                   state=state.state, exit_code=state.exit_code,
                   cancelled_by=state.cancelled_by or None)


def _nodes_text(failed: Sequence[dict[str, str]]) -> str:
    """"; node n1 down: PSU failed" for each failed node, or nothing."""
    return "".join(f"; node {d['node']} {d['state']}: {d['reason'] or 'no reason given'}"
                   for d in failed)


def queue_wait(state: QueueState) -> float | None:
    """Seconds from submission to start (the queue wait, part of the turnaround)."""
    submit, start = _slurm_time(state.submit_time), _slurm_time(state.start_time)
    if submit is None or start is None or start < submit:
        return None
    return start - submit


def describe(state: QueueState) -> str:
    """One line for a status display."""
    return json.dumps({k: v for k, v in vars(state).items() if v not in ("", None)})
