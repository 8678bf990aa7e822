"""Pushing the single-file agent to a host that lacks it, and starting its daemon there.

A GPU host with only Python (no pip install rights, no shared filesystem) can still be
watched: the cockpit builds the agent zipapp once, copies it over SFTP with an atomic
rename, starts `python agent.pyz run` detached, and streams from it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import posixpath
import stat
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import paramiko

from cockpit.transport import commands
from cockpit.transport.inventory import HostSpec


class DeployError(RuntimeError):
    """The agent could not be pushed or started; the message says what to fix."""


@functools.lru_cache(maxsize=1)
def agent_content_hash() -> str:
    """SHA-256 of what the zipapp holds (the agent's sources and bundled modules).

    The zipapp itself is not byte-for-byte reproducible (zip entries carry the staging
    directory's times), so a pushed copy is recognised by this hash of its contents,
    written next to it as `agent-VERSION.pyz.sha256`.
    """
    import agent
    from agent.zipapp import bundled_modules

    package = Path(agent.__file__).resolve().parent
    digest = hashlib.sha256()
    files = sorted(p for p in package.rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts
                   and p.suffix not in (".pyc", ".pyz"))
    for path in [*files, *bundled_modules()]:
        name = path.relative_to(package).as_posix() if package in path.parents else path.name
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class DeployedAgent:
    python: str
    zipapp: str
    # Found on the host with the same content hash: not copied again.
    reused: bool = False
    # A daemon already ran on the state dir: not started again.
    daemon_was_running: bool = False

    def argv(self) -> list[str]:
        return commands.deployed_argv(self.python, self.zipapp)


class ZipappBuilder:
    """Builds the agent zipapp once per cockpit process, on first need."""

    def __init__(self, workdir: Path | None = None) -> None:
        self._workdir = workdir
        self._lock = threading.Lock()
        self._path: Path | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def version(self) -> str:
        import agent

        return str(agent.__version__)

    def path(self) -> Path:
        with self._lock:
            if self._path is None or not self._path.is_file():
                try:
                    from agent.zipapp import build_zipapp
                except ImportError as exc:
                    raise DeployError(f"cannot build the agent zipapp: {exc}") from exc
                if self._workdir is None:
                    self._tmp = tempfile.TemporaryDirectory(prefix="cockpit-zipapp-")
                    workdir = Path(self._tmp.name)
                else:
                    workdir = self._workdir
                    workdir.mkdir(parents=True, exist_ok=True)
                self._path = Path(build_zipapp(workdir / f"agent-{self.version}.pyz"))
            return self._path


def _remote_abspath(sftp: paramiko.SFTPClient, path: str) -> str:
    """Absolute host path; `~/x` and relative paths are taken from the login directory."""
    if path.startswith("/"):
        return path
    home = sftp.normalize(".")
    rest = path[2:] if path.startswith("~/") else ("" if path == "~" else path)
    return posixpath.join(home, rest) if rest else home


def _makedirs(sftp: paramiko.SFTPClient, directory: str) -> None:
    parts = [p for p in directory.split("/") if p]
    current = "/"
    for part in parts:
        current = posixpath.join(current, part)
        try:
            info = sftp.stat(current)
        except FileNotFoundError:
            sftp.mkdir(current, 0o755)
            continue
        if info.st_mode is not None and not stat.S_ISDIR(info.st_mode):
            raise DeployError(f"cannot create {directory}: {current} exists and is not a directory")


def _is_current(sftp: paramiko.SFTPClient, target: str, digest: str) -> bool:
    try:
        sftp.stat(target)
        with sftp.open(f"{target}.sha256", "r") as handle:
            return bool(handle.read(100).decode("ascii", "replace").strip() == digest)
    except (OSError, paramiko.SSHException):
        return False


def push_agent(client: paramiko.SSHClient, spec: HostSpec, builder: ZipappBuilder) -> DeployedAgent:
    """Copy the zipapp to the host unless the same build is there already, and start its
    daemon unless one runs; return how to run it."""
    digest = agent_content_hash()
    try:
        sftp = client.open_sftp()
    except (paramiko.SSHException, OSError) as exc:
        raise DeployError(
            f"cannot push the agent to {spec.name}: SFTP is unavailable ({exc}); install the "
            "agent on the host and set `agent` in the inventory"
        ) from exc
    try:
        deploy_dir = _remote_abspath(sftp, spec.deploy_dir)
        _makedirs(sftp, deploy_dir)
        target = commands.zipapp_path(deploy_dir, builder.version)
        reused = _is_current(sftp, target, digest)
        if not reused:
            staging = f"{target}.{uuid.uuid4().hex[:8]}.part"
            sftp.put(str(builder.path()), staging)
            sftp.chmod(staging, 0o755)
            try:  # a stale hash must never vouch for the new file
                sftp.remove(f"{target}.sha256")
            except OSError:
                pass
            sftp.posix_rename(staging, target)
            with sftp.open(f"{staging}.sha256", "w") as handle:
                handle.write(digest + "\n")
            sftp.posix_rename(f"{staging}.sha256", f"{target}.sha256")
    except DeployError:
        raise
    except (OSError, paramiko.SSHException) as exc:
        raise DeployError(f"cannot copy the agent to {spec.name}:{spec.deploy_dir}: {exc}") from exc
    finally:
        sftp.close()
    deployed = DeployedAgent(spec.python, target, reused)
    if daemon_running(client, deployed, spec.state_dir):
        return DeployedAgent(spec.python, target, reused, daemon_was_running=True)
    start_daemon(client, spec, deployed)
    return deployed


def daemon_running(client: paramiko.SSHClient, deployed: DeployedAgent, state_dir: str) -> bool:
    """Whether an agent daemon holds the state dir's lock (`agent status --json`): a
    second start would only be refused, one more line in agent.log per cockpit run."""
    command = commands.daemon_status(deployed.python, deployed.zipapp, state_dir)
    try:
        _, stdout, _ = client.exec_command(command, timeout=30)
        out = stdout.read(4096).decode("utf-8", "replace")
        if stdout.channel.recv_exit_status() != 0:
            return False
        info = json.loads(out.strip().splitlines()[-1])
    except (OSError, paramiko.SSHException, ValueError, IndexError):
        return False
    return isinstance(info, dict) and info.get("daemon") is True


def start_daemon(client: paramiko.SSHClient, spec: HostSpec, deployed: DeployedAgent) -> None:
    """Start the daemon detached; a second start on the same state dir exits by itself."""
    log_path = posixpath.join(posixpath.dirname(deployed.zipapp), "agent.log")
    command = commands.start_daemon(
        deployed.python, deployed.zipapp, spec.state_dir, spec.run_dirs, log_path
    )
    try:
        _, stdout, stderr = client.exec_command(command, timeout=30)
        out = stdout.read().decode("utf-8", "replace")
        err = stderr.read().decode("utf-8", "replace").strip()
        status = stdout.channel.recv_exit_status()
    except (OSError, paramiko.SSHException) as exc:
        raise DeployError(f"cannot start the agent daemon on {spec.name}: {exc}") from exc
    if status != 0 or "started" not in out:
        raise DeployError(
            f"cannot start the agent daemon on {spec.name} (status {status}): {err or out}"
        )
