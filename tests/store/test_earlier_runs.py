"""A job launched afresh under a name with a recorded run: the earlier run is filed under
a name of its own (cockpit.store.earlier_runs), so the new run's chart starts clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.wire.protocol import encode
from cockpit.store import Store
from cockpit.store.earlier_runs import steps_before
from cockpit.store.queries import StoreReader
from tests.store.wire import TS0, count, header, train

EARLIER = "j1 (earlier run 1)"


def _event(seq: int, kind: str, ts: float, **data: object) -> bytes:
    return encode("event", seq, {"kind": kind, "job": "j1", "rank": None, "step": None,
                                 "msg": kind, "data": data}, ts=ts)


def _earlier_run(store: Store) -> int:
    """Steps 1-200 of job j1, an alert against it and its exit; returns the next seq."""
    lines = [encode("run", 1, {"job": "j1", "rank": 0, "total_steps": 200}, ts=TS0)]
    lines += [train(1 + s, s, loss=5.0) for s in range(1, 201)]
    lines.append(encode("alert", 202, {"job": "j1", "rank": 0, "kind": "parameter",
                                       "severity": "critical", "code": "nonfinite_loss",
                                       "what": "NaN", "hint": "lower the LR"}, ts=TS0 + 201))
    lines.append(_event(203, "job_exited", TS0 + 202, returncode=0))
    store.ingest("h1", header() + b"".join(lines))
    return 204


def _fresh_launch(seq: int, at: float, checkpoint: str | None = None) -> bytes:
    """The launch's acknowledgement, the set-aside and the start, as an agent journals a
    launch, and just before them the acknowledgement of the earlier run's stop;
    `checkpoint`: a launch from the newest checkpoint, not a fresh one."""
    return (_event(seq, "control_ack", at - 5.0, op="stop", ok=True)
            + _event(seq + 1, "control_ack", at - 0.2, op="launch", ok=True)
            + _event(seq + 2, "checkpoints_set_aside", at - 0.1, ok=True)
            + _event(seq + 3, "job_started", at, reason="launch", checkpoint=checkpoint,
                     attempt=1))


def _curves_apart(store: Store, rank: int, new_steps: int) -> StoreReader:
    """Assert the rank's chart of the new run holds only its steps (loss 1.0) and the
    filed run's only the earlier run's 200 (loss 5.0)."""
    store.fold_levels()
    reader = StoreReader(store)
    new = reader.series("train", "loss", where={"job": "j1", "rank": rank})
    assert max(new.x) <= new_steps and {*new.lo, *new.hi} == {1.0}
    old = reader.series("train", "loss", where={"job": EARLIER, "rank": rank})
    assert max(old.x) == 200 and {*old.lo, *old.hi} == {5.0}
    return reader


def test_a_fresh_launch_files_the_earlier_run_and_the_chart_starts_clean(store: Store) -> None:
    seq = _earlier_run(store)
    start = TS0 + 1000
    # The start and the new run's first steps arrive in one flush (a backlog).
    new_steps = b"".join(train(seq + 4 + s, s, loss=1.0, ts=start + s) for s in range(1, 51))
    result = store.ingest("h1", _fresh_launch(seq, start) + new_steps)
    assert result.filed_runs == (("j1", EARLIER),)
    assert count(store, "train", "job = 'j1'") == 50
    assert count(store, "train", f"job = '{EARLIER}'") == 200
    assert count(store, "alert", f"job = '{EARLIER}'") == 1
    assert count(store, "alert", "job = 'j1'") == 0  # the new run has no NaN against it
    assert count(store, "run", f"job = '{EARLIER}'") == 1
    # The launch's own events stay with the new run; the earlier exit goes with the old.
    with store.cursor() as cur:
        kinds = {(k, op) for (k, op) in cur.execute(
            "SELECT kind, data->>'op' FROM event WHERE job = 'j1'").fetchall()}
    assert kinds == {("control_ack", "launch"), ("checkpoints_set_aside", None),
                     ("job_started", None)}
    reader = _curves_apart(store, rank=0, new_steps=50)
    assert set(reader.jobs()) == {"j1", EARLIER}


def test_each_fresh_launch_files_its_own_earlier_run_and_a_resume_files_none(
    store: Store,
) -> None:
    seq = _earlier_run(store)
    # From the newest checkpoint: the earlier run goes on.
    store.ingest("h1", _fresh_launch(seq, TS0 + 500, checkpoint="/ckpt/200.pt")
                 + train(seq + 4, 201, ts=TS0 + 501))
    assert count(store, "train", "job = 'j1'") == 201
    seq += 5
    store.ingest("h1", _fresh_launch(seq, TS0 + 1000) + train(seq + 4, 1, ts=TS0 + 1001))
    seq += 5
    result = store.ingest("h1", _fresh_launch(seq, TS0 + 2000) + train(seq + 4, 1, ts=TS0 + 2001))
    assert result.filed_runs == (("j1", "j1 (earlier run 2)"),)
    assert count(store, "train", f"job = '{EARLIER}'") == 201
    assert count(store, "train", "job = 'j1 (earlier run 2)'") == 1
    assert count(store, "train", "job = 'j1'") == 1


def test_a_second_hosts_start_of_the_same_launch_files_nothing_more(store: Store) -> None:
    seq = _earlier_run(store)
    store.ingest("h1", _fresh_launch(seq, TS0 + 1000))
    store.ingest("h1", train(seq + 4, 1, ts=TS0 + 1010))
    result = store.ingest("h2", header() + _fresh_launch(1, TS0 + 1001))
    assert result.filed_runs == ()
    assert count(store, "train", "job = 'j1'") == 1


def test_a_live_view_held_across_the_fresh_launch_shows_only_the_new_run(store: Store) -> None:
    """The screen read the earlier run before the launch (its steps held for the next
    refresh, `cockpit.read.train_tail`); after it, the new run's figures must not be mixed
    with what was held."""
    from cockpit.read.source import build_snapshot

    seq = _earlier_run(store)
    reader = StoreReader(store)
    before = build_snapshot(reader, until_ts=None, label="LIVE")
    assert before.job == "j1" and before.progress.step == 200
    start = TS0 + 1000
    store.ingest("h1", _fresh_launch(seq, start) + b"".join(
        train(seq + 4 + s, s, loss=1.0, ts=start + s) for s in range(1, 31)))
    after = build_snapshot(reader, until_ts=None, label="LIVE")
    assert after.job == "j1" and after.progress.step == 30
    assert after.progress.total_steps is None  # the earlier run's declaration went with it
    assert not [a for a in after.alerts if a.code == "nonfinite_loss"]
    assert max(after.effect.train_loss.x) <= 30


def test_only_a_filed_runs_name_reads_as_an_earlier_run() -> None:
    from cockpit.store.earlier_runs import earlier_run_name, is_earlier_run

    assert is_earlier_run(earlier_run_name("llama (7b)", 12))
    assert not is_earlier_run("j1") and not is_earlier_run("j1 (earlier run x)")
    assert not is_earlier_run(None)


@pytest.mark.slow
def test_the_earlier_runs_nan_steps_and_evals_do_not_follow_the_new_run(store: Store) -> None:
    """What the screen keeps up to date from the rows added since (the NaN/Inf steps,
    the evaluations) must be read afresh for the new run, not extended."""
    from cockpit.read.source import build_snapshot

    nan = encode("train", 1, {"job": "j1", "rank": 0, "step": 150, "loss": None,
                              "nonfinite": "nan"}, ts=TS0 + 150.5)
    ev = encode("eval", 2, {"job": "j1", "rank": 0, "step": 100, "loss": 9.0}, ts=TS0 + 100.5)
    store.ingest("h2", header() + nan + ev)
    seq = _earlier_run(store)
    reader = StoreReader(store)
    before = build_snapshot(reader, until_ts=None, label="LIVE")
    assert before.effect.nonfinite_steps == (150,) and before.effect.last_val_loss == 9.0
    start = TS0 + 1000
    store.ingest("h1", _fresh_launch(seq, start) + b"".join(
        train(seq + 4 + s, s, loss=1.0, ts=start + s) for s in range(1, 31)))
    after = build_snapshot(reader, until_ts=None, label="LIVE")
    assert after.progress.step == 30
    assert after.effect.nonfinite_steps == () and after.effect.last_val_loss is None


def test_a_second_hosts_start_with_a_clock_ahead_files_nothing_more(store: Store) -> None:
    """The hosts' clocks differ: the second host's start of the same launch is stamped
    after the new run's first steps, whose rows must stay the new run's."""
    seq = _earlier_run(store)
    store.ingest("h1", _fresh_launch(seq, TS0 + 1000) + b"".join(
        train(seq + 4 + s, s, ts=TS0 + 1000 + s) for s in range(1, 11)))
    result = store.ingest("h2", header() + _fresh_launch(1, TS0 + 1015))
    assert result.filed_runs == ()
    assert count(store, "train", "job = 'j1'") == 10
    assert count(store, "train", "job = 'j1 (earlier run 2)'") == 0


def test_a_live_view_shows_the_new_run_starting_before_its_first_step(store: Store) -> None:
    """The start arrives alone (a new run loads for minutes before its first step): what
    was read of the job before it is the earlier run's, and the job to show is the new
    run, starting, as a fresh reader sees it."""
    from cockpit.read.source import build_snapshot

    seq = _earlier_run(store)
    reader = StoreReader(store)
    assert build_snapshot(reader, until_ts=None, label="LIVE").progress.step == 200
    store.ingest("h1", _fresh_launch(seq, TS0 + 1000))
    after = build_snapshot(reader, until_ts=None, label="LIVE")
    afresh = build_snapshot(StoreReader(store), until_ts=None, label="LIVE")
    assert (after.job, after.progress.step, after.progress.state) == (
        afresh.job, afresh.progress.step, afresh.progress.state) == ("j1", None, "starting")


def test_every_hosts_start_of_one_launch_in_one_flush_files_the_earlier_run_once(
    store: Store,
) -> None:
    seq = _earlier_run(store)
    result = store.ingest_many([("h1", _fresh_launch(seq, TS0 + 1000)),
                                ("h2", header() + _fresh_launch(1, TS0 + 1000.4))])
    assert result.filed_runs == (("j1", EARLIER),)
    assert count(store, "train", f"job = '{EARLIER}'") == 200


def test_a_fork_of_the_earlier_run_names_the_filed_run_as_its_parent(store: Store) -> None:
    seq = _earlier_run(store)
    fork = encode("event", seq, {"kind": "fork", "job": "j1-fork-a", "rank": None,
                                 "step": 100, "msg": "fork", "data": {
                                     "ok": True, "parent": "j1", "parent_step": 100}},
                  ts=TS0 + 300)
    store.ingest("h1", fork + _fresh_launch(seq + 1, TS0 + 1000)
                 + train(seq + 5, 1, loss=1.0, ts=TS0 + 1001))
    reader = StoreReader(store)
    assert reader.forked_from("j1-fork-a") == {"job": EARLIER, "step": 100}
    # A fork of the new run keeps the job's own name for its parent.
    later = encode("event", seq + 6, {"kind": "fork", "job": "j1-fork-b", "rank": None,
                                      "step": 1, "msg": "fork", "data": {
                                          "ok": True, "parent": "j1", "parent_step": 1}},
                   ts=TS0 + 1100)
    store.ingest("h1", later)
    assert reader.forked_from("j1-fork-b") == {"job": "j1", "step": 1}
    assert reader.forked_from("j1-fork-a") == {"job": EARLIER, "step": 100}


def test_rows_of_the_earlier_run_that_arrive_after_the_filing_are_filed_too(
    store: Store, tmp_store_path: Path
) -> None:
    """A host whose link was down through the launch sends the earlier run's last steps
    late; a host that started the launch on a clock behind keeps its new steps."""
    seq = _earlier_run(store)  # h1: rank 0, steps 1-200
    store.ingest("h2", header() + b"".join(
        train(s, s, loss=5.0, rank=1) for s in range(1, 151)))
    start = TS0 + 1000
    result = store.ingest("h1", _fresh_launch(seq, start) + b"".join(
        train(seq + 4 + s, s, loss=1.0, ts=start + s) for s in range(1, 51)))
    assert result.filed_runs == (("j1", EARLIER),)
    # h2 is back: the earlier run's steps 151-200, then its own start of the launch and
    # the new run's first steps, its clock 30 s behind h1's.
    late = b"".join(train(s, s, loss=5.0, rank=1) for s in range(151, 201))
    h2_start = _event(201, "job_started", start - 28, reason="launch", checkpoint=None,
                      attempt=1)
    new = b"".join(train(201 + s, s, loss=1.0, rank=1, ts=start - 30 + s) for s in range(1, 21))
    result = store.ingest("h2", late + h2_start + new)
    assert result.filed_runs == ()
    assert count(store, "train", f"job = '{EARLIER}' AND rank = 1") == 200
    assert count(store, "train", "job = 'j1' AND rank = 1") == 20
    assert count(store, "event", "job = 'j1' AND kind = 'job_started' AND host = 'h2'") == 1
    _curves_apart(store, rank=1, new_steps=20)
    store.close()
    # After a restart of the cockpit the filing still holds: a third host's late steps
    # (it never started the launch) go by their time, a second run's later steps stay.
    with Store(tmp_store_path) as again:
        again.ingest("h3", header() + train(1, 199, loss=5.0, rank=2)
                     + train(2, 30, loss=1.0, rank=2, ts=start + 30))
        assert count(again, "train", f"job = '{EARLIER}' AND rank = 2") == 1
        assert count(again, "train", "job = 'j1' AND rank = 2 AND step = 30") == 1
        # h2's later steps keep to the new run, whatever their stamps.
        again.ingest("h2", train(230, 21, loss=1.0, rank=1, ts=start - 9))
        assert count(again, "train", "job = 'j1' AND rank = 1") == 21


def test_the_launch_events_of_a_late_host_stay_with_the_new_run(store: Store) -> None:
    seq = _earlier_run(store)
    start = TS0 + 1000
    store.ingest("h1", _fresh_launch(seq, start) + train(seq + 4, 1, loss=1.0, ts=start + 1))
    # h2 acknowledges the launch, its clock behind, and journals an earlier run's exit.
    store.ingest("h2", header() + _event(1, "job_exited", start - 100, returncode=0)
                 + _event(2, "control_ack", start - 20, op="launch", ok=True))
    assert count(store, "event", f"job = '{EARLIER}' AND host = 'h2'") == 1
    assert count(store, "event", "job = 'j1' AND host = 'h2' AND kind = 'control_ack'") == 1


def test_a_host_that_starts_the_launch_in_the_filing_flush_keeps_its_new_steps(
    store: Store,
) -> None:
    """Its clock 30 s behind the filing host's: its new steps are stamped before the
    launch's start, yet come after its own start in its stream."""
    seq = _earlier_run(store)
    store.ingest("h2", header() + b"".join(
        train(s, s, loss=5.0, rank=1) for s in range(1, 101)))
    start = TS0 + 1000
    h2 = _event(101, "job_started", start - 28, reason="launch", checkpoint=None, attempt=1)
    h2 += b"".join(train(101 + s, s, loss=1.0, rank=1, ts=start - 30 + s) for s in range(1, 21))
    result = store.ingest_many([
        ("h1", _fresh_launch(seq, start) + train(seq + 4, 1, loss=1.0, ts=start + 1)),
        ("h2", h2),
    ])
    assert result.filed_runs == (("j1", EARLIER),)
    assert count(store, "train", f"job = '{EARLIER}' AND rank = 1") == 100
    assert count(store, "train", "job = 'j1' AND rank = 1") == 20
    assert count(store, "event", "job = 'j1' AND kind = 'job_started'") == 2


