"""A recording opened for reading, with the store's errors as the CLI's.

Every command that reads a recording (report, compare, kpis) opens it read-only and
turns a `StoreError`, on opening or while reading, into one `CockpitError` naming the
recording: the user sees which file failed and why, not a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cockpit.errors import CockpitError
from cockpit.store.database import Store, StoreError
from cockpit.store.queries import StoreReader


@contextmanager
def reading(path: str | Path, what: str | None = None) -> Iterator[tuple[Store, StoreReader]]:
    """The recording at `path` and its reader; errors name it as `what` when given."""
    def error(exc: StoreError) -> CockpitError:
        return CockpitError(f"{what}: {exc}" if what else str(exc))

    try:
        store = Store(path, read_only=True)
    except StoreError as exc:
        raise error(exc) from None
    try:
        yield store, StoreReader(store)
    except StoreError as exc:
        raise error(exc) from None
    finally:
        store.close()
