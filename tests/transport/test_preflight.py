"""`cockpit check` through a jump host (real sshd): a good set-up passes; each fault of a
bad one is named on its host with what to do."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from cockpit.control.jobspec import JobSpec, parse_jobspec
from cockpit.control.preflight import check, torch_versions
from cockpit.transport.ssh_config import SshConfig
from tests.harness.job_hosts import free_port
from tests.harness.sshd import SshdHost
from tests.transport.support import options_for, spec_for

NO_TORCH_PYTHON = "/usr/bin/python3"  # the system Python: no torch, no psutil
# sysfs refuses new files to everyone, root included (EPERM), as a read-only mount would.
UNWRITABLE_STATE_DIR = "/sys/cockpit-state"


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


def job(endpoint: str, python: str, run_dir: Path) -> JobSpec:
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
                "rendezvous", "checkpoint dir", "shared"} <= items, text
        # What the agent can sample there is said either way (a warning without NVML).
        assert {"psutil", "gpus"} <= {f.item for f in report.findings if f.host == name}
    assert "serves the store" in text and "all checks passed" in text
    # The bastion down: said once, as the bastion, with the hosts behind it.
    bastion.stop()
    down = check(hosts, options)
    jump = [f for f in down.failures() if f.host.startswith("jump host")]
    assert len(jump) == 1 and "hosts behind it: gpu1, gpu2" in jump[0].detail, down.text()
    assert "which is down" in (down.failed("gpu1", "reach") or jump[0]).detail


def test_check_names_each_fault_where_it_is(sshd_hosts, tmp_path: Path) -> None:
    bastion, one, two = sshd_hosts(3)
    # gpu1's key is not recorded anywhere. gpu2's state dir lies in a directory nobody
    # may create files in, root included (sysfs); its run dir sits under a plain file.
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
                      identity_file=None, state_dir=UNWRITABLE_STATE_DIR,
                      run_dirs=(str(blocker / "run"),))]
    # "gpu1" is an ssh alias the hosts themselves cannot resolve.
    spec = job("gpu1:29400", NO_TORCH_PYTHON, tmp_path / "run")
    report = check(hosts, options, spec)
    assert not report.ok
    unknown = report.failed("gpu1", "host key")
    assert unknown is not None and "cockpit hosts trust gpu1" in unknown.fix
    assert "ssh-keyscan" not in unknown.detail  # it could not reach a host behind a jump
    state = report.failed("gpu2", "state dir")
    assert state is not None and "cannot write in /sys" in state.detail, report.text()
    assert "choose a writable `state_dir`" in state.fix
    run = report.failed("gpu2", "run dir")
    assert run is not None and f"{blocker} is not a directory" in run.detail
    torch = report.failed("gpu2", "torch")
    assert torch is not None and "No module named 'torch'" in torch.detail
    assert f"install torch for {NO_TORCH_PYTHON} on gpu2" in torch.fix
    rdzv = report.failed("gpu2", "rendezvous")
    assert rdzv is not None and "cannot resolve gpu1:29400" in rdzv.detail
    assert "ssh alias" in rdzv.fix


def test_check_names_a_checkpoint_dir_the_hosts_do_not_share(sshd_hosts, tmp_path: Path
                                                            ) -> None:  # fmt: skip
    """The job's run dir is under `~`, and each host has a home of its own (here the
    hosts' Pythons run with different HOMEs): a restart on one host would not see the
    checkpoints written on the other. gpu2 is told so, with the fix; nothing the check
    made is left behind."""
    bastion, one, two = sshd_hosts(3)
    options = options_for([bastion], tmp_path)
    options.ssh_config = jump_config(tmp_path, bastion, [one, two])
    homes = [tmp_path / "home1", tmp_path / "home2"]
    hosts = []
    for n, (host, home) in enumerate(zip((one, two), homes, strict=True), 1):
        home.mkdir()
        wrapper = tmp_path / f"python-gpu{n}"
        wrapper.write_text(f'#!/bin/sh\nHOME={home} exec {sys.executable} "$@"\n')
        wrapper.chmod(0o755)
        hosts.append(spec_for(host, name=f"gpu{n}", address=f"gpu{n}", port=None, user=None,
                              identity_file=None, python=str(wrapper)))
    spec = job(f"{one.address}:{free_port()}", sys.executable, Path("~/runs/j"))
    report = check(hosts, options, spec)
    shared = report.failed("gpu2", "shared")
    assert shared is not None, report.text()
    assert shared.detail.startswith("~/runs/j/checkpoints is not the dir gpu1 sees")
    assert f"not in {homes[1]} here" in shared.detail
    assert "mounts at the same path" in shared.fix
    assert not report.ok and report.failed("gpu1", "shared") is None
    assert [list(home.iterdir()) for home in homes] == [[], []]


def test_hosts_importing_different_torch_versions_fail_the_job() -> None:
    """One version everywhere passes; a host upgraded alone fails the job, naming each
    host's version and the fix."""
    assert torch_versions({"gpu1": "2.4.0", "gpu2": "2.4.0"}) == []
    [finding] = torch_versions({"gpu1": "2.4.0", "gpu2": "2.5.1+cu124"})
    assert (finding.host, finding.item, finding.ok, finding.fatal) == ("job", "torch", False,
                                                                       True)
    assert finding.detail.endswith("versions: gpu1 2.4.0, gpu2 2.5.1+cu124")
    assert "same torch version" in finding.fix


def test_check_names_a_rendezvous_port_already_taken(sshd_hosts, tmp_path: Path) -> None:
    """Something listens on the endpoint's port on gpu1, the host whose address the
    endpoint names: the store could not listen there, and the launch would fail."""
    bastion, one, two = sshd_hosts(3)
    options = options_for([bastion], tmp_path)
    options.ssh_config = jump_config(tmp_path, bastion, [one, two])
    hosts = [spec_for(h, name=f"gpu{n}", address=f"gpu{n}", port=None, user=None,
                      identity_file=None) for n, h in enumerate((one, two), 1)]
    with socket.socket() as holder:
        holder.bind((one.address, 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        report = check(hosts, options, job(f"{one.address}:{port}", sys.executable,
                                           tmp_path / "run"))
    taken = report.failed("gpu1", "port")
    assert taken is not None, report.text()
    assert f"port {port} is in use" in taken.detail and "ss -ltnp" in taken.fix
    assert not report.ok
