"""The chaos run (tests/chaos/run.py) at CI's size: two hosts, 20 faults of every kind
the machine allows, and an exact account of the records (none lost, none twice, none
altered). `make chaos` runs the full size."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos import run as chaos
from tests.conftest import ADDRESSES_PER_WORKER, _need_sshd
from tests.harness.workers import worker_index

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]


def test_twenty_faults_lose_nothing_and_every_one_is_survived(tmp_path: Path) -> None:
    _need_sshd()
    first = 2 + ADDRESSES_PER_WORKER * worker_index() + 400
    result = chaos.run(2, 20, seed=7, work=tmp_path, first_address=first)
    chaos.print_table(result)
    failed = [r for r in result["results"] if not r[2]]
    assert not failed, failed
    assert result["faults"] >= 20 and result["kinds"] >= 6, result
    assert result["lost"] == 0 and result["duplicated"] == 0, result["per_host"]
    assert result["extra"] == 0 and result["altered"] == 0, result["per_host"]
    assert result["caught_up"], result["per_host"]
