"""Which pytest-xdist worker runs this test, for what must not be shared between
workers running side by side: loopback addresses and listening ports."""

from __future__ import annotations

import os


def worker_index() -> int:
    """0 for the first worker (`gw0`) or a run without xdist, 1 for `gw1`, and so on."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = worker.removeprefix("gw")
    return int(digits) if digits.isdigit() else 0
