"""An `[alerts]` file's thresholds reach the read model: the host a replay has not heard
from for `host_silent_s` is stale, as the silent-host alert says, and the snapshot's
data-wait gauge level is judged by `data_wait_warn_pct`."""

from __future__ import annotations

import pytest

from cockpit.read.details import link_state
from cockpit.read.source import build_snapshot
from cockpit.store.queries import StoreReader
from cockpit.transport.states import STALE, STREAMING
from tests.harness.thresholds import configure


def test_a_replayed_host_is_stale_after_the_configured_silence(configured: None) -> None:
    host = {"host": "a", "last_seen": 100.0}
    assert link_state(host, None, now=120.0, replaying=True) == STREAMING
    assert link_state(host, None, now=131.0, replaying=True) == STALE
    configure(host_silent_s=10.0)
    assert link_state(host, None, now=120.0, replaying=True) == STALE
    configure(host_silent_s=60.0)
    assert link_state(host, None, now=131.0, replaying=True) == STREAMING


def test_the_snapshot_judges_data_wait_by_the_configured_alert(
        reader: StoreReader, configured: None) -> None:
    e = build_snapshot(reader, until_ts=None, label="LIVE", buckets=60).efficiency
    assert e.data_wait_pct == pytest.approx(10.0)
    assert (e.gpu_busy_level, e.data_wait_level) == ("good", "warn")
    configure(data_wait_warn_pct=8.0)
    e = build_snapshot(reader, until_ts=None, label="LIVE", buckets=60).efficiency
    assert e.data_wait_level == "bad"
