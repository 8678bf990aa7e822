"""`TrainTail` folds added step records in and answers what a full read answers.

Every answer here is compared with a fresh `TrainTail` (which reads in full) at the
same cursor; the held one must also have taken the cheap path where it can.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.wire.protocol import encode
from cockpit.analysis.ranks import StepSample
from cockpit.read.train_tail import TrainTail, in_window_order
from cockpit.store import Store
from cockpit.store.queries import StoreReader
from tests.store.wire import TS0

RANKS = 4


def steps(first: int, last: int, *, seq0: int, job: str = "j1", ranks: int = RANKS,
          ts_of=lambda step, rank: TS0 + step + rank * 0.01, skip: tuple[int, ...] = ()) -> bytes:
    lines = []
    seq = seq0
    for step in range(first, last + 1):
        for rank in range(ranks):
            if rank in skip:
                continue
            lines.append(encode("train", seq, {
                "job": job, "rank": rank, "step": step, "loss": 1.0 / step,
                "step_time": 0.5 + 0.01 * rank, "comm_time": 0.1, "samples": 8,
            }, ts=ts_of(step, rank)))
            seq += 1
    return b"".join(lines)


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "tail.duckdb")
    yield s
    s.close()


def check(reader: StoreReader, tail: TrainTail, until_ts: float | None,
          world: int | None = RANKS, world_since: float | None = None) -> int:
    """Compare with a full read at the same cursor; the held tail's extension count."""
    fr = reader.frontiers(until_ts=until_ts)
    job = tail.job(fr, until_ts)
    view = tail.view(job, world, fr, until_ts, world_since)
    fresh = TrainTail(StoreReader(reader._store))
    fr2 = fresh._reader.frontiers(until_ts=until_ts)
    job2 = fresh.job(fr2, until_ts)
    assert job == job2
    assert view == fresh.view(job2, world, fr2, until_ts, world_since)
    return tail._held.extensions if tail._held else 0


@pytest.mark.slow
def test_replay_forward_extends_and_matches(store: Store) -> None:
    store.ingest("h1", steps(1, 600, seq0=1))
    reader = StoreReader(store)
    tail = TrainTail(reader)
    counts = [check(reader, tail, TS0 + 300 + i * 1.5) for i in range(40)]
    assert counts[0] == 0 and counts[-1] == 39


@pytest.mark.slow
def test_live_growth_extends_until_a_rollback_or_a_new_job(store: Store) -> None:
    reader = StoreReader(store)
    tail = TrainTail(reader)
    store.ingest("h1", steps(1, 300, seq0=1))
    assert check(reader, tail, None) == 0
    seq = 10_000
    for first in range(301, 341, 5):
        store.ingest("h1", steps(first, first + 4, seq0=seq))
        seq += 100
        assert check(reader, tail, None) > 0
    # Resumed from the checkpoint of step 250: steps 251.. again, newer timestamps.
    store.ingest("h1", steps(251, 255, seq0=seq, ts_of=lambda s, r: TS0 + 1000 + s + r * 0.01))
    seq += 100
    assert check(reader, tail, None) == 0
    store.ingest("h1", steps(256, 260, seq0=seq, ts_of=lambda s, r: TS0 + 1000 + s + r * 0.01))
    seq += 100
    assert check(reader, tail, None) == 1
    # A fork starts training: the newest records are another job's.
    store.ingest("h1", steps(1, 3, seq0=seq, job="fork",
                             ts_of=lambda s, r: TS0 + 2000 + s + r * 0.01))
    assert check(reader, tail, None) == 0


@pytest.mark.slow
def test_a_lagging_hosts_late_rows_are_folded_in(store: Store) -> None:
    """Rows stamped before the last frontier (a host catching up) are found by the ids
    the store gave them and folded in, as a full read would see them (`check`)."""
    reader = StoreReader(store)
    tail = TrainTail(reader)
    store.ingest("h1", steps(1, 200, seq0=1, skip=(3,)))
    store.ingest("h2", steps(1, 150, seq0=1, ranks=4, skip=(0, 1, 2)))
    assert check(reader, tail, None) == 0
    store.ingest("h1", steps(201, 205, seq0=5000, skip=(3,)))
    assert check(reader, tail, None) == 1
    # Rank 3's host catches up with records stamped before the last frontier.
    store.ingest("h2", steps(151, 190, seq0=5000, ranks=4, skip=(0, 1, 2)))
    assert check(reader, tail, None) == 2


