"""A rank's own failure (a bad input, out of memory) is the cause, not the broken
collective its peer reports: without error files torchrun's "first observed failure" is
whichever rank it reaped first, often the peer (seen on the example trainer's injected
bad shard, tests/control/test_alerts_real_runs.py)."""

from __future__ import annotations

from pathlib import Path

from agent.job import recovery as r

DATA = Path(__file__).resolve().parents[1] / "agent" / "data" / "torchrun_failures"

GLOO = ("[rank0]: RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by "
        "peer [127.0.0.1]:51594")


def _tail(root_rank: int, *lines: str) -> list[str]:
    return [*lines, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "Root Cause (first observed failure):", "[0]:",
            f"  rank      : {root_rank} (local_rank: {root_rank})",
            "  exitcode  : 1 (pid: 4242)", "  error_file: <N/A>",
            "  traceback : To enable traceback see: https://pytorch.org/docs/stable/"
            "elastic/errors.html"]


def test_a_bad_shard_on_rank_1_wins_over_rank_0s_broken_collective() -> None:
    tail = _tail(0, "[rank0]: Traceback (most recent call last):", GLOO,
                 "[rank1]: charlm: error: invalid record in shard /data/train-00003.bin: "
                 "windows 120-4410 fail their check")
    d = r.classify(1, tail)
    assert d.cause == r.DATA and d.where["rank"] == 1
    assert (d.where["file"], d.where["range"]) == ("/data/train-00003.bin", [120, 4410])


def test_an_oom_on_another_rank_wins_and_a_lone_nccl_error_stays_nccl() -> None:
    oom = "[rank1]: torch.OutOfMemoryError: out of memory: tried to allocate"
    d = r.classify(1, _tail(0, GLOO, oom))
    assert (d.cause, d.where["rank"]) == (r.OOM, 1)
    assert r.classify(1, _tail(0, GLOO)).cause == r.NCCL
    assert r.classify(1, [GLOO, oom]).cause == r.OOM  # no root cause printed at all


def _with_other_failures(root_rank: int, others: list[tuple[int, int]], *lines: str
                         ) -> list[str]:  # fmt: skip
    """torchrun's whole report: the other failures (rank, exitcode), then the root."""
    failures = []
    for i, (rank, code) in enumerate(others, start=1):
        failures += [f"[{i}]:", f"  rank      : {rank} (local_rank: {rank})",
                     f"  exitcode  : {code} (pid: {4300 + rank})", "  error_file: <N/A>",
                     f"  traceback : Signal {-code} received by PID {4300 + rank}"]
    tail = _tail(root_rank, *lines)
    at = tail.index("Root Cause (first observed failure):")
    return [*tail[:at], "Failures:", *failures, "-" * 54, *tail[at:]]


def test_a_rank_killed_by_a_signal_wins_over_the_root_ranks_broken_collective() -> None:
    """Rank 1 SIGKILLed: rank 0's gloo read fails, and torchrun, with no error files,
    may name rank 0 the first observed failure and list rank 1 among the others."""
    tail = _with_other_failures(0, [(1, -9)], "[rank0]: Traceback (most recent call last):",
                                GLOO)
    assert r.other_failures(tail) == [{"rank": 1, "exitcode": -9, "pid": 4301,
                                       "error_file": None,
                                       "traceback": "Signal 9 received by PID 4301"}]
    d = r.classify(1, tail)
    assert (d.cause, d.where) == (r.KILLED, {"rank": 1})
    assert d.evidence == ["rank 1 (pid 4301) killed by SIGKILL"]
    # A segfault is a rank's own failure too.
    assert r.classify(1, _with_other_failures(0, [(1, -11)], GLOO)).cause == r.KILLED
    # SIGTERM is torchrun's teardown of the ranks still running: the collective stays.
    assert r.classify(1, _with_other_failures(0, [(1, -15)], GLOO)).cause == r.NCCL
    # A peer that aborted on the broken collective is a consequence: rank 2 was killed.
    aborted = GLOO.replace("[rank0]", "[rank1]")
    d = r.classify(1, _with_other_failures(0, [(1, -6), (2, -9)], GLOO, aborted))
    assert (d.cause, d.where) == (r.KILLED, {"rank": 2})
    # A rank's own printed failure is more telling than a peer's signal.
    oom = "[rank1]: torch.OutOfMemoryError: out of memory: tried to allocate"
    assert r.classify(1, _with_other_failures(0, [(2, -9)], GLOO, oom)).cause == r.OOM


def test_the_report_of_a_real_run_whose_killed_rank_was_reaped_second() -> None:
    """torch 2.13's own output when rank 1 of the example trainer was SIGKILLed: rank 0
    aborted on the gloo read (SIGABRT) and was reaped first, so torchrun named it."""
    text = (DATA / "killed_rank_reaped_after_its_peer.err").read_text()
    d = r.classify(1, text.splitlines())
    assert (d.cause, d.where) == (r.KILLED, {"rank": 1})
    assert d.evidence == ["rank 1 (pid 14276) killed by SIGKILL"]
