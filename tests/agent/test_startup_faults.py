"""The start-up fault classifier on torchrun's own output, captured from real runs of
torch 2.x torchrun on this machine (tests/agent/data/torchrun_startup/):

- unresolvable.err: `--rdzv-backend=c10d --rdzv-endpoint=nonexistent-host:29400`;
- unreachable.err: `--nnodes=2 --rdzv-endpoint=127.0.0.1:29411 --rdzv-conf is_host=false`
  with nothing listening there;
- port_in_use.err: `--rdzv-endpoint=127.0.0.1:29422 --rdzv-conf is_host=true` while
  another process held the port;
- import_error.err: `--nproc-per-node=2 --tee=3` of a script importing a missing module,
  with the agent's `[rank${rank}]:` line prefix.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.job import startup_faults as sf

DATA = Path(__file__).parent / "data" / "torchrun_startup"


def faults(name: str) -> list[sf.StartupFault]:
    watch = sf.StartupWatch()
    lines = (DATA / name).read_text(encoding="utf-8").splitlines()
    return [f for f in map(watch.feed, lines) if f is not None]


def test_an_unresolvable_endpoint_is_named_once_with_the_fix() -> None:
    found = faults("unresolvable.err")
    # c10d logs the lookup failure on every retry, then times the connect out: one fault,
    # the name (the timeout that follows is its consequence, not a second fault).
    assert [f.code for f in found] == [sf.UNRESOLVABLE]
    fault = found[0]
    assert fault.where == {"endpoint": "nonexistent-host:29400"}
    assert "does not resolve on this host" in fault.what
    assert "Name or service not known" in fault.what
    assert "getent hosts nonexistent-host" in fault.fix
    assert "gai error: -2" in fault.line


def test_an_unreachable_endpoint_is_named_with_its_timeout() -> None:
    found = faults("unreachable.err")
    assert [f.code for f in found] == [sf.UNREACHABLE]
    fault = found[0]
    assert fault.where == {"endpoint": "127.0.0.1:29411"}
    assert "for 60 s" in fault.what
    assert "nc -vz 127.0.0.1 29411" in fault.fix


def test_a_port_in_use_names_the_port() -> None:
    found = faults("port_in_use.err")
    assert [f.code for f in found] == [sf.PORT_IN_USE]
    assert found[0].where == {"port": 29422}
    assert "ss -ltnp 'sport = :29422'" in found[0].fix


def test_an_import_error_is_named_once_for_all_ranks_with_the_first_rank() -> None:
    found = faults("import_error.err")
    assert [f.code for f in found] == [sf.IMPORT_ERROR]
    assert found[0].where == {"module": "nonexistent_module_xyz", "rank": 0}
    assert "no module nonexistent_module_xyz" in found[0].what
    assert "install nonexistent_module_xyz" in found[0].fix


@pytest.mark.parametrize("line", [
    # Only the IPv6 address is missing: c10d goes on over IPv4.
    "[W1204 02:54:02.19 socket.cpp:764] [c10d] The IPv6 network addresses of (gpu1, 29400) "
    "cannot be retrieved (gai error: -5 - No address associated with hostname).",
    # Refused while the store's host is still starting: every other host sees it.
    "[W1204 02:54:02.19 socket.cpp:764] [c10d] The client socket cannot be initialized to "
    "connect to [gpu1]:29400 (errno: 111 - Connection refused).",
    "[rank0]:step 10 loss 2.31",
    "[rank0]:    from mypkg import ImportError as E",
])
def test_ordinary_lines_are_no_fault(line: str) -> None:
    assert sf.classify(line) is None


def test_older_bind_message_and_cannot_import_name() -> None:
    bind = sf.classify("[W socket.cpp:436] [c10d] The server socket has failed to bind to "
                       "[::]:29500 (errno: 98 - Address already in use).")
    assert bind is not None and bind.code == sf.PORT_IN_USE and bind.where == {"port": 29500}
    name = sf.classify("[rank3]:ImportError: cannot import name 'Foo' from 'mypkg.models' "
                       "(/src/mypkg/models/__init__.py)")
    assert name is not None and name.code == sf.IMPORT_ERROR
    assert name.where == {"module": "mypkg.models", "rank": 3}
    assert "cannot import Foo from mypkg.models" in name.what and "install mypkg " in name.fix


def test_a_new_attempt_reports_again() -> None:
    line = (DATA / "port_in_use.err").read_text(encoding="utf-8").splitlines()
    watch = sf.StartupWatch()
    first = [f for f in map(watch.feed, line) if f]
    assert [f for f in map(watch.feed, line) if f] == []  # the same attempt: said once
    watch.reset()
    assert [f.code for f in map(watch.feed, line) if f] == [f.code for f in first]
