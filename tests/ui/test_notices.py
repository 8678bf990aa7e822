"""The notification history (`n`): a toast that has gone can be read again, newest
first, as text; a repeated one is counted, and the list is bounded."""

from __future__ import annotations

from pathlib import Path

from cockpit.sessions.static_source import StaticSource
from cockpit.ui.app_factory import make_app
from cockpit.ui.demo_static import demo_details, demo_snapshot
from cockpit.ui.notices import NoticeLog
from cockpit.ui.screens.notices import NoticesScreen, history_content
from tests.ui.helpers import settle, text

HOSTILE = "rank 3 said [@click=app.quit]quit[/] \x1b[31mred\x1b[0m"


def test_a_repeat_is_counted_on_its_notice_and_the_oldest_make_room() -> None:
    log = NoticeLog(kept=3)
    log.add(1.0, "error", "snapshot failed", "OSError: disk full")
    log.add(2.0, "error", "snapshot failed", "OSError: disk full")
    log.add(3.0, "information", "Job control", "pause sent")
    newest, first = log.newest_first()
    assert (newest.message, newest.count) == ("pause sent", 1)
    assert (first.count, first.ts, first.newest_ts) == (2, 1.0, 2.0)
    # Not the newest: raised again, it is a notice of its own.
    log.add(4.0, "error", "snapshot failed", "OSError: disk full")
    log.add(5.0, "warning", "Job control", "host down")
    assert len(log) == 3 and log.dropped == 1
    assert [n.ts for n in log.newest_first()] == [5.0, 4.0, 3.0]
    shown = history_content(log.newest_first(), log.dropped).plain
    assert "(1 older notification no longer kept)" in shown
    assert shown.index("host down") < shown.index("pause sent")


def test_warnings_and_errors_are_unread_until_the_history_is_read() -> None:
    log = NoticeLog()
    log.add(1.0, "information", "Screenshot", "saved")
    assert log.unread == 0  # information is not counted
    log.add(2.0, "warning", "Job control", "gpu-node-b did not answer")
    log.add(3.0, "error", "snapshot failed", "OSError")
    log.add(4.0, "error", "snapshot failed", "OSError")  # counted on its line, and here
    assert log.unread == 3
    log.read()
    assert log.unread == 0 and len(log) == 3


def test_the_history_shows_what_was_said_as_text() -> None:
    log = NoticeLog()
    log.add(1.0, "error", "[b]title[/b]", HOSTILE + "\nsecond line")
    log.add(2.0, "error", "[b]title[/b]", HOSTILE + "\nsecond line")
    content = history_content(log.newest_first(), log.dropped)
    plain = content.plain
    assert "[@click=app.quit]quit[/]" in plain and "[b]title[/b]" in plain
    assert "\x1b" not in plain
    assert "ERROR" in plain and "(×2, last " in plain
    assert "   second line" in plain.split("\n")  # each line of the message, indented
    assert history_content([], 0).plain == "no notifications yet this session"


async def test_a_toast_gone_from_the_screen_is_listed_by_n() -> None:
    app = make_app(StaticSource(demo_snapshot(), demo_details()))
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        app.notify("checkpoint written at step 400", title="Job control")
        app.notify(HOSTILE, title="Job control", severity="error")
        await settle(pilot)
        app.clear_notifications()  # both toasts have gone, as they do after 5 to 8 s
        await settle(pilot)
        # The header says that something was said: the error, not the information.
        assert "✉ 1 unread notice (n)" in text(app, "#status-bar")
        await pilot.press("n")
        await settle(pilot)
        assert isinstance(app.screen, NoticesScreen)
        listed = text(app, "#notices-list")
        assert listed.index("rank 3 said") < listed.index("checkpoint written")
        assert "[@click=app.quit]quit[/]" in listed and "\x1b" not in listed
        assert "2 notifications" in text(app, "#notices-title")
        # Raised while the history is open: listed at once, on top.
        app.notify("screenshot saved: /tmp/x.svg", title="Screenshot")
        await settle(pilot)
        first, message = text(app, "#notices-list").split("\n")[:2]
        assert "INFO" in first and "Screenshot" in first
        assert message == "   screenshot saved: /tmp/x.svg"
        app.notify("gpu-node-b did not answer", title="Job control", severity="warning")
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, NoticesScreen)
        # Read: the warning was listed as it came.
        assert "unread" not in text(app, "#status-bar")


async def test_the_header_names_the_key_a_keymap_gave_the_history(tmp_path: Path) -> None:
    keymap = tmp_path / "keys.toml"
    keymap.write_text('notices = "N"\n')
    app = make_app(StaticSource(demo_snapshot(), demo_details()), keymap_path=keymap)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        app.notify("gpu-node-b refused: busy", title="Job control", severity="error")
        await settle(pilot)
        assert "✉ 1 unread notice (N)" in text(app, "#status-bar")
        await pilot.press("N")
        await settle(pilot)
        assert isinstance(app.screen, NoticesScreen)
        await pilot.press("escape")
        await settle(pilot)
        assert "unread" not in text(app, "#status-bar")
