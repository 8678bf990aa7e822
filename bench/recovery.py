"""Recovery benchmark: injected crashes and hangs on the CPU charlm job (2 ranks, gloo).

    .venv/bin/python bench/recovery.py [--crashes 10] [--hangs 3] [--baseline-crashes 3]

Managed: the agent daemon supervises the job (`launch` op). Each crash SIGKILLs one rank;
each hang SIGSTOPs one. Measured from the injection time the benchmark itself took:
detection latency (the `interruption` event's `detected_at`) and failure → first new step
(the first `train` record of the new attempt).

Baseline, in the same run: the same job under plain `torchrun --max-restarts N` with
`--resume auto`; its crash recovery is timed the same way (first train record written by a
new process), and a SIGSTOPped rank is watched for as long as the managed hang detection
took three times over -- plain torchrun never notices.

The baseline runs with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1. By default torchrun's c10d
rendezvous hands its own TCPStore to the workers and keeps it across restarts, and the
restarted workers' process group uses the same keys as the last one's: a restarted rank
may read its dead predecessor's address and hang in gloo's connectFullMesh (or fail to
connect), so plain torchrun often never trains again after its first or second restart
(pytorch/pytorch#135712). The switch gives every restart a fresh store; the managed job
does not need it (each attempt is a new torchrun).

Reported: the median time from a crash to the first new step (value) against plain
torchrun's median over its crashes (baseline); the hangs' median to the first new step
is reported beside it (`hang_recovery_median_s`: plain torchrun has no figure to set
against it, as it never notices a hang).

Goals (issue 6), each on the median: crash detected <= 2 s; hang detected <= max(10 s,
3 x median step time); failure -> first new step <= 30 s, for crashes and for hangs
alike. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.job.supervisor import alive, children_of  # noqa: E402
from agent.journal.control_inbox import append_op  # noqa: E402
from agent.journal.journal import JournalReader  # noqa: E402
from bench.result import report  # noqa: E402

TRAIN = ROOT / "examples" / "charlm" / "train.py"
SETTINGS = ["train.log_every=50", "eval.windows=32", "data.max_bytes=1500000",
            "checkpoint.every=10", "eval.at_start=false", "eval.every=100000"]
ENV = {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
HANG_FLOOR = 10.0
HANG_K = 3.0


def wait_for(predicate: Callable[[], Any], timeout: float, what: str,
             required: bool = True) -> Any:  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    if required:
        raise SystemExit(f"bench/recovery: timed out after {timeout:.0f} s waiting for {what}")
    return None


def trainer_args(data: Path) -> list[str]:
    args = [str(TRAIN), "--max-steps", "100000"]
    for setting in [f"data.dir={data}", *SETTINGS]:
        args += ["--set", setting]
    return args


class Managed:
    def __init__(self, base: Path, data: Path) -> None:
        self.state = base / "state"
        self.run_dir = base / "managed"
        self.log = open(base / "daemon.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, "-m", "agent", "run", "--state-dir",
                                      str(self.state)], cwd=ROOT, stdout=self.log,
                                     stderr=subprocess.STDOUT,
                                     env=dict(os.environ, PYTHONPATH=str(ROOT)))
        self._seen = 0
        self._records: list[dict] = []
        wait_for(lambda: (self.state / "journal_id").exists(), 30, "the agent daemon")
        args = trainer_args(data)
        spec = {"name": "bench", "python": sys.executable, "script": args[0],
                "args": args[1:], "nproc_per_node": 2, "run_dir": str(self.run_dir),
                "env": ENV, "resume": {"args": ["--resume", "{checkpoint}"]},
                "recovery": {"restart_budget": 1000, "backoff": 0.0, "backoff_max": 0.0},
                "hang": {"k": HANG_K, "floor": HANG_FLOOR, "startup": 300.0},
                "stop_grace": 5}
        append_op(self.state, {"op": "launch", "id": secrets.token_hex(6), "spec": spec,
                               "_rx": time.time()})

    def records(self) -> list[dict]:
        for record in JournalReader(self.state).records(self._seen):
            self._seen = record["seq"]
            if record["t"] in ("train", "event"):
                self._records.append(record)
        return self._records

    def events(self, kind: str) -> list[dict]:
        return [r for r in self.records() if r["t"] == "event" and r["kind"] == kind]

    def ranks(self, attempt: int) -> list[int]:
        started = wait_for(lambda: next((e for e in self.events("job_started")
                                         if e["data"]["attempt"] == attempt), None),
                           300, f"attempt {attempt}")
        pid = started["data"]["pid"]
        return wait_for(lambda: children_of(pid) if len(children_of(pid)) == 2 else None,
                        120, "two ranks")

    def inject(self, attempt: int, sig: int, rank: int) -> dict:
        ranks = self.ranks(attempt)
        start = next(e for e in self.events("job_started") if e["data"]["attempt"] == attempt)
        # A few steps and a checkpoint of this attempt first, as a job that runs a while.
        wait_for(lambda: len([r for r in self.records() if r["t"] == "train"
                              and r["ts"] > start["ts"]]) >= 30, 300, "steps")
        wait_for(lambda: any(e["ts"] > start["ts"] for e in self.events("checkpoint_saved")),
                 300, "a checkpoint")
        injected = time.time()
        os.kill(ranks[rank], sig)
        hit = wait_for(lambda: next((e for e in self.events("interruption")
                                     if e["data"]["attempt"] == attempt), None), 300,
                       "the interruption")
        recovery = wait_for(lambda: next((e for e in self.events("recovery")
                                          if e["data"]["restart_count"] == attempt), None),
                            300, "the recovery")
        first = min(r["ts"] for r in self.records() if r["t"] == "train"
                    and r["ts"] > hit["data"]["detected_at"])
        data = hit["data"]
        out = {"cause": data["cause"], "detection": data["detected_at"] - injected,
               "recovery": first - injected,
               "agent_recovery_seconds": recovery["data"]["recovery_seconds"],
               "threshold": data.get("threshold")}
        if data.get("threshold") is not None:
            # Where a hang's detection time goes: the last step may come after the
            # injection (a peer finishing the step the stopped rank had joined), and the
            # agent may wake a little after the deadline (last step + limit).
            out["last_step_after_injection"] = data["failure_at"] - injected
            out["detected_after_deadline"] = data["detected_at"] - (
                data["failure_at"] + data["threshold"])
        return out

    def median_step_time(self) -> float:
        times = [r["step_time"] for r in self.records() if r["t"] == "train"
                 and isinstance(r.get("step_time"), (int, float))]
        return statistics.median(times[-200:])

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


def _spool_train(spool: Path) -> list[tuple[int, float, int]]:
    """(pid, ts, step) of every train record under a spool dir."""
    out = []
    for path in spool.glob("rank-*.ndjson"):
        data = path.read_bytes()
        lines = data[: data.rfind(b"\n") + 1].splitlines()
        if not lines:
            continue
        pid = json.loads(lines[0]).get("pid")
        for raw in lines[1:]:
            record = json.loads(raw)
            if record.get("t") == "train":
                out.append((pid, record["ts"], record["step"]))
    return out


def baseline(base: Path, data: Path, crashes: int, hang_wait: float,
             recovery_wait: float = 120.0) -> dict:  # fmt: skip
    """Plain torchrun --max-restarts: crash recovery time (None: it did not recover within
    `recovery_wait`); whether a hang is ever noticed."""
    run_dir = base / "plain"
    spool = run_dir / "spool" / "plain"
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", "2", "--max-restarts", str(crashes + 3), *trainer_args(data),
            "--run-dir", str(run_dir), "--job", "plain", "--resume", "auto"]
    env = dict(os.environ, **ENV, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    env.pop("COCKPIT_JOB", None)
    env.pop("COCKPIT_RUN_DIR", None)
    run_dir.mkdir(parents=True)
    with open(base / "plain.log", "ab") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    times: list[float | None] = []

    def training_ranks() -> list[int] | None:
        pids = children_of(proc.pid)
        seen = {r[0] for r in _spool_train(spool)}
        return pids if len(pids) == 2 and all(p in seen for p in pids) else None

    def steps_of(ranks: list[int]) -> int:
        return len([r for r in _spool_train(spool) if r[0] in ranks])

    noticed = None
    try:
        for _ in range(crashes):
            ranks = wait_for(training_ranks, recovery_wait, "ranks", required=False)
            if not ranks or not wait_for(lambda ranks=ranks: steps_of(ranks) >= 60,
                                         recovery_wait, "steps", required=False):
                times.append(None)  # the restarted job never trained again
                break
            injected = time.time()
            os.kill(ranks[1], signal.SIGKILL)
            first = wait_for(lambda ranks=ranks, injected=injected: min(
                (r[1] for r in _spool_train(spool) if r[0] not in ranks and r[1] > injected),
                default=None) or proc.poll() is not None, recovery_wait,
                "the restarted ranks' step", required=False)  # fmt: skip
            if not isinstance(first, float):  # torchrun gave up, or never trained again
                times.append(None)
                break
            times.append(first - injected)
            print(f"baseline crash: {times[-1]:.2f} s to the first new step", file=sys.stderr)
        ranks = wait_for(training_ranks, recovery_wait, "ranks", required=False)
        if ranks and wait_for(lambda: steps_of(ranks) >= 30, recovery_wait, "steps",
                              required=False):  # fmt: skip
            injected = time.time()
            os.kill(ranks[0], signal.SIGSTOP)
            deadline = injected + hang_wait
            while time.time() < deadline and noticed is None:
                if proc.poll() is not None or set(children_of(proc.pid)) != set(ranks):
                    noticed = time.time() - injected
                time.sleep(0.2)
    finally:
        tree = [proc.pid, *children_of(proc.pid)]
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(30)
        wait_for(lambda: not any(alive(p) for p in tree), 30, "the baseline to exit")
    return {"recovery": times, "hang_noticed_after": noticed, "hang_watched": hang_wait}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--crashes", type=int, default=10)
    parser.add_argument("--hangs", type=int, default=3)
    parser.add_argument("--baseline-crashes", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as tmp:
        base = Path(tmp)
        data = base / "data"
        managed = Managed(base, data)
        crashes, hangs = [], []
        try:
            attempt = 1
            for i in range(args.crashes):
                crashes.append(managed.inject(attempt, signal.SIGKILL, i % 2))
                attempt += 1
                print(f"crash {i + 1}: {crashes[-1]}", file=sys.stderr)
            for i in range(args.hangs):
                hangs.append(managed.inject(attempt, signal.SIGSTOP, i % 2))
                attempt += 1
                print(f"hang {i + 1}: {hangs[-1]}", file=sys.stderr)
            step_time = managed.median_step_time()
        finally:
            managed.close()
        hang_goal = max(HANG_FLOOR, HANG_K * step_time)
        hang_detection = statistics.median(h["detection"] for h in hangs) if hangs else None
        plain = baseline(base, data, args.baseline_crashes,
                         hang_wait=3 * (hang_detection or hang_goal))
    crash_detection = statistics.median(c["detection"] for c in crashes)
    # Crashes alone, as the baseline's figure is: plain torchrun recovers from no hang.
    recovery = statistics.median(c["recovery"] for c in crashes)
    hang_recovery = statistics.median(h["recovery"] for h in hangs) if hangs else None
    recovered = [t for t in plain["recovery"] if t is not None]
    base_recovery = statistics.median(recovered) if recovered else None
    goals = {"crash_detection_s": 2.0, "hang_detection_s": hang_goal, "recovery_s": 30.0}
    passed = (crash_detection <= goals["crash_detection_s"]
              and (hang_detection is None or hang_detection <= hang_goal)
              and recovery <= goals["recovery_s"]
              and (hang_recovery is None or hang_recovery <= goals["recovery_s"]))
    return report(
        "recovery", round(recovery, 3), "s (median crash to first new step)",
        None if base_recovery is None else round(base_recovery, 3),
        goal=f"value <= {goals['recovery_s']:g} and hang_recovery_median_s <= "
             f"{goals['recovery_s']:g} and crash_detection_median_s <= "
             f"{goals['crash_detection_s']:g} and hang_detection_median_s <= "
             "hang_detection_goal_s",
        passed=passed, metric="crash_to_first_new_step_median_s",
        baseline_name="plain torchrun --max-restarts, its crashes",
        hang_recovery_median_s=None if hang_recovery is None else round(hang_recovery, 3),
        crash_detection_median_s=round(crash_detection, 3),
        crash_detection_goal_s=goals["crash_detection_s"],
        hang_detection_median_s=None if hang_detection is None else round(hang_detection, 3),
        hang_detection_goal_s=round(hang_goal, 3),
        median_step_time_s=round(step_time, 4),
        baseline_hang_noticed_after_s=plain["hang_noticed_after"],
        baseline_hang_watched_s=round(plain["hang_watched"], 1),
        crashes=len(crashes), hangs=len(hangs),
        baseline_crashes=len(plain["recovery"]),
        baseline_recovered=len(recovered),
        causes=sorted({c["cause"] for c in crashes + hangs}),
    )


if __name__ == "__main__":
    sys.exit(main())
