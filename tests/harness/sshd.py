"""Real OpenSSH `sshd` processes on loopback addresses, one per pretend host.

The transport is only trustworthy if it is tested against the SSH server people actually
run, so the end-to-end tests start `/usr/sbin/sshd` with generated host and user keys on
127.0.0.2, 127.0.0.3, … Each pretend host also gets its own agent state and run dirs,
because every host here shares one filesystem.

Used by `tests/conftest.py` (fixture `sshd_hosts`) and by `bench/fleet.py`, so this module
does not import pytest.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")
REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 10.0
# OpenSSH's MAX_LISTEN_SOCKS: more ListenAddress lines make sshd refuse to start.
MAX_LISTEN_ADDRESSES = 16


class SshdUnavailable(RuntimeError):
    """No usable OpenSSH server binary on this machine."""


def find_sshd() -> str:
    """Path of the sshd binary, or raise `SshdUnavailable` saying how to get one."""
    for candidate in (*SSHD_CANDIDATES, shutil.which("sshd")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise SshdUnavailable(
        "OpenSSH sshd not found (looked in /usr/sbin, /usr/local/sbin and PATH); "
        "install it with `make sshd` or `apt-get install openssh-server`"
    )


def agent_command() -> list[str]:
    """argv that runs this checkout's agent from a remote login shell.

    The remote command starts in the login user's home with sshd's environment, so it
    names this interpreter by absolute path and puts the checkout on PYTHONPATH.
    """
    return ["env", f"PYTHONPATH={REPO_ROOT}", sys.executable, "-m", "agent"]


def agent_command_str() -> str:
    """`agent_command()` as one shell-quoted string (what an inventory's `agent` holds)."""
    return shlex.join(agent_command())


def _free_port(address: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def _keygen(path: Path, comment: str) -> str:
    """Generate an ed25519 key pair at `path`; return the public key line."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return path.with_suffix(".pub").read_text().strip()


def _port_open(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        try:
            sock.connect((address, port))
        except OSError:
            return False
        return True


def loopback_address(index: int) -> str:
    """The index-th usable loopback address: 127.0.0.2 is index 2, then 127.0.1.1 …

    Linux answers on all of 127/8, so hundreds of pretend hosts need no setup; the
    .0 and .255 host parts are skipped.
    """
    third, fourth = divmod(index - 1, 254)
    return f"127.0.{third}.{fourth + 1}"


def known_hosts_entry(address: str, port: int, host_key_pub: str) -> str:
    """One known_hosts line in OpenSSH's `[addr]:port keytype base64` form."""
    key_type, key_b64 = host_key_pub.split()[:2]
    name = address if port == 22 else f"[{address}]:{port}"
    return f"{name} {key_type} {key_b64}"


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(procs: list[psutil.Process], timeout: float = 10.0) -> None:
    """Wait for killed non-children to vanish (psutil.wait_procs polls too lazily)."""
    deadline = time.monotonic() + timeout
    alive = list(procs)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _alive(p)]
        if alive:
            time.sleep(0.005)


@dataclass
class SshdProcess:
    """One sshd listening on one or more loopback addresses with one host key.

    stop() kills the listener and every session it spawned (with their commands), which is
    what a consumer sees when a host's network or sshd dies: connections drop at once.
    start() brings it back on the same addresses, port and host key.
    """

    workdir: Path
    addresses: list[str]
    port: int
    host_key_path: Path
    authorized_keys: Path
    max_sessions: int = 64
    # False starts sshd with -r: each connection is served by a fork of the listener
    # instead of a fresh exec of sshd, which spares about 15 ms of CPU per connection
    # (dynamic linking, config and key loading); what the client sees is the same.
    # A bench that connects hundreds of pretend hosts on the same cores as the cockpit
    # uses it, so that it measures the cockpit rather than the pretend hosts' start-up.
    reexec: bool = True
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def config_path(self) -> Path:
        return self.workdir / "sshd_config"

    @property
    def log_path(self) -> Path:
        return self.workdir / "sshd.log"

    def write_config(self) -> None:
        lines = [f"Port {self.port}"]
        lines += [f"ListenAddress {address}" for address in self.addresses]
        lines += [
            f"HostKey {self.host_key_path}",
            f"PidFile {self.workdir / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.authorized_keys}",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            "StrictModes no",
            "UsePAM no",
            "PermitRootLogin prohibit-password",
            "Subsystem sftp internal-sftp",
            f"MaxStartups {max(10, self.max_sessions * 2)}",
            "MaxSessions 16",
            "ClientAliveInterval 0",
            "UseDNS no",
            # bash sources ~/.bashrc for ssh commands unless it thinks it is nested
            # (SHLVL >= 1); a login user's heavy shell setup (pyenv, conda) would
            # otherwise run for every session and dominate the tests' and bench's cost.
            "SetEnv SHLVL=1",
            "LogLevel ERROR",
        ]
        self.config_path.write_text("\n".join(lines) + "\n")

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        self.write_config()
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            self.proc = subprocess.Popen(
                [find_sshd(), "-D", "-e", *([] if self.reexec else ["-r"]),
                 "-f", str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        finally:
            log.close()
        deadline = time.monotonic() + START_TIMEOUT
        pending = list(self.addresses)
        while pending:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"sshd exited with status {self.proc.returncode} while starting on "
                    f"{self.addresses[0]}:{self.port}; its log:\n{self.log_text()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"sshd did not accept connections on {pending[0]}:{self.port} within "
                    f"{START_TIMEOUT:.0f} s; its log:\n{self.log_text()}"
                )
            if _port_open(pending[0], self.port):
                pending.pop(0)
            else:
                time.sleep(0.02)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            tree = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            tree = []
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)
        for child in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        proc.wait(timeout=10)
        _wait_gone(tree)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return "(no log)"


@dataclass
class SshdHost:
    """A pretend host: one loopback address served by a real sshd, plus its own dirs."""

    name: str
    address: str
    port: int
    user: str
    key_path: Path
    known_hosts_path: Path
    host_key_pub: str
    state_dir: Path
    run_dir: Path
    server: SshdProcess = field(repr=False)

    @property
    def target(self) -> str:
        return f"{self.user}@{self.address}:{self.port}"

    def known_hosts_line(self) -> str:
        return known_hosts_entry(self.address, self.port, self.host_key_pub)

    def stop(self) -> None:
        """Kill this host's sshd and its sessions (other hosts on the same sshd too)."""
        self.server.stop()

    def start(self) -> None:
        self.server.start()

    def restart(self) -> None:
        self.stop()
        self.start()


@contextlib.contextmanager
def sshd_hosts(
    n: int,
    base_dir: Path | None = None,
    hosts_per_process: int = 1,
    first_address: int = 2,
    reexec: bool = True,
) -> Iterator[list[SshdHost]]:
    """Start `n` pretend hosts on 127.0.0.<first_address>…, stopped on exit.

    With `hosts_per_process` > 1 one sshd serves several addresses (to spare processes
    when simulating hundreds of hosts); those hosts then stop and start together.
    `reexec` False: see `SshdProcess.reexec`.
    """
    find_sshd()
    if not 1 <= hosts_per_process <= MAX_LISTEN_ADDRESSES:
        raise ValueError(
            f"one sshd listens on at most {MAX_LISTEN_ADDRESSES} addresses, "
            f"asked for {hosts_per_process}"
        )
    if n < 1 or n > 4000:
        raise ValueError(f"between 1 and 4000 loopback hosts, asked for {n}")
    owned = base_dir is None
    root = Path(tempfile.mkdtemp(prefix="cockpit-sshd-")) if base_dir is None else base_dir
    root.mkdir(parents=True, exist_ok=True)
    user = getpass.getuser()
    user_key = root / "id_ed25519"
    user_pub = _keygen(user_key, "cockpit-test-user")
    authorized = root / "authorized_keys"
    authorized.write_text(user_pub + "\n")
    known_hosts = root / "known_hosts"
    servers: list[SshdProcess] = []
    hosts: list[SshdHost] = []
    try:
        addresses = [loopback_address(first_address + i) for i in range(n)]
        for start in range(0, n, hosts_per_process):
            group = addresses[start : start + hosts_per_process]
            workdir = root / f"sshd-{group[0]}"
            workdir.mkdir()
            host_key = workdir / "ssh_host_ed25519_key"
            host_pub = _keygen(host_key, f"host-{group[0]}")
            server = SshdProcess(
                workdir=workdir,
                addresses=group,
                port=_free_port(group[0]),
                host_key_path=host_key,
                authorized_keys=authorized,
                max_sessions=len(group),
                reexec=reexec,
            )
            servers.append(server)
            for address in group:
                name = f"host{len(hosts) + 1}"
                host_root = root / name
                hosts.append(
                    SshdHost(
                        name=name,
                        address=address,
                        port=server.port,
                        user=user,
                        key_path=user_key,
                        known_hosts_path=known_hosts,
                        host_key_pub=host_pub,
                        state_dir=host_root / "state",
                        run_dir=host_root / "runs",
                        server=server,
                    )
                )
        known_hosts.write_text("".join(h.known_hosts_line() + "\n" for h in hosts))
        for host in hosts:
            host.state_dir.mkdir(parents=True)
            host.run_dir.mkdir(parents=True)
        for server in servers:
            server.start()
        yield hosts
    finally:
        for server in servers:
            server.stop()
        if owned:
            shutil.rmtree(root, ignore_errors=True)


def require_sshd_or_explain() -> str | None:
    """None when sshd is usable, else the reason (callers skip or fail with it)."""
    try:
        find_sshd()
    except SshdUnavailable as exc:
        return str(exc)
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen not found; install openssh-client"
    return None