@pytest.mark.slow
def test_which_run_a_row_is_filed_under_does_not_depend_on_how_the_streams_were_cut(
    tmp_path: Path,
) -> None:
    """The same two streams, delivered in different flushes and interleavings (h1's link
    fast or slow, h2 back before or after the launch was filed): every row ends up in the
    same run."""
    start = TS0 + 1000
    h1 = [header()]
    h1 += [train(s, s, loss=5.0) for s in range(1, 101)]
    h1 += [_fresh_launch(101, start)]
    h1 += [train(104 + s, s, loss=1.0, ts=start + s) for s in range(1, 31)]
    h2 = [header()]
    h2 += [train(s, s, loss=5.0, rank=1) for s in range(1, 121)]  # its last 20 arrive late
    h2 += [_event(121, "job_started", start - 28, reason="launch", checkpoint=None, attempt=1)]
    h2 += [train(121 + s, s, loss=1.0, rank=1, ts=start - 30 + s) for s in range(1, 31)]

    def runs(deliveries: list[tuple[str, int, int]]) -> dict[tuple[str, int], str]:
        path = tmp_path / f"cut-{len(list(tmp_path.iterdir()))}.duckdb"
        lines = {"h1": h1, "h2": h2}
        with Store(path) as store:
            for host, first, last in deliveries:
                store.ingest(host, b"".join(lines[host][first:last]))
            with store.cursor() as cur:
                return {(host, seq): job for host, seq, job in cur.execute(
                    "SELECT host, seq, job FROM train UNION ALL "
                    "SELECT host, seq, job FROM event").fetchall()}

    n1, n2 = len(h1), len(h2)
    expected = runs([("h1", 0, n1), ("h2", 0, n2)])
    assert sum(job == EARLIER for job in expected.values()) == 100 + 120 + 1  # + h1's stop ack
    cuts = [
        [("h2", 0, n2), ("h1", 0, n1)],  # h2's start files the run
        [("h1", 0, 50), ("h2", 0, 100), ("h1", 50, n1), ("h2", 100, n2)],
        [("h2", 0, 121), ("h1", 0, n1), ("h2", 121, n2)],  # h2's start after the filing
        [("h1", 0, 102), ("h2", 0, 130), ("h1", 102, n1), ("h2", 130, n2)],
        [("h2", 0, 60), ("h1", 0, n1), ("h2", 60, 122), ("h2", 122, n2)],
    ]
    for deliveries in cuts:
        assert runs(deliveries) == expected, deliveries


def test_a_backlog_holding_the_earlier_run_and_the_launch_files_it() -> None:
    assert steps_before([b'[1, "j1"]', b"not json j1", train(1, 5, ts=TS0)], "j1", TS0 + 1)
    assert not steps_before([train(1, 5, ts=TS0 + 2), train(2, 5, job="j2", ts=TS0)],
                            "j1", TS0 + 1)
