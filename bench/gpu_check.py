"""What only a machine with an NVIDIA GPU can show, in one short run (a few minutes):

1. **NVML**: the agent's sampler reads every GPU through the real driver: name, memory,
   utilisation, temperature, power, clocks, ECC, and this process among the GPU's
   processes while it holds a CUDA context. Nothing is marked simulated.
2. **No CUDA sync in the hot loop**: with about `--busy-ms` of work queued on the GPU,
   `Reporter.step(loss=<CUDA tensor>)` returns at once, where `loss.item()` waits for
   the queue to drain (the baseline, measured in the same run behind the same amount of
   queued work: the step's work is drained, untimed, before the baseline's is queued).
   Goal: the step's median < 5 % of the queued work (`--busy-ms`), while `.item()`'s
   median waits out more than half of it (so the work was really queued). The value
   the flusher later writes to the spool equals the tensor's.
3. **Exact resume on CUDA**: the reference trainer with dropout and float16 loss scaling
   (GradScaler), killed at step 13 and resumed from its step-8 checkpoint, trains every
   step after the resume to the uninterrupted run's loss, bit for bit.

    python bench/gpu_check.py            # exit 0: all hold; 3: one failed; 2: no GPU

The JSON line's value is `Reporter.step`'s median milliseconds and its baseline
`.item()`'s, each behind about `--busy-ms` of queued work: where the step does not sync
the ratio is far below 0.05, where it did it would be near 1. Its `nvml`, `no_sync` and
`exact_resume` fields hold each check's details.

It needs torch with CUDA and nvidia-ml-py; the cockpit itself is not imported. Ends with
its JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.hook.reporter import Reporter  # noqa: E402
from agent.samplers.nvml import Nvml  # noqa: E402
from bench.result import report, result_line  # noqa: E402
from tests.harness.torchrun import run_trainer, spool_files  # noqa: E402

# The exact-resume run: as tests/trainer/test_charlm_exact_resume.py runs it on CPU,
# with float16 autocast and loss scaling, which only a CUDA device has.
RESUME_SETTINGS = ["--set", "model.dropout=0.1", "--set", "checkpoint.every=8",
                   "--set", "eval.every=6", "--set", "control.every=4",
                   "--set", "amp.enabled=true", "--set", "amp.dtype=\"float16\""]
STEPS, KILLED_AT, RESUMED_FROM = 24, 13, 8


def check_nvml(torch: Any) -> dict[str, Any]:
    nvml = Nvml()
    if not nvml.init():
        return {"ok": False, "state": nvml.state, "detail": nvml.detail}
    inventory = nvml.inventory()
    # A CUDA context and some work, so this process is among the GPU's processes.
    x = torch.randn(4096, 4096, device="cuda")
    for _ in range(50):
        x = x @ x
        x = x / x.norm()
    samples = [nvml.sample({os.getpid(): 0}) for _ in range(3)]
    torch.cuda.synchronize()
    last = samples[-1]
    needed = ("util", "mem_used", "mem_total", "temp", "power", "power_limit", "sm_clock")
    missing = sorted({k for gpu in last for k in needed if gpu.get(k) is None})
    ours = any(p.get("pid") == os.getpid() for gpu in last for p in gpu.get("procs") or [])
    nvml.shutdown()
    return {
        "ok": bool(inventory) and not missing and ours
        and not any(g["simulated"] for g in inventory) and not any(g["sim"] for g in last),
        "driver": nvml.driver, "gpus": [g["name"] for g in inventory],
        "missing": missing, "this_process_listed": ours,
        "sample": {k: last[0].get(k) for k in (*needed, "throttle", "ecc_vol_unc",
                                                "pcie_tx", "fan")},
    }


def check_no_sync(torch: Any, busy_ms: float, rounds: int) -> dict[str, Any]:
    cycles_per_ms = _cycles_per_ms(torch)
    with tempfile.TemporaryDirectory() as run_dir:
        rep = Reporter(run_dir=run_dir, job="gpu-check", world_size=1)
        step_s, item_s, values = [], [], []
        for step in range(1, rounds + 1):
            loss = _busy_loss(torch, cycles_per_ms * busy_ms, step)
            t0 = time.perf_counter()
            rep.step(step, loss=loss, lr=1e-3, samples=8)
            step_s.append(time.perf_counter() - t0)
            # Untimed: the step's work drained, so that .item() waits behind its own
            # `busy_ms` of queued work only, as the step returned with that much queued.
            torch.cuda.synchronize()
            other = _busy_loss(torch, cycles_per_ms * busy_ms, step)
            t0 = time.perf_counter()
            values.append(other.item())  # the baseline: a host read waits for the GPU
            item_s.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
        rep.close()
        stored = {r["step"]: r["loss"] for _h, records in spool_files(
            Path(run_dir) / "spool" / "gpu-check") for r in records if r["t"] == "train"}
    exact = all(stored.get(step) == values[step - 1] for step in range(1, rounds + 1))
    step_ms, item_ms = 1e3 * statistics.median(step_s), 1e3 * statistics.median(item_s)
    return {
        # A step that synced would have waited out the queued work, as .item() did.
        "ok": exact and item_ms > 0.5 * busy_ms and step_ms < 0.05 * busy_ms,
        "busy_ms": busy_ms, "reporter_step_ms": round(step_ms, 4),
        "item_ms": round(item_ms, 2), "ratio": round(step_ms / item_ms, 6),
        "stored_values_exact": exact,
    }


def _cycles_per_ms(torch: Any) -> float:
    """GPU clock cycles in a millisecond of `torch.cuda._sleep`, measured."""
    torch.cuda._sleep(1_000_000)  # warm-up
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(50_000_000)
    end.record()
    torch.cuda.synchronize()
    return 50_000_000 / start.elapsed_time(end)


def _busy_loss(torch: Any, cycles: float, step: int) -> Any:
    """A loss that depends on `cycles` of queued GPU work: reading it means waiting."""
    torch.cuda._sleep(int(cycles))
    return torch.full((), 1.0 / step, device="cuda") * 3.0


def check_exact_resume(work: Path) -> dict[str, Any]:
    data = work / "data"
    whole = run_trainer(work / "whole", nproc=1, steps=STEPS, data_dir=data,
                        extra_args=RESUME_SETTINGS, torchrun=True)
    if whole.wait(timeout=300) != 0:
        return {"ok": False, "why": "uninterrupted run failed", "log": whole.output()[-2000:]}
    expected = _losses(whole.spool_dir)
    broken = run_trainer(work / "broken", nproc=1, steps=STEPS, data_dir=data,
                         extra_args=[*RESUME_SETTINGS, "--set", f"fault.kill_at={KILLED_AT}",
                                     "--set", "fault.kill_rank=0"], torchrun=True)
    broken.wait(timeout=300)
    ended = time.time()
    again = run_trainer(work / "broken", nproc=1, steps=STEPS, data_dir=data,
                        extra_args=[*RESUME_SETTINGS, "--resume", "auto"], torchrun=True,
                        log_name="resume.log")
    if again.wait(timeout=300) != 0:
        return {"ok": False, "why": "resumed run failed", "log": again.output()[-2000:]}
    out = again.output()
    resumed = _losses(broken.spool_dir, after=ended)
    steps = list(range(RESUMED_FROM + 1, STEPS + 1))
    differ = {s: (resumed.get(s), expected.get(s)) for s in steps
              if resumed.get(s) != expected.get(s)}
    from_ckpt = f"(step {RESUMED_FROM})" in out and "not bit for bit" not in out
    return {"ok": not differ and from_ckpt and sorted(resumed) == steps,
            "steps_compared": len(steps), "differ": differ, "resumed_from_checkpoint": from_ckpt,
            "scaler": "float16 GradScaler", "log_tail": "" if not differ else out[-1500:]}


def _losses(spool_dir: Path, after: float = 0.0) -> dict[int, float]:
    return {r["step"]: r["loss"] for header, records in spool_files(spool_dir)
            if header["ts"] > after for r in records if r["t"] == "train"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy-ms", type=float, default=200.0)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--work", type=Path, default=None,
                        help="where the trainer runs write (default: a temporary folder)")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print(result_line("gpu_check", None, "ms", None, goal="needs torch with CUDA",
                          passed=False, skipped="no torch"))
        return 2
    if not torch.cuda.is_available():
        print(result_line("gpu_check", None, "ms", None, goal="needs a CUDA device",
                          passed=False, skipped="no CUDA device"))
        return 2
    result: dict[str, Any] = {"torch": torch.__version__,
                              "device": torch.cuda.get_device_name(0)}
    result["nvml"] = check_nvml(torch)
    print("nvml:", json.dumps(result["nvml"]), flush=True)
    result["no_sync"] = check_no_sync(torch, args.busy_ms, args.rounds)
    print("no_sync:", json.dumps(result["no_sync"]), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        result["exact_resume"] = check_exact_resume(args.work or Path(tmp))
    print("exact_resume:", json.dumps(result["exact_resume"]), flush=True)
    ok = all(result[k]["ok"] for k in ("nvml", "no_sync", "exact_resume"))
    sync = result["no_sync"]
    # The figure: Reporter.step's time against .item()'s on the same queued GPU work.
    return report("gpu_check", sync["reporter_step_ms"], "ms", sync["item_ms"],
                  goal="NVML read, no sync (step < 5 % of the queued work), exact resume",
                  passed=ok, **{k: v for k, v in result.items() if k != "bench"})


if __name__ == "__main__":
    sys.exit(main())
