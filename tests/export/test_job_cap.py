"""However many job names the hosts send, a refresh of the exporter builds a bounded
number of snapshots (one per job exported) and says how many jobs it left out: a host
that files events under 500 names once made every refresh (each 5 s) build 500."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import cockpit.export.server as server
from agent.wire.protocol import encode
from cockpit.export.metrics import (
    MAX_EXPORTED_JOBS,
    SnapshotCollector,
    families,
    jobs_not_exported,
    jobs_to_export,
)
from cockpit.snapshot import Snapshot
from cockpit.store.database import Store
from cockpit.store.queries import StoreReader
from tests.store.wire import TS0

NAMES = 500
TRAINING = ("trainer-a", "trainer-b")  # the two jobs that train, among the 500


def _records() -> bytes:
    lines = []
    seq = 1
    for i in range(NAMES):  # each a job the recording knows of, by an event under it
        name = f"spam-{i}" if i % 50 else f"spam-{i}\x1b]0;x\x07\n}} evil"
        lines.append(encode("event", seq, {"kind": "note", "job": name, "rank": None,
                                           "step": None, "msg": "hello", "data": {}},
                            ts=TS0 + i * 0.01))
        seq += 1
    for job in TRAINING:
        lines.append(encode("run", seq, {"job": job, "rank": 0, "world_size": 1},
                            ts=TS0 + 10 + TRAINING.index(job)))
        seq += 1
    for step in range(1, 21):
        for job in TRAINING:
            lines.append(encode("train", seq, {
                "job": job, "rank": 0, "step": step, "loss": 1.0 / step, "step_time": 0.5,
                "comm_time": 0.1, "samples": 8}, ts=TS0 + 20 + step))
            seq += 1
    return b"".join(lines)


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StoreReader]:
    path: Path = tmp_path_factory.mktemp("jobs") / "many.duckdb"
    with Store(path) as store:
        store.ingest("h1", _records())
    store = Store(path, read_only=True)
    yield StoreReader(store)
    store.close()


def test_a_refresh_builds_a_bounded_number_of_snapshots(
        reader: StoreReader, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str | None] = []
    build = server.build_snapshot

    def counted(*args: Any, **kwargs: Any) -> Snapshot:
        built.append(kwargs.get("job"))
        if len(built) > MAX_EXPORTED_JOBS:  # fail fast rather than build 500
            raise AssertionError(f"{len(built)} snapshot builds in one refresh")
        return build(*args, **kwargs)

    monkeypatch.setattr(server, "build_snapshot", counted)
    kpis_of: list[str] = []

    def kpis(_reader: Any, job: str) -> None:
        kpis_of.append(job)

    monkeypatch.setattr(server, "job_kpis_of", kpis)
    snapshots = server.job_snapshots(reader, None)
    first = snapshots[0]
    assert len(first.jobs) >= NAMES + len(TRAINING)  # the store does know them all
    assert len(built) == len(snapshots) == MAX_EXPORTED_JOBS
    exported = [snap.job for snap in snapshots]
    assert len(set(exported)) == len(exported)
    # The jobs that train come first; then the names that appeared last.
    assert set(TRAINING) <= set(exported[:len(TRAINING)])
    assert exported[len(TRAINING)] == f"spam-{NAMES - 1}"
    left_out = len(set(first.jobs)) - MAX_EXPORTED_JOBS
    assert jobs_not_exported(snapshots) == left_out
    # The KPIs (a whole history each) only of the jobs exported.
    server.job_kpis(reader, snapshots)
    assert sorted(kpis_of) == sorted(exported)
    # And the exposition says how many were left out, the names sanitised as before.
    collector = SnapshotCollector()
    collector.update(snapshots)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    assert f"cockpit_jobs_not_exported {float(left_out)}" in text, text[-2000:]
    assert "\x1b" not in text and "\x07" not in text
    assert all(line.startswith(("#", "cockpit_")) for line in text.splitlines())


def test_the_pick_is_stable_and_counts_nothing_left_out_below_the_cap() -> None:
    few = Snapshot(ts=1.0, source_label="X", job="b", jobs=("a", "b", "c"),
                   jobs_training=("c", "b"))
    assert jobs_to_export(few) == ["b", "c", "a"]
    got = {s.name: s.value for fam in families([few]) for s in fam.samples}
    assert got["cockpit_jobs_not_exported"] == 2  # one snapshot of three jobs
    many = Snapshot(ts=1.0, source_label="X", job=None,
                    jobs=tuple(f"j{i}" for i in range(100)), jobs_training=("j3",))
    picked = jobs_to_export(many)
    assert picked == jobs_to_export(many) and len(picked) == MAX_EXPORTED_JOBS
    assert picked[:3] == ["j3", "j99", "j98"]
    assert jobs_to_export(many, limit=0) == [] and jobs_not_exported([]) == 0


def test_the_cap_is_documented() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "metrics.md").read_text()
    assert "`cockpit_jobs_not_exported`" in docs
    assert f"at most {MAX_EXPORTED_JOBS} jobs" in docs
