"""Alert thresholds a test configures, put back to the defaults after it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from cockpit.analysis import alert_config
from cockpit.analysis.alert_config import AlertThresholds


@pytest.fixture
def configured() -> Iterator[None]:
    """Restores the defaults after a test that configures thresholds of its own."""
    try:
        yield
    finally:
        alert_config.configure(AlertThresholds())


def configure(**values: float) -> None:
    """The default thresholds with `values` changed, in force until `configured` ends."""
    alert_config.configure(dataclasses.replace(AlertThresholds(), **values))
