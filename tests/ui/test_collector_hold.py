"""The collector waits while a refresh is built and painted, and only then."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from textual.worker import WorkerFailed

from cockpit.sessions.static_source import StaticSource
from cockpit.snapshot import Snapshot
from cockpit.ui.app_factory import make_app
from cockpit.ui.collector import MAX_CARRIED, CollectorHold
from cockpit.ui.demo_static import demo_snapshot
from tests.ui.helpers import settle, wait_until


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_a_hold_turns_the_collector_off_until_released() -> None:
    hold = CollectorHold()
    hold.hold()
    hold.hold()  # a second hold is the same hold
    assert not gc.isenabled() and hold.held
    hold.release()
    assert gc.isenabled() and not hold.held
    hold.release()  # nothing held: nothing changes
    assert gc.isenabled()


def test_a_release_for_a_refresh_a_newer_one_followed_waits_for_the_newer() -> None:
    hold = CollectorHold()
    first = hold.hold()
    second = hold.hold()  # the next refresh began before the first one's release ran
    hold.release(first)
    assert not gc.isenabled() and hold.held
    hold.release(second)
    assert gc.isenabled() and not hold.held
    # Refreshes back to back without a rest: after MAX_CARRIED the collector runs anyway.
    stale = hold.hold()
    for _ in range(MAX_CARRIED):
        hold.hold()
    hold.release(stale)
    assert gc.isenabled() and not hold.held


def test_a_collector_someone_else_turned_off_stays_off() -> None:
    gc.disable()
    hold = CollectorHold()
    hold.hold()
    hold.release()
    assert not gc.isenabled() and not hold.held


class _Recording(StaticSource):
    """Notes whether the collector ran free while each snapshot was built."""

    def __init__(self, snapshot: Snapshot, fail: bool = False) -> None:
        super().__init__(snapshot)
        self.collector_on: list[bool] = []
        self.fail = fail

    def snapshot(self, buckets: int = 120) -> Snapshot:
        self.collector_on.append(gc.isenabled())
        if self.fail:
            raise RuntimeError("the store is gone")
        return super().snapshot(buckets)


@pytest.mark.parametrize("fail", [False, True], ids=["painted", "failed"])
async def test_the_app_holds_the_collector_only_while_a_refresh_runs(
    fail: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _Recording(demo_snapshot(), fail=fail)
    app = make_app(source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        started = app._snapshot_worker
        on_at_start: list[bool] = []

        def spy() -> object:
            # Held before the worker starts: its start allocates as well.
            on_at_start.append(gc.isenabled())
            return started()

        monkeypatch.setattr(app, "_snapshot_worker", spy)
        app._build_snapshot()
        assert on_at_start == [False]
        try:
            await app.workers.wait_for_complete()
        except WorkerFailed:
            assert fail
        await settle(pilot)
        assert source.collector_on and not any(source.collector_on)
        # Released a moment after the paint (`RELEASE_AFTER_S`), or at once on a failure.
        await wait_until(pilot, lambda: gc.isenabled() and not app.collector.held,
                         "the collector released")
    assert gc.isenabled()
