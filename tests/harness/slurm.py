"""A real single-machine Slurm cluster: munged, slurmctld and two slurmd faking nodes.

The Slurm launcher is only trustworthy if it is tested against Slurm itself, so the
tests start Debian's daemons as root with no systemd, every file in a temp dir: a
private munged (its own key and socket), one slurmctld, and one `slurmd -N NAME` per
pretend node, each on its own loopback address (n1 on 127.0.0.2, n2 on 127.0.0.3), all
sharing this machine's CPUs. Clients find the cluster through `SLURM_CONF`.

Installs the packages when missing (`apt-get install -y slurmctld slurmd slurm-client
munge`, after `apt-get update` if the first try fails). Used as a pytest fixture by
`tests/slurm/conftest.py`; this module does not import pytest.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
NODES = (("n1", "127.0.0.2"), ("n2", "127.0.0.3"))
PARTITION = "debug"
START_TIMEOUT = 30.0


class SlurmUnavailable(RuntimeError):
    """Slurm cannot run here (not root, packages missing and not installable)."""


def _have_binaries() -> bool:
    return all(shutil.which(b) or os.path.exists("/usr/sbin/" + b)
               for b in ("slurmctld", "slurmd", "sbatch", "munged"))


def ensure_installed() -> None:
    """Install the Debian packages when a binary is missing (root only)."""
    if _have_binaries():
        return
    if os.geteuid() != 0:
        raise SlurmUnavailable("Slurm is not installed and this is not root; install "
                               + " ".join(PACKAGES))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES]
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
        done = subprocess.run(install, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SlurmUnavailable("apt-get install failed: " + done.stderr[-2000:])
    if not _have_binaries():
        raise SlurmUnavailable("Slurm binaries still missing after installing " +
                               " ".join(PACKAGES))


def _sbin(name: str) -> str:
    return shutil.which(name) or "/usr/sbin/" + name


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    nodes: tuple[str, ...] = tuple(n for n, _ in NODES)
    partition: str = PARTITION
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """The environment a Slurm client (sbatch, squeue…) needs to find this cluster."""
        return dict(os.environ, SLURM_CONF=str(self.conf))

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True,
                              check=check, timeout=30)

    def log(self, name: str) -> str:
        path = self.root / "log" / name
        return path.read_text(errors="replace") if path.exists() else ""

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False).stdout
        return dict(line.split(None, 1) for line in out.splitlines() if " " in line)

    def queue(self) -> list[str]:
        """Job ids in squeue (pending, running, completing)."""
        return self.run("squeue", "-h", "-o", "%i", check=False).stdout.split()

    def stop(self) -> None:
        # Jobs first, so no slurmstepd outlives its slurmd with a job's processes.
        with contextlib.suppress(Exception):
            self.run("scancel", "--full", "--signal=KILL", "-u", "root", check=False)
            deadline = time.monotonic() + 15
            while self.queue() and time.monotonic() < deadline:
                time.sleep(0.3)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        _kill_stepds(self.root)


def _kill_stepds(root: Path) -> None:
    """slurmstepd processes of this cluster left behind, found by their spool dir or a
    file of the cluster they hold open (a step's slurmstepd names only its job and step,
    `slurmstepd: [12.0]`, once it runs: it keeps the slurmd's log open)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "slurmstepd" in cmd and (str(root) in cmd or _holds_open(entry, root)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)


def _holds_open(proc: Path, root: Path) -> bool:
    try:
        fds = list((proc / "fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(fd).startswith(f"{root}/"):
                return True
    return False


def _config(root: Path, ctld_port: int, ports: dict[str, int],
            settings: Mapping[str, str] | None = None) -> str:
    """slurm.conf; `settings` replace (or add) a KEY=VALUE line each."""
    cpus = os.cpu_count() or 1
    lines = [
        "ClusterName=cockpit",
        # Job ids from a random start: two clusters at once (test workers) then give
        # their jobs different ids, so different rendezvous ports (derived from the id).
        f"FirstJobId={random.randrange(1000, 1_000_000)}",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={root / 'munge' / 'munge.socket'}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}/%n",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd'}-%n.pid",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log'}/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SchedulerType=sched/backfill",
        "MpiDefault=none",
        # A node an admin sets DOWN (a node failure, in the tests) stays down with its
        # reason until set back; one DOWN for not responding returns when it answers.
        "ReturnToService=1",
        # Each finished job's completion record, appended to a text file: what the
        # cockpit reads once slurmctld forgot a job and there is no accounting (sacct).
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={root / 'jobcomp.txt'}",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "MinJobAge=300",
        "KillWait=5",
        "InactiveLimit=0",
        "SchedulerParameters=sched_interval=1",
    ]
    for key, value in (settings or {}).items():
        lines = [line for line in lines if line.split("=", 1)[0] != key]
        lines.append(f"{key}={value}")
    for name, addr in NODES:
        lines.append(f"NodeName={name} NodeAddr={addr} NodeHostname={name} "
                     f"Port={ports[name]} CPUs={cpus} State=UNKNOWN")
    lines.append(f"PartitionName={PARTITION} Nodes={','.join(n for n, _ in NODES)} "
                 "Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def _start_munged(root: Path) -> subprocess.Popen:
    mdir = root / "munge"
    mdir.mkdir(mode=0o700)
    key = mdir / "munge.key"
    subprocess.run([_sbin("mungekey"), "-c", "-k", str(key)], check=True,
                   capture_output=True)
    proc = subprocess.Popen(
        [_sbin("munged"), "-F", "--force", f"--socket={mdir / 'munge.socket'}",
         f"--key-file={key}", f"--pid-file={mdir / 'munged.pid'}",
         f"--log-file={root / 'log' / 'munged.log'}", f"--seed-file={mdir / 'seed'}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + START_TIMEOUT
    while not (mdir / "munge.socket").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SlurmUnavailable("munged did not start: "
                                   + (root / "log" / "munged.log").read_text(errors="replace")
                                   if (root / "log" / "munged.log").exists() else "no log")
        time.sleep(0.05)
    return proc


def start_cluster(root: Path, settings: Mapping[str, str] | None = None) -> SlurmCluster:
    """Start munged, slurmctld and the two slurmd under `root`; wait until both nodes
    are idle. The caller stops it with `cluster.stop()`."""
    ensure_installed()
    if os.geteuid() != 0:
        raise SlurmUnavailable("the test cluster runs its daemons as root")
    for sub in ("log", "state", "spool/n1", "spool/n2"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    ports = {name: _free_port() for name, _ in NODES}
    conf = root / "slurm.conf"
    conf.write_text(_config(root, _free_port(), ports, settings))
    # slurmd reads cgroup.conf only with cgroup plugins; an empty one keeps it quiet.
    (root / "cgroup.conf").write_text("")
    cluster = SlurmCluster(root, conf)
    try:
        cluster.procs.append(_start_munged(root))
        env = cluster.env
        cluster.procs.append(subprocess.Popen(
            [_sbin("slurmctld"), "-D", "-i", "-f", str(conf)], env=env,
            stdout=open(root / "log" / "slurmctld.out", "ab"), stderr=subprocess.STDOUT))  # noqa: SIM115
        for name, _ in NODES:
            cluster.procs.append(subprocess.Popen(
                [_sbin("slurmd"), "-D", "-N", name, "-f", str(conf)], env=env,
                stdout=open(root / "log" / f"slurmd-{name}.out", "ab"),  # noqa: SIM115
                stderr=subprocess.STDOUT))
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            states = cluster.node_states()
            if states and all(states.get(n, "").startswith("idle") for n, _ in NODES):
                return cluster
            dead = [p.args[0] for p in cluster.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise SlurmUnavailable(
                    f"Slurm did not come up (exited: {dead}, nodes: {states}); slurmctld log:"
                    f"\n{cluster.log('slurmctld.log')[-3000:]}")
            time.sleep(0.2)
    except BaseException:
        cluster.stop()
        raise


@contextlib.contextmanager
def slurm_cluster(settings: Mapping[str, str] | None = None) -> Iterator[SlurmCluster]:
    """A started cluster, stopped and removed on exit; `settings` replace slurm.conf
    lines (`{"MinJobAge": "2"}`)."""
    root = Path(tempfile.mkdtemp(prefix="slurm-"))
    cluster = start_cluster(root, settings)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
