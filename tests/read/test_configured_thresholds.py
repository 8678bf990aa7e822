"""An `[alerts]` file's thresholds reach the read model: the host a replay has not heard
from for `host_silent_s` is stale, as the silent-host alert says, and the snapshot's
data-wait gauge level is judged by `data_wait_warn_pct`."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from cockpit.analysis import alert_config
from cockpit.analysis.alert_config import AlertThresholds
from cockpit.read.details import link_state
from cockpit.read.source import build_snapshot
from cockpit.store.queries import StoreReader
from cockpit.transport.states import STALE, STREAMING


@pytest.fixture
def configured() -> Iterator[None]:
    try:
        yield
    finally:
        alert_config.configure(AlertThresholds())


def _configure(**values: float) -> None:
    alert_config.configure(dataclasses.replace(AlertThresholds(), **values))


def test_a_replayed_host_is_stale_after_the_configured_silence(configured: None) -> None:
    host = {"host": "a", "last_seen": 100.0}
    assert link_state(host, None, now=120.0, replaying=True) == STREAMING
    assert link_state(host, None, now=131.0, replaying=True) == STALE
    _configure(host_silent_s=10.0)
    assert link_state(host, None, now=120.0, replaying=True) == STALE
    _configure(host_silent_s=60.0)
    assert link_state(host, None, now=131.0, replaying=True) == STREAMING


def test_the_snapshot_judges_data_wait_by_the_configured_alert(
        reader: StoreReader, configured: None) -> None:
    e = build_snapshot(reader, until_ts=None, label="LIVE", buckets=60).efficiency
    assert e.data_wait_pct == pytest.approx(10.0)
    assert (e.gpu_busy_level, e.data_wait_level) == ("good", "warn")
    _configure(data_wait_warn_pct=8.0)
    e = build_snapshot(reader, until_ts=None, label="LIVE", buckets=60).efficiency
    assert e.data_wait_level == "bad"
