"""Job specs: the operator's TOML, checked before anything is started anywhere.

A mistake found after torchrun started on 16 hosts costs a failed rendezvous and a
timeout; found here it costs one line naming the file, the line and the field. The
checked spec becomes, per host, the JSON the agent's `launch` op takes
(`agent.launch.LaunchSpec`), which adds that host's node rank.

    name = "charlm-7b"
    hosts = ["gpu1", "gpu2"]            # names from the inventory
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

    [rendezvous]
    endpoint = "gpu1:29400"             # c10d; required for more than one host

    [recovery]
    restart_budget = 10
    backoff = 1.0                       # s, doubled per consecutive failure
    backoff_max = 60.0

    [hang]
    k = 3.0                             # × the median step time
    floor = 10.0                        # s, never less (keep it below the NCCL timeout)
    startup = 600.0                     # s allowed before the first step
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

_SIMPLE_KEYS = {"name", "hosts", "nproc_per_node", "python", "script", "module", "args",
                "run_dir", "checkpoint_dir", "workdir", "override_args", "max_restarts",
                "pg_timeout", "pause_timeout", "stop_grace"}  # fmt: skip
_TABLES: dict[str, dict[str, type | tuple[type, ...]]] = {
    "env": {},
    "resume": {"args": (list, str), "env": str},
    "rendezvous": {"endpoint": str, "backend": str, "id": str},
    "recovery": {"restart_budget": int, "backoff": (int, float), "backoff_max": (int, float)},
    "hang": {"k": (int, float), "floor": (int, float), "startup": (int, float)},
}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENDPOINT = re.compile(r"^[^\s:]+:\d{1,5}$")


class JobSpecError(ValueError):
    """A spec that cannot be used; the message is `FILE:LINE: field 'F': what is wrong`."""

    def __init__(self, path: str, line: int | None, field_name: str | None, what: str) -> None:
        self.path, self.line, self.field, self.what = path, line, field_name, what
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: field '{field_name}': {what}" if field_name
                         else f"{where}: {what}")  # fmt: skip


@dataclass(frozen=True)
class JobSpec:
    name: str
    hosts: tuple[str, ...]
    nproc_per_node: int
    script: str
    run_dir: str
    python: str = "python3"
    module: bool = False
    args: tuple[str, ...] = ()
    checkpoint_dir: str = "checkpoints"
    workdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    resume_args: tuple[str, ...] = ()
    resume_env: str | None = None
    override_args: tuple[str, ...] = ("--set", "{key}={value}")
    rdzv_endpoint: str | None = None
    rdzv_backend: str = "c10d"
    max_restarts: int = 0
    restart_budget: int = 10
    backoff: float = 1.0
    backoff_max: float = 60.0
    hang_k: float = 3.0
    hang_floor: float = 10.0
    hang_startup: float = 600.0
    pg_timeout: float = 1800.0
    pause_timeout: float = 300.0
    stop_grace: float = 10.0
    source: str = "<spec>"

    def for_host(self, host: str, hosts: tuple[str, ...] | None = None) -> dict[str, Any]:
        """The `launch` op's spec for `host`: its node rank among `hosts` (default: all)."""
        hosts = self.hosts if hosts is None else hosts
        if host not in hosts:
            raise ValueError(f"host {host!r} is not one of the job's hosts {list(hosts)}")
        wire: dict[str, Any] = {
            "name": self.name, "python": self.python, "script": self.script,
            "module": self.module, "args": list(self.args),
            "nproc_per_node": self.nproc_per_node, "nnodes": len(hosts),
            "node_rank": hosts.index(host), "host": host, "run_dir": self.run_dir,
            "checkpoint_dir": self.checkpoint_dir, "env": dict(self.env),
            "resume": {"args": list(self.resume_args), "env": self.resume_env},
            "override_args": list(self.override_args),
            "rendezvous": {"backend": self.rdzv_backend, "endpoint": self.rdzv_endpoint,
                           "id": self.name},
            "max_restarts": self.max_restarts,
            "recovery": {"restart_budget": self.restart_budget, "backoff": self.backoff,
                         "backoff_max": self.backoff_max},
            "hang": {"k": self.hang_k, "floor": self.hang_floor, "startup": self.hang_startup},
            "pg_timeout": self.pg_timeout, "pause_timeout": self.pause_timeout,
            "stop_grace": self.stop_grace,
        }  # fmt: skip
        if self.workdir is not None:
            wire["workdir"] = self.workdir
        return wire


