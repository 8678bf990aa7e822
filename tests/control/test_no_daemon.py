"""A host whose agent stream says no daemon runs gets no op: it would wait in the inbox,
unanswered, and the command would wait its whole ack timeout for nothing."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from cockpit.app.operations import run_operation
from cockpit.errors import CockpitError

pytestmark = pytest.mark.timeout(60)


def _files(tmp_path: Path) -> tuple[Path, Path]:
    inventory = tmp_path / "hosts.toml"
    inventory.write_text(textwrap.dedent(f"""\
        [[hosts]]
        name = "local"
        address = "local"
        state_dir = "{tmp_path / 'state'}"
    """))
    spec = tmp_path / "job.toml"
    spec.write_text(textwrap.dedent(f"""\
        name = "job"
        hosts = ["local"]
        nproc_per_node = 1
        script = "train.py"
        run_dir = "{tmp_path / 'run'}"
    """))
    return spec, inventory


@pytest.mark.parametrize("action", ["launch", "stop"])
def test_an_operation_on_a_host_without_a_daemon_fails_at_once(tmp_path: Path,
                                                               action: str) -> None:
    spec, inventory = _files(tmp_path)
    said: list[str] = []
    started = time.monotonic()
    with pytest.raises(CockpitError) as info:
        run_operation(action, spec, inventory_path=inventory,
                      store_path=tmp_path / "rec.duckdb", connect_timeout=30,
                      ack_timeout=120, echo=said.append)  # fmt: skip
    assert time.monotonic() - started < 30
    assert (f"no agent daemon is running on local: start one there with `cockpit-agent "
            f"run --state-dir {tmp_path / 'state'}`") in str(info.value)
    if action == "launch":
        assert "Nothing was sent" in str(info.value)
    else:
        assert any(line.startswith("warning: no agent daemon") for line in said)
