"""Every notification a Textual app raised, kept for the test that reads them.

A toast times out after a few seconds (Textual's default is 5, the cockpit's control
toasts 8) and is then gone from `App._notifications`. A test that presses several keys
and then reads what the operator was told loses the first toasts whenever those steps
took longer than that: on a loaded machine they do. The tests read the kept list
(`tests/ui/helpers.notified`), what the app raised in the order it raised it, and a test
that clears the notifications clears it too. The toasts themselves still time out.

No Textual import here: `tests/conftest.py` installs this only where a test has
already imported Textual, so the tiers that never load it do not start to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

KEPT = "_kept_notifications"


@dataclass(frozen=True)
class Toast:
    title: str
    message: Any
    severity: str


def keep_notifications(monkeypatch: pytest.MonkeyPatch, app_class: Any) -> None:
    """Wrap `app_class.notify` and `clear_notifications` (Textual's public methods) so
    that each app keeps what it raised until the test clears it."""
    notify, clear = app_class.notify, app_class.clear_notifications

    def kept_notify(self: Any, message: Any, *, title: str = "",
                    severity: str = "information", **kwargs: Any) -> None:
        self.__dict__.setdefault(KEPT, []).append(Toast(title, message, severity))
        notify(self, message, title=title, severity=severity, **kwargs)

    def kept_clear(self: Any) -> None:
        self.__dict__[KEPT] = []
        clear(self)

    monkeypatch.setattr(app_class, "notify", kept_notify)
    monkeypatch.setattr(app_class, "clear_notifications", kept_clear)


def kept(app: Any) -> list[Toast]:
    """What `app` raised since it started or the test last cleared it, oldest first."""
    return list(app.__dict__.get(KEPT, ()))