class _Lines:
    """Where each key was written: TOML parsers forget positions, error messages need them."""

    _HEADER = re.compile(r"^\s*\[\s*([A-Za-z0-9_.\-\"' ]+?)\s*\]\s*(?:#.*)?$")
    _KEY = re.compile(r"^\s*(\"[^\"]*\"|'[^']*'|[A-Za-z0-9_\-]+)\s*=")

    def __init__(self, text: str) -> None:
        self.keys: dict[str, int] = {}
        table = ""
        for number, line in enumerate(text.splitlines(), start=1):
            header = self._HEADER.match(line)
            if header:
                table = header.group(1).replace('"', "").replace("'", "").strip()
                self.keys.setdefault(table, number)
                continue
            key = self._KEY.match(line)
            if key:
                name = key.group(1).strip("\"'")
                self.keys.setdefault(f"{table}.{name}" if table else name, number)

    def line(self, dotted: str) -> int | None:
        while dotted:
            if dotted in self.keys:
                return self.keys[dotted]
            dotted = dotted.rpartition(".")[0]
        return None


def load_jobspec(path: Path | str, known_hosts: list[str] | tuple[str, ...] | None = None
                 ) -> JobSpec:  # fmt: skip
    """Read and check a job spec; `known_hosts` (the inventory's names) checks `hosts`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise JobSpecError(str(path), None, None, f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise JobSpecError(str(path), None, None, f"not UTF-8 text: {exc}") from None
    return parse_jobspec(text, str(path), known_hosts)


def parse_jobspec(text: str, source: str = "<spec>",
                  known_hosts: list[str] | tuple[str, ...] | None = None) -> JobSpec:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        what = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        raise JobSpecError(source, int(match.group(1)) if match else None, None,
                           f"not valid TOML: {what}") from None  # fmt: skip
    lines = _Lines(text)

    def fail(name: str, what: str) -> JobSpecError:
        return JobSpecError(source, lines.line(name), name, what)

    for key, value in data.items():
        if key in _TABLES:
            if not isinstance(value, dict):
                raise fail(key, f"must be a table ([{key}])")
            allowed = _TABLES[key]
            for sub, sub_value in value.items():
                dotted = f"{key}.{sub}"
                if key == "env":
                    if not _ENV_NAME.match(sub):
                        raise fail(dotted, "not a valid environment variable name")
                    if not isinstance(sub_value, str):
                        raise fail(dotted, f"must be a string, got {_kind(sub_value)}")
                    continue
                if sub not in allowed:
                    raise fail(dotted, f"unknown key; known: {', '.join(sorted(allowed))}")
                want = allowed[sub]
                if isinstance(sub_value, bool) or not isinstance(sub_value, want):
                    raise fail(dotted, f"must be {_type_name(want)}, got {_kind(sub_value)}")
        elif key not in _SIMPLE_KEYS:
            known = ", ".join(sorted(_SIMPLE_KEYS | set(_TABLES)))
            raise fail(key, f"unknown key; known: {known}")

    def need(name: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if name not in data:
            if default is ...:
                raise JobSpecError(source, None, name, "missing (required)")
            return default
        value = data[name]
        if isinstance(value, bool) and kind is not bool:
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
        if value < 0 or (value == 0 and not allow_zero):
            raise fail(name, f"must be {'>= 0' if allow_zero else '> 0'}, got {value}")
        return float(value)

    name = need("name", str)
    if not name or name in (".", "..") or any(c in name for c in "/\\\0") or name[0] == "-":
        raise fail("name", f"{name!r} cannot name a folder: no '/', '\\', NUL or leading '-'")
    hosts = need("hosts", list)
    if not hosts or not all(isinstance(h, str) and h for h in hosts):
        raise fail("hosts", "must be a non-empty list of host names")
    if len(set(hosts)) != len(hosts):
        raise fail("hosts", "lists a host twice")
    if known_hosts is not None:
        unknown = [h for h in hosts if h not in known_hosts]
        if unknown:
            raise fail("hosts", f"not in the inventory: {', '.join(unknown)} (known: "
                       f"{', '.join(known_hosts) or 'none'})")  # fmt: skip
    nproc = need("nproc_per_node", int)
    if nproc < 1:
        raise fail("nproc_per_node", f"must be at least 1, got {nproc}")
    script = need("script", str, None)
    module = need("module", (str, bool), None)
    if isinstance(module, str):
        if script is not None:
            raise fail("module", "give either 'script' or 'module', not both")
        script, is_module = module, True
    else:
        is_module = False
    if not script:
        raise JobSpecError(source, None, "script", "missing: name the training script "
                           "('script = \"train.py\"') or module ('module = \"pkg.train\"')")
    run_dir = need("run_dir", str)
    if not run_dir:
        raise fail("run_dir", "must not be empty")
    resume = data.get("resume", {})
    resume_args = str_list("resume.args", resume["args"]) if "args" in resume else ()
    if resume_args and not any("{checkpoint}" in a for a in resume_args):
        raise fail("resume.args", "must contain {checkpoint} where the path goes")
    resume_env = resume.get("env")
    if resume_env is not None and not _ENV_NAME.match(resume_env):
        raise fail("resume.env", f"{resume_env!r} is not an environment variable name")
    override_args = str_list("override_args", need("override_args", (list, str),
                                                   ["--set", "{key}={value}"]))
    rdzv = data.get("rendezvous", {})
    endpoint = rdzv.get("endpoint")
    if endpoint is not None and not _ENDPOINT.match(endpoint):
        raise fail("rendezvous.endpoint", f"must be HOST:PORT, got {endpoint!r}")
    if len(hosts) > 1 and endpoint is None:
        raise JobSpecError(source, lines.line("rendezvous"), "rendezvous.endpoint",
                           f"missing: a job on {len(hosts)} hosts needs a c10d endpoint "
                           "(HOST:PORT on one of them)")  # fmt: skip
    recovery, hang = data.get("recovery", {}), data.get("hang", {})
    backoff = positive("recovery.backoff", recovery.get("backoff", 1.0), allow_zero=True)
    backoff_max = positive("recovery.backoff_max", recovery.get("backoff_max", 60.0), True)
    if backoff_max < backoff:
        raise fail("recovery.backoff_max", f"must be >= recovery.backoff ({backoff})")
    budget = recovery.get("restart_budget", 10)
    if budget < 0:
        raise fail("recovery.restart_budget", f"must be >= 0, got {budget}")
    max_restarts = need("max_restarts", int, 0)
    if max_restarts < 0:
        raise fail("max_restarts", f"must be >= 0, got {max_restarts}")
    pg_timeout = positive("pg_timeout", need("pg_timeout", (int, float), 1800.0))
    hang_floor = positive("hang.floor", hang.get("floor", 10.0))
    if hang_floor >= pg_timeout:
        raise fail("hang.floor", f"must be shorter than pg_timeout ({pg_timeout:g} s), or the "
                   "collective times out before the hang is noticed")  # fmt: skip
    return JobSpec(
        name=name, hosts=tuple(hosts), nproc_per_node=nproc, script=script,
        run_dir=run_dir, python=need("python", str, "python3"), module=is_module,
        args=str_list("args", need("args", (list, str), [])),
        checkpoint_dir=need("checkpoint_dir", str, "checkpoints"),
        workdir=need("workdir", str, None), env=dict(data.get("env", {})),
        resume_args=resume_args, resume_env=resume_env, override_args=override_args,
        rdzv_endpoint=endpoint, rdzv_backend=rdzv.get("backend", "c10d"),
        max_restarts=max_restarts, restart_budget=budget, backoff=backoff,
        backoff_max=backoff_max, hang_k=positive("hang.k", hang.get("k", 3.0)),
        hang_floor=hang_floor, hang_startup=positive("hang.startup", hang.get("startup", 600.0)),
        pg_timeout=pg_timeout,
        pause_timeout=positive("pause_timeout", need("pause_timeout", (int, float), 300.0)),
        stop_grace=positive("stop_grace", need("stop_grace", (int, float), 10.0), True),
        source=source,
    )  # fmt: skip


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a table"}.get(type(value), type(value).__name__)  # fmt: skip


def _type_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {int: "an integer", float: "a number", str: "a string", list: "a list",
             bool: "true or false", dict: "a table"}  # fmt: skip
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in kinds))
