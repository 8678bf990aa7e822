"""The Textual app: wiring between a `Source` and the screens, nothing more.

Data flow: the source calls `on_data` from any thread → `DataArrived` (merged when
they flood) → a refresh worker builds a snapshot, gated to one in flight and at most
four per second → `SnapshotReady` → the app sets `snapshot` on the screens, which set
it on their panes. Job-control and replay keys live in their own mixins.
"""

from __future__ import annotations

import dataclasses
import gc
import time
from collections.abc import Iterable
from functools import partial
from pathlib import Path

from textual import on, work
from textual.app import App, SystemCommand
from textual.notifications import Notify, SeverityLevel
from textual.screen import ModalScreen, Screen
from textual.widgets import Input
from textual.worker import Worker, WorkerState

from cockpit.analysis.signal_alerts import acknowledge
from cockpit.analysis.text import printable
from cockpit.read.details import DetailKind
from cockpit.read.source import SNAPSHOT_BUCKETS, Source
from cockpit.snapshot import Snapshot
from cockpit.ui import keymap as keys
from cockpit.ui import refresh_gate
from cockpit.ui.collector import RELEASE_AFTER_S, CollectorHold
from cockpit.ui.commands import CockpitCommands
from cockpit.ui.control_actions import ControlActions
from cockpit.ui.messages import DataArrived, DetailsReady, DetailsRequested, SnapshotReady
from cockpit.ui.notices import NoticeLog
from cockpit.ui.replay_actions import REPLAY_ACTIONS, ReplayActions, is_replayable
from cockpit.ui.screens.alerts import AlertsScreen
from cockpit.ui.screens.compare import CompareScreen
from cockpit.ui.screens.confirm import ConfirmScreen
from cockpit.ui.screens.drill_down import DrillDownScreen
from cockpit.ui.screens.help import HelpScreen
from cockpit.ui.screens.host_detail import HostDetailScreen
from cockpit.ui.screens.log_tail import LogTailScreen
from cockpit.ui.screens.main import MainScreen
from cockpit.ui.screens.notices import NoticesScreen
from cockpit.ui.screens.prompt import PromptScreen
from cockpit.ui.screens.run_info import RunInfoScreen
from cockpit.ui.themes import ThemeSet

TOAST_REPAINT_DELAY = 0.1  # s after a toast's timeout: it has been removed by then
FAILURE_TOAST_S = 8.0  # how long a worker's failure is shown


