"""`cockpit check`: everything a watch or a launch needs from each host, in seconds.

A launch that cannot work (a rendezvous endpoint the hosts cannot resolve, a Python
without torch, a host key nobody trusted) otherwise fails minutes later, or never: torchrun
loops on `Name or service not known` until the start-up hang limit. Here each host is
reached in parallel, one short Python probe runs with the host's own interpreter, and
every finding that fails says what to do. Whatever a probe prints comes from the host and
is validated and shown as plain text.

Over ~500 lines would be too many for one reader; this stays one module because the
probes' scripts and the code that reads their answers must change together.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from cockpit.analysis.text import printable
from cockpit.control.jobspec import JobSpec
from cockpit.transport import commands
from cockpit.transport.deploy import ZipappBuilder, agent_content_hash
from cockpit.transport.inventory import AUTO_AGENT, HostSpec
from cockpit.transport.link import LinkOptions
from cockpit.transport.ssh_config import SshConfigError
from cockpit.transport.ssh_exec import SSH_ERRORS, agent_key_count, exec_capture
from cockpit.transport.ssh_link import ConnectFailed, Connection, connect
from cockpit.transport.states import AUTH_FAILED, HOSTKEY_CHANGED, HOSTKEY_UNKNOWN

# Bytes read back from one probe: its answer is a few hundred.
MAX_ANSWER = 64 * 1024
PROBE_TIMEOUT = 30.0
# Importing torch reads a few hundred MB of shared libraries on a cold cache.
TORCH_TIMEOUT = 120.0
# A free-space figure under this is reported as a failure (a journal fills it in hours).
MIN_FREE = 1 << 30

# Runs under the host's own Python (>= 3.8, stdlib only); argv[1] is a JSON object.
HOST_PROBE = r"""
import ctypes, json, os, shutil, socket, sys, tempfile
a = json.loads(sys.argv[1]); out = {"python": sys.version.split()[0]}
try:
    import psutil; out["psutil"] = str(psutil.__version__)
except Exception:
    out["psutil"] = None
try:
    nv = ctypes.CDLL("libnvidia-ml.so.1")
    if nv.nvmlInit_v2() != 0: raise OSError("nvmlInit failed")
    n = ctypes.c_uint(); nv.nvmlDeviceGetCount_v2(ctypes.byref(n)); out["gpus"] = n.value
    b = ctypes.create_string_buffer(96); nv.nvmlSystemGetDriverVersion(b, 96)
    out["driver"] = b.value.decode("ascii", "replace")
except Exception as e:
    out["nvml"] = str(e)[:200]
def place(p):
    p = os.path.expanduser(p); q = p
    while not os.path.isdir(q):
        if os.path.exists(q): return {"path": p, "error": "%s is not a directory" % q}
        q = os.path.dirname(q) or "/"
    try:
        d = tempfile.mkdtemp(prefix=".cockpit-check-", dir=q); os.rmdir(d)
    except OSError as e:
        return {"path": p, "error": "cannot write in %s: %s" % (q, e.strerror or e)}
    return {"path": p, "exists": q == p, "free": shutil.disk_usage(q).free, "at": q}
out["dirs"] = {k: place(v) for k, v in a["dirs"].items()}
if a.get("agent"): out["agent_on_path"] = shutil.which(a["agent"])
z = os.path.expanduser(a["zipapp"])
if os.path.isfile(z):
    try:
        with open(z + ".sha256") as f: out["zipapp"] = f.read(100).strip()
    except OSError:
        out["zipapp"] = ""
r = a.get("rdzv")
if r:
    try:
        addrs = sorted({i[4][0] for i in socket.getaddrinfo(r[0], r[1], 0, socket.SOCK_STREAM)})
        out["rdzv"] = {"addresses": addrs}
        for addr in addrs:
            s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as c10d's store does
            try:
                s.bind((addr, r[1])); out["rdzv"]["local"] = "free"
            except OSError as e:
                if e.errno == 98: out["rdzv"]["local"] = "in use"
            finally:
                s.close()
    except socket.gaierror as e:
        out["rdzv"] = {"error": str(e)[:200]}
