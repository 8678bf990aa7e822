"""Job specs: the operator's TOML, checked before anything is started anywhere.

A mistake found after torchrun started on 16 hosts costs a failed rendezvous and a
timeout; found here it costs one line naming the file, the line and the field. The
checked spec becomes, per host, the JSON the agent's `launch` op takes
(`agent.job.launch.LaunchSpec`), which adds that host's node rank.

    name = "charlm-7b"
    hosts = ["gpu1", "gpu2"]            # names from the inventory
    nnodes = "2:4"                      # elastic: torchrun admits / loses nodes (default: fixed)
    spares = ["gpu9"]                   # elastic: take over from a host excluded as faulty
    nproc_per_node = 8
    python = "/opt/venv/bin/python"     # the interpreter torchrun runs under
    script = "train.py"                 # or module = "pkg.train"
    args = ["--config", "big.toml"]
    run_dir = "/data/runs/charlm-7b"
    checkpoint_dir = "checkpoints"      # relative to run_dir
    workdir = "/src/charlm"             # where torchrun starts (default: the agent's cwd)
    override_args = ["--set", "{key}={value}"]   # how a fork's overrides are passed
    max_restarts = 0                    # torchrun's own in-place restarts

    [env]
    HF_HOME = "/data/hf"

    [resume]                            # how a restart names the checkpoint
    args = ["--resume", "{checkpoint}"] # or: env = "RESUME_FROM"
    newest_args = ["--resume", "auto"]  # elastic: the trainer finds its newest one itself

    [rendezvous]
    endpoint = "gpu1:29400"             # c10d; required for more than one host
    host = "gpu1"                       # the job host serving the store (default: the
                                        # endpoint's host, when it is a job host)
    last_call = 30                      # elastic: s a round waits for more nodes after MIN
    keep_alive = 5                      # elastic: s between heartbeats (3 missed: gone)

    [recovery]
    restart_budget = 10
    backoff = 1.0                       # s, doubled per consecutive failure
    backoff_max = 60.0
    exclude_on = ["gpu_fault"]          # elastic: causes that take a host out of the job

    [hang]
    k = 3.0                             # × the median step time
    floor = 10.0                        # s, never less (keep it below the NCCL timeout)
    startup = 600.0                     # s allowed before the first step

    [launcher]                          # kind = "slurm": Slurm allocates the nodes and
    kind = "slurm"                      # `hosts` is left out (docs/slurm.md)

Over 500 lines because the job spec is one contract: the layout above, the table of its
fields and types, the parser whose every error names its line, and the per-host launch
spec (`JobSpec.for_host`) it becomes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shlex
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import EllipsisType
from typing import Any, overload

from agent.wire.causes import CAUSES
from agent.wire.checkpoints import RESUME_ENV
from agent.wire.launch_spec import (
    CHECKPOINT_FIELD,
    DEFAULTS,
    ENV_NAME,
    MAX_NPROC_PER_NODE,
    MAXIMUM,
    MINIMUM,
    OVERRIDE_PLACEHOLDERS,
    check_job_name,
    finite,
    nul_field,
    per_cause_budget,
    per_cause_problem,
)
from agent.wire.op_error import OpError
from cockpit.analysis.text import json_printable, printable
from cockpit.toml_lines import TomlLines

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, packaged separately
    import tomli as tomllib

_SIMPLE_KEYS = {"name", "hosts", "nnodes", "spares", "nproc_per_node", "python", "script",
                "module", "args", "run_dir", "checkpoint_dir", "workdir", "override_args",
                "max_restarts", "pg_timeout", "pause_timeout", "stop_grace"}  # fmt: skip
_TABLES: dict[str, dict[str, type | tuple[type, ...]]] = {
    "env": {},
    "resume": {"args": (list, str), "env": str, "newest_args": (list, str)},
    "rendezvous": {"endpoint": str, "backend": str, "host": str, "last_call": int,
                   "keep_alive": int},
    "recovery": {"restart_budget": int, "backoff": (int, float), "backoff_max": (int, float),
                 "exclude_on": list, "window": (int, float), "per_cause": dict},
    "hang": {"k": (int, float), "floor": (int, float), "startup": (int, float)},
    # Checked in full by cockpit.control.slurm (the launcher that reads them).
    "launcher": {"kind": str, "partition": str, "nodes": int, "gpus_per_node": int,
                 "time_limit": str, "account": str, "qos": str, "extra_sbatch": list,
                 "signal_seconds": int, "login": str},
}
_ENDPOINT = re.compile(r"^([^\s:\[\]]+):(\d+)$")
_NNODES = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")
# torchrun's own restarts in an elastic job: each node leaving costs every other node one.
ELASTIC_MAX_RESTARTS = 100
# The rendezvous backends torchrun knows; an elastic job's store host, spares and
# `is_host` setting are c10d's, so it must use that one.
RDZV_BACKENDS = ("c10d", "etcd", "etcd-v2", "static")
# The agent's own variables for the trainer (its run dir, job, checkpoint dir, resume
# path, timeouts): a spec that set one would point the trainer's spool, checkpoints or
# resume at another place than the agent watches, so `[env]` may not.
AGENT_ENV_PREFIX = "COCKPIT_"


class JobSpecError(ValueError):
    """A spec that cannot be used; the message is `FILE:LINE: field 'F': what is wrong`.

    The field (an unknown key, say) and what is wrong (host names, values) quote the
    file: the message shows them as text (`printable`), wherever it is printed."""

    def __init__(self, path: str, line: int | None, field_name: str | None, what: str) -> None:
        self.path, self.line, self.field, self.what = path, line, field_name, what
        where = printable(f"{path}:{line}" if line else path)
        what = printable(what, multiline=True)
        super().__init__(f"{where}: field '{printable(field_name)}': {what}" if field_name
                         else f"{where}: {what}")  # fmt: skip


@dataclass(frozen=True)
class JobSpec:
    name: str
    hosts: tuple[str, ...]
    nproc_per_node: int
    script: str
    run_dir: str
    # The defaults are the agent's (agent.wire.launch_spec), which a `launch` op's spec
    # that leaves a field out gets.
    python: str = DEFAULTS["python"]
    module: bool = DEFAULTS["module"]
    args: tuple[str, ...] = DEFAULTS["args"]
    checkpoint_dir: str = DEFAULTS["checkpoint_dir"]
    workdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    resume_args: tuple[str, ...] = ()
    resume_env: str | None = None
    override_args: tuple[str, ...] = DEFAULTS["override_args"]
    rdzv_endpoint: str | None = None
    rdzv_backend: str = DEFAULTS["rendezvous.backend"]
    max_restarts: int = DEFAULTS["max_restarts"]
    restart_budget: int = DEFAULTS["recovery.restart_budget"]
    backoff: float = DEFAULTS["recovery.backoff"]
    backoff_max: float = DEFAULTS["recovery.backoff_max"]
    # The job-wide restart budget per cause (agent.job.restart_budget).
    budget_window: float = DEFAULTS["recovery.window"]
    per_cause: dict[str, int] = field(
        default_factory=lambda: dict(DEFAULTS["recovery.per_cause"]))
    hang_k: float = DEFAULTS["hang.k"]
    hang_floor: float = DEFAULTS["hang.floor"]
    hang_startup: float = DEFAULTS["hang.startup"]
    pg_timeout: float = DEFAULTS["pg_timeout"]
    pause_timeout: float = DEFAULTS["pause_timeout"]
    stop_grace: float = DEFAULTS["stop_grace"]
    # Elastic jobs (`nnodes = "MIN:MAX"`): None for a fixed-size job.
    min_nodes: int | None = None
    max_nodes: int | None = None
    spares: tuple[str, ...] = ()
    resume_newest: tuple[str, ...] | None = None
    rdzv_host: str | None = None
    rdzv_last_call: int | None = None
    rdzv_keep_alive: int | None = None
    exclude_on: tuple[str, ...] = DEFAULTS["recovery.exclude_on"]
    source: str = "<spec>"
    # `[launcher]` as written (kind "slurm": cockpit.control.slurm); empty: agents over SSH.
    launcher: dict[str, Any] = field(default_factory=dict)

    @property
    def elastic(self) -> bool:
        return self.min_nodes is not None

    def store_host(self, hosts: tuple[str, ...] | None = None) -> str | None:
        """The member whose torchrun serves the c10d store, when known: it cannot leave
        without taking the rendezvous of every other node with it."""
        hosts = self.hosts if hosts is None else hosts
        return self.rdzv_host if self.rdzv_host in hosts else None

    def for_host(self, host: str, hosts: tuple[str, ...] | None = None) -> dict[str, Any]:
        """The `launch` op's spec for `host`: its node rank among `hosts` (default: all),
        or, for one of the spares, its standby spec."""
        hosts = self.hosts if hosts is None else hosts
        if host not in hosts and not (self.elastic and host in self.spares):
            raise ValueError(f"host {host!r} is not one of the job's hosts {list(hosts)}")
        nnodes: int | str = len(hosts)
        rendezvous: dict[str, Any] = {"backend": self.rdzv_backend,
                                      "endpoint": self.rdzv_endpoint, "id": self.name}
        resume: dict[str, Any] = {"args": list(self.resume_args), "env": self.resume_env}
        recovery: dict[str, Any] = {"restart_budget": self.restart_budget,
                                    "backoff": self.backoff, "backoff_max": self.backoff_max,
                                    "window": self.budget_window,
                                    "per_cause": dict(self.per_cause)}
        if self.elastic:
            nnodes = f"{self.min_nodes}:{self.max_nodes}"
            store = self.store_host(hosts)
            if store is not None:
                rendezvous["is_host"] = host == store
            rendezvous["last_call"] = self.rdzv_last_call
            rendezvous["keep_alive"] = self.rdzv_keep_alive
            resume["newest_args"] = list(self.resume_newest or ())
            recovery["exclude_on"] = list(self.exclude_on)
        wire: dict[str, Any] = {
            "name": self.name, "python": self.python, "script": self.script,
            "module": self.module, "args": list(self.args),
            "nproc_per_node": self.nproc_per_node, "nnodes": nnodes,
            "node_rank": hosts.index(host) if host in hosts else 0, "host": host,
            "hosts": list(hosts), "spares": [s for s in self.spares if s not in hosts],
            "run_dir": self.run_dir,
            "checkpoint_dir": self.checkpoint_dir, "env": dict(self.env),
            "resume": resume, "override_args": list(self.override_args),
            "rendezvous": rendezvous, "max_restarts": self.max_restarts, "recovery": recovery,
            "hang": {"k": self.hang_k, "floor": self.hang_floor, "startup": self.hang_startup},
            "pg_timeout": self.pg_timeout, "pause_timeout": self.pause_timeout,
            "stop_grace": self.stop_grace,
        }  # fmt: skip
        if self.workdir is not None:
            wire["workdir"] = self.workdir
        return wire


class JobFile:
    """A job spec file, read again when its contents changed.

    `changed` returns the new spec, or None while the file says what it said when last
    read; a file that no longer reads raises `JobSpecError` and is read again next time,
    so fixing it is enough. The bytes are compared, not the modification time: an edit
    of the same size within one tick of the file system's clock would go unseen."""

    def __init__(self, path: Path | str, load: Callable[[Path], JobSpec]) -> None:
        self.path = Path(path)
        self._load = load
        self._seen = self._contents()

    def _contents(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except OSError:
            return None

    def changed(self) -> JobSpec | None:
        contents = self._contents()
        if contents == self._seen:
            return None
        spec = self._load(self.path)
        self._seen = contents
        return spec


def load_jobspec(path: Path | str, known_hosts: list[str] | tuple[str, ...] | None = None
                 ) -> JobSpec:  # fmt: skip
    """Read and check a job spec; `known_hosts` (the inventory's names) checks `hosts`."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise JobSpecError(str(path), None, None, f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JobSpecError(str(path), raw[:exc.start].count(b"\n") + 1, None,
                           f"not UTF-8 text: {exc}") from None
    return parse_jobspec(text, str(path), known_hosts)


def parse_jobspec(text: str, source: str = "<spec>",
                  known_hosts: list[str] | tuple[str, ...] | None = None) -> JobSpec:
    # Over 80 lines: one pass over the spec's fields in the order the docs list them,
    # each check beside the error it raises; the helpers (`fail`, `need` …) close over
    # the file's text so that every error names its line.
    # Editors on Windows save a byte-order mark that TOML does not allow; it says nothing.
    text = text.removeprefix("\ufeff")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        what = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        raise JobSpecError(source, int(match.group(1)) if match else None, None,
                           f"not valid TOML: {what}") from None  # fmt: skip
    lines = TomlLines(text)

    def fail(name: str, what: str) -> JobSpecError:
        return JobSpecError(source, lines.dotted(name), name, what)

    for key, value in data.items():
        if key in _TABLES:
            if not isinstance(value, dict):
                raise fail(key, f"must be a table ([{key}])")
            allowed = _TABLES[key]
            for sub, sub_value in value.items():
                dotted = f"{key}.{sub}"
                if key == "env":
                    if not ENV_NAME.match(sub):
                        raise fail(dotted, "not a valid environment variable name")
                    if sub.upper().startswith(AGENT_ENV_PREFIX):
                        raise fail(dotted, f"{AGENT_ENV_PREFIX}* variables are set by the "
                                   "agent for the trainer (run dir, job, checkpoints); "
                                   "[env] may not set them")
                    if not isinstance(sub_value, str):
                        raise fail(dotted, f"must be a string, got {_kind(sub_value)}")
                    continue
                if dotted == "rendezvous.id":
                    raise fail(dotted, "the rendezvous id is the job's name (torchrun's "
                               "--rdzv-id NAME): remove it, or rename the job")
                if sub not in allowed:
                    raise fail(dotted, f"unknown key; known: {', '.join(sorted(allowed))}")
                want = allowed[sub]
                if isinstance(sub_value, bool) or not isinstance(sub_value, want):
                    raise fail(dotted, f"must be {_type_name(want)}, got {_kind(sub_value)}")
        elif key not in _SIMPLE_KEYS:
            known = ", ".join(sorted(_SIMPLE_KEYS | set(_TABLES)))
            raise fail(key, f"unknown key; known: {known}")

    nul = nul_field(data)
    if nul is not None:
        raise fail(nul, "holds a NUL byte, which no path, argument or environment value "
                   "can carry")

    def need(name: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if name not in data:
            if default is ...:
                raise JobSpecError(source, None, name, "missing (required)")
            return default
        value = data[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # bool is an int in Python, not in TOML: `nproc_per_node = true` is a mistake.
        if isinstance(value, bool) and bool not in kinds:
            raise fail(name, f"must be {_type_name(kind)}, got a boolean")
        if not isinstance(value, kind):
            raise fail(name, f"must be {_type_name(kind)}, got {_kind(value)}")
        return value

    def str_list(name: str, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            try:
                return tuple(shlex.split(value))
            except ValueError as exc:
                raise fail(name, f"cannot split into arguments: {exc}") from None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise fail(name, "must be a list of strings (or one string, split like a shell)")
        return tuple(value)

    def positive(name: str, value: float, allow_zero: bool = False) -> float:
        # nan and inf pass every comparison below, then break the JSON of the launch op.
        number = finite(value)
        if number is None:
            raise fail(name, "must be a finite number")
        value = number
        if value < 0 or (value == 0 and not allow_zero):
            raise fail(name, f"must be {'>= 0' if allow_zero else '> 0'}, got {value:g}")
        least = MINIMUM.get(name, 0.0)
        if value < least:
            raise fail(name, f"must be at least {least:g}, got {value:g}")
        return float(at_most(name, value))

    def at_most(name: str, value: float) -> float:
        # Every number is bounded (agent.wire.launch_spec.MAXIMUM): none may reach
        # torchrun, the environment or a timer as one they cannot take.
        most = MAXIMUM[name]
        if value > most:
            # An integer as written: one past a float's range has no `:g`.
            got = str(value) if isinstance(value, int) else f"{value:g}"
            raise fail(name, f"must be at most {most:g}, got {got}")
        return value

    def folder_name(name: str, value: Any) -> str:
        problem = name_problem(value)
        if problem is not None:
            raise fail(name, problem)
        return value

    @overload
    def path(name: str, default: str | EllipsisType) -> str: ...
    @overload
    def path(name: str, default: None) -> str | None: ...
    def path(name: str, default: str | EllipsisType | None) -> str | None:
        """A path field: `...` when it is required, None when it may be absent."""
        value = need(name, str, default)
        if value is not None and not value.strip():
            raise fail(name, "must not be empty")
        return value

    name = folder_name("name", need("name", str))
    # A Slurm job's hosts are whatever nodes Slurm allocates (cockpit.control.slurm).
    slurm = data.get("launcher", {}).get("kind") == "slurm"
    if "launcher" in data and not slurm:
        raise fail("launcher.kind", "must be \"slurm\" (without [launcher], the agents "
                   "start the job over SSH)")
    hosts = need("hosts", list, [] if slurm else ...)
    if not (hosts or slurm) or not all(isinstance(h, str) and h for h in hosts):
        raise fail("hosts", "must be a non-empty list of host names")
    for host in hosts:  # the agent makes a folder of each (RUN_DIR/nodes/HOST)
        folder_name("hosts", host)
    if len(set(hosts)) != len(hosts):
        raise fail("hosts", "lists a host twice")
    if len(hosts) > MAXIMUM["nnodes"]:
        raise fail("hosts", f"lists {len(hosts)} hosts, more than a job may have "
                   f"({MAXIMUM['nnodes']:g})")
    if known_hosts is not None:
        unknown = [h for h in hosts if h not in known_hosts]
        if unknown:
            raise fail("hosts", f"not in the inventory: {', '.join(unknown)} (known: "
                       f"{', '.join(known_hosts) or 'none'})")  # fmt: skip
    spares = need("spares", list, [])
    if not all(isinstance(h, str) and h for h in spares):
        raise fail("spares", "must be a list of host names")
    for host in spares:  # a spare that takes over is a host like the others
        folder_name("spares", host)
    if len(set(spares)) != len(spares):
        raise fail("spares", "lists a host twice")
    both = [h for h in spares if h in hosts]
    if both:
        raise fail("spares", f"{', '.join(both)} also in 'hosts': a spare waits outside the job")
    if known_hosts is not None:
        unknown = [h for h in spares if h not in known_hosts]
        if unknown:
            raise fail("spares", f"not in the inventory: {', '.join(unknown)} (known: "
                       f"{', '.join(known_hosts) or 'none'})")  # fmt: skip
    min_nodes = max_nodes = None
    if "nnodes" in data:
        nnodes = data["nnodes"]
        match = _NNODES.match(nnodes) if isinstance(nnodes, str) else None
        if isinstance(nnodes, int) and not isinstance(nnodes, bool):
            if nnodes != len(hosts):
                raise fail("nnodes", f"must equal the number of hosts ({len(hosts)}), got "
                           f"{nnodes}; a job that may grow or shrink gives \"MIN:MAX\"")
        elif match:
            min_nodes, max_nodes = int(match.group(1)), int(match.group(2))
            at_most("nnodes", max_nodes)
            if not 1 <= min_nodes <= len(hosts) <= max_nodes:
                raise fail("nnodes", f"\"{min_nodes}:{max_nodes}\" must satisfy 1 <= MIN <= "
                           f"number of hosts ({len(hosts)}) <= MAX")  # fmt: skip
        else:
            raise fail("nnodes", f"must be the number of hosts or \"MIN:MAX\", got "
                       f"{_toml(nnodes)}")
    elastic = min_nodes is not None
    if spares and not elastic:
        raise fail("spares", "a spare takes over inside torchrun's elastic rendezvous: give "
                   f"nnodes = \"MIN:MAX\" (e.g. \"{len(hosts)}:{len(hosts)}\")")
    nproc = need("nproc_per_node", int)
    if not 1 <= nproc <= MAX_NPROC_PER_NODE:
        raise fail("nproc_per_node", f"must be between 1 and {MAX_NPROC_PER_NODE} (the "
                   f"training processes torchrun starts on each host), got {nproc}")
    script = need("script", str, None)
    module = need("module", (str, bool), None)
    if isinstance(module, str):
        if script is not None:
            raise fail("module", "give either 'script' or 'module', not both")
        script, is_module = module, True
    else:  # true: `script` names a module (torchrun --module)
        is_module = bool(module)
    if not script:
        raise JobSpecError(source, None, "script", "missing: name the training script "
                           "('script = \"train.py\"') or module ('module = \"pkg.train\"')")
    run_dir = path("run_dir", ...)
    if not run_dir.startswith(("/", "~")):
        raise fail("run_dir", f"{run_dir!r} is relative: each host's agent would resolve it "
                   "in whatever directory it was started from; give an absolute path (or "
                   "~/… for each host's home)")
    resume = data.get("resume", {})
    resume_args = str_list("resume.args", resume["args"]) if "args" in resume else ()
    if resume_args and not any(CHECKPOINT_FIELD in a for a in resume_args):
        raise fail("resume.args", f"must contain {CHECKPOINT_FIELD} where the path goes")
    resume_env = resume.get("env")
    if resume_env is not None and not ENV_NAME.match(resume_env):
        raise fail("resume.env", f"{resume_env!r} is not an environment variable name")
    if (resume_env is not None and resume_env != RESUME_ENV
            and resume_env.upper().startswith(AGENT_ENV_PREFIX)):
        raise fail("resume.env", f"{resume_env!r}: {AGENT_ENV_PREFIX}* variables are set by "
                   f"the agent (the resume path is always in {RESUME_ENV}); name the "
                   "trainer's own variable")
    override_args = str_list("override_args", need("override_args", (list, str),
                                                   list(DEFAULTS["override_args"])))
    _check_override_template(override_args, lambda what: fail("override_args", what))
    rdzv = data.get("rendezvous", {})
    backend = rdzv.get("backend", DEFAULTS["rendezvous.backend"])
    if backend not in RDZV_BACKENDS:
        raise fail("rendezvous.backend", f"{_toml(backend)} is not a torchrun rendezvous "
                   f"backend; known: {', '.join(RDZV_BACKENDS)}")
    if elastic and backend != "c10d":
        raise fail("rendezvous.backend", "an elastic job needs \"c10d\": its store host, "
                   "spares and membership changes are the c10d rendezvous's")
    endpoint = rdzv.get("endpoint")
    if endpoint is not None:
        _check_endpoint(endpoint, lambda what: fail("rendezvous.endpoint", what))
    if (len(hosts) > 1 or elastic) and endpoint is None:
        on = "an elastic job" if len(hosts) == 1 else f"a job on {len(hosts)} hosts"
        raise JobSpecError(source, lines.line("rendezvous"), "rendezvous.endpoint",
                           f"missing: {on} needs a c10d endpoint "
                           "(HOST:PORT on one of them)")  # fmt: skip
    rdzv_host = rdzv.get("host")
    if rdzv_host is not None and rdzv_host not in hosts:
        raise fail("rendezvous.host", f"{rdzv_host!r} is not one of the job's hosts")
    if elastic and rdzv_host is None:
        endpoint_host = str(endpoint).rpartition(":")[0]
        if endpoint_host not in hosts:
            raise JobSpecError(source, lines.line("rendezvous"), "rendezvous.host",
                               f"missing: an elastic job must know which host serves the "
                               f"rendezvous store, and the endpoint's {endpoint_host!r} is "
                               "not a job host name; name it (host = \"...\")")  # fmt: skip
        rdzv_host = endpoint_host
    for key in ("last_call", "keep_alive"):
        if key in rdzv and not elastic:
            raise fail(f"rendezvous.{key}", "only an elastic job (nnodes = \"MIN:MAX\") uses it")
        least = MINIMUM.get(f"rendezvous.{key}", 0)
        if rdzv.get(key, least) < least:
            raise fail(f"rendezvous.{key}", f"must be >= {least:g}, got {rdzv[key]}")
        at_most(f"rendezvous.{key}", rdzv.get(key, least))
    resume_newest = None
    if "newest_args" in resume:
        resume_newest = str_list("resume.newest_args", resume["newest_args"])
        if any(CHECKPOINT_FIELD in a for a in resume_newest):
            raise fail("resume.newest_args", "must not name a checkpoint: torchrun restarts "
                       "the workers with the same command after a membership change, so the "
                       "trainer must find its newest checkpoint itself")  # fmt: skip
    if elastic and resume_newest is None:
        raise JobSpecError(source, lines.line("resume"), "resume.newest_args",
                           "missing: an elastic job's workers are restarted by torchrun after "
                           "a membership change with the command they started with; give the "
                           "arguments that make the trainer resume from its newest checkpoint "
                           "by itself, e.g. [\"--resume\", \"auto\"] ([] if it always does)")
    recovery, hang = data.get("recovery", {}), data.get("hang", {})
    backoff = positive("recovery.backoff", recovery.get("backoff", DEFAULTS["recovery.backoff"]),
                       allow_zero=True)
    backoff_max = positive("recovery.backoff_max", recovery.get(
        "backoff_max", DEFAULTS["recovery.backoff_max"]), True)
    if backoff_max < backoff:
        raise fail("recovery.backoff_max", f"must be >= recovery.backoff ({backoff})")
    budget = recovery.get("restart_budget", DEFAULTS["recovery.restart_budget"])
    if budget < 0:
        raise fail("recovery.restart_budget", f"must be >= 0, got {budget}")
    at_most("recovery.restart_budget", budget)
    budget_window = positive("recovery.window", recovery.get(
        "window", DEFAULTS["recovery.window"]))
    if budget_window < MINIMUM["recovery.window"]:
        raise fail("recovery.window", f"must be at least {MINIMUM['recovery.window']:g} s")
    for cause, count in recovery.get("per_cause", {}).items():
        problem = per_cause_problem(cause, count)
        if problem is not None:
            raise fail(f"recovery.per_cause.{cause}", problem)
    try:
        per_cause = per_cause_budget(recovery.get("per_cause"))
    except OpError as exc:
        raise fail("recovery.per_cause", str(exc).split(": ", 1)[-1]) from None
    exclude_on = recovery.get("exclude_on", list(DEFAULTS["recovery.exclude_on"]))
    if "exclude_on" in recovery:
        if not elastic:
            raise fail("recovery.exclude_on", "only an elastic job (nnodes = \"MIN:MAX\") can "
                       "go on without a host")
        bad = [c for c in exclude_on if c not in CAUSES]
        if bad:
            raise fail("recovery.exclude_on", f"unknown cause(s) {_toml(bad)}; known: "
                       f"{', '.join(CAUSES)}")
    if not all(isinstance(c, str) for c in exclude_on):
        raise fail("recovery.exclude_on", "must be a list of cause names")
    max_restarts = need("max_restarts", int,
                        ELASTIC_MAX_RESTARTS if elastic else DEFAULTS["max_restarts"])
    if max_restarts < 0:
        raise fail("max_restarts", f"must be >= 0, got {max_restarts}")
    at_most("max_restarts", max_restarts)
    if elastic and max_restarts < 1:
        raise fail("max_restarts", "an elastic job needs torchrun's own restarts: a node that "
                   "leaves fails the others' collectives and torchrun restarts them in a new "
                   f"rendezvous round (default {ELASTIC_MAX_RESTARTS})")
    pg_timeout = positive("pg_timeout", need("pg_timeout", (int, float), DEFAULTS["pg_timeout"]))
    hang_floor = positive("hang.floor", hang.get("floor", DEFAULTS["hang.floor"]))
    python = need("python", str, DEFAULTS["python"])
    if not python.strip():
        raise fail("python", "must name the interpreter (default python3), not be empty")
    checkpoint_dir = path("checkpoint_dir", DEFAULTS["checkpoint_dir"])
    for key, value in (("run_dir", run_dir), ("checkpoint_dir", checkpoint_dir)):
        if slurm and value.startswith("~"):
            # The login host's commands, the #SBATCH options and the pause's outcome files
            # take the path as written: `~` would be a directory of that name.
            raise fail(key, f"{value!r} starts with ~, which a Slurm job's paths do not "
                       "expand (sbatch options, the login host's commands); give the "
                       "absolute path, such as /home/USER/…")
    if hang_floor >= pg_timeout:
        raise fail("hang.floor", f"must be shorter than pg_timeout ({pg_timeout:g} s), or the "
                   "collective times out before the hang is noticed")  # fmt: skip
    return JobSpec(
        name=name, hosts=tuple(hosts), nproc_per_node=nproc, script=script,
        run_dir=run_dir, python=python, module=is_module,
        args=str_list("args", need("args", (list, str), [])),
        checkpoint_dir=checkpoint_dir,
        workdir=path("workdir", None), env=dict(data.get("env", {})),
        resume_args=resume_args, resume_env=resume_env, override_args=override_args,
        rdzv_endpoint=endpoint, rdzv_backend=backend,
        max_restarts=max_restarts, restart_budget=budget, backoff=backoff,
        budget_window=budget_window, per_cause=per_cause,
        backoff_max=backoff_max, hang_k=positive("hang.k", hang.get("k", DEFAULTS["hang.k"])),
        hang_floor=hang_floor,
        hang_startup=positive("hang.startup", hang.get("startup", DEFAULTS["hang.startup"])),
        pg_timeout=pg_timeout,
        pause_timeout=positive("pause_timeout", need("pause_timeout", (int, float),
                                                     DEFAULTS["pause_timeout"])),
        stop_grace=positive("stop_grace", need("stop_grace", (int, float),
                                               DEFAULTS["stop_grace"]), True),
        min_nodes=min_nodes, max_nodes=max_nodes, spares=tuple(spares),
        resume_newest=resume_newest, rdzv_host=rdzv_host if elastic else rdzv.get("host"),
        rdzv_last_call=rdzv.get("last_call"), rdzv_keep_alive=rdzv.get("keep_alive"),
        exclude_on=tuple(exclude_on), source=source, launcher=dict(data.get("launcher", {})),
    )  # fmt: skip


def with_inventory_spares(spec: JobSpec, inventory_spares: Iterable[str]) -> JobSpec:
    """An elastic job that names no spares of its own takes the inventory's hosts marked
    `spare = true`: the pool the operator keeps for any job that loses a host."""
    if not spec.elastic or spec.spares:
        return spec
    return dataclasses.replace(spec, spares=tuple(h for h in inventory_spares
                                                  if h not in spec.hosts))


def name_problem(value: Any) -> str | None:
    """What is wrong with a job or host name, or None: the agent's rule for the names it
    makes folders and files of (`agent.wire.launch_spec.check_job_name`, applied here so the
    mistake is named before anything starts), and no control character, which would
    break the log lines and the screen that show the name."""
    try:
        check_job_name(value, "")
    except OpError as exc:
        return str(exc).strip()
    if any(not c.isprintable() for c in value):
        return f"{_toml(value)} holds a control character (newline, tab…)"
    return None


def _check_override_template(args: tuple[str, ...], fail: Any) -> None:
    """A fork's overrides reach the trainer only through {key} and {value}: a template
    without them drops the override unseen, a stray brace passes a broken argument."""
    missing = [p for p in OVERRIDE_PLACEHOLDERS if not any(p in a for a in args)]
    if missing:
        raise fail(f"must contain {' and '.join(missing)}, where each override's name "
                   "and value go (default: [\"--set\", \"{key}={value}\"])")
    for arg in args:
        rest = arg
        for placeholder in OVERRIDE_PLACEHOLDERS:
            rest = rest.replace(placeholder, "")
        if "{" in rest or "}" in rest:
            raise fail(f"{_toml(arg)} has a '{{' or '}}' that is not part of {{key}} or "
                       "{value}")


def _check_endpoint(endpoint: str, fail: Any) -> None:
    """HOST:PORT as torchrun takes it; the port must be one a store can listen on."""
    if endpoint.startswith("["):
        raise fail(f"{_toml(endpoint)}: IPv6 literals are not supported; use a host name "
                   "that resolves to the address")
    match = _ENDPOINT.match(endpoint)
    if not match:
        raise fail(f"must be HOST:PORT, got {_toml(endpoint)}")
    port = int(match.group(2))
    if not 1 <= port <= 65535:
        raise fail(f"port {port} is not 1-65535")


def _toml(value: Any) -> str:
    """A value as it is written in TOML (true, not True), for messages about the file."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):  # C1 and bidi controls too as escapes, as TOML reads them
        return json_printable(json.dumps(value, ensure_ascii=False))
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{printable(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    return str(value)


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a table"}.get(type(value), type(value).__name__)  # fmt: skip


def _type_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {int: "an integer", float: "a number", str: "a string", list: "a list",
             bool: "true or false", dict: "a table"}  # fmt: skip
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in kinds))
