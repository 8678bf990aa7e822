"""A job spec as the agent receives it (JSON in a `launch` op) and the torchrun argv it
becomes on this host.

The cockpit parses and checks the operator's TOML (`cockpit.control.jobspec`); the agent
checks the JSON again because it arrives over a channel and a wrong type here would
otherwise surface as a crash deep in a restart. Every command is an argv list handed to
`subprocess` without a shell, so names, paths and arguments are data, never syntax: a
`;` or `$(...)` in them reaches the trainer verbatim.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from agent.wire import paths
from agent.wire.checkpoints import CHECKPOINT_DIR_ENV, RESUME_ENV
from agent.wire.launch_spec import (
    CHECKPOINT_FIELD,
    DEFAULTS,
    ENV_NAME,
    MAXIMUM,
    MINIMUM,
    check_job_name,
    finite,
    nul_field,
    per_cause_budget,
)
from agent.wire.op_error import OpError

# A watchdog-friendly environment: NCCL errors abort the collective instead of hanging
# it, and the process-group timeout is explicit (and longer than the agent's hang check).
# torchrun's look at its workers in an elastic job (its default: 0.1 s). A worker that
# failed on its own is this host's agent's to recover, and the agent looks first: were
# torchrun quicker, it would take the failed node back into a new rendezvous round just
# before the agent stops it, and the others would form a group with a node that is gone.
ELASTIC_MONITOR_INTERVAL = 2.0

WATCHDOG_ENV = {
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "TORCH_NCCL_ENABLE_MONITORING": "1",
}


def _str_list(spec: Mapping[str, Any], key: str, default: Optional[List[str]] = None
              ) -> List[str]:
    value = spec.get(key, default if default is not None else [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise OpError("spec field %r must be a list of strings" % key)
    return list(value)


def _int(spec: Mapping[str, Any], key: str, name: Optional[str] = None,
         maximum: Optional[int] = None) -> int:
    """`key` of `spec` (dotted name `name`), its default and bounds as
    agent.wire.launch_spec gives them (`maximum`, for a field not in its table)."""
    name = name or key
    minimum = int(MINIMUM.get(name, 0))
    value = spec.get(key, DEFAULTS[name])
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise OpError("spec field %r must be an integer >= %d" % (name, minimum))
    return _at_most(name, value, int(MAXIMUM[name]) if maximum is None else maximum)


def _at_most(name: str, value: int, most: int) -> int:
    if value > most:
        raise OpError("spec field %r must be at most %d, got %d" % (name, most, value))
    return value


def _number(spec: Mapping[str, Any], key: str, name: Optional[str] = None) -> float:
    """As `_int`, for a finite number."""
    name = name or key
    minimum = MINIMUM.get(name, 0.0)
    number = finite(spec.get(key, DEFAULTS[name]))
    if number is None or number < minimum:
        raise OpError("spec field %r must be a finite number >= %g" % (name, minimum))
    if number > MAXIMUM[name]:
        raise OpError("spec field %r must be at most %g, got %g"
                      % (name, MAXIMUM[name], number))
    return number


def _nnodes(value: Any) -> Tuple[int, int, bool]:
    """(min, max, elastic) from `nnodes`: N, or "MIN:MAX" (an elastic job, even "2:2")."""
    most = int(MAXIMUM["nnodes"])
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise OpError("spec field 'nnodes' must be at least 1")
        return _at_most("nnodes", value, most), value, False
    if isinstance(value, str):
        low, sep, high = value.partition(":")
        if sep and low.strip().isdigit() and high.strip().isdigit():
            lo, hi = int(low), int(high)
            if 1 <= lo <= hi:
                return lo, _at_most("nnodes", hi, most), True
    raise OpError("spec field 'nnodes' must be a number of nodes or \"MIN:MAX\" with "
                  "1 <= MIN <= MAX, got %r" % (value,))


def _optional_int(table: Mapping[str, Any], key: str, name: str) -> Optional[int]:
    value = table.get(key)
    if value is None:
        return None
    minimum = int(MINIMUM.get(name, 0))
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise OpError("spec field %r must be an integer >= %d" % (name, minimum))
    return _at_most(name, value, int(MAXIMUM[name]))


def _table(spec: Mapping[str, Any], key: str) -> Dict[str, Any]:
    value = spec.get(key, {})
    if not isinstance(value, dict):
        raise OpError("spec field %r must be an object" % key)
    return value


class LaunchSpec:
    """The validated spec of one job on this host."""

    def __init__(self, spec: object) -> None:
        # `object`: a spec comes from an op or a saved state, whatever its shape; this
        # is where it is checked. Over 80 lines: one check per field, in the spec's
        # order, each setting the attribute it checks.
        if not isinstance(spec, dict):
            raise OpError("'spec' must be an object")
        self.raw = dict(spec)
        nul = nul_field(spec)
        if nul is not None:
            raise OpError("spec field %r holds a NUL byte" % nul)
        self.name = check_job_name(spec.get("name"))
        self.python = spec.get("python", DEFAULTS["python"])
        if not isinstance(self.python, str) or not self.python:
            raise OpError("spec field 'python' must be a non-empty string")
        self.script = spec.get("script")
        if not isinstance(self.script, str) or not self.script:
            raise OpError("spec field 'script' must name the training script or module")
        self.module = bool(spec.get("module", DEFAULTS["module"]))
        self.args = _str_list(spec, "args")
        self.nproc_per_node = _int(spec, "nproc_per_node")
        # An elastic job ("MIN:MAX") lets torchrun's rendezvous admit and lose nodes while
        # the others keep running; its node ranks are the rendezvous's to give.
        self.min_nodes, self.max_nodes, self.elastic = _nnodes(
            spec.get("nnodes", DEFAULTS["nnodes"]))
        self.nnodes = self.max_nodes
        self.node_rank = _int(spec, "node_rank", maximum=int(MAXIMUM["nnodes"]) - 1)
        if not self.elastic and self.node_rank >= self.nnodes:
            raise OpError("node_rank %d is not below nnodes %d" % (self.node_rank, self.nnodes))
        self.hosts = _str_list(spec, "hosts")
        self.spares = _str_list(spec, "spares")
        run_dir = spec.get("run_dir")
        if not isinstance(run_dir, str) or not run_dir:
            raise OpError("spec field 'run_dir' must be a path")
        host = spec.get("host")
        if host is not None:
            host = check_job_name(host, "spec field 'host'")
        self.host: Optional[str] = host
        self.shared_dir = Path(os.path.expanduser(run_dir)).resolve()
        ckpt = spec.get("checkpoint_dir", DEFAULTS["checkpoint_dir"])
        if not isinstance(ckpt, str) or not ckpt:
            raise OpError("spec field 'checkpoint_dir' must be a path")
        self.checkpoint_rel = os.path.expanduser(ckpt)
        self.checkpoint_dir = self.shared_dir / self.checkpoint_rel
        # The run dir is shared storage; what each host's agent and ranks write for
        # themselves (spool, logs, torchrun's error file) must not be: another host's
        # agent would journal this host's ranks as its own and read its failures.
        self.run_dir = self.shared_dir
        if self.max_nodes > 1:
            self.run_dir = paths.node_dir(self.shared_dir, host or "node-%d" % self.node_rank)
        workdir = spec.get("workdir")
        if workdir is not None and not isinstance(workdir, str):
            raise OpError("spec field 'workdir' must be a path")
        self.workdir = Path(os.path.expanduser(workdir)) if workdir else None
        env = _table(spec, "env")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise OpError("spec field 'env' must map names to strings")
        for key in env:
            if not ENV_NAME.match(key):
                raise OpError("spec field 'env.%s' is not an environment variable name" % key)
        self.env = env
        resume = _table(spec, "resume")
        self.resume_args = _str_list(resume, "args")
        self.resume_env = resume.get("env")
        if self.resume_env is not None and not (isinstance(self.resume_env, str)
                                                and ENV_NAME.match(self.resume_env)):
            raise OpError("spec field 'resume.env' must be an environment variable name")
        # torchrun restarts an elastic job's workers by itself after a membership change,
        # with the command it was started with: only a trainer that finds its newest
        # checkpoint on its own resumes from it then.
        self.resume_newest: Optional[List[str]] = (
            _str_list(resume, "newest_args") if "newest_args" in resume else None)
        if self.elastic and self.resume_newest is None:
            raise OpError("an elastic job needs 'resume.newest_args' (how the trainer resumes "
                          "from its newest checkpoint by itself)")
        self.override_args = _str_list(spec, "override_args", list(DEFAULTS["override_args"]))
        rdzv = _table(spec, "rendezvous")
        self.rdzv_backend = rdzv.get("backend", DEFAULTS["rendezvous.backend"])
        self.rdzv_endpoint = rdzv.get("endpoint")
        self.rdzv_id = rdzv.get("id", self.name)
        for key, value in (("backend", self.rdzv_backend), ("id", self.rdzv_id)):
            if not isinstance(value, str) or not value:
                raise OpError("spec field 'rendezvous.%s' must be a string" % key)
        if self.rdzv_endpoint is not None and not isinstance(self.rdzv_endpoint, str):
            raise OpError("spec field 'rendezvous.endpoint' must be HOST:PORT")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise OpError("a job on %d hosts needs 'rendezvous.endpoint'" % self.nnodes)
        is_host = rdzv.get("is_host")
        if is_host is not None and not isinstance(is_host, bool):
            raise OpError("spec field 'rendezvous.is_host' must be true or false")
        self.rdzv_is_host: Optional[bool] = is_host
        self.rdzv_last_call = _optional_int(rdzv, "last_call", "rendezvous.last_call")
        self.rdzv_keep_alive = _optional_int(rdzv, "keep_alive", "rendezvous.keep_alive")
        self.max_restarts = _int(spec, "max_restarts")
        recovery = _table(spec, "recovery")
        self.restart_budget = _int(recovery, "restart_budget", "recovery.restart_budget")
        self.backoff = _number(recovery, "backoff", "recovery.backoff")
        self.backoff_max = _number(recovery, "backoff_max", "recovery.backoff_max")
        if self.backoff_max < self.backoff:
            raise OpError("recovery.backoff_max must be >= recovery.backoff")
        self.budget_window = _number(recovery, "window", "recovery.window")
        self.per_cause: Dict[str, int] = per_cause_budget(recovery.get("per_cause"))
        self.exclude_on = _str_list(recovery, "exclude_on",
                                    list(DEFAULTS["recovery.exclude_on"]))
        hang = _table(spec, "hang")
        self.hang_k = _number(hang, "k", "hang.k")
        self.hang_floor = _number(hang, "floor", "hang.floor")
        self.hang_startup = _number(hang, "startup", "hang.startup")
        self.pg_timeout = _number(spec, "pg_timeout")
        self.pause_timeout = _number(spec, "pause_timeout")
        self.stop_grace = _number(spec, "stop_grace")
        parent = spec.get("parent")
        self.parent = parent if isinstance(parent, dict) else None

    def prepare_dirs(self) -> None:
        """Create the run dir; on a multi-host job, this host's own dir inside the shared
        one, in which the checkpoint dir (when relative) and the control dir are links to
        the shared ones: the trainer finds them where it always does, under its run dir,
        and every host's ranks and agent see the same checkpoints and operator controls."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.run_dir == self.shared_dir:
            return
        links = [(paths.CONTROL, paths.control_dir(self.shared_dir))]
        if not os.path.isabs(self.checkpoint_rel):
            links.append((self.checkpoint_rel, self.checkpoint_dir))
        for name, target in links:
            target.mkdir(parents=True, exist_ok=True)
            link = self.run_dir / name
            if link.is_symlink() and Path(os.readlink(str(link))) == target:
                continue
            if link.is_symlink():
                link.unlink()
            elif link.exists():
                raise OpError("%s exists and is not a link to the shared %s" % (link, target))
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(str(target), str(link))

    def argv(self, checkpoint: Optional[str] = None,
             overrides: Optional[Mapping[str, Any]] = None) -> List[str]:
        """torchrun's argv for one attempt: resuming from `checkpoint` when given."""
        nnodes = ("%d:%d" % (self.min_nodes, self.max_nodes) if self.elastic
                  else str(self.nnodes))
        argv = [self.python, "-m", "torch.distributed.run",
                "--nnodes", nnodes, "--nproc-per-node", str(self.nproc_per_node),
                "--max-restarts", str(self.max_restarts)]
        if self.elastic:
            argv += ["--monitor-interval", "%g" % ELASTIC_MONITOR_INTERVAL]
        if not self.elastic and self.nnodes == 1 and not self.rdzv_endpoint:
            argv.append("--standalone")
        else:
            if not self.elastic:
                argv += ["--node-rank", str(self.node_rank)]
            argv += ["--rdzv-backend", self.rdzv_backend, "--rdzv-endpoint",
                     str(self.rdzv_endpoint), "--rdzv-id", self.rdzv_id]
            conf = self.rdzv_conf()
            if conf:
                argv += ["--rdzv-conf", ",".join("%s=%s" % kv for kv in conf)]
        if self.module:
            argv.append("--module")
        argv.append(self.script)
        argv += self.args
        for key, value in sorted((overrides or {}).items()):
            argv += [a.replace("{key}", str(key)).replace("{value}", format_value(value))
                     for a in self.override_args]
        if self.elastic:
            argv += list(self.resume_newest or ())
        elif checkpoint is not None and self.resume_args:
            argv += [a.replace(CHECKPOINT_FIELD, checkpoint) for a in self.resume_args]
        return argv

    def rdzv_conf(self) -> List[Tuple[str, str]]:
        """torchrun's `--rdzv-conf` pairs. Which node serves the c10d store is said, not
        guessed from addresses (several nodes may share one, and the store's node can
        never leave); the heartbeat and last-call times bound how long a membership
        change takes: a node that left counts as gone after 3 missed heartbeats."""
        conf: List[Tuple[str, str]] = []
        if self.rdzv_is_host is not None:
            conf.append(("is_host", "1" if self.rdzv_is_host else "0"))
        if self.rdzv_last_call is not None:
            conf.append(("last_call_timeout", str(self.rdzv_last_call)))
        if self.rdzv_keep_alive is not None:
            conf.append(("keep_alive_interval", str(self.rdzv_keep_alive)))
        return conf

    def with_hosts(self, hosts: List[str]) -> None:
        """The job's member hosts changed (scale, a spare's takeover)."""
        self.hosts = list(hosts)
        self.raw["hosts"] = list(hosts)

    def environment(self, checkpoint: Optional[str] = None) -> Dict[str, str]:
        env = dict(WATCHDOG_ENV)
        env["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"] = "%d" % self.pg_timeout
        env["COCKPIT_PG_TIMEOUT"] = "%g" % self.pg_timeout
        env[CHECKPOINT_DIR_ENV] = str(self.checkpoint_dir)
        if self.elastic or self.max_restarts > 0:
            # torchrun shares its agent's store server with the workers and keeps the
            # master address it published in the first round; a node admitted in a later
            # round then waits for an address nobody publishes again, and workers
            # restarted in place can read their predecessors' keys and hang in gloo's
            # mesh set-up (torch 2.x). Without sharing, every round publishes afresh.
            env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        env.update(self.env)
        # RESUME_ENV always says where a restart resumes from (the framework callbacks
        # read it); the spec's own `resume.env` gets the same path. An elastic job's
        # workers are restarted by torchrun with their first environment, so a path set
        # here would go stale: such a trainer finds its newest checkpoint by itself.
        for name in {RESUME_ENV, self.resume_env or RESUME_ENV}:
            if checkpoint is not None and not self.elastic:
                env[name] = checkpoint
            else:
                env.pop(name, None)
        return env


def format_value(value: Any) -> str:
    """An override value as the trainer's command line expects it (TOML-like literals)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
