"""A synthetic recording written once per module through the real ingest path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cockpit.store.database import Store
from cockpit.store.queries import StoreReader
from tests.read.synthetic import write_recording


@pytest.fixture(scope="package")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_recording(tmp_path_factory.mktemp("rec") / "run.duckdb")


@pytest.fixture
def reader(recording: Path) -> Iterator[StoreReader]:
    store = Store(recording, read_only=True)
    try:
        yield StoreReader(store)
    finally:
        store.close()