class CockpitApp(ControlActions, ReplayActions, App):
    TITLE = "cockpit"
    # Replay keys first: they show only in a replay, where they are what the footer must
    # not cut off at 160 columns (the job-control keys there only answer "read-only").
    BINDINGS = keys.bindings("replay") + keys.bindings("app")
    COMMANDS = App.COMMANDS | {CockpitCommands}

    def __init__(self, source: Source, theme_set: ThemeSet, theme: str,
                 keymap: dict[str, str] | None = None,
                 screenshot_dir: Path | None = None) -> None:
        super().__init__(css_path=list(theme_set.css_paths))
        self.source = source
        self.screenshot_dir = screenshot_dir  # None: the recording's directory
        self.keymap = keymap or {}
        self.theme_names = theme_set.names()
        for definition in theme_set.themes:
            self.register_theme(definition)
        self.theme = theme
        self.set_keymap(self.keymap)
        self.snapshot: Snapshot | None = None
        self.gate = refresh_gate.RefreshGate()
        self.collector = CollectorHold()  # the collector waits while a refresh runs
        # (code, where) of the alerts the operator acknowledged in Alerts (`x`): shown so
        # while they last, and no longer counted in the header.
        self.acknowledged: set[tuple[str, str]] = set()
        self.main_screen = MainScreen()
        self.main_screen.notices_key = keys.key_label(self.keymap, "notices")
        self._frozen = False
        # The failure shown last (text, monotonic time): a recording that cannot be read
        # fails every refresh, four times a second, and its toasts would cover the screen.
        self._last_failure: tuple[str, float] | None = None
        # Every toast, to be read again once it has gone (`n`).
        self.notices = NoticeLog()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Textual's commands, less its theme picker: it lists Textual's own themes, which
        the cockpit's per-theme CSS does not cover. `Theme: NAME` entries switch among the
        cockpit's themes instead."""
        for command in super().get_system_commands(screen):
            if command.title != "Theme":
                yield command

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Every toast (screens' and widgets' `notify` come here) as text: its message
        holds job and host names, an agent's answer or an exception's text, none of
        which may be parsed as markup or put a control character on the terminal."""
        super().notify(printable(message, multiline=True), title=printable(title),
                       severity=severity, timeout=timeout, markup=False)

    def on_notify(self, event: Notify) -> None:
        """Keep the toast in the notification history (shown at once where it is open:
        here, on the event loop, whichever thread raised it), and repaint the screen
        once it has gone: over a maximised pane Textual removes an expired toast without
        repainting what it covered, so it stayed on screen until something else redrew
        there (a paused replay: never)."""
        shown = event.notification
        self.notices.add(shown.raised_at, shown.severity, shown.title, shown.message)
        for screen in self.screen_stack:
            if isinstance(screen, NoticesScreen):
                screen.show()
        self.main_screen.unread = self.notices.unread
        timeout = shown.timeout
        self.set_timer(timeout + TOAST_REPAINT_DELAY, self.repaint_after_toast)

    def repaint_after_toast(self) -> None:
        """The timer may fire while the app shuts down, its screens already gone."""
        if self.screen_stack:
            self.screen.refresh(layout=True)

    def get_default_screen(self) -> Screen:
        return self.main_screen

    def screenshot_folder(self) -> Path:
        """Where screenshots go: the directory given (`--screenshots`), else the
        recording's (a source reading one names it as `recording`), else the current
        one. Never Textual's default, the user's Downloads folder, which a server or a
        container often lacks (the save then failed and did not say where it had tried)."""
        if self.screenshot_dir is not None:
            return self.screenshot_dir
        recording = getattr(self.source, "recording", None)
        return Path(recording).parent if recording is not None else Path.cwd()

    def deliver_screenshot(self, filename: str | None = None, path: str | None = None,
                           time_format: str | None = None) -> str | None:
        """The command palette's Screenshot (and `action_screenshot`): an SVG of the
        screen in `screenshot_folder()` (or `path`), and a toast that says where it is,
        or why it could not be written there."""
        folder = Path(path) if path is not None else self.screenshot_folder()
        try:
            saved = self.save_screenshot(filename, str(folder), time_format)
        except OSError as exc:
            self.notify(f"screenshot not saved in {folder}: {exc.strerror or exc}",
                        title="Screenshot", severity="error")
            return None
        self.notify(f"screenshot saved: {saved}", title="Screenshot")
        return saved

    def on_mount(self) -> None:
        self.refresh_label()
        self.source.start(self._on_data)
        self._request_refresh()

    def on_unmount(self) -> None:
        self.collector.release()
        self.abandon_operations()
        self.source.stop()
        if self._frozen:
            gc.unfreeze()

    def _freeze_startup_objects(self) -> None:
        """Keep the garbage collector's full passes off the screen's objects.

        A full collection walks every object alive, and a composed screen holds tens of
        thousands (widgets, styles, render caches): each pass stalled a refresh by up to
        a tenth of a second. Once the first snapshot is on screen those objects live as
        long as the app, so they are moved out of the collector's view (`gc.freeze`);
        what each refresh allocates is still collected as usual.

        The garbage start-up left is collected first, so as not to freeze it: a pass over
        the two young generations, where it is (it was made moments ago). A full pass
        would walk every object the process holds, a quarter of a second in a process
        that has imported much (a test worker); what it alone would find, garbage old
        enough to have reached the oldest generation, is frozen only while the app runs
        (`on_unmount` thaws it).
        """
        if not self._frozen:
            gc.collect(1)
            gc.freeze()
            self._frozen = True

    def _on_data(self) -> None:
        """Called by the source from any thread."""
        self.post_message(DataArrived())

    def on_data_arrived(self, _message: DataArrived) -> None:
        self._request_refresh()

    def _request_refresh(self) -> None:
        self._act(*self.gate.request(time.monotonic()))

    def _timer_fired(self) -> None:
        self._act(*self.gate.timer_fired(time.monotonic()))

    def _act(self, decision: str, wait: float) -> None:
        if decision == refresh_gate.BUILD_NOW:
            self._build_snapshot()
        elif decision == refresh_gate.WAIT:
            self.set_timer(wait, self._timer_fired)

    def _build_snapshot(self) -> None:
        """Start a refresh. The collector waits from here, not from the worker's first
        line: starting a worker allocates too, and a collection owed by the records
        stored since the last refresh then ran inside this one."""
        if self.is_running:  # released once the snapshot is painted (or not made)
            self.collector.hold()
        self._snapshot_worker()

    @work(thread=True, exclusive=True, exit_on_error=False, group="snapshot")
    def _snapshot_worker(self) -> None:
        if self.is_running:  # held already, unless a cancelled worker's end released it
            self.collector.hold(renew=False)
        snapshot = self.source.snapshot(buckets=SNAPSHOT_BUCKETS)
        if self.acknowledged:
            snapshot = dataclasses.replace(snapshot, alerts=acknowledge(
                snapshot.alerts, frozenset(self.acknowledged)))
        self.post_message(SnapshotReady(snapshot))

    def on_snapshot_ready(self, message: SnapshotReady) -> None:
        if not self.is_running:
            # Built while the app was closing: its screens are being taken apart, and a
            # pane whose children are already gone has nowhere to show it.
            self.collector.release()
            return
        self.snapshot = message.snapshot
        self._last_failure = None
        self.main_screen.failing = ""
        self.refresh_label()  # a replay pauses itself at the end: the header must say so
        for screen in self.screen_stack:
            if isinstance(screen, MainScreen | DrillDownScreen):
                screen.snapshot = message.snapshot
        if not self._frozen:
            self.call_after_refresh(self._freeze_startup_objects)
        # This refresh's release, once it is painted: skipped if the next refresh has
        # begun when it runs.
        self.call_after_refresh(self._release_collector, self.collector.generation)

    def _release_collector(self, generation: int) -> None:
        self.set_timer(RELEASE_AFTER_S, partial(self.collector.release, generation))

    @on(Worker.StateChanged)
    def _worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one place worker outcomes are handled: failures become notifications."""
        worker = event.worker
        if event.state == WorkerState.ERROR:
            error = worker.error
            what = worker.group if worker.group != "default" else worker.name
            said = f"{type(error).__name__}: {error}"
            now = time.monotonic()
            last = self._last_failure
            if last is None or last[0] != said or now - last[1] >= FAILURE_TOAST_S:
                self._last_failure = (said, now)
                self.notify(said, title=f"{what} failed", severity="error",
                            timeout=FAILURE_TOAST_S)
            if worker.group == "snapshot":
                self.main_screen.failing = said
        if worker.group == "control" and event.state in (
            WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED
        ):
            self.operation_ended()
        if worker.group == "snapshot" and event.state in (
            WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED
        ):
            if event.state != WorkerState.SUCCESS:
                self.collector.release()  # no snapshot to paint
            self._act(*self.gate.finished(time.monotonic()))

    def on_details_requested(self, message: DetailsRequested) -> None:
        self._load_details(message.what, message.params)

    @work(thread=True, exclusive=True, exit_on_error=False, group="details")
    def _load_details(self, what: DetailKind, params: dict[str, object]) -> None:
        details = self.source.details(what, **params)
        self.post_message(DetailsReady(what, params, details))

    def on_details_ready(self, message: DetailsReady) -> None:
        if not self.is_running:  # as a snapshot built while the app closes
            return
        screen = self.screen
        if isinstance(screen, DrillDownScreen) and screen.accepts(message.what, message.params):
            screen.details = message.details

    def refresh_label(self) -> None:
        label = self.source.label or ""
        self.main_screen.label = label
        self.main_screen.paused = self.replay_paused
        self.main_screen.replaying = is_replayable(self.source)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in REPLAY_ACTIONS:
            # Text being typed keeps its arrows (a filter, a prompt), and a dialog its
            # keys: the seek keys come before the focused widget's, except there.
            return (is_replayable(self.source) and not isinstance(self.focused, Input)
                    and not isinstance(self.screen, ModalScreen))
        return True

    def _open(self, screen: Screen) -> None:
        while len(self.screen_stack) > 1:
            self.pop_screen()
        self.push_screen(screen)

    def action_open_host_detail(self) -> None:
        self._open(HostDetailScreen(self.snapshot))

    def action_open_alerts(self) -> None:
        self._open(AlertsScreen(self.snapshot))

    def action_open_run_info(self) -> None:
        self._open(RunInfoScreen(self.snapshot))

    def action_open_compare(self) -> None:
        self._open(CompareScreen(self.snapshot))

    def action_next_job(self) -> None:
        """Show the next job of the recording: those training first (a fork and its
        parent side by side), then the others (a paused fork, to resume it)."""
        snapshot = self.snapshot
        if snapshot is None:
            return
        training = snapshot.jobs_training
        jobs = (*training, *(j for j in snapshot.jobs if j not in training))
        if len(jobs) < 2:
            self.notify(f"one job to show ({snapshot.job or 'none'}): the recording has no "
                        "other", title="Next job")
            return
        current = snapshot.job
        following = jobs[(jobs.index(current) + 1) % len(jobs)] if current in jobs else jobs[0]
        self.source.focus_job = following
        # In the header's words, which it shows once the job's snapshot arrives.
        if following not in training:
            place = f"not training; {len(training)} of {len(jobs)} jobs training"
        elif len(training) > 1:
            place = f"{training.index(following) + 1} of {len(training)} training"
        else:
            place = "training"
        self.notify(f"showing job {following} ({place})", title="Next job")
        self._request_refresh()

    def action_open_log(self) -> None:
        self._open(LogTailScreen(self.snapshot))

    def action_open_notices(self) -> None:
        """Over whatever is on screen (a drill-down stays where it was), once."""
        if not isinstance(self.screen, NoticesScreen):
            self.push_screen(NoticesScreen(self.notices))
        self.main_screen.unread = 0  # read now (the screen's `show`)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.keymap))

    async def run_keyed_action(self, spec_id: str) -> None:
        """Run an action chosen in the command palette on the screen it belongs to.

        Never over an open dialog (a confirmation, a prompt): the palette must not stack
        a second one on it, nor close it without an answer."""
        spec = keys.SPECS[spec_id]
        dialog = next((s for s in self.screen_stack if isinstance(s, ConfirmScreen | PromptScreen)),
                      None)
        if dialog is not None:
            self.notify(f"{spec.description}: answer or cancel (Esc) the open dialog first",
                        severity="warning", timeout=4)
            return
        if spec.scope == "main":
            while len(self.screen_stack) > 1:
                self.pop_screen()
            await self.run_action(spec.action, self.main_screen)
        elif spec.scope in ("host", "filter", "compare"):
            screens: dict[str, tuple[tuple[type[Screen], ...], str]] = {
                "host": ((HostDetailScreen,), "host detail"),
                "filter": ((AlertsScreen, LogTailScreen), "alerts or log"),
                "compare": ((CompareScreen,), "compare")}
            wanted, where = screens[spec.scope]
            if not isinstance(self.screen, wanted):
                self.notify(f"{spec.description}: only on the {where} screen", timeout=3)
                return
            await self.run_action(spec.action, self.screen)
        elif spec.scope == "replay" and not is_replayable(self.source):
            self.notify(f"{spec.description}: only when replaying a recording", timeout=3)
        else:
            await self.run_action(spec.action)
