"""`cockpit check`, `cockpit hosts trust` and `cockpit launch` as typed, with
`--ssh-config` naming a bastion (ProxyJump), UserKnownHostsFile and StrictHostKeyChecking."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.sshd import REPO_ROOT, SshdHost, agent_command_str

pytestmark = [pytest.mark.e2e]


def cockpit(tmp_path: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    # The cockpit's own known_hosts (user data dir) must stay out of the test.
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "XDG_DATA_HOME": str(tmp_path / "xdg")}
    return subprocess.run([sys.executable, "-m", "cockpit", *args], capture_output=True,
                          text=True, env=env, cwd=REPO_ROOT, timeout=120, input=stdin)


def setup(tmp_path: Path, hosts: list[SshdHost]) -> tuple[Path, Path, Path]:
    """(ssh config, inventory, the gpus' UserKnownHostsFile): gpu1 strict (the default),
    gpu2 `StrictHostKeyChecking accept-new`, both only through the bastion."""
    bastion, one, two = hosts
    bastion_known = tmp_path / "bastion_known"
    bastion_known.write_text(bastion.known_hosts_line() + "\n")
    gpus_known = tmp_path / "gpus_known"
    config = tmp_path / "ssh_config"
    text = (f"Host bastion\n  HostName {bastion.address}\n  Port {bastion.port}\n"
            f"  UserKnownHostsFile {bastion_known}\n\n"
            "Host gpu2\n  StrictHostKeyChecking accept-new\n\n")
    for n, host in enumerate((one, two), 1):
        text += f"Host gpu{n}\n  HostName {host.address}\n  Port {host.port}\n\n"
    text += (f"Host *\n  User {bastion.user}\n  IdentityFile {bastion.key_path}\n"
             f"  IdentitiesOnly yes\n\nHost gpu*\n  ProxyJump bastion\n"
             f"  UserKnownHostsFile {gpus_known}\n")
    config.write_text(text)
    inventory = tmp_path / "hosts.toml"
    inventory.write_text("".join(
        f'[[hosts]]\nname = "gpu{n}"\naddress = "gpu{n}"\n'
        f"state_dir = {json.dumps(str(h.state_dir))}\nagent = {json.dumps(agent_command_str())}\n\n"
        for n, h in enumerate((one, two), 1)))
    return config, inventory, gpus_known


def test_check_trust_and_accept_new_from_the_given_ssh_config(sshd_hosts, tmp_path: Path
                                                              ) -> None:  # fmt: skip
    hosts = sshd_hosts(3)
    _, one, two = hosts
    config, inventory, gpus_known = setup(tmp_path, hosts)
    first = cockpit(tmp_path, "check", str(inventory), "--ssh-config", str(config))
    assert first.returncode == 1, first.stdout + first.stderr
    # gpu1 (strict) is refused with the way to trust it; gpu2 (accept-new) is recorded
    # in the UserKnownHostsFile the config names.
    assert "cockpit hosts trust gpu1" in first.stdout
    assert f"[{two.address}]:{two.port} ssh-ed25519" in gpus_known.read_text()
    assert one.address not in gpus_known.read_text()

    refused = cockpit(tmp_path, "hosts", "trust", "gpu1", "--ssh-config", str(config),
                      stdin="n\n")
    assert refused.returncode == 1 and "not recorded" in refused.stdout
    trusted = cockpit(tmp_path, "hosts", "trust", "gpu1", "--ssh-config", str(config),
                      "--yes")
    assert trusted.returncode == 0, trusted.stdout + trusted.stderr
    assert "SHA256:" in trusted.stdout and f"recorded in {gpus_known}" in trusted.stdout
    again = cockpit(tmp_path, "check", str(inventory), "--ssh-config", str(config))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "all checks passed" in again.stdout and "via " in again.stdout
    # Every key went where the config said, none into the cockpit's own file.
    assert not list((tmp_path / "xdg").rglob("known_hosts*"))

    # The key came through the jump host: with the bastion down (the host itself up),
    # it cannot be fetched, and the error names the bastion.
    bastion = hosts[0]
    bastion.stop()
    cut = cockpit(tmp_path, "hosts", "trust", "gpu1", "--ssh-config", str(config), "--yes")
    assert cut.returncode != 0, cut.stdout + cut.stderr
    assert f"jump host {bastion.user}@{bastion.address}:{bastion.port}" in cut.stderr, \
        cut.stderr


def test_launch_with_an_unresolvable_endpoint_is_refused_before_anything_starts(
    sshd_hosts, tmp_path: Path
) -> None:
    hosts = sshd_hosts(3)
    config, inventory, gpus_known = setup(tmp_path, hosts)
    gpus_known.write_text("".join(h.known_hosts_line() + "\n" for h in hosts[1:]))
    job = tmp_path / "job.toml"
    job.write_text(f'name = "j"\nhosts = ["gpu1", "gpu2"]\nnproc_per_node = 1\n'
                   f'script = "train.py"\npython = {json.dumps(sys.executable)}\n'
                   f'run_dir = {json.dumps(str(tmp_path / "run"))}\n'
                   '[rendezvous]\nendpoint = "gpu1:29400"\n')
    store = tmp_path / "launch.duckdb"
    launched = cockpit(tmp_path, "launch", str(job), "--inventory", str(inventory),
                       "--ssh-config", str(config), "--store", str(store))
    assert launched.returncode == 2, launched.stdout + launched.stderr
    assert "cannot resolve gpu1:29400" in launched.stderr
    assert "nothing was started" in launched.stderr
    assert not store.exists()  # no session was opened, no agent asked anything
    assert [list(h.state_dir.iterdir()) for h in hosts[1:]] == [[], []]
    assert not (tmp_path / "run").exists()  # no host made the job's run dir
    # Refused for the endpoint alone: the hosts, keys and torch all passed through the jump.
    assert "via " in launched.stderr
    assert "2 check(s) failed: gpu1 rendezvous, gpu2 rendezvous\n" in launched.stderr, \
        launched.stderr
