"""The only code that talks to DuckDB: schema, migrations, writes, queries, retention."""

from cockpit.store.database import (
    HostRow,
    IngestResult,
    Store,
    StoreDamagedError,
    StoreError,
    StoreLockedError,
    StoreReadOnlyError,
    StoreVersionError,
)

__all__ = [
    "HostRow",
    "IngestResult",
    "Store",
    "StoreDamagedError",
    "StoreError",
    "StoreLockedError",
    "StoreReadOnlyError",
    "StoreVersionError",
]
