"""Fixtures for the transport tests: a consumer, and links that are always stopped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cockpit.transport.link import BaseLink
from tests.transport.support import Collector


@pytest.fixture
def collector() -> Collector:
    return Collector()


@pytest.fixture
def links() -> Iterator[list[BaseLink]]:
    """Register links here; they are stopped at teardown even when a test fails."""
    started: list[BaseLink] = []
    yield started
    for link in started:
        link.request_stop()
    for link in started:
        link.stop()
