"""Where a command writes its recording when the user names none: one owner, imported
by watch, the operations and the Slurm commands."""

from __future__ import annotations

import time
from pathlib import Path

from platformdirs import user_data_path


def default_recording_path(kind: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return user_data_path("training-cockpit") / "recordings" / f"{kind}-{stamp}.duckdb"
