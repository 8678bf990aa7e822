"""The one timeline read from a store: GPU faults at the steps they hit, each rank's
position, and the stage band, from the recorded real run.

The recording's GPUs are simulated and never throttled: a GPU sample throttled for heat
and one with an uncorrectable ECC error are added (the only synthetic records). Where
they belong, and the stages, are read from the raw records, not through the code under
test.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from cockpit.analysis import throttle as bits
from cockpit.read.source import build_snapshot
from cockpit.snapshot import Snapshot
from cockpit.store.database import Store
from cockpit.store.queries import StoreReader
from tests.harness.recording import RECORDED_HOST, RECORDING, load_recording
from tests.ui.recorded import recording_facts


def _records() -> list[dict]:
    with gzip.open(RECORDING, "rt", encoding="utf-8") as journal:
        return [json.loads(line) for line in journal]


def _rank0_steps() -> list[tuple[float, int]]:
    return sorted((r["ts"], r["step"]) for r in _records()
                  if r["t"] == "train" and r["rank"] == 0)


def _between(index: int) -> tuple[float, int]:
    """An instant between rank 0's `index`th step and the next, and that step."""
    steps = _rank0_steps()
    return (steps[index][0] + steps[index + 1][0]) / 2, steps[index][1]


HOT, ECC = 40, 120  # rank 0's step records the added samples follow


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = load_recording(tmp_path_factory.mktemp("faults") / "run.duckdb")
    records = _records()
    sample = next(r for r in records if r["t"] == "gpu" and r["gpu"] == 0)
    seq = max(r["seq"] for r in records)
    added = []
    for i, (at, throttle, ecc) in enumerate([
        (_between(HOT)[0], bits.SW_THERMAL, 0),
        (_between(HOT + 1)[0], bits.SW_THERMAL, 0),  # still throttled: no new fault
        (_between(ECC)[0], bits.IDLE, 2),  # idle clocks are no fault; the ECC is
    ]):
        added.append({**sample, "seq": seq + 1 + i, "ts": at, "throttle": throttle,
                      "ecc_vol_unc": ecc})
    with Store(path) as store:
        store.ingest(RECORDED_HOST, "".join(json.dumps(r) + "\n" for r in added).encode())
    return path


def _snapshot(path: Path, until_ts: float | None = None,
              reader: StoreReader | None = None) -> Snapshot:
    with Store(path, read_only=True) as store:
        return build_snapshot(reader or StoreReader(store), until_ts=until_ts, label="REPLAY")


@pytest.mark.slow
def test_gpu_faults_sit_at_the_steps_trained_when_they_were_seen(store_path: Path) -> None:
    faults = _snapshot(store_path).effect.faults
    assert [(m.kind, m.step) for m in faults] == [("throttle", _between(HOT)[1]),
                                                  ("ecc", _between(ECC)[1])]
    assert "thermal (SW)" in faults[0].text and "2 uncorrectable ECC" in faults[1].text


@pytest.mark.slow
def test_a_replay_shows_only_the_faults_seen_by_its_cursor(store_path: Path) -> None:
    at = _between(HOT + 10)[0]
    assert [m.kind for m in _snapshot(store_path, until_ts=at).effect.faults] == ["throttle"]


@pytest.mark.slow
def test_faults_kept_across_a_moving_cursor_match_a_fresh_read(store_path: Path) -> None:
    """The faults extended from the rows each refresh adds are those a fresh read finds."""
    end = recording_facts().last_ts
    with Store(store_path, read_only=True) as store:
        reader = StoreReader(store)
        first = recording_facts().first_ts
        for k in range(1, 11):  # a replay playing forward
            kept = build_snapshot(reader, until_ts=first + (end - first) * k / 10,
                                  label="REPLAY")
        assert kept.effect.faults == _snapshot(store_path, until_ts=end).effect.faults


def test_every_rank_is_at_its_newest_step(store_path: Path) -> None:
    ranks = _snapshot(store_path).progress.ranks
    train = [r for r in _records() if r["t"] == "train"]
    newest = {rank: max(r["step"] for r in train if r["rank"] == rank)
              for rank in {r["rank"] for r in train}}
    assert {r.rank: r.step for r in ranks} == newest
    assert all(r.lag == max(newest.values()) - r.step for r in ranks)
    assert all(r.steps_per_second and r.steps_per_second > 0 for r in ranks)


def test_the_stages_follow_the_recorded_lifecycle(store_path: Path) -> None:
    facts = recording_facts()
    spans = _snapshot(store_path).progress.stages
    assert spans[0].stage == "start-up" and spans[0].start == facts.job_started_ts
    # The interruption's restart: from the interruption to the resumed training.
    events = [r for r in _records() if r["t"] == "event"]
    interrupted = next(r["ts"] for r in events if r["kind"] == "interruption")
    resumed = next(r["ts"] for r in events if r["kind"] == "resumed")
    restarting = [s for s in spans if s.stage == "restarting"]
    assert [(s.start, s.end) for s in restarting] == [(interrupted, resumed)]
    saves = [r for r in events if r["kind"] == "checkpoint_saved"]
    assert len([s for s in spans if s.stage == "checkpoint"]) == len(saves)
    # Nothing after the job's last exit: its processes had ended.
    last_exit = max(r["ts"] for r in events if r["kind"] == "job_exited")
    assert spans[-1].end == last_exit