print(json.dumps(out))
"""

# Whether the hosts of a job see one checkpoint dir: one host leaves an empty folder in
# the nearest existing folder of the dir (as `place` finds it, on its own view of the
# path: a `~` is each host's home) and the others look for it in theirs. argv[1]:
# [path, null] makes the folder (its name printed), [path, name] looks for it, and
# [path, name, true] also removes it.
SHARED_PROBE = r"""
import json, os, sys, tempfile
p, name, *rm = json.loads(sys.argv[1]); q = os.path.expanduser(p)
while not os.path.isdir(q): q = os.path.dirname(q) or "/"
if name is None:
    print(os.path.basename(tempfile.mkdtemp(prefix=".cockpit-check-shared-", dir=q)))
else:
    d = os.path.join(q, name); print("seen" if os.path.isdir(d) else "absent in " + q)
    if rm and os.path.isdir(d): os.rmdir(d)
"""

# Holds the rendezvous port on the host that will serve it while the others dial it.
LISTEN_PROBE = r"""
import json, socket, sys
h, p = json.loads(sys.argv[1]); s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((h, p)); s.listen(64)
print("listening", flush=True)
sys.stdin.read()
"""

CONNECT_PROBE = r"""
import json, socket, sys
h, p = json.loads(sys.argv[1])
try:
    socket.create_connection((h, p), 5).close(); print("ok")
except OSError as e:
    print(str(e)[:200])
"""

TORCH_PROBE = r"""
import sys
try:
    import torch
except Exception as e:
    print("ERROR %s: %s" % (type(e).__name__, str(e)[:300]))
else:
    print("OK %s" % torch.__version__)
