"""A recording whose elastic job went on without an excluded host: the outage reads as
recovered, and its KPIs never add up past the wall span (store to report)."""

from __future__ import annotations

from pathlib import Path

from agent.wire.protocol import encode
from cockpit.read.kpis_report import job_kpis_of
from cockpit.read.report import render_report
from cockpit.store.database import Store
from cockpit.store.queries import StoreReader

T = 1_800_000_000.0


def _ev(seq: int, ts: float, kind: str, **data: object) -> bytes:
    return encode("event", seq, {"kind": kind, "job": "j", "rank": None, "step": None,
                                 "msg": kind, "data": data}, ts=T + ts)


def _tr(seq: int, ts: float, step: int) -> bytes:
    return encode("train", seq, {"job": "j", "rank": 0, "step": step, "step_time": 10.0,
                                 "loss": 1.0}, ts=T + ts)


def _excluded(path: Path) -> None:
    a = [_ev(1, 0, "job_started", reason="launch")]
    b = [_ev(1, 0, "job_started", reason="launch"),
         _ev(2, 1001, "job_exited", returncode=1),
         _ev(3, 1001, "interruption", cause="gpu_fault", detected_at=T + 1001,
             detection_latency=1.0, decision={"retry": False},
             exclusion={"host": "b", "hosts": ["a"]})]
    s = 2
    for i, t in enumerate(range(10, 1000, 10)):
        a.append(_tr(s, t, i + 1))
        s += 1
    a.append(_ev(s, 1003, "interruption", cause="nccl", detected_at=T + 1003,
                 detection_latency=3.0, decision={"retry": True}))
    s += 1
    for i, t in enumerate(range(1030, 4000, 10)):
        a.append(_tr(s, t, 95 + i))
        s += 1
    a.append(_ev(s, 1030, "recovery", cause="nccl", recovery_seconds=30.0, steps_lost=5,
                 restart_count=1))
    with Store(path) as store:
        store.ingest("a", b"".join(a))
        store.ingest("b", b"".join(b))


def test_an_excluded_hosts_outage_is_recovered_and_the_kpis_fit_the_span(
        tmp_path: Path) -> None:
    path = tmp_path / "excl.duckdb"
    _excluded(path)
    with Store(path) as store:
        k = job_kpis_of(StoreReader(store), "j")
    assert k.running and k.recovered == 1 and k.recovery_s == (30.0,)
    assert k.lost_s["stopped"] == 0.0
    assert k.productive_s + sum(k.lost_s.values()) <= k.span_s + 1e-6
    text = render_report(path)
    assert "not recovered" not in text and "job_interrupted" not in text
