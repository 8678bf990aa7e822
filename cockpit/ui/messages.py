"""Messages that travel up to the app: data notices from sources and worker results.

Workers never touch widgets; they end by posting one of these, and the app sets
attributes on the panes in response (attributes down, messages up).
"""

from __future__ import annotations

from typing import Any

from textual.message import Message
from textual.notifications import SeverityLevel

from cockpit.read.details import DetailKind
from cockpit.read.source import Controller
from cockpit.snapshot import Snapshot


class DataArrived(Message):
    """The source has new data. Posted from any thread; a flood merges into one."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, DataArrived)


class SnapshotReady(Message):
    """A refresh worker built a snapshot for the main screen."""

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class DetailsReady(Message):
    """A drill-down query (`source.details(what, **params)`) finished."""

    def __init__(self, what: DetailKind, params: dict[str, object], details: object) -> None:
        super().__init__()
        self.what = what
        self.params = params
        self.details = details


class ControlPlanned(Message):
    """The controller described a destructive action; the user must now confirm it."""

    def __init__(self, action: str, kwargs: dict[str, Any], description: str,
                 controller: Controller) -> None:  # fmt: skip
        super().__init__()
        self.action = action
        self.kwargs = kwargs
        self.description = description
        self.controller = controller  # the job's, chosen when the key was pressed


class ControlDone(Message):
    """A job-control action returned; `result` is what the controller answered."""

    def __init__(self, action: str, result: object, job: str | None = None,
                 ops: dict[str, str] | None = None, severity: SeverityLevel = "information",
                 ) -> None:
        super().__init__()
        self.action = action
        self.result = result
        self.job = job  # the job it acted on
        self.ops = ops or {}  # host -> id of the op sent there, for its acknowledgement
        self.severity = severity  # "warning": sent to some of the job's hosts only


class ControlAcked(Message):
    """The agents answered a sent op, or some did not within the wait: `answers` maps
    host -> (accepted, what it said), None for a host that has not answered. `late`:
    the seconds since it was sent, for answers that came after the wait (those hosts
    only)."""

    def __init__(self, action: str, job: str | None,
                 answers: dict[str, tuple[bool, str] | None],
                 late: float | None = None) -> None:
        super().__init__()
        self.action = action
        self.job = job
        self.answers = answers
        self.late = late


class PaneFocused(Message):
    """A pane took focus, so the narrow layout knows which one to expand."""

    def __init__(self, pane_id: str) -> None:
        super().__init__()
        self.pane_id = pane_id


class DetailsRequested(Message):
    """A drill-down screen wants `source.details(what, **params)`; the app fetches it."""

    def __init__(self, what: DetailKind, params: dict[str, object]) -> None:
        super().__init__()
        self.what = what
        self.params = params