@pytest.mark.slow
def test_a_rank_silent_past_the_held_window_is_found_by_a_full_read(store: Store) -> None:
    reader = StoreReader(store)
    tail = TrainTail(reader)
    # Rank 3 stopped at step 100; the others go on far past the first window.
    store.ingest("h1", steps(1, 100, seq0=1))
    store.ingest("h1", steps(101, 200, seq0=1000, skip=(3,)))
    check(reader, tail, None)
    seq = 5000
    for first in range(201, 400, 20):
        store.ingest("h1", steps(first, first + 19, seq0=seq, skip=(3,)))
        seq += 100
        check(reader, tail, None)


def test_the_global_batch_counts_ranks_a_few_steps_behind(store: Store) -> None:
    """Ranks report through their own spool files, so when a snapshot is taken one rank
    is often a few steps behind the newest; the job's batch is still every rank's."""
    reader = StoreReader(store)
    tail = TrainTail(reader)
    store.ingest("h1", steps(1, 50, seq0=1))
    store.ingest("h1", steps(51, 53, seq0=1000, skip=(3,)))  # rank 3 lags by three steps
    fr = reader.frontiers(until_ts=None)
    view = tail.view(tail.job(fr, None), RANKS, fr, None)
    assert view.newest is not None and view.newest["step"] == 53
    assert view.global_samples == 8 * RANKS
    check(reader, tail, None)
    store.ingest("h1", steps(54, 55, seq0=2000, skip=(3,)))  # the incremental path too
    assert check(reader, tail, None) == 1
    assert tail._held is not None and tail._held.view.global_samples == 8 * RANKS


@pytest.mark.slow
def test_the_ranks_a_scale_down_took_stay_out_as_steps_arrive(store: Store) -> None:
    """Ranks 2 and 3 leave at step 100; ranks 0 and 1 go on from the step 80 checkpoint
    as a world of two. Neither the held view nor a full read has ranks 2 and 3 again,
    not even when a late record of theirs arrives."""
    reader = StoreReader(store)
    tail = TrainTail(reader)
    store.ingest("h1", steps(1, 100, seq0=1))
    since = TS0 + 120
    store.ingest("h1", encode("run", 1000, {"job": "j1", "rank": 0, "world_size": 2},
                              ts=since))
    assert StoreReader(store).run_info("j1")["world_since"] == since
    after = {"ranks": 2, "ts_of": lambda s, r: since + s + r * 0.01}
    store.ingest("h1", steps(81, 90, seq0=1001, **after))
    assert check(reader, tail, None, 2, since) == 0
    seq = 2000
    for first in range(91, 131, 10):
        store.ingest("h1", steps(first, first + 9, seq0=seq, **after))
        seq += 100
        assert check(reader, tail, None, 2, since) > 0
    # Rank 3's host was unreachable: its last steps, stamped before the scale-down.
    store.ingest("h2", steps(101, 105, seq0=1, ts_of=lambda s, r: TS0 + s + 0.5, skip=(0, 1, 2)))
    store.ingest("h1", steps(131, 131, seq0=seq, **after))
    check(reader, tail, None, 2, since)
    assert tail._held is not None
    view = tail._held.view
    assert [r["rank"] for r in view.latest] == [0, 1]
    assert {s.rank for s in view.samples} == {0, 1}
    assert view.global_samples == 8 * 2


def test_ranks_past_a_declared_world_that_train_since_are_kept(store: Store) -> None:
    """A trainer that declares a smaller world than it runs (a rank given to the
    Reporter, no WORLD_SIZE): its other ranks are not taken for ranks a scale-down took."""
    reader = StoreReader(store)
    tail = TrainTail(reader)
    store.ingest("h1", encode("run", 1, {"job": "j1", "rank": 0, "world_size": 1}, ts=TS0))
    store.ingest("h1", steps(1, 50, seq0=2))
    check(reader, tail, None, 1, TS0)
    assert tail._held is not None
    assert [r["rank"] for r in tail._held.view.latest] == list(range(RANKS))


