"""The faults drawn on a job's curves are kept from the job's own hosts: on a shared
fleet, a GPU elsewhere whose throttling comes and goes all day does not push the job's
fault out of what the reader keeps, read in full or kept up to date."""

from __future__ import annotations

from pathlib import Path

import pytest

import cockpit.read.effect as effect
from agent.wire.protocol import encode
from cockpit.analysis import throttle as bits
from cockpit.read.source import build_snapshot
from cockpit.store import Store
from cockpit.store.queries import StoreReader
from tests.store.wire import TS0, train

KEPT = 3  # faults kept per source (FAULTS_KEPT), small so that a few flaps exceed it
HOT_AT = 5  # the second the job's GPU throttles for heat


def _gpu(seq: int, ts: float, throttle: int) -> bytes:
    return encode("gpu", seq, {"gpu": 0, "sim": True, "util": 90.0, "temp": 80.0,
                               "throttle": throttle}, ts=ts)


def _second(store: Store, s: int) -> None:
    """The job steps on host `job`, whose GPU throttles from HOT_AT on; host `other`'s
    GPU throttles every other second."""
    store.ingest("job", train(2 * s, s, ts=TS0 + s)
                 + _gpu(2 * s + 1, TS0 + s, bits.SW_THERMAL if s >= HOT_AT else 0))
    store.ingest("other", _gpu(s, TS0 + s, bits.HW_SLOWDOWN if s % 2 else 0))


def _job_faults(reader: StoreReader) -> list[str]:
    faults = build_snapshot(reader, until_ts=None, label="LIVE").effect.faults
    return [m.text for m in faults]


def test_the_jobs_fault_stays_whatever_another_host_does(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(effect, "FAULTS_KEPT", KEPT)
    with Store(tmp_path / "fleet.duckdb") as store:
        for s in range(1, 20):
            _second(store, s)
        live = StoreReader(store)
        assert any(text.startswith("job: gpu 0 throttled") for text in _job_faults(live))
        for s in range(20, 40):  # other's GPU throttles ten times more
            _second(store, s)
            kept_up = _job_faults(live)
            assert kept_up == _job_faults(StoreReader(store))
            assert any(text.startswith("job: gpu 0 throttled") for text in kept_up)
            assert not any(text.startswith("other") for text in kept_up)
