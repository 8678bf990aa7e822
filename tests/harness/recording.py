"""The recorded real run (tests/data/charlm-run.ndjson.gz) loaded into a DuckDB store.

The recording is the agent journal of a real torchrun run of the example trainer; it is
ingested through the real `Store.ingest`, in wire-sized chunks, as a live session would.
"""

from __future__ import annotations

import gzip
from pathlib import Path

from cockpit.store.database import Store

RECORDING = Path(__file__).resolve().parents[1] / "data" / "charlm-run.ndjson.gz"
RECORDED_HOST = "gpu-host-1"


def load_recording(dest: Path, host: str = RECORDED_HOST, chunk_lines: int = 500) -> Path:
    """Write the recording into a new store at `dest` and return its path."""
    with gzip.open(RECORDING, "rb") as fh:
        lines = fh.read().splitlines(keepends=True)
    with Store(dest) as store:
        for start in range(0, len(lines), chunk_lines):
            store.ingest(host, b"".join(lines[start : start + chunk_lines]))
    return dest
