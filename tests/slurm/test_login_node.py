"""Slurm's clients on a login node reached over SSH (a real sshd), as `login = "HOST"`
in a spec's [launcher] makes the cockpit do.

Over SSH a command is one shell line, so this is where quoting matters most: a job whose
name and extra `#SBATCH` value are hostile is written, submitted, watched and finished
through the SSH seam, and nothing but the job runs. The watch then streams both nodes'
agents through the login node (its SSH settings, the nodes' journals on shared storage),
as `cockpit watch` does when the compute nodes accept no SSH.
"""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from cockpit.app.slurm_cli import SlurmWatch
from cockpit.control.jobspec import JobSpec, parse_jobspec
from cockpit.control.slurm import SlurmJob, commands_for, launcher_of
from cockpit.sessions.live import LiveSession
from cockpit.transport.inventory import Inventory
from cockpit.transport.run_command import CommandResult, Commands, SshCommands
from tests.harness.slurm import SlurmCluster
from tests.harness.sshd import SshdHost
from tests.slurm.conftest import tiny_spec
from tests.transport.support import options_for, spec_for

pytestmark = [pytest.mark.e2e]

EVIL = "a $(touch pwned) `touch pwned` ';touch pwned;' \"x\" \\ * ~"
SBATCH_EVIL = EVIL.replace("\\", "")  # refused in #SBATCH values: sbatch unescapes it


def test_ssh_commands_pass_every_word_and_stdin_verbatim(
        sshd_hosts: Callable[..., list[SshdHost]], tmp_path: Path) -> None:
    host = sshd_hosts(1)[0]
    commands = SshCommands(spec_for(host), options_for([host], tmp_path))
    try:
        done = commands.run(["printf", "%s\\n", EVIL, "second word"])
        assert done.ok and done.stdout == f"{EVIL}\nsecond word\n", done
        target = tmp_path / "in $(touch pwned).txt"
        assert commands.run(["sh", "-c", 'cat > "$1"', "sh", str(target)],
                            stdin=EVIL.encode()).ok
        assert target.read_text() == EVIL
        failed = commands.run(["sh", "-c", "echo oops >&2; exit 3"])
        assert (failed.returncode, failed.stderr) == (3, "oops\n")
    finally:
        commands.close()
    assert not list(tmp_path.rglob("pwned")) and not list(Path.home().glob("pwned"))


class _LoginEnv:
    """The login node's Slurm configuration: a real one is in /etc/slurm, this test
    cluster's is named by SLURM_CONF, which an SSH session does not inherit."""

    def __init__(self, inner: Commands, conf: Path) -> None:
        self.inner, self.conf = inner, conf

    def run(self, argv: Sequence[str], stdin: bytes | None = None,
            timeout: float = 60.0) -> CommandResult:
        return self.inner.run(["env", f"SLURM_CONF={self.conf}", *argv], stdin, timeout)


def test_a_hostile_job_through_the_login_node(
        slurm: SlurmCluster, sshd_hosts: Callable[..., list[SshdHost]],
        tmp_path: Path) -> None:
    host = sshd_hosts(1)[0]
    text = tiny_spec(tmp_path, "n " + SBATCH_EVIL, "login",
                     "print('hello from the job')\n",
                     f"login = {json.dumps(host.name)}\n"
                     f"extra_sbatch = {json.dumps(['--comment=' + SBATCH_EVIL])}\n")
    spec = parse_jobspec(text, "login.toml")
    commands = commands_for(launcher_of(spec), Inventory((spec_for(host),)),
                            options_for([host], tmp_path))
    assert isinstance(commands, SshCommands)
    try:
        job = SlurmJob(spec, _LoginEnv(commands, slurm.conf))
        job.submit()
        ended = job.wait_ended(120)
        assert ended.state == "COMPLETED", ended
        assert job.attach() == job.job_id  # what a later command finds on the cluster
    finally:
        commands.close()
    shown = slurm.run("scontrol", "show", "job", "-o", str(job.job_id)).stdout
    assert f"JobName={spec.name} " in shown and f"Comment={SBATCH_EVIL} " in shown, shown
    logs = "".join(p.read_text() for p in (tmp_path / "runs" / "login" / "nodes")
                   .glob("*/logs/*.out"))
    assert logs.count("hello from the job") == 2, logs
    assert not list(tmp_path.rglob("pwned")) and not list(Path.home().glob("pwned"))
    _watch_through_the_login_node(slurm, host, spec, tmp_path)


def _watch_through_the_login_node(slurm: SlurmCluster, host: SshdHost, spec: JobSpec,
                                  tmp_path: Path) -> None:
    """The nodes are not in the inventory: each is streamed over the login node's SSH."""
    options = options_for([host], tmp_path)
    commands = SshCommands(spec_for(host), options)
    watch = SlurmWatch(spec, Inventory(()), _LoginEnv(commands, slurm.conf),
                       login=spec_for(host), known={})
    session = LiveSession(Inventory(()), tmp_path / "watch.duckdb", options)
    try:
        with session:
            watch.start(session.writer, session.fleet, every=0.5)
            deadline = time.monotonic() + 90
            while True:
                session.writer.flush()
                with session.store.cursor() as cur:
                    ended = {r[0] for r in cur.execute(
                        "SELECT host FROM event WHERE kind = 'job_exited'").fetchall()}
                if ended >= {"n1", "n2"} or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            links = {name: link.spec for name, link in session.fleet.links.items()}
            watch.stop()
    finally:
        commands.close()
    assert ended >= {"n1", "n2"}, (ended, session.fleet.status())
    for node in ("n1", "n2"):  # through the login node: its address, the node's journal
        assert (links[node].address, links[node].port) == (host.address, host.port)
        assert links[node].state_dir == f"{spec.run_dir}/agents/{node}"


def test_a_login_host_missing_from_the_inventory_is_named(tmp_path: Path) -> None:
    spec = parse_jobspec(textwrap.dedent(f"""\
        name = "j"
        nproc_per_node = 1
        script = "t.py"
        run_dir = {json.dumps(str(tmp_path))}
        [launcher]
        kind = "slurm"
        login = "login9"
    """), "j.toml")
    with pytest.raises(ValueError, match="login9"):
        commands_for(launcher_of(spec), Inventory(()))
