"""Each alert rule a CPU can cause, raised by a real run: the example trainer (charlm
under torchrun, gloo) under the real agent, with a fault injected through its own
code paths (`[fault]` in examples/charlm/config.toml): a corrupt shard, an out-of-memory
error, an LR that diverges, a slow data loader and a slow rank. The agent's journal is
stored as the cockpit stores it and the snapshot's alerts are checked for their kind,
where and what to try. (A killed rank: tests/e2e/test_demo_app.py; hardware faults,
which CPUs cannot cause: tests/analysis/test_alerts.py on synthetic records.)

A fault that ends one rank of two (the shard, the OOM) runs on two ranks, so that the
alert names the failing rank and not the peer torchrun tore down; a straggler needs a
peer to straggle behind. A diverging LR and a slow loader are each rank's own, and run
on one rank (each rank costs a few seconds of CPU before its first step)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.wire.protocol import encode
from cockpit.read.source import build_snapshot
from cockpit.snapshot import Alert, Snapshot
from cockpit.store import Store
from cockpit.store.queries import StoreReader

from .conftest import AgentDaemon, charlm_spec

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(180)]


def _launch(tmp_path: Path, d: AgentDaemon, data: Path, name: str, steps: int,
            *sets: str, restarts: int | None = None, ranks: int = 2) -> None:
    """`restarts`: the job's restart budget (0: the first failure ends it, which is all
    a test of its alert needs)."""
    spec = charlm_spec(tmp_path, data, name, steps=steps, ranks=ranks)
    for setting in sets:
        spec["args"] += ["--set", setting]
    if restarts is not None:
        spec["recovery"]["restart_budget"] = restarts
    d.op("launch", spec=spec)


def _state(d: AgentDaemon, name: str) -> str | None:
    jobs = d.op("jobs")["jobs"]
    return next((j["state"] for j in jobs if j.get("job") == name or j.get("name") == name),
                None)


def _recorded(tmp_path: Path, d: AgentDaemon, name: str,
              at: Callable[[list[dict]], float | None] = lambda records: None) -> Snapshot:
    """The agent's journal stored as the cockpit stores it; the snapshot at the time
    `at` picks from the job's train records (None: the end)."""
    journal = [r for r in d.records() if r["t"] != "stream"]
    path = tmp_path / f"{name}.duckdb"
    with Store(path) as store:
        store.ingest("local", b"".join(encode(r["t"], r["seq"], r, ts=r["ts"])
                                       for r in journal))
    until = at([r for r in journal if r["t"] == "train" and r.get("job") == name])
    with Store(path, read_only=True) as store:
        return build_snapshot(StoreReader(store), until_ts=until, label="REPLAY", job=name,
                              now=until)


def _alert(snap: Snapshot, code: str) -> Alert:
    found = [a for a in snap.alerts if a.code == code]
    assert found, f"no {code} alert in {[(a.code, a.what) for a in snap.alerts]}"
    return found[0]


def _until_ended(d: AgentDaemon, name: str, timeout: float = 150.0) -> str:
    return d.wait_for(lambda: (_state(d, name) in ("finished", "failed", "stopped")
                               and _state(d, name)), timeout, f"job {name} to end")


def test_a_corrupt_shard_is_a_data_alert_naming_the_shard_and_windows(
        tmp_path: Path, agent_daemon: AgentDaemon, charlm_shards: Path) -> None:
    d = agent_daemon
    _launch(tmp_path, d, charlm_shards, "shard", 30, "fault.bad_shard_at=4",
            "fault.kill_rank=1", restarts=0)
    assert _until_ended(d, "shard") == "failed"
    snap = _recorded(tmp_path, d, "shard")
    alert = _alert(snap, "interrupted_data")
    assert alert.kind == "data"
    assert "rank 1" in alert.where and "train-" in alert.where and ".bin" in alert.where
    assert re.search(r"range \d+-\d+", alert.where), alert  # the windows read there
    assert "inspect shard" in alert.hint and "train-" in alert.hint
    assert snap.progress.state == "failed"


def test_an_out_of_memory_error_is_a_resource_alert_with_the_micro_batch_to_try(
        tmp_path: Path, agent_daemon: AgentDaemon, charlm_shards: Path) -> None:
    d = agent_daemon
    _launch(tmp_path, d, charlm_shards, "oom", 30, "fault.oom_at=4", "fault.kill_rank=0",
            "train.batch_size=8", restarts=0)
    assert _until_ended(d, "oom") == "failed"
    snap = _recorded(tmp_path, d, "oom")
    alert = _alert(snap, "interrupted_oom")
    assert alert.kind == "resource" and "rank 0" in alert.where
    assert "out of GPU memory" in alert.what and "fault.oom_at" in alert.what
    # No GPU memory is recorded on CPUs: the micro-batch is halved from the one the
    # ranks reported (8 windows each), not computed from the memory reached.
    assert "halve the micro-batch per rank" in alert.hint


def test_an_lr_that_diverges_is_a_parameter_alert_at_its_step(
        tmp_path: Path, agent_daemon: AgentDaemon, charlm_shards: Path) -> None:
    d = agent_daemon
    _launch(tmp_path, d, charlm_shards, "lr", 40, "optim.lr=200.0", "optim.warmup_steps=1",
            "optim.grad_clip=1e9", "optim.min_lr=200.0", ranks=1)
    _until_ended(d, "lr")
    snap = _recorded(tmp_path, d, "lr")
    found = [a for a in snap.alerts if a.kind == "parameter"
             and a.code in ("nonfinite_loss", "loss_spike", "lr_too_high", "grad_norm_explosion")]
    assert found, [(a.code, a.what) for a in snap.alerts]
    for alert in found:
        assert alert.where.startswith("step ") or alert.where == "job", alert
        assert "LR" in alert.hint or "learning rate" in alert.hint, alert


def test_a_slow_data_loader_is_a_data_alert_naming_the_rank(
        tmp_path: Path, agent_daemon: AgentDaemon, charlm_shards: Path) -> None:
    d = agent_daemon
    _launch(tmp_path, d, charlm_shards, "slowdata", 25, "fault.data_sleep=0.4", ranks=1)
    assert _until_ended(d, "slowdata") == "finished"
    snap = _recorded(tmp_path, d, "slowdata")
    alert = _alert(snap, "data_starved")
    assert alert.kind == "data" and "rank " in alert.where and "host local" in alert.where
    assert "DataLoader workers" in alert.hint


def test_a_rank_made_slow_is_a_straggler_alert_naming_its_host(
        tmp_path: Path, agent_daemon: AgentDaemon, charlm_shards: Path) -> None:
    d = agent_daemon
    # 1 s more a step: a slowdown is steps 2.5 times the usual, and the usual step of
    # the small test model takes a tenth of that on loaded cores.
    _launch(tmp_path, d, charlm_shards, "slowrank", 34, "fault.slow_rank=1",
            "fault.slow_by=1.0", "fault.slow_from=25")
    assert _until_ended(d, "slowrank") == "finished"

    def while_slow(train: list[dict]) -> float | None:
        # While it ran: just after rank 0's step 32, seven steps into the slowdown.
        return next(float(r["ts"]) + 0.01 for r in train
                    if r.get("rank") == 0 and r.get("step") == 32)

    started = time.monotonic()
    snap = _recorded(tmp_path, d, "slowrank", at=while_slow)
    assert time.monotonic() - started < 60
    alert = _alert(snap, "slowdown")
    assert alert.kind == "resource" and "host local" in alert.where
    assert "rank 1" in alert.where, alert
    assert "exclude the host" in alert.hint