"""


@dataclass(frozen=True)
class Finding:
    """One line of the report: on `host` (or "job"), `item` is fine or not, and `fix`."""

    host: str
    item: str
    ok: bool
    detail: str
    fix: str = ""
    # A failure that would make a launch hang or fail (a warning otherwise).
    fatal: bool = True

    def line(self) -> str:
        mark = "ok  " if self.ok else ("FAIL" if self.fatal else "warn")
        text = f"  {mark} {self.item:<14} {printable(self.detail)}"
        if self.fix and not self.ok:
            text += f"\n{'':21}-> {printable(self.fix)}"
        return text


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures()

    def failures(self) -> list[Finding]:
        return [f for f in self.findings if not f.ok and f.fatal]

    def failed(self, host: str, item: str) -> Finding | None:
        for f in self.findings:
            if f.host == host and f.item == item and not f.ok:
                return f
        return None

    def text(self) -> str:
        lines: list[str] = []
        for host in dict.fromkeys(f.host for f in self.findings):
            lines.append(f"{host}:")
            lines += [f.line() for f in self.findings if f.host == host]
        bad = self.failures()
        lines.append("all checks passed" if not bad else
                     f"{len(bad)} check(s) failed: "
                     + ", ".join(dict.fromkeys(f"{f.host} {f.item}" for f in bad)))
        return "\n".join(lines)


class _Runner:
    """Runs a probe on one host (over its SSH connection, or here for the local host)."""

    def __init__(self, connection: Connection | None) -> None:
        self.connection = connection

    def run(self, command: str, timeout: float) -> tuple[int | None, str, str]:
        if self.connection is None:
            try:
                done = subprocess.run(["/bin/sh", "-c", command], capture_output=True,
                                      timeout=timeout, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                return None, "", f"no answer within {timeout:g} s"
            return (done.returncode, done.stdout[:MAX_ANSWER].decode("utf-8", "replace"),
                    done.stderr[-2000:].decode("utf-8", "replace"))
        return exec_capture(self.connection.client, command, timeout, MAX_ANSWER)

    def open(self, command: str) -> Any:
        """A long-running probe: the listener, ended when its stdin closes."""
        if self.connection is None:
            return subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        transport = self.connection.client.get_transport()
        if transport is None:
            raise OSError("connection closed")
        channel = transport.open_session()
        channel.settimeout(PROBE_TIMEOUT)
        channel.exec_command(command)
        return channel


def _first_line(proc: Any) -> str:
    if isinstance(proc, subprocess.Popen):
        assert proc.stdout is not None
        return proc.stdout.readline(200).decode("utf-8", "replace").strip()
    return proc.makefile("rb").readline(200).decode("utf-8", "replace").strip()


def _close(proc: Any) -> None:
    if isinstance(proc, subprocess.Popen):
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    else:
        proc.shutdown_write()
        proc.close()


@dataclass
class _Host:
    spec: HostSpec
    findings: list[Finding] = field(default_factory=list)
    runner: _Runner | None = None
    probe: dict[str, Any] = field(default_factory=dict)
    jump_down: tuple[str, str, str] | None = None  # (jump label, what failed, fix)
    torch: str | None = None  # the torch version the job's Python imports here

    def add(self, item: str, ok: bool, detail: str, fix: str = "", fatal: bool = True) -> None:
        self.findings.append(Finding(self.spec.name, item, ok, detail, fix, fatal))

    def failed(self, item: str) -> bool:
        return any(f.item == item and not f.ok for f in self.findings)


def rendezvous_address(spec: JobSpec) -> tuple[str, int] | None:
    """(host, port) of the spec's c10d endpoint, as the job's hosts will dial it."""
    if not spec.rdzv_endpoint:
        return None
    host, _, port = spec.rdzv_endpoint.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        return None
    return host, int(port)


def check(hosts: Sequence[HostSpec], options: LinkOptions, spec: JobSpec | None = None,
          builder: ZipappBuilder | None = None) -> Report:
    """Check every host in parallel; with a job spec, also what its launch needs."""
    agent_hash = agent_content_hash()
    version = (builder or ZipappBuilder()).version
    rdzv = rendezvous_address(spec) if spec is not None else None
    states = [_Host(h) for h in hosts]

    def one(state: _Host) -> _Host:
        try:
            _check_host(state, options, spec, rdzv, version, agent_hash)
        except SSH_ERRORS as exc:  # a connection lost midway
            state.add("check", False, f"interrupted: {type(exc).__name__}: {exc}",
                      "run the check again; if it repeats, the host's SSH is unstable")
        return state

    report = Report()
    try:
        with ThreadPoolExecutor(max_workers=min(32, max(1, len(states)))) as pool:
            list(pool.map(one, states))
        job_findings: list[Finding] = []
        if spec is not None and rdzv is not None:
            job_findings = _check_rendezvous(states, spec, rdzv)
        if spec is not None:
            _check_shared(states, spec)
            job_findings += torch_versions({s.spec.name: s.torch for s in states
                                            if s.torch is not None})
        for state in states:
            report.findings += state.findings
        report.findings += _jump_outages(states) + job_findings
    finally:
        for state in states:
            if state.runner is not None and state.runner.connection is not None:
                state.runner.connection.close()
    return report


def _check_host(state: _Host, options: LinkOptions, spec: JobSpec | None,
                rdzv: tuple[str, int] | None, version: str, agent_hash: str) -> None:
    host = state.spec
    if host.is_local:
        state.runner = _Runner(None)
        state.add("reach", True, "this machine (no SSH)")
    elif not _connect(state, options):
        return
    _probe(state, spec, rdzv, version, agent_hash)
    if spec is not None and host.name in (*spec.hosts, *spec.spares):
        _check_torch(state, spec)


def _connect(state: _Host, options: LinkOptions) -> bool:
    host = state.spec
    try:
        endpoint = options.config().resolve(host)
    except SshConfigError as exc:
        state.add("reach", False, str(exc), "fix the SSH config entry for this host")
        return False
    via = " via " + " → ".join(j.label() for j in endpoint.proxy_jump) if endpoint.proxy_jump \
        else ""
    try:
        connection = connect(host, options)
    except ConnectFailed as exc:
        if exc.state == HOSTKEY_UNKNOWN:
            state.add("reach", True, f"{endpoint.label()}{via}")
            state.add("host key", False, exc.detail,
                      f"check the fingerprint, then `cockpit hosts trust {host.name}` "
                      "(fetches the key through the jump host when there is one)")
        elif exc.state == HOSTKEY_CHANGED:
            state.add("reach", True, f"{endpoint.label()}{via}")
            state.add("host key", False, exc.detail)
        elif exc.state == AUTH_FAILED:
            state.add("reach", True, f"{endpoint.label()}{via}")
            state.add("auth", False, exc.detail,
                      "load the key into ssh-agent (`ssh-add`) or set IdentityFile")
        else:
            down = next((j for j in endpoint.proxy_jump
                         if exc.detail.startswith(f"jump host {j.label()}:")), None)
            fix = (f"the jump host {down.hostname} is down or unreachable from here (not "
                   f"the hosts behind it): check it with `ssh -p {down.port} "
                   f"{down.user}@{down.hostname}`" if down else
                   f"the jump host answered but cannot reach {endpoint.hostname}:"
                   f"{endpoint.port}: check the host is up" if "jump host" in exc.detail else
                   "check the host is up and its SSH port (Port in the SSH config)")
            if down is not None:  # said once for all its hosts (see `_jump_outages`)
                state.add("reach", False, f"behind jump host {down.label()}, which is down",
                          f"see jump host {down.label()} below")
                state.jump_down = (down.label(), exc.detail, fix)
            else:
                state.add("reach", False, f"{exc.detail}{via}", fix)
        return False
    state.runner = _Runner(connection)
    state.add("reach", True, f"{endpoint.label()}{via}")
    transport = connection.client.get_transport()
    key = transport.get_remote_server_key() if transport is not None else None
    if key is not None:
        from cockpit.transport.host_keys import fingerprint

        state.add("host key", True, f"{key.get_name()} {fingerprint(key)} (known)")
    method = getattr(getattr(transport, "auth_handler", None), "auth_method", None) or "?"
    keys = ("only the configured IdentityFile" if endpoint.identities_only
            else f"ssh-agent offers {_agent_keys()} key(s)")
    state.add("auth", True, f"{method} as {endpoint.user} ({keys})")
    return True


def _jump_outages(states: list[_Host]) -> list[Finding]:
    """A jump host that is down, once, naming the hosts behind it."""
    behind: dict[tuple[str, str, str], list[str]] = {}
    for state in states:
        if state.jump_down is not None:
            behind.setdefault(state.jump_down, []).append(state.spec.name)
    return [Finding(f"jump host {label}", "reach", False,
                    f"{detail} (hosts behind it: {', '.join(names)})", fix)
            for (label, detail, fix), names in behind.items()]


_agent_keys = agent_key_count


def _probe(state: _Host, spec: JobSpec | None, rdzv: tuple[str, int] | None,
           version: str, agent_hash: str) -> None:
    host = state.spec
    assert state.runner is not None
    dirs = {"state dir": host.state_dir}
    for n, run_dir in enumerate(host.run_dirs):
        dirs[f"run dir {n + 1}" if len(host.run_dirs) > 1 else "run dir"] = run_dir
    in_job = spec is not None and host.name in (*spec.hosts, *spec.spares)
    if spec is not None and in_job:
        dirs["job run dir"] = spec.run_dir
        dirs["checkpoint dir"] = _checkpoint_dir(spec)
    argument = {
        "dirs": dirs,
        "agent": commands.DEFAULT_AGENT_ARGV[0] if host.agent == AUTO_AGENT
        else commands.agent_argv(host.agent)[0],
        "zipapp": commands.zipapp_path(host.deploy_dir, version),
        "rdzv": list(rdzv) if rdzv and in_job else None,
    }
    command = commands.python_script(host.python, HOST_PROBE, json.dumps(argument))
    status, out, err = state.runner.run(command, PROBE_TIMEOUT)
    try:
        answer = json.loads(out.strip().splitlines()[-1]) if out.strip() else None
    except ValueError:
        answer = None
    if status != 0 or not isinstance(answer, dict):
        state.add("python", False,
                  f"`{host.python}` did not run the probe (status {status}): "
                  f"{(err or out).strip()[-300:]}",
                  "set `python` in the inventory to the host's Python (>= 3.8)")
        return
    state.probe = answer
    state.add("python", True, f"{host.python} {_word(answer.get('python'))}")
    _report_sampling(state, answer)
    _report_agent(state, answer, agent_hash)
    for item, where in dirs.items():
        _report_dir(state, item, where, answer.get("dirs", {}).get(item))


def _checkpoint_dir(spec: JobSpec) -> str:
    """The spec's checkpoint dir as each host's agent reads it (before `~` expands)."""
    ckpt = spec.checkpoint_dir
    return ckpt if ckpt.startswith(("/", "~")) else f"{spec.run_dir.rstrip('/')}/{ckpt}"


def _word(value: object, limit: int = 200) -> str:
    return printable(value if isinstance(value, str | int | float) else "?")[:limit]


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and 0 <= value < 1 << 20 else None


def _report_sampling(state: _Host, answer: dict[str, Any]) -> None:
    psutil = answer.get("psutil")
    if isinstance(psutil, str):
        state.add("psutil", True, f"psutil {_word(psutil)}: CPU, memory, disk, network")
    else:
        state.add("psutil", False, "no psutil: the agent sends host records with only load "
                  "and disk (a heartbeat), no CPU/memory/network",
                  f"`{state.spec.python} -m pip install --user psutil` on the host",
                  fatal=False)
    gpus = _count(answer.get("gpus"))
    if gpus is not None:
        state.add("gpus", True, f"{gpus} GPU(s) through NVML, driver {_word(answer.get('driver'))}")
    else:
        state.add("gpus", False, f"no NVML: {_word(answer.get('nvml'))}; no GPU samples",
                  "install the NVIDIA driver (libnvidia-ml.so.1) if this host has GPUs",
                  fatal=False)


def _report_agent(state: _Host, answer: dict[str, Any], agent_hash: str) -> None:
    host = state.spec
    on_path = answer.get("agent_on_path")
    pushed = answer.get("zipapp")
    if isinstance(on_path, str):
        state.add("agent", True, f"installed: {_word(on_path)}")
    elif host.agent != AUTO_AGENT:
        state.add("agent", False, f"agent command `{host.agent}` not found on the host",
                  'install it, or set agent = "auto" to have it pushed')
    elif pushed == agent_hash:
        state.add("agent", True, f"pushed, current ({agent_hash[:12]}) in {host.deploy_dir}")
    elif isinstance(pushed, str):
        state.add("agent", True, f"pushed, another build in {host.deploy_dir}: replaced at "
                  "the next connect")
    else:
        state.add("agent", True, f"not installed: pushed to {host.deploy_dir} at the first "
                  "connect (needs SFTP)")


def _report_dir(state: _Host, item: str, where: str, found: object) -> None:
    if not isinstance(found, dict):
        state.add(item, False, f"{where}: not checked")
        return
    if isinstance(found.get("error"), str):
        state.add(item, False, f"{where}: {_word(found['error'], 300)}",
                  f"choose a writable `{item.replace(' ', '_')}` or create it with the "
                  "right owner")
        return
    free = found.get("free")
    free = free if isinstance(free, int) and free >= 0 else None
    gib = f"{free / (1 << 30):.1f} GiB free" if free is not None else "free space unknown"
    made = "" if found.get("exists") else " (created when needed)"
    if free is not None and free < MIN_FREE:
        state.add(item, False, f"{where}: writable{made}, only {gib}",
                  "free some space: the agent's journal and checkpoints need it")
        return
    state.add(item, True, f"{where}: writable{made}, {gib}")


def _check_torch(state: _Host, spec: JobSpec) -> None:
    if state.runner is None:
        return
    command = commands.python_script(spec.python, TORCH_PROBE, "", workdir=spec.workdir,
                                     env=sorted(spec.env.items()))
    status, out, err = state.runner.run(command, TORCH_TIMEOUT)
    line = out.strip().splitlines()[-1] if out.strip() else ""
    if status == 0 and line.startswith("OK "):
        state.torch = _word(line[3:], 60)
        state.add("torch", True, f"{spec.python} imports torch {state.torch}")
        return
    why = line[6:] if line.startswith("ERROR ") else (err or out).strip()[-300:]
    state.add("torch", False, f"{spec.python} cannot import torch: {printable(why)}",
              f"install torch for {spec.python} on {state.spec.name}, or set `python` in "
              "the job spec to the interpreter that has it")


def torch_versions(found: dict[str, str]) -> list[Finding]:
    """One torch for the whole job (`found`: host -> the version its job Python
    imports): ranks whose torch differs (a host upgraded alone) may fail their
    rendezvous or hang in a collective whose wire format changed."""
    if len(set(found.values())) < 2:
        return []
    return [Finding("job", "torch", False, "the job's hosts import different torch "
                    "versions: " + ", ".join(f"{host} {v}" for host, v in found.items()),
                    "install the same torch version for the job's Python on every host")]


def _check_rendezvous(states: list[_Host], spec: JobSpec, rdzv: tuple[str, int]
                      ) -> list[Finding]:  # fmt: skip
    """Resolved from every host; served (port free) by one; reached from every host."""
    name, port = rdzv
    endpoint = f"{name}:{port}"
    members = [s for s in states if s.spec.name in (*spec.hosts, *spec.spares)
               and isinstance(s.probe.get("rdzv"), dict)]
    server: _Host | None = None
    for state in members:
        found = state.probe["rdzv"]
        if isinstance(found.get("error"), str):
            state.add("rendezvous", False,
                      f"cannot resolve {endpoint}: {_word(found['error'])}",
                      f"torchrun would retry for ever: set rendezvous.endpoint to a name or "
                      f"address every host resolves (an ssh alias is not one; try "
                      f"`getent hosts {name}` on {state.spec.name})")
            continue
        local = found.get("local")
        if local == "in use":
            state.add("port", False, f"{endpoint} is this host's and port {port} is in use",
                      "stop what holds it (`ss -ltnp`) or choose another port")
        elif local == "free" and (server is None or state.spec.name == spec.rdzv_host):
            server = state
    if server is None:
        if all(s.failed("rendezvous") for s in members) or not members:
            return []
        return [Finding("job", "rendezvous", False,
                        f"{endpoint} is no job host's address (or its port is taken)",
                        "c10d serves the store on the host whose address the endpoint "
                        "names: name one of the job's hosts")]
    assert server.runner is not None  # its `rdzv` probe ran through it
    listener = server.runner.open(commands.python_script(
        server.spec.python, LISTEN_PROBE, json.dumps([name, port])))
    try:
        try:
            heard = _first_line(listener)
        except OSError as exc:
            heard = str(exc)
        if heard != "listening":
            server.add("port", False, f"cannot listen on {endpoint}",
                       "stop what holds the port or choose another")
            return []
        server.add("port", True, f"{endpoint} is free here (this host serves the store)")

        def dial(state: _Host) -> None:
            assert state.runner is not None
            _, out, err = state.runner.run(commands.python_script(
                state.spec.python, CONNECT_PROBE, json.dumps([name, port])), PROBE_TIMEOUT)
            said = (out or err).strip()[-200:]
            if said == "ok":
                state.add("rendezvous", True, f"{endpoint} resolves and connects")
            else:
                state.add("rendezvous", False, f"cannot connect to {endpoint}: "
                          f"{printable(said)}",
                          f"open port {port} from {state.spec.name} to {server.spec.name} "
                          "(firewall), or use an address on a network both share")
        dialers = [s for s in members if not s.failed("rendezvous")]
        with ThreadPoolExecutor(max_workers=min(32, max(1, len(dialers)))) as pool:
            list(pool.map(dial, dialers))
    finally:
        _close(listener)
    return []


_MARKER = re.compile(r"\.cockpit-check-shared-[A-Za-z0-9_]{1,64}")


def _check_shared(states: list[_Host], spec: JobSpec) -> None:
    """On a job of several hosts, whether every host sees the checkpoint dir the others
    write: each agent restarts from the newest checkpoint in its own view of the dir, so
    a dir that is not shared (a `~` in homes that are not, a local disk) makes a restart
    on one host miss the checkpoints rank 0 wrote on another."""
    if len((*spec.hosts, *spec.spares)) < 2:
        return
    members = [s for s in states if s.spec.name in (*spec.hosts, *spec.spares)
               and s.runner is not None and isinstance(s.probe.get("dirs"), dict)
               and any(f.item == "checkpoint dir" and f.ok for f in s.findings)]
    if len(members) < 2:
        return
    path = _checkpoint_dir(spec)
    writer, readers = members[0], members[1:]

    def probe(state: _Host, *argument: object) -> str:
        assert state.runner is not None
        _, out, err = state.runner.run(commands.python_script(
            state.spec.python, SHARED_PROBE, json.dumps([path, *argument])), PROBE_TIMEOUT)
        return (out or err).strip()[-300:]

    name = probe(writer, None)
    if not _MARKER.fullmatch(name):
        writer.add("shared", False, f"{path}: could not leave a marker to look for from the "
                   f"other hosts: {printable(name)}", "run the check again")
        return
    try:
        with ThreadPoolExecutor(max_workers=min(32, len(readers))) as pool:
            seen = list(pool.map(lambda s: probe(s, name), readers))
    finally:
        probe(writer, name, True)
    for state, said in zip(readers, seen, strict=True):
        if said == "seen":
            state.add("shared", True, f"{path}: the same dir as on {writer.spec.name}")
        elif said.startswith("absent in "):
            state.add("shared", False, f"{path} is not the dir {writer.spec.name} sees: a "
                      f"folder {writer.spec.name} made in it is not in {printable(said[10:])}"
                      " here", "put `run_dir` (and an absolute `checkpoint_dir`) on storage "
                      "every host of the job mounts at the same path (NFS, Lustre …): a "
                      "restart reads the checkpoints the other hosts wrote")
        else:
            state.add("shared", False, f"{path}: could not look for the folder "
                      f"{writer.spec.name} made: {printable(said)[-200:]}",
                      "run the check again")
    if all(said == "seen" for said in seen):
        writer.add("shared", True, f"{path}: seen alike from {len(readers)} other host(s)")
