"""What the cockpit told the operator in toasts, kept so that it can be read again.

A toast stays on screen five to eight seconds. An operator who looked away while a
control was refused, a refresh failed or a screenshot could not be written would
otherwise never learn of it: the notification history (`n`) lists what was said, newest
first. Each notice is kept as it was shown (its text already made printable by the app),
at most `KEPT` of them, the oldest dropped first; the same notice raised again straight
after (a recording that cannot be read fails every few seconds) is counted on one line
rather than filling the list.

No Textual here: the log is plain data, the screen (`screens/notices.py`) draws it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace

KEPT = 200  # a long night's notices; each holds a line or two of text


@dataclass(frozen=True)
class Notice:
    """One notice as the operator saw it, or the same one raised `count` times in a
    row (first at `ts`, last at `last_ts`: wall-clock seconds)."""

    ts: float
    severity: str  # Textual's: "information", "warning" or "error"
    title: str
    message: str
    count: int = 1
    last_ts: float | None = None

    @property
    def newest_ts(self) -> float:
        return self.last_ts if self.last_ts is not None else self.ts

    def same_as(self, severity: str, title: str, message: str) -> bool:
        return (self.severity, self.title, self.message) == (severity, title, message)


# What the header counts until the history is read: a refusal, a failure, a host that
# did not answer. Information ("loss axis: linear", "screenshot saved") is not.
UNREAD_SEVERITIES = frozenset({"warning", "error"})


class NoticeLog:
    """The notices of this session, oldest first, at most `kept`; `unread` counts the
    warnings and errors raised since the operator last read the history."""

    def __init__(self, kept: int = KEPT) -> None:
        if kept < 1:
            raise ValueError("a notice log keeps at least one notice")
        self._notices: deque[Notice] = deque(maxlen=kept)
        self.dropped = 0  # the oldest, gone to make room: said when the list is shown
        self.unread = 0

    def add(self, ts: float, severity: str, title: str, message: str) -> Notice:
        """Keep one notice raised at `ts`; the same as the newest is counted on it."""
        if severity in UNREAD_SEVERITIES:
            self.unread += 1
        if self._notices and self._notices[-1].same_as(severity, title, message):
            last = self._notices[-1]
            self._notices[-1] = replace(last, count=last.count + 1, last_ts=ts)
            return self._notices[-1]
        if len(self._notices) == self._notices.maxlen:
            self.dropped += 1
        notice = Notice(ts=ts, severity=severity, title=title, message=message)
        self._notices.append(notice)
        return notice

    def newest_first(self) -> list[Notice]:
        return list(reversed(self._notices))

    def read(self) -> None:
        """The operator has the history in front of them."""
        self.unread = 0

    def __len__(self) -> int:
        return len(self._notices)
