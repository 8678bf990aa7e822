"""What the agent daemon costs the host it watches: CPU share and peak RSS, against the job.

The agent runs next to every training job, for its whole life, on machines whose cores
and memory were bought for training; it must stay negligible. Here the real daemon
samples 8 simulated GPUs and the host at 1 Hz and tails the spool of a real example
trainer it launched itself (through its control inbox, as the cockpit does). Over a
steady window the daemon process alone is measured -- CPU time (user + system) over wall
time, and its peak RSS (VmHWM) -- and so are the trainer job's processes over the same
window, as the baseline: `ratio` is the agent's overhead relative to the work it watches.

Goal: the daemon <= 1 % of one core and <= 60 MB peak RSS. The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agent.journal.control_inbox import append_op  # noqa: E402
from agent.journal.journal import JournalReader  # noqa: E402
from bench.result import report  # noqa: E402
from cockpit.control.jobspec import parse_jobspec  # noqa: E402

TRAIN = REPO / "examples" / "charlm" / "train.py"
# Small data so the job starts in seconds; eval off so its load is steady over the window.
FAST = ("train.log_every=10", "eval.windows=32", "data.max_bytes=1500000",
        "checkpoint.every=200", "eval.at_start=false", "eval.every=100000")  # fmt: skip
CPU_GOAL_PCT = 1.0
RSS_GOAL_MB = 60.0


def job_spec(tmp: Path, ranks: int) -> dict:
    """A charlm launch spec, written and parsed the way an operator's TOML is."""
    args = ["--max-steps", "10000000"]
    for setting in (f"data.dir={tmp / 'data'}", *FAST):
        args += ["--set", setting]
    text = textwrap.dedent(f"""\
        name = "bench"
        hosts = ["local"]
        nproc_per_node = {ranks}
        python = {json.dumps(sys.executable)}
        script = {json.dumps(str(TRAIN))}
        args = {json.dumps(args)}
        run_dir = {json.dumps(str(tmp / "runs" / "bench"))}
        stop_grace = 5
        [env]
        PYTHONPATH = {json.dumps(str(REPO))}
        OMP_NUM_THREADS = "1"
        GLOO_SOCKET_IFNAME = "lo"
    """)
    return parse_jobspec(text, str(tmp / "bench.toml")).for_host("local")


def records(state: Path, t: str) -> list[dict]:
    if not (state / "journal_id").exists():
        return []
    return [r for r in JournalReader(state).records() if r["t"] == t]


def wait_for(proc: subprocess.Popen, predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if proc.poll() is not None:
            raise RuntimeError(f"agent daemon exited ({proc.returncode}) waiting for {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.2)


def cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def peak_rss_mb(pid: int) -> float:
    """VmHWM: the kernel's high-water mark of the process's resident set."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/{pid}/status has no VmHWM line")


def job_cpu(daemon: psutil.Process) -> dict[int, float]:
    """CPU seconds so far of each process under the daemon (the launcher and the ranks)."""
    out: dict[int, float] = {}
    for child in daemon.children(recursive=True):
        try:
            out[child.pid] = cpu_seconds(child)
        except psutil.NoSuchProcess:
            pass
    return out


def measure(tmp: Path, window: float, ranks: int, warmup: float) -> dict:
    state, run_dir = tmp / "state", tmp / "runs" / "bench"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    log = open(tmp / "daemon.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent", "run", "--state-dir", str(state), "--run-dir",
         str(run_dir), "--simulate-gpus", "8", "--interval", "1.0", "--stop-grace", "5"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        op_id = secrets.token_hex(6)
        wait_for(proc, lambda: records(state, "hello"), 30, "the daemon's hello")
        append_op(state, {"op": "launch", "id": op_id, "_rx": time.time(),
                          "spec": job_spec(tmp, ranks)})
        ack = wait_for(proc, lambda: next((e for e in records(state, "event")
                                           if e["kind"] == "control_ack"
                                           and e["data"]["id"] == op_id), None),
                       30, "the launch ack")  # fmt: skip
        if not ack["data"]["ok"]:
            raise RuntimeError(f"launch refused: {ack['msg']}")
        wait_for(proc, lambda: records(state, "train"), 180, "the trainer's first steps")
        time.sleep(warmup)  # past the ranks' start-up, into steady training

        daemon = psutil.Process(proc.pid)
        train_before = len(records(state, "train"))
        gpu_before = len(records(state, "gpu"))
        t0 = time.monotonic()
        agent0, job0 = cpu_seconds(daemon), job_cpu(daemon)
        time.sleep(window)
        agent1, job1 = cpu_seconds(daemon), job_cpu(daemon)
        wall = time.monotonic() - t0
        job_pids = sorted(set(job0) & set(job1))
        agent_rss = peak_rss_mb(proc.pid)
        job_rss = sum(peak_rss_mb(pid) for pid in job_pids)
        train_seen = len(records(state, "train")) - train_before
        gpu_seen = len(records(state, "gpu")) - gpu_before
        if not job_pids or train_seen == 0:
            raise RuntimeError("the trainer was not running through the window "
                               f"(processes {job_pids}, {train_seen} train records)")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        log.close()
    job_cpu_s = sum(job1[pid] - job0[pid] for pid in job_pids)
    return {
        "wall": wall, "agent_cpu_pct": (agent1 - agent0) / wall * 100,
        "job_cpu_pct": job_cpu_s / wall * 100, "agent_rss_mb": agent_rss,
        "job_rss_mb": job_rss, "job_procs": len(job_pids), "train_records": train_seen,
        "gpu_records": gpu_seen,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--window", type=float, default=60.0, help="measured seconds")
    parser.add_argument("--ranks", type=int, default=1, help="trainer ranks under torchrun")
    parser.add_argument("--warmup", type=float, default=3.0,
                        help="seconds of training before the window opens")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp:
        m = measure(Path(tmp), args.window, args.ranks, args.warmup)
    value, baseline = m["agent_cpu_pct"], m["job_cpu_pct"]
    rss, rss_base = m["agent_rss_mb"], m["job_rss_mb"]
    ok = value <= CPU_GOAL_PCT and rss <= RSS_GOAL_MB
    print(f"window {m['wall']:.1f} s: {m['gpu_records']} gpu records (8 simulated GPUs at 1 Hz), "
          f"{m['train_records']} train records tailed")
    print(f"agent daemon:          {value:6.2f} % of one core, peak RSS {rss:6.1f} MB")
    print(f"trainer job ({m['job_procs']} procs): {baseline:6.2f} % of one core, "
          f"peak RSS {rss_base:6.1f} MB")
    print(f"ratio agent/job: CPU {value / baseline:.4f}, RSS {rss / rss_base:.3f}")
    print(f"goal: <= {CPU_GOAL_PCT:g} % CPU and <= {RSS_GOAL_MB:g} MB RSS: "
          f"{'pass' if ok else 'FAIL'}")
    return report(
        "agent", round(value, 3), "% of one core", round(baseline, 2),
        goal=f"value <= {CPU_GOAL_PCT:g} and rss_mb <= {RSS_GOAL_MB:g}", passed=ok,
        metric="agent daemon CPU share", baseline_name="the trainer job's processes",
        rss_mb=round(rss, 1), rss_baseline_mb=round(rss_base, 1),
        rss_ratio=round(rss / rss_base, 4), window_s=round(m["wall"], 1), gpus=8,
        interval_s=1.0, job_procs=m["job_procs"], train_records=m["train_records"],
        gpu_records=m["gpu_records"],
    )


if __name__ == "__main__":
    sys.exit(main())
