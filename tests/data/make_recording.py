"""Regenerate `charlm-run.ndjson.gz`: the recording the UI and report tests replay.

It is a real run, not a synthetic one: the demo pipeline (agent daemon supervising the
example trainer under torchrun, simulated GPUs since CI has none) runs until the job
exits, and the agent's journal — exactly what a cockpit receives on the wire — is saved.

    .venv/bin/python tests/data/make_recording.py [--steps 300]
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
from pathlib import Path

from cockpit.demo import DemoRun

HERE = Path(__file__).resolve().parent
OUT = HERE / "charlm-run.ndjson.gz"


def _job_exited(journal_dir: Path) -> bool:
    for seg in sorted(journal_dir.glob("*.ndjson")):
        for line in seg.read_text().splitlines():
            if '"kind":"job_exited"' in line:
                return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        demo = DemoRun(run_root=Path(tmp) / "run", steps=args.steps, simulate_gpus=2)
        with demo:
            journal = demo.state_dir / "journal"
            deadline = time.monotonic() + args.timeout
            while time.monotonic() < deadline and not _job_exited(journal):
                time.sleep(1.0)
            time.sleep(3.0)  # a few more telemetry samples after the exit
        lines = []
        for seg in sorted((demo.state_dir / "journal").glob("*.ndjson")):
            lines.extend(seg.read_text().splitlines())
    for line in lines:
        json.loads(line)  # the recording must be clean wire data
    with gzip.open(OUT, "wt") as fh:
        fh.write("\n".join(lines) + "\n")
    print(f"{OUT}: {len(lines)} records")


if __name__ == "__main__":
    main()
