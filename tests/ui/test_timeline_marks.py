"""One timeline: an XID and a restart sit on the loss chart and on the throughput chart at
the steps they happened, and `t` hides and shows them on both.

The store is the recorded real run (its restart from the step-200 checkpoint is real)
with one XID added, the only synthetic record: the recording's GPUs are simulated and
never failed. The step the XID belongs at is read from the raw records, not through the
code under test, and the marks are found in the rendered charts, by column.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from textual.strip import Strip

from cockpit.read.source import build_snapshot
from cockpit.sessions.static_source import StaticSource
from cockpit.snapshot import Snapshot
from cockpit.store.database import Store
from cockpit.store.queries import StoreReader
from cockpit.ui.app_factory import make_app
from cockpit.ui.widgets.effect_pane import EffectPane
from cockpit.ui.widgets.loss_chart import ChartWidget, LossChart
from cockpit.ui.widgets.progress_pane import ProgressPane
from cockpit.ui.widgets.throughput_chart import ThroughputChart
from tests.harness.recording import RECORDED_HOST, RECORDING, load_recording
from tests.ui.helpers import settle
from tests.ui.recorded import recording_facts


def _records() -> list[dict]:
    with gzip.open(RECORDING, "rt", encoding="utf-8") as journal:
        return [json.loads(line) for line in journal]


def _xid_moment() -> tuple[float, int]:
    """An instant in the first attempt, between two of rank 0's steps, and the step rank
    0 had trained then: where an XID seen at that instant belongs."""
    steps = sorted((r["ts"], r["step"]) for r in _records()
                   if r["t"] == "train" and r["rank"] == 0)
    interrupted = recording_facts().interruption["ts"]
    before = [(ts, step) for ts, step in steps if ts < interrupted]
    ts, step = before[len(before) * 3 // 4]
    following = next(t for t, _ in steps if t > ts)
    return (ts + following) / 2, step


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    path = load_recording(tmp_path_factory.mktemp("xid") / "run.duckdb")
    at, _ = _xid_moment()
    seq = max(r["seq"] for r in _records()) + 1
    xid = {"t": "event", "seq": seq, "ts": at, "kind": "xid", "job": None, "rank": None,
           "step": None, "msg": "XID 79: GPU has fallen off the bus",
           "data": {"gpu": 1, "xid": 79, "uuid": None}}
    with Store(path) as store:
        store.ingest(RECORDED_HOST, (json.dumps(xid) + "\n").encode())
    with Store(path, read_only=True) as store:
        return build_snapshot(StoreReader(store), until_ts=None, label="REPLAY")


def test_the_xid_and_the_restart_are_placed_at_their_steps(snapshot: Snapshot) -> None:
    _, step = _xid_moment()
    (xid,) = [m for m in snapshot.effect.faults if m.kind == "xid"]
    assert (xid.step, xid.host) == (step, RECORDED_HOST)
    assert "XID 79 gpu 1" in xid.text
    restarts = [m.step for m in snapshot.effect.markers if m.kind == "restart"]
    assert restarts == [recording_facts().resumed_step]


def _lines(chart: ChartWidget) -> list[str]:
    strips: list[Strip] = chart._draw_lines()
    return ["".join(segment.text for segment in strip) for strip in strips]


def _label_value(label: str) -> float:
    factor = {"k": 1e3, "M": 1e6}.get(label[-1], 1.0)
    return float(label.rstrip("kM")) * factor


def _step_of_column(lines: list[str]) -> tuple[float, float]:
    """(step at column 0, steps per column) from the chart's x ticks: the bottom frame's
    `┬`s and the step labels under them."""
    frame = next(i for i, line in enumerate(lines) if "└" in line)
    columns = [m.start() for m in re.finditer("┬", lines[frame])]
    labels = lines[frame + 1].split()
    assert len(columns) == len(labels) >= 2, (lines[frame], lines[frame + 1])
    (c0, s0), (c1, s1) = (columns[0], _label_value(labels[0])), \
        (columns[-1], _label_value(labels[-1]))
    per_column = (s1 - s0) / (c1 - c0)
    return s0 - c0 * per_column, per_column


def _marks(lines: list[str], glyph: str) -> list[int]:
    """The columns where `glyph` is drawn inside the plot frame."""
    frame = next(i for i, line in enumerate(lines) if "└" in line)
    return sorted({m.start() for line in lines[:frame] for m in re.finditer(glyph, line)})


def _assert_at_step(lines: list[str], glyph: str, step: int) -> None:
    origin, per_column = _step_of_column(lines)
    (column,) = _marks(lines, glyph)
    # Within the cell the step falls in: a point is drawn in its nearest column.
    assert abs(origin + column * per_column - step) <= per_column, (glyph, column, lines)


@pytest.mark.parametrize("chart_type", [LossChart, ThroughputChart])
async def test_the_marks_are_drawn_at_their_steps_on_both_charts(
        snapshot: Snapshot, chart_type: type[ChartWidget]) -> None:
    app = make_app(StaticSource(snapshot), theme="dark")
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        chart = app.screen.query_one(chart_type)
        lines = _lines(chart)
        _, xid_step = _xid_moment()
        _assert_at_step(lines, "X", xid_step)
        _assert_at_step(lines, "↻", recording_facts().resumed_step)


async def test_t_hides_and_shows_the_marks_on_both_charts(snapshot: Snapshot) -> None:
    app = make_app(StaticSource(snapshot), theme="dark")
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        charts = [app.screen.query_one(LossChart), app.screen.query_one(ThroughputChart)]
        legend = app.screen.query_one("#loss-legend")
        assert "X XID" in str(legend.render())
        assert all(_marks(_lines(c), "X") and _marks(_lines(c), "↻") for c in charts)
        await pilot.press("t")
        await settle(pilot)
        assert not app.screen.query_one(EffectPane).timeline
        assert not app.screen.query_one(ProgressPane).timeline
        assert not any(_marks(_lines(c), "X") or _marks(_lines(c), "↻") for c in charts)
        assert "events hidden" in str(legend.render())
        assert "events hidden" in str(app.screen.query_one("#throughput-heading").render())
        await pilot.press("t")
        await settle(pilot)
        assert all(_marks(_lines(c), "X") and _marks(_lines(c), "↻") for c in charts)
        assert "X XID" in str(legend.render())


def test_the_key_is_documented_where_the_keys_are() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "`t` chart events" in readme
