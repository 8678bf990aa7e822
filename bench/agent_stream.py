"""How fast `cockpit-agent stream` serves a journal backlog, against `cat` of the same files.

A cockpit that reconnects after a long disconnection asks for everything since its last
seq; the stream must push that backlog at pipe speed (goal: > 1 M lines/s). Both runs
write into the same consumer (a pipe drained by this process), so the ratio shows what
the stream adds on top of reading the segment files.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agent.journal.journal import Journal, list_segments  # noqa: E402
from bench.result import report  # noqa: E402

LINES = int(os.environ.get("BENCH_LINES", "1000000"))
GOAL = 1_000_000.0


def _drain(cmd: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, cwd=REPO)
    assert proc.stdout is not None
    lines = 0
    while True:
        block = proc.stdout.read1(1 << 20)
        if not block:
            break
        lines += block.count(b"\n")
    proc.wait()
    return time.perf_counter() - start, lines


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-agent-stream-") as tmp:
        state = Path(tmp)
        journal = Journal(state, max_bytes=8 << 30)
        batch = [("gpu", {"gpu": i % 8, "util": 97.5, "temp": 71.0, "power": 612.3,
                          "mem_used": 64 << 30, "throttle": 0}) for i in range(10_000)]
        for _ in range(LINES // len(batch)):
            journal.append_many(batch, ts=1.7e9)
        journal.close()
        files = [str(p) for _, p in list_segments(state / "journal")]
        megabytes = sum(os.path.getsize(f) for f in files) / 1e6
        env = dict(os.environ, PYTHONPATH=str(REPO))
        base_s, base_lines = _drain(["cat", *files], env)
        stream_s, stream_lines = _drain(
            [sys.executable, "-m", "agent", "stream", "--state-dir", str(state), "--from", "0"],
            env)
    assert base_lines == LINES and stream_lines == LINES + 1, (base_lines, stream_lines)
    value = stream_lines / stream_s
    baseline = base_lines / base_s
    return report(
        "agent_stream_backlog", round(value), "lines/s", round(baseline),
        goal=f"value > {GOAL:.0f}", passed=value > GOAL, metric="lines/s", lines=LINES,
        baseline_name="cat segments", mb=round(megabytes, 1),
    )


if __name__ == "__main__":
    sys.exit(main())
