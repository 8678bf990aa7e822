"""Classifying failures from what torchrun leaves behind, the retry policy, and the hang
rule -- as pure functions, with output shaped like real torchrun output."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agent.job import recovery as r


def _torchrun_failure(rank: int, exitcode: int, error_file: str = "<N/A>",
                      peer_lines: tuple[str, ...] = ()) -> list[str]:  # fmt: skip
    """The tail torchrun prints when a worker fails (torch 2.x ChildFailedError)."""
    signame = {-9: "SIGKILL", -15: "SIGTERM"}.get(exitcode)
    trace = (f"Signal {-exitcode} ({signame}) received by PID 4242" if signame
             else "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")
    return [
        *peer_lines,
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "======================================================",
        "train.py FAILED",
        "------------------------------------------------------",
        "Failures:",
        "[1]:",
        "  rank      : 9 (local_rank: 1)",
        "  exitcode  : -15 (pid: 4243)  (SIGTERM)",
        "  error_file: <N/A>",
        "  traceback : Signal 15 (SIGTERM) received by PID 4243",
        "------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2026-11-30_08:58:23",
        f"  rank      : {rank} (local_rank: 0)",
        f"  exitcode  : {exitcode} (pid: 4242)",
        f"  error_file: {error_file}",
        f"  traceback : {trace}",
        "======================================================",
    ]  # fmt: skip


GLOO_RESET = ("[rank0]: RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error "
              "[127.0.0.1]:57546: Connection reset by peer.")


def test_a_killed_rank_is_the_cause_not_its_peers_connection_errors() -> None:
    tail = _torchrun_failure(1, -9, peer_lines=("[rank0]: Traceback (most recent call last):",
                                                GLOO_RESET))  # fmt: skip
    d = r.classify(1, tail)
    assert d.cause == r.KILLED and d.where == {"rank": 1}
    assert d.evidence == ["rank 1 (pid 4242) killed by SIGKILL"]
    # Without the root-cause block, the network error is all there is to go on.
    assert r.classify(1, ["[rank0]: Traceback (most recent call last):", GLOO_RESET]).cause \
        == r.NCCL


def test_out_of_memory_on_the_root_rank() -> None:
    tail = [
        "[rank3]: Traceback (most recent call last):",
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB "
        "(GPU 3; 79.15 GiB total capacity)",
        *_torchrun_failure(3, 1, peer_lines=(GLOO_RESET,)),
    ]
    d = r.classify(1, tail)
    assert d.cause == r.OOM and d.where["rank"] == 3
    assert "CUDA out of memory" in d.evidence[0]
    assert "micro-batch" in d.hint


def test_data_error_names_file_and_sample_range_from_the_error_file(tmp_path: Path) -> None:
    error_file = tmp_path / "error.json"
    stamp = str(int(time.time()) - 5)  # as torchrun writes it: whole seconds, as text
    error_file.write_text(json.dumps({"message": {
        "message": "DataError: corrupt record in shard file /data/shards/train-00017.bin, "
                   "samples 81920-82047",
        "extraInfo": {"py_callstack": "Traceback ...", "timestamp": stamp}}}))
    d = r.classify(1, _torchrun_failure(0, 1, error_file=str(error_file)))
    assert d.cause == r.DATA
    assert d.where == {"file": "/data/shards/train-00017.bin", "range": [81920, 82047],
                       "rank": 0}  # fmt: skip
    assert r.read_error_file(error_file)["timestamp"] == float(stamp)


def test_user_code_exception_and_unknown_exit() -> None:
    tail = ["[rank0]: Traceback (most recent call last):",
            '[rank0]:   File "train.py", line 12, in <module>',
            "[rank0]: KeyError: 'optimizer'",
            *_torchrun_failure(0, 1)]  # fmt: skip
    d = r.classify(1, tail)
    assert d.cause == r.USER_CODE and d.evidence == ["[rank0]: KeyError: 'optimizer'"]
    assert r.classify(3, ["bye"]).cause == r.UNKNOWN
    assert r.classify(-9, ["bye"]).cause == r.KILLED


def test_gpu_telemetry_wins_over_what_the_code_saw() -> None:
    tail = ["[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered"]
    d = r.classify(1, tail, telemetry={"xid": [79], "gpu": 2})
    assert d.cause == r.GPU_FAULT and "79" in d.evidence[0] and d.where == {"gpu": 2}
    assert r.classify(1, ["[rank0]: RuntimeError: uncorrectable ECC error encountered"]
                      ).cause == r.GPU_FAULT  # fmt: skip


def test_policy_backs_off_within_the_budget_and_stops_repeated_oom() -> None:
    policy = r.RecoveryPolicy(restart_budget=3, backoff=1.0, backoff_max=3.0)
    crash = r.Diagnosis(r.KILLED, ["x"])
    delays = [policy.decide(crash).delay for _ in range(3)]
    assert delays == [1.0, 2.0, 3.0]
    final = policy.decide(crash)
    assert not final.retry and "budget of 3" in final.reason

    policy = r.RecoveryPolicy(restart_budget=10, backoff=1.0)
    oom = r.Diagnosis(r.OOM, ["CUDA out of memory"])
    first = policy.decide(oom)
    assert first.retry
    policy.progressed()
    second = policy.decide(oom)
    assert not second.retry and "repeated 2 times" in second.reason
    assert "micro-batch" in (second.hint or "")


def test_policy_resets_backoff_after_progress_and_tells_data_errors_apart() -> None:
    policy = r.RecoveryPolicy(restart_budget=10, backoff=2.0)
    a = r.Diagnosis(r.DATA, ["bad"], {"file": "a.bin"}, "data:a.bin:None")
    b = r.Diagnosis(r.DATA, ["bad"], {"file": "b.bin"}, "data:b.bin:None")
    assert policy.decide(a).delay == 2.0
    policy.progressed()
    assert policy.decide(b).delay == 2.0  # another file: not a repeat, backoff restarted
    assert not policy.decide(a).retry  # the same file twice


def test_hang_rule_uses_startup_then_k_times_median_with_a_floor() -> None:
    det = r.HangDetector(k=3.0, floor=2.0, startup=30.0)
    det.reset(100.0)
    assert det.threshold() == 30.0 and not det.hung(129.0) and det.hung(131.0)
    for step in range(1, 11):
        assert det.observe(step, 0.5 if step != 5 else 9.0, 100.0 + step)
    assert det.median_step_time() == 0.5
    assert det.threshold() == 2.0  # the floor: 3 × 0.5 s is less
    assert not det.observe(10, 0.5, 120.0)  # the same step again is no progress
    assert det.silent_for(112.5) == pytest.approx(2.5) and det.hung(112.5)
    for step in range(11, 40):
        det.observe(step, 1.5, 110.0 + step)
    assert det.threshold() == pytest.approx(4.5)
    det.reset(500.0, new_attempt=False)  # a thaw: silence starts over, steps carry on
    assert det.last_step == 39 and not det.hung(504.0) and det.hung(505.0)
