"""The chaos run (tests/chaos/run.py) at CI's size: two hosts, one fault of every kind
the machine allows (eight where the journal can fill a tmpfs), and an exact account of
the records (none lost, none twice, none altered). `make chaos` runs the full size
(32 faults, every kind four times)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos import run as chaos
from tests.conftest import ADDRESSES_PER_WORKER, _need_sshd
from tests.harness.workers import worker_index

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]


def test_every_kind_of_fault_loses_nothing_and_is_survived(tmp_path: Path) -> None:
    _need_sshd()
    first = 2 + ADDRESSES_PER_WORKER * worker_index() + 400
    result = chaos.run(2, 8, seed=7, work=tmp_path, first_address=first)
    chaos.print_table(result)
    failed = [r for r in result["results"] if not r[2]]
    assert not failed, failed
    assert result["faults"] >= 8 and result["kinds"] >= 7, result
    assert result["lost"] == 0 and result["duplicated"] == 0, result["per_host"]
    assert result["extra"] == 0 and result["altered"] == 0, result["per_host"]
    assert result["caught_up"], result["per_host"]
