"""Regenerate `charlm-run.ndjson.gz`: the recording the UI and report tests replay.

It is a real run, not a synthetic one: the demo pipeline (agent daemon supervising the
example trainer under torchrun, simulated GPUs since CI has none) runs until the job
exits, and the agent's journal — exactly what a cockpit receives on the wire — is saved.
On the way the run goes through what an operator sees on a long job: the LR is halved
from the cockpit (`ADJUST_AT`), and one rank is killed with SIGKILL (`KILL_AT`, as the
host's OOM killer would), so the agent recovers the job from its newest checkpoint.

    .venv/bin/python tests/data/make_recording.py [--steps 300]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cockpit.app.demo import DEMO_JOB, DemoRun

HERE = Path(__file__).resolve().parent
OUT = HERE / "charlm-run.ndjson.gz"
ADJUST_AT = 120  # the operator halves the LR once training passed this step
KILL_AT = 230  # then rank 1 is killed past this step (the checkpoints come every 100)
# The recording goes on after the job's end (GPUs idle, the host still reports) until
# it spans this long: the replay tests seek through it a minute at a time.
MIN_SPAN_S = 90.0


def _lines(journal_dir: Path) -> list[str]:
    """The journal as written: the exact wire lines (each must parse)."""
    lines = []
    for seg in sorted(journal_dir.glob("*.ndjson")):
        lines.extend(line for line in seg.read_text().splitlines() if line)
    return lines


def _journal(journal_dir: Path) -> list[dict]:
    return [json.loads(line) for line in _lines(journal_dir)]


def _wait(what: str, done: Callable[[], bool], deadline: float) -> None:
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what}")
        time.sleep(0.2)


def _step(demo: DemoRun) -> int:
    return demo.source.snapshot().progress.step or 0


def _rank_pid(run_dir: Path, rank: int) -> int:
    """The newest process of `rank`, from its spool files' headers."""
    headers = [json.loads(path.read_text().split("\n", 1)[0])
               for path in (run_dir / "spool" / DEMO_JOB).glob(f"rank-{rank}.*.ndjson")]
    return int(max(headers, key=lambda h: h["ts"])["pid"])


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
            _wait(f"step {ADJUST_AT}", lambda: _step(demo) >= ADJUST_AT, deadline)
            controller = demo.source.controller
            assert controller is not None
            print(controller.adjust(lr_scale=0.5))
            _wait(f"step {KILL_AT}", lambda: _step(demo) >= KILL_AT, deadline)
            os.kill(_rank_pid(demo.run_dir, 1), signal.SIGKILL)
            _wait("the job's end", lambda: any(
                r.get("kind") == "job_exited" and r["data"].get("returncode") == 0
                for r in _journal(journal)), deadline)
            first_ts = json.loads(_lines(journal)[0])["ts"]
            time.sleep(max(3.0, first_ts + MIN_SPAN_S - time.time()))
        lines = _lines(demo.state_dir / "journal")
    kinds = {json.loads(line).get("kind") for line in lines}
    assert {"interruption", "recovery", "resumed"} <= kinds, sorted(k for k in kinds if k)
    with gzip.open(OUT, "wt") as fh:
        fh.write("\n".join(lines) + "\n")
    print(f"{OUT}: {len(lines)} records")


if __name__ == "__main__":
    main()
