"""Cost of `Reporter.step()` on the training thread, against TensorBoard's `add_scalar`.

Both record the same 8 scalars per step (a 0-dim tensor loss among them), in the same
process and run. Between timed batches the loop sleeps briefly, standing in for the
training step's own compute, so that both libraries' background writer threads do their
work outside the timed region, as they would in a real loop. The figure that matters to
a trainer is what the training thread pays per step: value is `Reporter.step()`'s median
microseconds per step, baseline the eight `add_scalar` calls' in the same run.

Goal: `Reporter.step()` at least 50x faster than TensorBoard's eight calls (ratio
value / baseline <= 0.02). What the Reporter's flusher thread then spends per record,
off the training thread, is printed for reference (`flush_us_per_record`).

    .venv/bin/python bench/hook.py [--steps N]

Ends with one JSON line: {"bench": "hook", "metric": "step_us", ...}.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.utils.tensorboard import SummaryWriter  # noqa: E402

from agent.hook import Reporter  # noqa: E402
from bench.result import report  # noqa: E402

GOAL = 50.0
BATCH = 50


def per_call_us(call: Callable[[int], None], steps: int, pause: float) -> float:
    """Median over batches of the per-call wall time, in microseconds."""
    samples = []
    step = 0
    for _ in range(max(1, steps // BATCH)):
        start = time.perf_counter()
        for _ in range(BATCH):
            step += 1
            call(step)
        samples.append((time.perf_counter() - start) / BATCH * 1e6)
        time.sleep(pause)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10_000, help="Reporter steps timed")
    args = parser.parse_args(argv)

    loss = torch.tensor(2.5)
    values = {"lr": 3e-4, "samples": 32, "tokens": 4096, "grad_norm": 0.8,
              "loss_scale": 1024.0, "acc": 0.5, "ppl": 12.2}  # fmt: skip

    with tempfile.TemporaryDirectory() as tmp:
        rep = Reporter(run_dir=str(Path(tmp) / "run"), job="bench", rank=0,
                       register_atexit=False)  # fmt: skip
        writer = SummaryWriter(log_dir=str(Path(tmp) / "tb"))

        def reporter_step(step: int) -> None:
            rep.step(step, loss=loss, **values)

        def tensorboard_step(step: int) -> None:
            writer.add_scalar("loss", loss, step)
            for name, value in values.items():
                writer.add_scalar(name, value, step)

        # Warm both up, then alternate rounds so that machine noise hits both alike.
        per_call_us(reporter_step, 500, 0.001)
        per_call_us(tensorboard_step, 200, 0.001)
        ours, theirs = [], []
        for _ in range(3):
            ours.append(per_call_us(reporter_step, args.steps // 3, 0.001))
            theirs.append(per_call_us(tensorboard_step, max(BATCH, args.steps // 30), 0.001))

        # What the flusher thread spends per record, off the training thread.
        flush_n = 5000
        for step in range(flush_n):
            rep.step(step, loss=loss, **values)
        start = time.perf_counter()
        rep.flush()
        flush_us = (time.perf_counter() - start) / flush_n * 1e6
        rep.close()
        writer.close()

    value, baseline = statistics.median(ours), statistics.median(theirs)
    speedup = baseline / value
    print(f"Reporter.step(), 8 scalars:        {value:8.2f} µs per step")
    print(f"SummaryWriter.add_scalar x 8:      {baseline:8.2f} µs per step "
          f"({baseline / 8:.2f} µs per scalar)")  # fmt: skip
    print(f"ratio: {value / baseline:.4f} ({speedup:.1f}x faster, goal >= {GOAL:.0f}x)")
    print(f"flusher thread (off the hot path): {flush_us:8.2f} µs per record")
    return report("hook", round(value, 3), "us per step (8 scalars)", round(baseline, 3),
                  goal=f"ratio <= {1 / GOAL:g}", passed=speedup >= GOAL, metric="step_us",
                  speedup=round(speedup, 1), scalars=8,
                  baseline_name="tensorboard SummaryWriter.add_scalar x 8",
                  flush_us_per_record=round(flush_us, 3))  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
