"""KPI arithmetic on hand-computed timelines (`cockpit.analysis.kpis`), and the store's
step totals it reads (`cockpit.store.queries_kpis`) on small real stores."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.wire.protocol import encode
from cockpit.analysis.kpis import (
    StepTotals,
    hours_by_week,
    job_kpis,
    mttr_trend,
    split_spans,
    totals,
)
from cockpit.read.kpis_report import job_kpis_of
from cockpit.store.database import Store
from cockpit.store.queries import StoreReader

T = 1_800_000_000.0  # every time below is T + seconds


def ev(ts: float, kind: str, job: str | None = "j", **data: object) -> dict[str, object]:
    return {"ts": T + ts, "kind": kind, "job": job, "host": "h", "data": data, "step": None}


def outage(failed: float, detected: float, recovered_in: float | None,
           recovered_at: float | None) -> dict[str, object]:
    return {"job": "j", "detected_at": T + detected, "detection_latency": detected - failed,
            "recovered_in": recovered_in,
            "recovered_at": None if recovered_at is None else T + recovered_at}


# Launched at 0; first start at 10, its first step begins at 20. Interruption 1: failure
# at 1000 (seen at 1002, processes exited at 1001), restart at 1010 whose first step
# begins at 1050, recovery journaled at 1060 (60 s after the failure). Paused at 2000
# (exit at 2005), resumed at 2300, first step at 2330. Interruption 2: failure at 3000,
# restart at 3020, first step begins at 3080, recovered at 3100. Clean exit at 4000.
EVENTS = [
    {**ev(0, "control_ack", job=None), "data": {"op": "launch", "ok": True, "job": "j"}},
    ev(10, "job_started", reason="launch"),
    ev(1001, "job_exited", returncode=1),
    ev(1010, "job_started", reason="recovery"),
    ev(2000, "pause", ok=True, mode="checkpoint"),
    ev(2005, "job_exited", returncode=0, ended_for="pause"),
    ev(2290, "resume"),
    ev(2300, "job_started", reason="resume"),
    ev(3020, "job_started", reason="recovery"),
    ev(4000, "job_exited", returncode=0),
    ev(50, "pause", ok=False, mode="checkpoint"),  # a failed pause is no pause
    ev(60, "job_started", job="other", reason="launch"),  # another job's
]
OUTAGES = [outage(1000, 1002, 60.0, 1060), outage(3000, 3000, 100.0, 3100)]
FIRST_STEPS = {T + 10: T + 20, T + 1010: T + 1050, T + 2300: T + 2330, T + 3020: T + 3080}
STEPS = StepTotals(records=3900, first_ts=T + 21, last_ts=T + 3990, last_step=3800,
                   step_time=3200.0, data_time=100.0, ckpt_time=None, redo_records=150,
                   redo_steps=150, redo_time=150.0)


def kpis(**over: object):
    args: dict[str, object] = dict(
        events=EVENTS, interruptions=OUTAGES, steps=STEPS, first_steps=FIRST_STEPS, gpus=8,
        gpus_from="world size", recording_end=T + 5000, checkpoint_seconds=[20.0, 30.0, None],
        evals=[(T + 500, 2.0), (T + 1500, 1.4), (T + 2500, 1.2)], target_loss=1.5)
    args.update(over)
    return job_kpis("j", **args)  # type: ignore[arg-type]


def test_two_interruptions_and_a_pause_account_for_every_second() -> None:
    k = kpis()
    assert (k.launched, k.end, k.span_s) == (T, T + 4000, 4000.0)
    assert not k.running and k.finished
    # Lost spans: the outages up to their first step's beginning (the restarts' start-up
    # and the exit inside them are the outage's); the pause until the resume's start
    # (the exit inside it is the pause's); start-ups of the launch and the resume only.
    assert k.lost_s["interruption"] == pytest.approx(50 + 80)
    assert k.lost_s["pause"] == pytest.approx(300)
    assert k.lost_s["stopped"] == pytest.approx(0)
    assert k.lost_s["startup"] == pytest.approx(10 + 30)
    # Inside the steps: data wait, the checkpoint events' seconds, the redone steps.
    assert k.lost_s["data_wait"] == pytest.approx(100)
    assert k.lost_s["checkpoint"] == pytest.approx(50)
    assert k.lost_s["recomputed"] == pytest.approx(150)
    assert k.steps_recomputed == 150
    assert k.productive_s == pytest.approx(3200 - 100 - 50)
    assert k.lost_s["other"] == pytest.approx(4000 - 3050 - 130 - 300 - 40 - 100 - 50 - 150)
    assert k.productive_s + sum(k.lost_s.values()) == pytest.approx(k.span_s)
    assert k.utilization == pytest.approx(3050 / 4000)
    assert k.gpu_hours == pytest.approx(8 * 4000 / 3600)
    assert k.lost_gpu_hours["pause"] == pytest.approx(8 * 300 / 3600)
    assert (k.interruptions, k.recovered, k.recovery_s) == (2, 2, (60.0, 100.0))
    assert k.mttr_s == pytest.approx(80)
    assert k.mttr_trend.startswith("longer")
    assert k.checkpoint_share == pytest.approx(50 / 4000)
    assert k.turnaround_s == pytest.approx(3990)
    assert k.turnaround_to_target_s == pytest.approx(1500)


def test_checkpoint_phase_time_wins_over_the_events_and_a_running_job_ends_now() -> None:
    events = [e for e in EVENTS if not (e["kind"] == "job_exited" and e["ts"] == T + 4000)]
    k = kpis(events=events, steps=StepTotals(**{**STEPS.__dict__, "ckpt_time": 12.0}))
    assert k.running and not k.finished
    assert k.end == T + 5000 and k.span_s == 5000
    assert k.lost_s["checkpoint"] == pytest.approx(12)
    assert k.productive_s == pytest.approx(3200 - 100 - 12)
    assert k.gpu_hours_by_week == {"2027-W02": pytest.approx(8 * 5000 / 3600)}


def test_an_outage_the_agent_never_recovered_ends_at_the_operators_start() -> None:
    events = [ev(0, "job_started", reason="launch"), ev(100, "job_exited", returncode=1),
              ev(400, "job_started", reason="relaunch"), ev(1000, "job_exited", returncode=0)]
    k = job_kpis("j", events=events, interruptions=[outage(100, 101, None, None)],
                 steps=StepTotals(records=10, first_ts=T + 5, last_ts=T + 990,
                                  step_time=600.0),
                 first_steps={T: T + 4, T + 400: T + 410}, gpus=2, gpus_from="world size",
                 recording_end=T + 2000)
    assert k.lost_s["interruption"] == pytest.approx(300)  # failure to the relaunch
    assert k.lost_s["startup"] == pytest.approx(4 + 10)
    assert k.recovered == 0 and k.mttr_s is None
    assert k.productive_s + sum(k.lost_s.values()) == pytest.approx(1000)


def test_overlapping_spans_count_once_by_precedence() -> None:
    spans = [("startup", 0, 10), ("interruption", 5, 20), ("pause", 15, 30),
             ("stopped", 25, 40)]
    assert split_spans(spans, 0, 50) == {"interruption": 15, "pause": 10, "stopped": 10,
                                         "startup": 5}


def test_mttr_trend_and_weekly_split() -> None:
    assert mttr_trend([10.0]) == "n/a"
    assert mttr_trend([10.0, 10.5]) == "steady"
    assert mttr_trend([30.0, 20.0, 10.0, 5.0]).startswith("shorter")
    sunday_23h = datetime(2026, 11, 29, 23, 0, tzinfo=UTC).timestamp()
    split = hours_by_week(sunday_23h, sunday_23h + 3 * 3600, gpus=4)
    assert split == {"2026-W48": pytest.approx(4.0), "2026-W49": pytest.approx(8.0)}


def test_totals_weight_utilization_by_gpu_hours() -> None:
    a = kpis()
    b = kpis(gpus=1, steps=StepTotals(**{**STEPS.__dict__, "step_time": 4000.0 + 150.0}))
    t = totals([a, b])
    assert t.gpu_hours == pytest.approx(9 * 4000 / 3600)
    assert t.utilization == pytest.approx((8 * 3050 + 1 * 4000) / (9 * 4000))
    assert t.interruptions == 4 and t.mttr_s == pytest.approx(80)


# --- on stores ------------------------------------------------------------------------


def _store(path: Path, records: list[tuple[float, str, dict[str, object]]]) -> Path:
    lines = [encode("stream", 0, {"protocol": 1, "agent_version": "test", "journal_id": "j-h",
                                  "from": 0, "first": 1, "head": len(records)}, ts=T)]
    lines += [encode(t, seq, fields, ts=ts)
              for seq, (ts, t, fields) in enumerate(sorted(records, key=lambda r: r[0]), 1)]
    with Store(path) as store:
        assert not store.ingest("h", b"".join(lines)).malformed
    return path


def _step(ts: float, step: int, rank: int = 0, **over: object) -> tuple[float, str, dict]:
    fields = {"job": "j", "rank": rank, "step": step, "loss": 1.0, "step_time": 1.0,
              "data_time": 0.25, "ckpt_time": None, "samples": 8, "extra": {}}
    return (ts, "train", {**fields, **over})


def test_store_step_totals_split_redone_steps(tmp_path: Path) -> None:
    """Steps 1..10, a restart from step 5's checkpoint (6..10 again, 11..12), and a record
    covering 4 steps: the redone records and the steps they cover are apart."""
    recs = [(T, "hello", {"agent_version": "t", "protocol": 1, "hostname": "h", "gpus": [
        {"index": i, "name": "H100"} for i in range(4)], "env": {}})]
    recs += [(T + 1, "event", {"kind": "job_started", "job": "j", "data": {"reason": "launch"}})]
    recs += [(T + 1, "run", {"job": "j", "rank": 0, "world_size": 2})]
    recs += [_step(T + 10 + s, s) for s in range(1, 11)]
    recs += [_step(T + 10 + s, s, rank=1, step_time=9.0) for s in range(1, 11)]  # not rank 0
    recs += [(T + 30, "event", {"kind": "job_started", "job": "j",
                                "data": {"reason": "recovery"}})]
    recs += [_step(T + 40 + s, s, ckpt_time=0.5 if s == 12 else None) for s in range(6, 13)]
    recs += [_step(T + 60, 16, extra={"steps": 4}, step_time=4.0)]
    recs += [_step(T + 61, 14, extra={"steps": 4}, step_time=4.0)]  # redone: 4 steps
    path = _store(tmp_path / "s.duckdb", recs)
    store = Store(path, read_only=True)
    try:
        reader = StoreReader(store)
        totals_ = reader.step_totals("j")
        assert totals_["rank"] == 0 and totals_["records"] == 19
        assert totals_["redo_records"] == 6 and totals_["redo_steps"] == 5 + 4
        assert totals_["redo_time"] == pytest.approx(5 * 1.0 + 4.0)
        assert totals_["step_time"] == pytest.approx(10 + 2 + 4.0)
        assert totals_["data_time"] == pytest.approx(0.25 * 13)
        assert totals_["ckpt_time"] == pytest.approx(0.5)
        assert totals_["last_step"] == 16
        # The restart's first step (step 6 at T+46) began at T+45 after its 1 s step.
        assert reader.first_steps_after("j", [T + 30]) == {T + 30: T + 45}
        k = job_kpis_of(reader, "j")
        assert (k.gpus, k.gpus_from) == (2, "world size")  # 2 ranks on a 4-GPU host
        assert k.lost_s["stopped"] == 0 and k.lost_s["startup"] == pytest.approx(9 + 15)
    finally:
        store.close()


@pytest.mark.slow
def test_synthetic_recording_kpis(recording_path: Path) -> None:
    """tests/read/synthetic.py: 600 one-second steps on 4 ranks over 2 two-GPU hosts,
    data 0.1 s a step, two 30 s checkpoints, a 40 s outage recovered in 35 s."""
    from tests.read import synthetic as syn

    store = Store(recording_path, read_only=True)
    try:
        reader = StoreReader(store)
        k = job_kpis_of(reader, "job-1")
        end = reader.time_range()[1]  # type: ignore[index]
    finally:
        store.close()
    assert (k.gpus, k.gpus_from) == (4, "world size")
    # Launched at its first `run` record (T0 + 1), before the agent's start event (T0 + 5).
    assert k.running and k.launched == syn.T0 + 1 and k.end == end
    assert k.productive_s == pytest.approx(600 * 1.0 - 600 * 0.1 - 2 * syn.CHECKPOINT_SECONDS)
    assert k.lost_s["interruption"] == pytest.approx(syn.OUTAGE_S - 5)
    assert k.lost_s["startup"] == pytest.approx(syn.FIRST_STEP_TS - 1.0 - (syn.T0 + 5))
    assert k.mttr_s == pytest.approx(syn.OUTAGE_S - 5)
    assert k.productive_s + sum(k.lost_s.values()) == pytest.approx(k.span_s)


@pytest.fixture(scope="module")
def recording_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.read.synthetic import write_recording

    return write_recording(tmp_path_factory.mktemp("kpi") / "run.duckdb")
