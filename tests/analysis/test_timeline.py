"""Faults placed at their steps, and the stage band, from events and samples."""

from __future__ import annotations

import random
from typing import Any

from cockpit.analysis import throttle as bits
from cockpit.analysis import timeline as tl
from cockpit.snapshot import Marker, StageSpan


def xid(ts: float, host: str, code: int, gpu: int) -> dict[str, Any]:
    return {"kind": "xid", "ts": ts, "host": host, "step": None, "msg": f"XID {code}",
            "data": {"xid": code, "gpu": gpu}}


def gpu(ts: float, host: str, index: int, throttle: int = 0, ecc: int = 0) -> dict[str, Any]:
    return {"ts": ts, "host": host, "gpu": index, "throttle": throttle, "ecc_vol_unc": ecc}


def test_a_fault_sits_at_the_step_trained_when_it_was_seen() -> None:
    faults = tl.xid_faults([xid(105.0, "h1", 79, 3), xid(300.0, "h2", 48, 0)])
    marks = tl.place(faults, {105.0: 42, 300.0: None})
    # The second came when nothing trained: it is on no curve.
    assert marks == (Marker(42, "xid", "h1: XID 79 gpu 3", host="h1", ts=105.0),)


def test_faults_of_one_kind_at_one_step_are_one_mark_naming_the_first_host() -> None:
    faults = [tl.Fault(10.0, "h2", "throttle", "gpu 0 throttled"),
              tl.Fault(9.0, "h1", "throttle", "gpu 5 throttled"),
              tl.Fault(9.5, "h1", "throttle", "gpu 6 throttled"),
              tl.Fault(9.0, "h3", "xid", "XID 79")]
    marks = tl.place(faults, {10.0: 7, 9.0: 7, 9.5: 7})
    assert [(m.step, m.kind, m.text) for m in marks] == [
        (7, "xid", "h3: XID 79"),
        (7, "throttle", "h1: gpu 5 throttled (+1 more hosts)"),
    ]


def test_only_the_newest_steps_are_kept() -> None:
    faults = [tl.Fault(float(i), "h", "xid", f"XID {i}") for i in range(10)]
    marks = tl.place(faults, {float(i): i * 10 for i in range(10)}, limit=3)
    assert [m.step for m in marks] == [70, 80, 90]


def test_throttling_for_heat_begins_once_and_idle_clocks_are_no_fault() -> None:
    rows = [gpu(1.0, "h", 0, bits.IDLE), gpu(2.0, "h", 0, bits.SW_THERMAL),
            gpu(3.0, "h", 0, bits.SW_THERMAL | bits.HW_THERMAL), gpu(4.0, "h", 0, 0),
            gpu(5.0, "h", 0, bits.HW_POWER_BRAKE)]
    faults, state = tl.gpu_faults(rows)
    assert [(f.ts, f.kind) for f in faults] == [(2.0, "throttle"), (5.0, "throttle")]
    assert "thermal (SW)" in faults[0].text
    assert state == {("h", 0): (True, 0)}


def test_ecc_counts_a_fault_each_time_the_count_rises_across_reads() -> None:
    first, state = tl.gpu_faults([gpu(1.0, "h", 2, ecc=0), gpu(2.0, "h", 2, ecc=1)])
    # The next read starts where the last ended: the same count is no new fault.
    second, state = tl.gpu_faults([gpu(3.0, "h", 2, ecc=1), gpu(4.0, "h", 2, ecc=3)], state)
    assert [(f.ts, f.kind, f.text) for f in first + second] == [
        (2.0, "ecc", "gpu 2 1 uncorrectable ECC"), (4.0, "ecc", "gpu 2 3 uncorrectable ECC")]
    assert state == {("h", 2): (False, 3)}


def test_an_unreachable_host_is_a_fault_from_when_its_link_said_so() -> None:
    hosts = [{"host": "a", "state": "unreachable", "state_ts": 50.0},
             {"host": "b", "state": "streaming", "state_ts": 10.0},
             {"host": "c", "state": "unreachable", "state_ts": None}]
    assert tl.link_faults(hosts) == [tl.Fault(50.0, "a", "unreachable", "host unreachable")]


