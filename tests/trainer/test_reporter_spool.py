"""What `agent.hook.Reporter` writes to a rank's spool, and when it reads tensor values."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from agent.hook import Reporter
from tests.harness.torchrun import ROOT


class CountingScalar:
    """Tensor stand-in: counts how often the Reporter reads its value."""

    def __init__(self, value: float) -> None:
        self.value = value
        self.reads = 0

    def item(self) -> float:
        self.reads += 1
        return self.value


def _files(run_dir: Path, job: str = "job-a") -> list[Path]:
    return sorted((run_dir / "spool" / job).glob("rank-*.ndjson"))


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_spool_file_starts_with_header_naming_its_file_id(make_reporter, tmp_path) -> None:
    rep = make_reporter(rank=3)
    rep.step(1, loss=2.0)
    rep.flush()
    (path,) = _files(tmp_path / "run")
    header, record = _lines(path)
    assert next(iter(header)) == "t" and header["t"] == "spool"
    assert header["v"] == 1 and header["job"] == "job-a" and header["rank"] == 3
    assert path.name == f"rank-3.{header['file_id']}.ndjson"
    assert len(header["file_id"]) == 32 and int(header["file_id"], 16) >= 0
    assert isinstance(header["pid"], int) and isinstance(header["ts"], float)
    assert list(record)[:4] == ["t", "ts", "job", "rank"]
    assert "seq" not in record


def test_train_record_has_every_protocol_field(make_reporter, spool) -> None:
    rep = make_reporter()
    rep.step(7, loss=1.5, lr=3e-4, samples=32, tokens=4096, loss_scale=1024.0,
             grad_norm=0.75, epoch=0.5, acc=0.9)  # fmt: skip
    rep.flush()
    (rec,) = spool("train")
    expected = {"t": "train", "job": "job-a", "rank": 0, "step": 7, "epoch": 0.5,
                "stage": None, "loss": 1.5, "nonfinite": None, "lr": 3e-4, "samples": 32,
                "tokens": 4096, "loss_scale": 1024.0, "grad_norm": 0.75,
                "extra": {"acc": 0.9}, "data_time": None, "compute_time": None,
                "comm_time": None, "ckpt_time": None,
                "step_time": None}  # fmt: skip
    assert {k: rec[k] for k in expected} == expected  # a process's first step: no time


def test_each_reporter_starts_a_new_file(make_reporter, tmp_path) -> None:
    first = make_reporter()
    first.step(1, loss=1.0)
    first.close()
    second = make_reporter()
    second.step(2, loss=1.0)
    second.close()
    files = _files(tmp_path / "run")
    assert len(files) == 2
    ids = {_lines(f)[0]["file_id"] for f in files}
    assert len(ids) == 2


def test_rotation_at_size_cap_keeps_lines_whole_and_in_order(make_reporter, tmp_path) -> None:
    rep = make_reporter(max_file_bytes=2000)
    for step in range(1, 101):
        rep.step(step, loss=1.0 / step)
        if step % 10 == 0:
            rep.flush()
    rep.close()
    files = _files(tmp_path / "run")
    assert len(files) > 3
    parts = []
    steps = []
    for path in files:
        data = path.read_bytes()
        assert data.endswith(b"\n")
        lines = _lines(path)
        assert lines[0]["t"] == "spool"
        assert all(line["t"] != "spool" for line in lines[1:])
        parts.append((lines[0]["part"], [r["step"] for r in lines[1:] if r["t"] == "train"]))
    for _part, part_steps in sorted(parts):
        steps.extend(part_steps)
    assert steps == list(range(1, 101))
    # A file is only left once it has passed the cap, and never before.
    for path in files:
        header = _lines(path)[0]
        if header["part"] < len(files) - 1:
            assert path.stat().st_size >= 2000


def test_step_reads_no_value_until_flushed(make_reporter, spool) -> None:
    rep = make_reporter()
    loss, norm = CountingScalar(2.25), CountingScalar(0.5)
    rep.step(1, loss=loss, grad_norm=norm, custom=CountingScalar(3.0))
    assert (loss.reads, norm.reads) == (0, 0)
    rep.flush()
    assert (loss.reads, norm.reads) == (1, 1)
    (rec,) = spool("train")
    assert (rec["loss"], rec["grad_norm"], rec["extra"]) == (2.25, 0.5, {"custom": 3.0})


def test_torch_tensors_are_resolved_off_the_step_call(make_reporter, spool) -> None:
    rep = make_reporter()
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * w).sum()
    loss.backward()
    rep.step(torch.tensor(5), loss=loss, lr=torch.tensor(1e-3),
             grad_norm=w.grad.norm(), samples=torch.tensor(8))  # fmt: skip
    rep.flush()
    (rec,) = spool("train")
    assert rec["step"] == 5 and rec["samples"] == 8
    assert rec["loss"] == pytest.approx(5.0)
    assert rec["lr"] == pytest.approx(1e-3)
    assert rec["grad_norm"] == pytest.approx(math.sqrt(20.0))


def test_periodic_flush_holds_back_the_two_newest_steps(make_reporter, spool) -> None:
    """A device value of the latest steps may still be in flight: read it a flush later."""
    rep = make_reporter()
    values = [CountingScalar(float(i)) for i in range(4)]
    for i, v in enumerate(values):
        rep.step(i, loss=v)
    rep._drain(holdback=True)  # what the flusher thread does on its timer
    assert [v.reads for v in values] == [1, 1, 0, 0]
    assert [r["step"] for r in spool("train")] == [0, 1]
    rep.flush()
    assert [v.reads for v in values] == [1, 1, 1, 1]
    assert [r["step"] for r in spool("train")] == [0, 1, 2, 3]


def test_flusher_thread_writes_without_explicit_flush(make_reporter, spool) -> None:
    rep = make_reporter(flush_interval=0.05)
    rep.step(1, loss=1.0)
    deadline = time.monotonic() + 30
    while not spool("train") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [r["step"] for r in spool("train")] == [1]


@pytest.mark.parametrize(
    ("value", "kind"),
    [(float("nan"), "nan"), (float("inf"), "inf"), (float("-inf"), "-inf"),
     (torch.tensor(float("nan")), "nan"), (torch.tensor(float("-inf")), "-inf")],
)  # fmt: skip
def test_nonfinite_loss_is_null_with_its_kind(make_reporter, spool, value, kind) -> None:
    rep = make_reporter()
    rep.step(1, loss=value, lr=float("nan"), grad_norm=float("inf"), x=float("nan"))
    rep.flush()
    (rec,) = spool("train")
    assert rec["loss"] is None and rec["nonfinite"] == kind
    assert rec["lr"] is None and rec["grad_norm"] is None and rec["extra"] == {"x": None}


def test_phases_attribute_time_to_the_next_step(make_reporter, spool) -> None:
    rep = make_reporter()
    with rep.phase("data"):
        time.sleep(0.02)
    with rep.phase("compute"):
        time.sleep(0.03)
    with rep.phase("compute"):
        time.sleep(0.01)
    rep.phase_time("comm", 0.005)
    rep.step(1, loss=1.0)
    with rep.phase("checkpoint"):
        time.sleep(0.01)
    rep.step(2, loss=1.0)
    rep.step(3, loss=1.0)
    rep.flush()
    r1, r2, r3 = spool("train")
    assert r1["data_time"] >= 0.02 and r1["compute_time"] >= 0.04
    assert r1["comm_time"] == pytest.approx(0.005) and r1["ckpt_time"] is None
    assert r1["step_time"] is None  # start-up, not a step
    assert r2["ckpt_time"] >= 0.01 and r2["data_time"] is None
    assert r2["step_time"] >= r2["ckpt_time"]
    assert all(r3[k] is None for k in ("data_time", "compute_time", "comm_time", "ckpt_time"))


def test_unknown_phase_is_refused(make_reporter) -> None:
    rep = make_reporter()
    with pytest.raises(ValueError, match="unknown phase 'io'"):
        rep.phase("io")


def test_eval_declare_stage_event_checkpoint_alert_log(make_reporter, spool, tmp_path) -> None:
    rep = make_reporter(world_size=4)
    rep.declare(total_steps=1000, config={"lr": 1e-3, "bad": float("nan")}, seed=7)
    rep.declare(data_version="v2", tags=["a"])
    rep.stage("pretrain")
    rep.step(10, loss=torch.tensor(1.0))
    rep.eval(10, loss=torch.tensor(0.75), acc=CountingScalar(0.5))
    ckpt = tmp_path / "ckpt.pt"
    ckpt.write_bytes(b"x" * 1234)
    rep.checkpoint_saved(str(ckpt), 10, 0.25)
    rep.event("custom", "hello", answer=42)
    rep.alert("data", "bad_shard", "shard 3 unreadable", "re-run preparation",
              severity="critical", file="shard-3")  # fmt: skip
    rep.log("x" * 10000)
    rep.close()

    first_run, run = spool("run")
    assert first_run["total_steps"] == 1000 and first_run["world_size"] == 4
    assert first_run["config"] == {"lr": 1e-3, "bad": None}
    assert run["seed"] == 7 and run["total_steps"] == 1000 and run["data_version"] == "v2"
    (train,) = spool("train")
    assert train["stage"] == "pretrain"
    (ev,) = spool("eval")
    assert ev["step"] == 10 and ev["loss"] == 0.75 and ev["metrics"] == {"acc": 0.5}
    events = {e["kind"]: e for e in spool("event")}
    assert events["stage"]["data"] == {"stage": "pretrain"}
    saved = events["checkpoint_saved"]
    assert saved["step"] == 10
    assert saved["data"] == {"path": str(ckpt), "seconds": 0.25, "bytes": 1234}
    assert events["custom"]["msg"] == "hello" and events["custom"]["data"] == {"answer": 42}
    assert events["custom"]["step"] == 10  # defaults to the last reported step
    (alert,) = spool("alert")
    assert alert["kind"] == "data" and alert["severity"] == "critical"
    assert alert["where"] == {"file": "shard-3", "rank": 0, "step": 10}
    (log,) = spool("log")
    assert len(log["line"]) == 4096 and log["stream"] == "stdout"


def test_bad_alert_and_declare_arguments_fail_at_the_call(make_reporter) -> None:
    rep = make_reporter()
    with pytest.raises(ValueError, match="alert kind 'gpu'"):
        rep.alert("gpu", "x", "y", "z")
    with pytest.raises(ValueError, match="severity 'fatal'"):
        rep.alert("data", "x", "y", "z", severity="fatal")
    with pytest.raises(TypeError, match="total_steps"):
        rep.declare(total_steps="many")


def test_non_scalar_value_becomes_null_and_is_reported_once(make_reporter, spool, capsys) -> None:
    rep = make_reporter()
    rep.step(1, loss=torch.ones(3))
    rep.step(2, loss=torch.ones(3))
    rep.flush()
    rep.flush()
    assert [r["loss"] for r in spool("train")] == [None, None]
    (log,) = spool("log")
    assert log["stream"] == "stderr" and "'loss'" in log["line"] and "3 elements" in log["line"]
    assert capsys.readouterr().err.count("'loss'") == 1


def _no_json_constant(name: str) -> None:
    raise AssertionError(f"non-standard JSON literal {name} in a spool line")


def _wire_ints(value: object) -> list[int]:
    if isinstance(value, dict):
        return [i for v in value.values() for i in _wire_ints(v)]
    if isinstance(value, list):
        return [i for v in value for i in _wire_ints(v)]
    return [value] if isinstance(value, int) and not isinstance(value, bool) else []


def test_values_the_cockpit_cannot_load_become_null_with_a_warning(
        make_reporter, spool, tmp_path, capsys) -> None:
    rep = make_reporter()
    rep.step(1, loss=1.0, samples=2**70, tokens=1e30, big=10**400, m=float("-inf"))
    rep.step(2, loss="2.5", samples="8", lr=b"0.1")
    rep.eval(2, loss=float("inf"), acc=10**20)
    rep.event("custom", "x", answer=10**400, nested=[2**64, float("nan")])
    rep.declare(config={"huge": -(2**63) - 1, "ok": 2**63 - 1})
    rep.close()
    for path in _files(tmp_path / "run"):
        for line in path.read_text().splitlines():
            record = json.loads(line, parse_constant=_no_json_constant)
            assert all(-(2**63) <= i < 2**63 for i in _wire_ints(record)), line
    r1, r2 = spool("train")
    assert (r1["samples"], r1["tokens"], r1["extra"]) == (None, None, {"big": None, "m": None})
    assert (r2["loss"], r2["nonfinite"], r2["samples"], r2["lr"]) == (None, None, None, None)
    (ev,) = spool("eval")
    assert ev["loss"] is None and ev["metrics"] == {"acc": None}
    custom = next(e for e in spool("event") if e["kind"] == "custom")
    assert custom["data"] == {"answer": None, "nested": [None, None]}
    assert spool("run")[-1]["config"] == {"huge": None, "ok": 2**63 - 1}
    err = capsys.readouterr().err
    assert "'samples' is a 71-bit integer, outside the 64-bit range" in err
    assert "'big' is a 1329-bit integer" in err and "'m' is -inf, not a finite number" in err
    assert "'loss' is a str, not a number" in err and "'lr' is a bytes" in err
    # A second, different problem with a field is reported too; the same one only once.
    assert "'samples' is a str, not a number" in err and err.count("'samples'") == 2
    assert "'loss' is inf" in err and "'acc' is a 67-bit integer" in err


@pytest.mark.parametrize(("step", "problem"), [
    (None, "'step' is None"), (float("nan"), "'step' is nan, not a finite number"),
    (10**20, "'step' is a 67-bit integer"), ("7", "'step' is a str"),
])  # fmt: skip
def test_a_step_record_without_a_usable_step_is_not_written(make_reporter, spool, capsys,
                                                            step, problem) -> None:
    rep = make_reporter()
    rep.step(1, loss=1.0)
    rep.step(step, loss=1.0)
    rep.step(2, loss=1.0)
    rep.eval(step, loss=0.5)
    rep.flush()
    assert [r["step"] for r in spool("train")] == [1, 2] and spool("eval") == []
    err = capsys.readouterr().err
    assert f"{problem}" in err
    assert "the train record was not written" in err and "the eval record was not written" in err


def test_declare_refuses_a_string_for_tags_or_stages(make_reporter) -> None:
    rep = make_reporter()
    with pytest.raises(TypeError, match=r"declare\(tags=...\) must be a list of strings"):
        rep.declare(tags="notalist")
    with pytest.raises(TypeError, match=r"declare\(stages=...\)"):
        rep.declare(stages="pretrain")


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), -1.0, "soon"])
def test_checkpoint_saved_with_unusable_seconds_says_unknown(make_reporter, spool, capsys,
                                                             seconds) -> None:
    rep = make_reporter()
    rep.checkpoint_saved("/nowhere/ckpt.pt", 5, seconds)
    rep.flush()
    (saved,) = spool("event")
    assert saved["msg"] == "checkpoint at step 5 saved" and saved["data"]["seconds"] is None
    assert "'checkpoint_saved seconds'" in capsys.readouterr().err


def test_closed_reporter_refuses_more_records(make_reporter) -> None:
    rep = make_reporter()
    rep.close()
    rep.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        rep.step(1, loss=1.0)


def test_location_from_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("COCKPIT_RUN_DIR", str(tmp_path / "envrun"))
    monkeypatch.setenv("COCKPIT_JOB", "from-env")
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "8")
    rep = Reporter(register_atexit=False)
    rep.close()
    assert (rep.job, rep.rank, rep.world_size) == ("from-env", 5, 8)
    (path,) = (tmp_path / "envrun" / "spool" / "from-env").glob("rank-5.*.ndjson")
    assert not [r for r in _lines(path) if r["t"] == "run"]  # the job id was given


def test_without_run_dir_writes_under_runs_job_and_records_generated_id(
    tmp_path, monkeypatch
) -> None:
    for name in ("COCKPIT_RUN_DIR", "COCKPIT_JOB", "RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    rep = Reporter(register_atexit=False)
    rep.close()
    assert rep.run_dir == str(tmp_path / "runs" / rep.job)
    (path,) = (tmp_path / "runs" / rep.job / "spool" / rep.job).glob("rank-0.*.ndjson")
    run = [r for r in _lines(path) if r["t"] == "run"]
    assert run and run[0]["job"] == rep.job and run[0]["world_size"] == 1


def test_bad_environment_and_job_are_named(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RANK", "zero")
    with pytest.raises(ValueError, match="RANK='zero'"):
        Reporter(run_dir=str(tmp_path), job="j", register_atexit=False)
    monkeypatch.delenv("RANK")
    with pytest.raises(ValueError, match=r"job id '\.\./x'"):
        Reporter(run_dir=str(tmp_path), job="../x", register_atexit=False)


def test_exit_flushes_without_close_and_never_imports_torch(tmp_path) -> None:
    code = (
        "import sys\n"
        "from agent.hook import Reporter\n"
        f"rep = Reporter(run_dir={str(tmp_path)!r}, job='exiting', rank=0)\n"
        "for i in range(1, 6):\n"
        "    rep.step(i, loss=1.0 / i)\n"
        "rep.eval(5, loss=0.5)\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)
    (path,) = (tmp_path / "spool" / "exiting").glob("rank-0.*.ndjson")
    records = _lines(path)
    assert [r["step"] for r in records if r["t"] == "train"] == [1, 2, 3, 4, 5]
    assert [r["loss"] for r in records if r["t"] == "eval"] == [0.5]


def test_a_sigterm_flushes_what_was_buffered_then_ends_the_process(tmp_path) -> None:
    """torchrun stops its workers with SIGTERM (a pause): the steps and the checkpoint
    event still buffered reach the spool, and the process still dies of the signal."""
    code = (
        "import os, signal\n"
        "from agent.hook import Reporter\n"
        f"rep = Reporter(run_dir={str(tmp_path)!r}, job='stopped', rank=0,"
        " flush_interval=3600.0)\n"
        "for i in range(1, 6):\n"
        "    rep.step(i, loss=1.0 / i)\n"
        "rep.checkpoint_saved('ckpt-00000005.pt', 5, seconds=0.1)\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "raise SystemExit('not reached: the signal ends the process')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=60)
    assert done.returncode == -signal.SIGTERM
    (path,) = (tmp_path / "spool" / "stopped").glob("rank-0.*.ndjson")
    records = _lines(path)
    assert [r["step"] for r in records if r["t"] == "train"] == [1, 2, 3, 4, 5]
    assert [r["kind"] for r in records if r["t"] == "event"] == ["checkpoint_saved"]


def test_a_processs_first_step_has_no_step_time_of_its_own(make_reporter, spool) -> None:
    """Before the first step comes start-up (data, a checkpoint's load, an evaluation):
    timed as a step it stretched the ETA for a whole window after every (re)start."""
    rep = make_reporter()
    time.sleep(0.05)  # start-up
    rep.step(1, loss=1.0)
    time.sleep(0.01)
    rep.step(2, loss=1.0)
    rep.flush()
    first, second = spool("train")
    assert first["step_time"] is None
    assert second["step_time"] >= 0.01  # from the first step on, not from start-up
