"""The comparison's rows (`cockpit.read.compare`), pure: provenance differences side by
side over three sides and past a section's row limit, KPI rows aligned by name, and the
speed of a run whose trainer reported no step times."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.analysis.kpis import JobKpis
from cockpit.analysis.provenance import ROWS_PER_SECTION, Provenance
from cockpit.read.compare import (
    Comparison,
    Curve,
    Side,
    Speed,
    comparison,
    kpi_table,
    provenance_table,
    short_labels,
    side_of,
)
from cockpit.snapshot import Series
from cockpit.store.database import Store
from cockpit.store.queries import StoreReader
from tests.harness.fork_runs import T0, write_records


def _side(job: str, config: dict, recording: str = "r.duckdb",
          queue_wait_s: float | None = None) -> Side:
    k = JobKpis(job=job, recording=recording, gpus=1, gpus_from="assumed 1", launched=None,
                end=None, running=False, finished=True, span_s=10.0, gpu_hours=0.01,
                productive_s=5.0, utilization=0.5, queue_wait_s=queue_wait_s)
    return Side(f"{recording}:{job}", recording, job, Curve(Series(), Series(), (), ()),
                None, None, None, None, None, Speed(), k,
                Provenance(f"{recording}:{job}", job, config=config))


def test_three_sides_show_each_value_and_the_firsts_where_they_agree() -> None:
    c = comparison([_side("a", {"lr": 1, "bs": 8}), _side("b", {"lr": 2, "bs": 8}),
                    _side("c", {"lr": 1, "bs": 16})])
    header, rows = provenance_table(c)
    assert header == ("section", "key", "a", "b", "c")
    assert rows == [("config", "lr", "1", "2", "1"), ("config", "bs", "8", "8", "16")]


def test_a_section_past_its_row_limit_says_how_many_more() -> None:
    many = ROWS_PER_SECTION + 3
    c = comparison([_side("a", {f"k{i}": i for i in range(many)}),
                    _side("b", {f"k{i}": i + 1 for i in range(many)})])
    _header, rows = provenance_table(c)
    assert len(rows) == ROWS_PER_SECTION + 1
    assert rows[-1][:2] == ("config", "… 3 more")


def test_kpi_rows_only_some_sides_have_sit_after_their_neighbour() -> None:
    c = comparison([_side("a", {}), _side("b", {}, queue_wait_s=30.0)])
    _header, rows = kpi_table(c)
    names = [r[0] for r in rows]
    assert names.index("queue wait") == names.index("turnaround") + 1
    assert dict((r[0], r[1]) for r in rows)["queue wait"] == "—"


def test_labels_are_job_names_unless_two_recordings_share_one() -> None:
    same = Comparison((_side("run", {}, "a.duckdb"), _side("run", {}, "b.duckdb")), ())
    assert short_labels(same) == ["a.duckdb:run", "b.duckdb:run"]
    other = Comparison((_side("x", {}, "a.duckdb"), _side("y", {}, "b.duckdb")), ())
    assert short_labels(other) == ["x", "y"]


def test_a_run_without_step_times_is_timed_by_the_wall_clock(tmp_path: Path) -> None:
    steps, every = 30, 2.0
    records = [(T0 + every * s, "train", {"job": "log", "rank": 0, "step": s,
                                          "loss": 1.0 / s, "samples": 8})
               for s in range(1, steps + 1)]
    rec = write_records(tmp_path / "log.duckdb", records)
    with Store(rec, read_only=True) as store:
        side = side_of(StoreReader(store), rec.name, "log")
    # The first record's own step is before the clock starts: steps - 1 over the span.
    assert side.speed.basis == "wall clock"
    assert side.speed.steps_per_s == pytest.approx(1 / every)
    assert side.speed.samples_per_s == pytest.approx(8 / every)
    assert side.speed.tokens_per_s is None
    assert side.final_loss == (steps, 1.0 / steps) and side.best_loss == (steps, 1.0 / steps)
