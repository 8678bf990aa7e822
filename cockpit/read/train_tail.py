"""The step records a snapshot builds on, kept up to date from the rows added since.

Every refresh needs the current job, each rank's newest step record and the last
hundred or so steps of every rank. Read afresh, that is three statements whose cost
is mostly DuckDB planning them; yet between two refreshes a running job adds a few
rows. `TrainTail` therefore keeps what it read and, when the store can tell that every
row added since has a newer timestamp (`StoreReader.added_after`: a replay moving
forward, a live store gaining rows in time order), reads just those rows in one small
statement and folds them in. Whatever it cannot fold in exactly (another job, a
different number of ranks, a step window that moved back after a rollback, a rank
silent for longer than the rows it holds) sends it back to the full read, and so does
every `FULL_READ_EVERY`th refresh.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from cockpit.analysis.lifecycle import (
    ended,
    newest_in_effect,
    parts_still_running,
    paused,
    took_effect,
)
from cockpit.analysis.ranks import StepSample, step_walls
from cockpit.store.earlier_runs import launched_again_as
from cockpit.store.queries import Frontiers, StoreReader
from cockpit.store.queries_base import FULL_READ_EVERY, of_kinds
from cockpit.store.queries_events import LIFECYCLE_KINDS
from cockpit.store.queries_train import (
    LATEST_STEP_WINDOWS,
    STEP_COLUMNS,
    newest_per_rank_step,
    of_world,
    record_steps,
)

RECENT_STEP_ROWS = 4000  # recent (rank, step) rows read per snapshot, at most
# A job with a step this recent is training now: between two such jobs (a fork beside its
# parent) the view stays on the one started last instead of flipping between them.
TRAINING_WINDOW_S = 60.0
MIN_RECENT_STEPS = 10
MAX_RECENT_STEPS = 200
STEP_KEYS = tuple(name.strip() for name in STEP_COLUMNS.split(","))


@dataclass(frozen=True)
class TrainView:
    """What the step records say, gathered once and shared by the panes."""

    latest: list[dict[str, Any]] = field(default_factory=list)
    samples: list[StepSample] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)  # one optimizer step's, per record
    wall_steps: list[int] = field(default_factory=list)  # the steps each of them covers
    ref_rank: int | None = None  # the rank whose loss/LR series are drawn
    newest: dict[str, Any] | None = None
    # Samples per optimizer step, all ranks (a record covering N steps counts N steps'
    # samples: its own over N).
    global_samples: int | float | None = None
    global_tokens: int | float | None = None
    record_steps: int = 1  # optimizer steps the newest record covers


@dataclass
class _Held:
    """What the last read found, and how far it can be trusted."""

    fr: Frontiers
    newest_row: tuple[float, int, str] | None  # (ts, seq, job) of the newest record
    job: str | None = None
    world: int | None = None
    world_since: float | None = None  # run_info's: ranks a scale-down took are left out
    by_rank: dict[Any, dict[str, Any]] = field(default_factory=dict)
    # by_rank holds every rank whose newest record is newer than this (-inf: all).
    complete_after: float = -math.inf
    window: list[StepSample] = field(default_factory=list)  # steps > low, every rank
    low: int = 0
    steps: int = 0  # steps per rank in the window
    view: TrainView = field(default_factory=TrainView)
    extensions: int = 0


def steps_per_rank(ranks: int) -> int:
    return max(MIN_RECENT_STEPS, min(MAX_RECENT_STEPS, RECENT_STEP_ROWS // max(ranks, 1)))


class TrainTail:
    """The current job and its `TrainView`, for one reader (one snapshot at a time)."""

    def __init__(self, reader: StoreReader) -> None:
        self._reader = reader
        self._held: _Held | None = None
        self._added: tuple[Frontiers, list[dict[str, Any]] | None] | None = None

    def job(self, fr: Frontiers, until_ts: float | None, prefer: str | None = None,
            training: tuple[str, ...] | None = None, known: Collection[str] = ()
            ) -> str | None:  # fmt: skip
        """The job to show: `prefer` (the operator's pick) while it is training or one of
        the `known` jobs (a pick stays put when its job pauses or ends: the operator may
        want to resume it); else of the jobs training now, the one started last (a fork
        beside its parent: the fork, steadily, not whichever wrote the newest row); else
        the job that trained most recently, else the most recently declared one.
        `training` is `self.training`'s answer when the caller has it already."""
        if training is None:
            training = self.training(fr, until_ts)
        if prefer is not None and (prefer in training or prefer in known):
            return prefer
        if len(training) > 1:
            return training[-1]
        held = self._held
        added = self._rows_added(fr, until_ts)
        if held is not None and held.newest_row is not None and added is not None:
            newest = max([held.newest_row,
                          *((r["ts"], r["seq"], r["job"]) for r in added)])
            return newest[2]
        row = self._reader.newest_train_row(until_ts=until_ts, frontiers=fr)
        if row is not None:
            # A run filed away by a fresh launch of its name is over: until the new run's
            # first step, the new run (starting) is the job to show, not the old one.
            again = launched_again_as(str(row["job"]))
            return again if again is not None and again in known else str(row["job"])
        return self._reader.memo(
            "declared_job", fr.key("run", "event"),
            lambda: self._reader.declared_job(until_ts=until_ts))

    def training(self, fr: Frontiers, until_ts: float | None) -> tuple[str, ...]:
        """The jobs training now, in the order they started: a step in the last minute,
        and no exit or pause since it (a job that ended is not training, however
        recent its last step)."""
        reader = self._reader
        training = [job for job, last_step in self._training(fr, until_ts).items()
                    if not _ended_after(reader, job, fr, until_ts, last_step)]
        if len(training) < 2:
            return tuple(training)
        started = {job: reader.memo(f"job_started:{job}", job,
                                    functools.partial(reader.job_started_ts, job))
                   for job in training}
        return tuple(sorted(training, key=lambda job: (started[job] or -math.inf, job)))

    def _training(self, fr: Frontiers, until_ts: float | None) -> dict[str, float]:
        """The jobs with a step in the last `TRAINING_WINDOW_S`, kept up to date from the
        rows added since (a refresh while one job trains reads nothing more)."""
        reader = self._reader

        def extend(held: dict[str, float], after: float) -> dict[str, float] | None:
            added = reader.added_rows("train", after, until_ts, fr)
            end = fr.ts.get("train")
            if added is None or end is None:
                return None
            newest = dict(held)
            for r in added:
                if r["job"] is not None and r["ts"] > newest.get(r["job"], -math.inf):
                    newest[r["job"]] = r["ts"]
            return {job: ts for job, ts in newest.items() if ts > end - TRAINING_WINDOW_S}

        return reader.kept("jobs_training", None, "train", fr,
                           lambda: reader.jobs_training(TRAINING_WINDOW_S, until_ts=until_ts,
                                                        frontiers=fr), extend)

    def view(self, job: str | None, world: int | None, fr: Frontiers,
             until_ts: float | None, world_since: float | None = None) -> TrainView:
        """`job`'s steps, of the ranks of its current world of `world` ranks when
        `world_since` says since when it has had it (`world_clause`)."""
        held = self._held
        if job is None:
            self._held = None
            return TrainView()
        if (held is not None and held.job == job and held.world == world
                and held.world_since == world_since):
            if held.fr.key("train") == fr.key("train"):
                return held.view
            added = self._rows_added(fr, until_ts)
            if added is not None and held.extensions < FULL_READ_EVERY:
                extended = _extend(held, added, fr)
                if extended is not None:
                    self._held = extended
                    return extended.view
        self._held = self._full_read(job, world, world_since, fr, until_ts)
        return self._held.view

    def _rows_added(self, fr: Frontiers, until_ts: float | None) -> list[dict[str, Any]] | None:
        """The training records added since the held read (read once per frontier)."""
        held = self._held
        if held is None:
            return None
        if self._added is not None and self._added[0] is fr:
            return self._added[1]
        if held.fr.key("train") == fr.key("train"):
            return []  # nothing visible was added
        rows = None
        after = self._reader.added_after("train", held.fr, fr)
        if after is not None:
            added = self._reader.added_rows("train", after, until_ts, fr)
            # Shaped as the full read's rows: the job and the step columns.
            rows = None if added is None else [
                {"job": r["job"], **{k: r[k] for k in STEP_KEYS},
                 "steps": record_steps(r.get("extra"))} for r in added]
        self._added = (fr, rows)
        return rows

    def _full_read(self, job: str, world: int | None, world_since: float | None,
                   fr: Frontiers, until_ts: float | None) -> _Held:
        reader = self._reader
        newest_row = reader.newest_train_row(until_ts=until_ts, frontiers=fr)
        held = _Held(fr, None if newest_row is None else
                     (newest_row["ts"], newest_row["seq"], newest_row["job"]), job, world,
                     world_since)
        latest = reader.latest_train(job, until_ts=until_ts, expected_ranks=world,
                                     world_since=world_since, frontiers=fr)
        if not latest:
            return held
        held.by_rank = {r["rank"]: r for r in latest}
        held.complete_after = _complete_after(latest, fr, world)
        newest = _newest(latest)
        held.steps = steps_per_rank(len(latest))
        last_step = int(newest["step"])
        held.low = last_step - held.steps
        held.window = [StepSample(*r) for r in reader.recent_step_samples(
            job, held.steps, until_ts=until_ts, last_step=last_step, bounded=False,
            world=world, world_since=world_since)]
        held.view = _make_view(latest, newest, held.window)
        return held


def _newest(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    return max(rows, key=lambda r: (r["ts"], r["seq"]))


def _complete_after(latest: list[dict[str, Any]], fr: Frontiers, world: int | None) -> float:
    """Below which ts a full read's rank set may have left ranks out: it stops at the
    first window (before the newest record) holding `world` ranks."""
    end = fr.ts.get("train")
    want = world or 1
    for window in LATEST_STEP_WINDOWS:
        if window is None or end is None:
            return -math.inf
        if sum(1 for r in latest if r["ts"] > end - window) >= want:
            return end - window
    return -math.inf


def _choose_ranks(by_rank: Mapping[Any, dict[str, Any]], end: float, world: int | None,
                  complete_after: float) -> list[dict[str, Any]] | None:
    """What `latest_train` answers at `end`, from the ranks held, or None when a rank
    not held could be part of that answer."""
    want = world or 1
    for window in LATEST_STEP_WINDOWS:
        floor = -math.inf if window is None else end - window
        chosen = [r for r in by_rank.values() if r["ts"] > floor]
        if len(chosen) >= want or window is None:
            if floor < complete_after:
                return None
            return sorted(chosen, key=lambda r: (r["rank"] is None, r["rank"]))
    return None


def _sample(row: Mapping[str, Any]) -> StepSample:
    rank = row["rank"]
    return StepSample(-1 if rank is None else int(rank), row["host"], int(row["step"]),
                      row["step_time"], row["data_time"], row["compute_time"],
                      row["comm_time"], row["samples"], row["tokens"], row["ts"],
                      int(row.get("steps") or 1))


def _extend(held: _Held, added: list[dict[str, Any]], fr: Frontiers) -> _Held | None:
    end = fr.ts.get("train")
    if end is None:
        return None
    # Shaped as `latest_train` rows (which do not repeat the job), of the current world.
    rows = [{k: v for k, v in r.items() if k != "job"} for r in added
            if r["job"] == held.job
            and of_world(r["rank"], r["ts"], held.world, held.world_since)]
    by_rank = dict(held.by_rank)
    for r in rows:
        old = by_rank.get(r["rank"])
        if old is None or (r["ts"], r["seq"]) > (old["ts"], old["seq"]):
            by_rank[r["rank"]] = r
    newest_row = max([held.newest_row, *((r["ts"], r["seq"], r["job"]) for r in added)]) \
        if held.newest_row is not None else None
    latest = _choose_ranks(by_rank, end, held.world, held.complete_after)
    if not latest:
        return None
    newest = _newest(latest)
    steps = steps_per_rank(len(latest))
    last_step = int(newest["step"])
    low = last_step - steps
    if steps != held.steps or low < held.low:
        return None  # another rank count, or the window moved back (a rollback)
    fresh = [_sample(r) for r in rows if r["step"] is not None and r["step"] > low]
    window = newest_per_rank_step(in_window_order([*(s for s in held.window if s.step > low),
                                                   *fresh]))
    return _Held(fr, newest_row, held.job, held.world, held.world_since, by_rank,
                 held.complete_after, window, low, steps, _make_view(latest, newest, window),
                 held.extensions + 1)


def in_window_order(samples: list[StepSample]) -> list[StepSample]:
    """`samples` by (step, rank, ts), a sample without a ts first among its rank's step."""
    try:  # by C-level keys: a live refresh sorts a few thousand
        return sorted(samples, key=_STEP_RANK_TS)
    except TypeError:  # a ts is compared only within a rank's step: there one was None
        return sorted(samples, key=lambda s: (s.step, s.rank,
                                              s.ts if s.ts is not None else -math.inf))


_STEP_RANK_TS = attrgetter("step", "rank", "ts")


def _make_view(latest: list[dict[str, Any]], newest: dict[str, Any],
               window: list[StepSample]) -> TrainView:
    last_step = int(newest["step"])
    samples = [s for s in window if s.step <= last_step]
    ranks = [r["rank"] for r in latest if r["rank"] is not None]
    walls, wall_steps = step_walls(samples)
    return TrainView(
        latest=latest,
        samples=samples,
        walls=walls,
        wall_steps=wall_steps,
        ref_rank=min(ranks) if ranks else None,
        newest=newest,
        # Every rank's own newest step, not only the ranks already at the newest one:
        # ranks report through separate spool files, so at any instant one of them is
        # a few steps behind, and counting only the leaders halved the job's batch.
        global_samples=_per_step_total(latest, "samples"),
        global_tokens=_per_step_total(latest, "tokens"),
        record_steps=_steps_of(newest),
    )


def _steps_of(row: Mapping[str, Any]) -> int:
    steps = row.get("steps")
    return steps if isinstance(steps, int) and steps >= 1 else 1


def _per_step_total(rows: Iterable[Mapping[str, Any]], key: str) -> int | float | None:
    """The ranks' `key` per optimizer step, summed: each record's over the steps it
    covers (whole when it divides evenly, as it does for a fixed batch)."""
    known = [row[key] / _steps_of(row) for row in rows if row[key] is not None]
    if not known:
        return None
    total = sum(known)
    return int(total) if float(total).is_integer() else total


def _ended_after(reader: StoreReader, job: str, fr: Frontiers, until_ts: float | None,
                 last_step_ts: float) -> bool:
    """Whether `job`'s processes ended after its last step: its newest lifecycle event
    ends it, and (a pause) on every host (`running_parts`)."""
    event = job_lifecycle(reader, job, fr, until_ts)
    if event is None or not ended(event) or float(event["ts"]) < last_step_ts:
        return False
    return not (paused(event) and running_parts(reader, job, fr, until_ts))


def job_lifecycle(reader: StoreReader, job: str, fr: Frontiers,
                  until_ts: float | None) -> Mapping[str, Any] | None:
    """`job`'s newest lifecycle event that took effect (`newest_in_effect`: not an
    operation that failed), read once per change of the event table (the training set
    and the job's state both ask)."""

    def read() -> Mapping[str, Any] | None:
        newest = reader.lifecycle(job, until_ts=until_ts, frontiers=fr)
        if newest is None or took_effect(newest):
            return newest
        # Rare (an operation failed last): the job is as the events before it left it.
        return newest_in_effect(e for e in reader.rare_events(LIFECYCLE_KINDS, job, until_ts)
                                if e.get("job") == job)

    name = f"lifecycle:{job}"
    return reader.memo(name, (job, reader.event_version(name, fr, until_ts,
                                                        of_kinds(*LIFECYCLE_KINDS))), read)


def running_parts(reader: StoreReader, job: str, fr: Frontiers,
                  until_ts: float | None) -> dict[str, Mapping[str, Any]]:
    """The hosts whose part of `job` still runs, each with its newest lifecycle event in
    effect (`parts_still_running`), read once per change of the job's lifecycle events.
    Asked only of a job whose newest lifecycle event is a pause: one that took effect on
    rank 0's host may have failed on another, whose part runs on."""
    name = f"running-parts:{job}"
    return reader.memo(name, (job, reader.event_version(name, fr, until_ts,
                                                        of_kinds(*LIFECYCLE_KINDS))),
                       lambda: parts_still_running(
                           e for e in reader.rare_events(LIFECYCLE_KINDS, job, until_ts)
                           if e.get("job") == job))


def job_hosts(train: TrainView) -> frozenset[str]:
    """The hosts the job's ranks report from (their newest steps'): their GPUs, loads
    and faults are the job's; on a shared fleet the other hosts' are not."""
    return frozenset(str(r["host"]) for r in train.latest if r.get("host") is not None)