def event(ts: float, kind: str, **data: Any) -> dict[str, Any]:
    return {"ts": ts, "kind": kind, "data": data, "msg": kind}


def test_stages_follow_the_lifecycle_and_a_save_is_cut_into_training() -> None:
    events = [
        event(0.0, "job_started", reason="launch"),
        event(100.0, "checkpoint_saved", seconds=10.0),
        event(120.0, "stage", stage="eval"),
        event(130.0, "stage", stage="train"),
        event(150.0, "job_exited", returncode=1),
        event(151.0, "interruption", cause="killed"),
        event(152.0, "job_started", reason="recovery"),
        event(160.0, "resumed"),
    ]
    spans = tl.stage_spans(events, now=200.0, first_steps=[20.0, 161.0])
    assert spans == (
        StageSpan(0.0, 20.0, "start-up"), StageSpan(20.0, 90.0, "train"),
        StageSpan(90.0, 100.0, "checkpoint"), StageSpan(100.0, 120.0, "train"),
        StageSpan(120.0, 130.0, "eval"), StageSpan(130.0, 150.0, "train"),
        StageSpan(151.0, 160.0, "restarting"), StageSpan(160.0, 200.0, "train"),
    )


def test_a_pause_that_failed_leaves_the_job_training() -> None:
    refused = {"ts": 50.0, "kind": "pause", "msg": "pause failed",
               "data": {"ok": False}}
    spans = tl.stage_spans([event(0.0, "stage", stage="train"), refused], now=60.0)
    assert [s.stage for s in spans] == ["train"]


def test_a_band_cell_shows_the_most_telling_stage_it_covers() -> None:
    spans = [StageSpan(0.0, 99.0, "train"), StageSpan(99.0, 100.0, "checkpoint"),
             StageSpan(100.0, 200.0, "train"), StageSpan(300.0, 400.0, "paused")]
    cells = tl.band_cells(spans, 0.0, 400.0, 8)
    assert cells == ["train", "checkpoint", "train", "train", None, None, "paused", "paused"]


def test_no_lifecycle_event_is_no_stage() -> None:
    assert tl.stage_spans([], now=10.0) == ()
    assert tl.stage_spans([event(20.0, "job_started")], now=10.0) == ()  # after now


def test_a_fault_on_a_host_outside_the_job_is_not_on_its_curves() -> None:
    faults = [tl.Fault(1.0, "idle-host", "xid", "XID 79"), tl.Fault(2.0, "h1", "ecc", "E")]
    assert tl.on_hosts(faults, {"h1"}) == [faults[1]]


def test_the_rows_of_untroubled_hosts_change_nothing_and_are_passed_over() -> None:
    """`fault_rows` keeps what `gpu_faults` needs: batch after batch, following only
    those rows finds the faults and the troubled GPUs that following every row does."""
    rnd = random.Random(5)
    masks = [0, 0, 0, 0, bits.IDLE, bits.SW_THERMAL, bits.HW_POWER_BRAKE]
    every: Any = None
    kept: Any = None
    for batch in range(40):
        rows = [gpu(batch + rnd.random(), f"h{rnd.randrange(6)}", rnd.randrange(4),
                    rnd.choice(masks), ecc=rnd.choice([0, 0, 0, 0, 1, 2]))
                for _ in range(rnd.randrange(0, 12))]
        rows.sort(key=lambda r: r["ts"])
        found_all, every = tl.gpu_faults(rows, every)
        chosen = tl.fault_rows(rows, kept)
        assert len(chosen) <= len(rows)
        found_kept, kept = tl.gpu_faults(chosen, kept)
        assert found_kept == found_all, batch
        troubled = {k: v for k, v in every.items() if v != (False, 0)}
        assert {k: v for k, v in kept.items() if v != (False, 0)} == troubled, batch
    # Well GPUs everywhere: nothing to follow.
    assert tl.fault_rows([gpu(1.0, "h", 0, bits.IDLE), gpu(1.0, "g", 1, 0)], {}) == []