def write_fork_beside_parent(store: Store) -> int:
    """A parent job and, from step 50, its fork training side by side (the parent's
    rows are always the newest); the next free seq."""
    def run(seq: int, job: str, ts: float) -> bytes:
        return encode("run", seq, {"job": job, "rank": 0, "world_size": RANKS}, ts=ts)

    store.ingest("h1", run(1, "parent", TS0) + steps(1, 100, seq0=2, job="parent"))
    store.ingest("h2", run(1, "fork", TS0 + 50) + steps(
        50, 80, seq0=2, job="fork", ts_of=lambda s, r: TS0 + s + 20 + r * 0.01))
    return 1000


@pytest.mark.slow
def test_a_fork_training_beside_its_parent_is_shown_steadily(store: Store) -> None:
    """Two jobs write steps side by side: the view stays on the one started last (the
    fork), whichever wrote the newest row, until it has been silent for a minute."""
    reader = StoreReader(store)
    tail = TrainTail(reader)
    seq = write_fork_beside_parent(store)
    shown = []
    for first in range(101, 131, 3):  # the parent's rows are the newest every time
        store.ingest("h1", steps(first, first + 2, seq0=seq, job="parent"))
        store.ingest("h2", steps(first - 20, first - 18, seq0=seq, job="fork",
                                 ts_of=lambda s, r: TS0 + s + 19 + r * 0.01))
        seq += 100
        fr = reader.frontiers(until_ts=None)
        shown.append(tail.job(fr, None))
        assert shown[-1] == TrainTail(StoreReader(store)).job(fr, None)  # fresh read agrees
    assert set(shown) == {"fork"}
    assert tail.training(fr, None) == ("parent", "fork")  # in the order they started
    assert tail.job(fr, None, prefer="parent") == "parent"  # the operator's pick wins
    assert tail.job(fr, None, prefer="gone") == "fork"  # a pick not training: the default
    # The fork stops; a minute later the parent, still training, is shown again.
    store.ingest("h1", steps(131, 200, seq0=seq, job="parent"))
    fr = reader.frontiers(until_ts=None)
    assert tail.job(fr, None) == "parent"
    # An operator's pick of a known job stays, training or not (to resume it, say).
    assert tail.job(fr, None, prefer="fork", known=("parent", "fork")) == "fork"
    assert tail.job(fr, None, prefer="gone", known=("parent", "fork")) == "parent"


@pytest.mark.parametrize(("kind", "data", "training"), [
    ("job_exited", {"code": 0}, ("parent",)),
    ("pause", {"mode": "checkpoint", "ok": True}, ("parent",)),
    ("pause", {"mode": "checkpoint", "ok": False}, ("parent", "fork")),  # keeps running
])
def test_a_job_that_ended_is_not_training_however_recent_its_last_step(
        store: Store, kind: str, data: dict, training: tuple[str, ...]) -> None:
    reader = StoreReader(store)
    tail = TrainTail(reader)
    seq = write_fork_beside_parent(store)
    fr = reader.frontiers(until_ts=None)
    assert tail.training(fr, None) == ("parent", "fork")
    store.ingest("h2", encode("event", seq, {"kind": kind, "job": "fork", "rank": None,
                                            "step": 80, "msg": kind, "data": data},
                              ts=TS0 + 101))
    fr = reader.frontiers(until_ts=None)
    assert tail.training(fr, None) == training
    assert TrainTail(StoreReader(store)).training(fr, None) == training
    if training == ("parent",):
        assert tail.job(fr, None) == "parent"


def test_the_window_is_ordered_by_step_rank_and_ts_a_missing_ts_first() -> None:
    def at(step: int, rank: int, ts: float | None) -> StepSample:
        return StepSample(rank, "h", step, 0.1, ts=ts)

    plain = [at(2, 0, 5.0), at(1, 1, 3.0), at(1, 0, 4.0), at(1, 0, 2.0)]
    assert in_window_order(plain) == [plain[3], plain[2], plain[1], plain[0]]
    # A record without a ts beside one with a ts, in the same rank's step.
    odd = [at(1, 0, 2.0), at(1, 0, None), at(0, 3, None)]
    assert in_window_order(odd) == [odd[2], odd[1], odd[0]]
