"""Polling for a condition in tests, shared so every test fails the same way."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "",
             poll: float = 0.05) -> Any:
    """Poll until `predicate()` is truthy and return it; fail naming `what` after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for "
                                 f"{what or predicate}")
        time.sleep(poll)
