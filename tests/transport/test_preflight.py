"""`cockpit check` through a jump host (real sshd): a good set-up passes; each fault of a
bad one is named on its host with what to do."""

from __future__ import annotations

import sys
from pathlib import Path

from cockpit.control.jobspec import parse_jobspec
from cockpit.control.preflight import check
from cockpit.transport.ssh_config import SshConfig
from tests.harness.job_hosts import free_port
from tests.harness.sshd import SshdHost
from tests.transport.support import options_for, spec_for

NO_TORCH_PYTHON = "/usr/bin/python3"  # the system Python: no torch, no psutil


def jump_config(tmp_path: Path, bastion: SshdHost, hosts: list[SshdHost]) -> SshConfig:
    """`gpuN` aliases reachable only through `bastion` (ProxyJump)."""
    text = (f"Host bastion\n  HostName {bastion.address}\n  Port {bastion.port}\n"
            f"  User {bastion.user}\n  IdentityFile {bastion.key_path}\n\n")
    for n, host in enumerate(hosts, 1):
        text += (f"Host gpu{n}\n  HostName {host.address}\n  Port {host.port}\n"
                 f"  User {host.user}\n  IdentityFile {host.key_path}\n  ProxyJump bastion\n\n")
    path = tmp_path / "ssh_config"
    path.write_text(text)
    return SshConfig(path)


def job(endpoint: str, python: str, run_dir: Path) -> object:
    return parse_jobspec(
        f'name = "j"\nhosts = ["gpu1", "gpu2"]\nnproc_per_node = 1\nscript = "train.py"\n'
        f'python = "{python}"\nrun_dir = "{run_dir}"\n'
        f'[rendezvous]\nendpoint = "{endpoint}"\n', known_hosts=["gpu1", "gpu2"])


def test_check_through_a_jump_host_passes_on_a_good_setup(sshd_hosts, tmp_path: Path) -> None:
    bastion, one, two = sshd_hosts(3)
    options = options_for([bastion], tmp_path)
    options.ssh_config = jump_config(tmp_path, bastion, [one, two])
    hosts = [spec_for(h, name=f"gpu{n}", address=f"gpu{n}", port=None, user=None,
                      identity_file=None, agent="auto", run_dirs=(str(h.run_dir),))
             for n, h in enumerate((one, two), 1)]
    spec = job(f"{one.address}:{free_port()}", sys.executable, tmp_path / "run")
    report = check(hosts, options, spec)
    assert report.ok, report.text()
    text = report.text()
    assert f"via {bastion.user}@{bastion.address}:{bastion.port}" in text
    for name in ("gpu1", "gpu2"):
        items = {f.item for f in report.findings if f.host == name and f.ok}
        assert {"reach", "host key", "auth", "python", "agent", "state dir", "torch",
                "rendezvous", "checkpoint dir"} <= items, text
    assert "serves the store" in text and "all checks passed" in text
    # The bastion down: said once, as the bastion, with the hosts behind it.
    bastion.stop()
    down = check(hosts, options)
    jump = [f for f in down.failures() if f.host.startswith("jump host")]
    assert len(jump) == 1 and "hosts behind it: gpu1, gpu2" in jump[0].detail, down.text()
    assert "which is down" in (down.failed("gpu1", "reach") or jump[0]).detail


def test_check_names_each_fault_where_it_is(sshd_hosts, tmp_path: Path) -> None:
    bastion, one, two = sshd_hosts(3)
    # gpu1's key is not recorded anywhere; gpu2's state dir sits under a plain file.
    known = tmp_path / "known_hosts"
    known.write_text(bastion.known_hosts_line() + "\n" + two.known_hosts_line() + "\n")
    options = options_for([], tmp_path)
    options.known_hosts.extra_files = [known]
    options.ssh_config = jump_config(tmp_path, bastion, [one, two])
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    hosts = [spec_for(one, name="gpu1", address="gpu1", port=None, user=None,
                      identity_file=None),
             spec_for(two, name="gpu2", address="gpu2", port=None, user=None,
                      identity_file=None, state_dir=str(blocker / "state"))]
    # "gpu1" is an ssh alias the hosts themselves cannot resolve.
    spec = job("gpu1:29400", NO_TORCH_PYTHON, tmp_path / "run")
    report = check(hosts, options, spec)
    assert not report.ok
    unknown = report.failed("gpu1", "host key")
    assert unknown is not None and "cockpit hosts trust gpu1" in unknown.fix
    assert "ssh-keyscan" not in unknown.detail  # it could not reach a host behind a jump
    state = report.failed("gpu2", "state dir")
    assert state is not None and "is not a directory" in state.detail
    torch = report.failed("gpu2", "torch")
    assert torch is not None and "No module named 'torch'" in torch.detail
    rdzv = report.failed("gpu2", "rendezvous")
    assert rdzv is not None and "cannot resolve gpu1:29400" in rdzv.detail
    assert "ssh alias" in rdzv.fix
