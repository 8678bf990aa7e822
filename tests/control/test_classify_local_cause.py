"""A rank's own failure (a bad input, out of memory) is the cause, not the broken
collective its peer reports: without error files torchrun's "first observed failure" is
whichever rank it reaped first, often the peer (seen on the example trainer's injected
bad shard, tests/control/test_alerts_real_runs.py)."""

from __future__ import annotations

from agent.job import recovery as r

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
