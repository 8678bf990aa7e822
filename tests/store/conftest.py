from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cockpit.store import Store


@pytest.fixture
def store(tmp_store_path: Path) -> Iterator[Store]:
    with Store(tmp_store_path) as s:
        yield s

