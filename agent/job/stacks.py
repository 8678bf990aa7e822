"""Python stacks of hung ranks, taken before they are killed.

A hang is only fixable if one knows where the ranks waited, and that knowledge dies with
the processes. Two ways, best first:

- `py-spy dump` when it is installed: reads a process's stacks from outside, works on a
  process that is stopped or stuck in C code, needs nothing from the trainer.
- `faulthandler`, when (and only when) the rank registered it for SIGUSR1
  (`faulthandler.register(signal.SIGUSR1)`): its C-level handler writes every thread's
  stack to the rank's stderr, which the agent captures. The registration is read from
  `/proc/PID/status` (SigCgt): sending SIGUSR1 to a process that did not register a
  handler would kill it, so it is never sent blindly.

When neither applies, the reason is recorded: "stacks unavailable" is evidence too.

The rank's stderr is the trainer's: what is collected of it is bounded (`STACKS_MAX_BYTES`),
however much it writes while the dumps are awaited.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

PY_SPY_TIMEOUT = 15.0
# The most of the job's output kept as faulthandler's dumps. faulthandler writes at most
# 100 threads of at most 100 frames per process, a frame a line of ~100 bytes (its names
# are cut at 500 characters): about 1 MiB for a rank at the very worst, so 8 MiB holds a
# host's 8 ranks. The output read for them is the first that much written after the
# signal (the dumps come first); `read_new_output` itself should read at most this much
# per call (`agent.job.bounded_read.read_new(..., STACKS_MAX_BYTES, keep_head=True)`).
STACKS_MAX_BYTES = 8 << 20


def catches_signal(pid: int, sig: int) -> bool:
    """Whether `pid` installed a handler for `sig` (Linux /proc; False when unknown)."""
    try:
        with open("/proc/%d/status" % pid, "r") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (sig - 1)))
    except (OSError, ValueError, IndexError):
        return False
    return False


def is_stopped(pid: int) -> bool:
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] in (b"T", b"t")


def _collect(read_new_output: Callable[[], str], limit: float, quiet: float = 0.3,
             most: int = STACKS_MAX_BYTES) -> str:
    """Output written by the signalled ranks: until it has been quiet for `quiet` seconds
    after the first bytes, or `limit` seconds passed, or `most` characters came (the
    first `most` are kept, and a line says the rest was cut)."""
    deadline = time.monotonic() + limit
    chunks: List[str] = []
    size = 0
    last_growth = None
    while time.monotonic() < deadline:
        chunk = read_new_output()
        now = time.monotonic()
        if chunk:
            if size + len(chunk) > most:
                chunks.append(chunk[:most - size])
                chunks.append("\n[output cut at %d characters: the rest was not kept]\n"
                              % most)
                break
            chunks.append(chunk)
            size += len(chunk)
            last_growth = now
        elif last_growth is not None and now - last_growth >= quiet:
            break
        time.sleep(0.05)
    return "".join(chunks)


def dump_stacks(ranks: Dict[int, Optional[int]], out_path: Path,
                read_new_output: Callable[[], str], settle: float = 5.0) -> dict:
    """Dump the stacks of `ranks` (pid -> rank) into `out_path`.

    `read_new_output` returns the job's output written since the previous call (without
    waiting); it is called before signalling and then until the dumps stop coming (at most
    `settle` seconds), to cut out what faulthandler wrote.
    Returns {"method", "file", "ranks": [...], "unavailable": {rank: why}}.
    """
    py_spy = shutil.which("py-spy")
    sections: List[str] = []
    dumped: List[Optional[int]] = []
    unavailable: Dict[str, str] = {}
    method = None
    if py_spy:
        method = "py-spy"
        for pid, rank in sorted(ranks.items()):
            try:
                result = subprocess.run([py_spy, "dump", "--pid", str(pid), "--nonblocking"],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        timeout=PY_SPY_TIMEOUT, check=False)
                text = result.stdout.decode("utf-8", "replace")
            except (OSError, subprocess.TimeoutExpired) as exc:
                unavailable[str(rank)] = "py-spy failed: %s" % exc
                continue
            if result.returncode != 0:
                unavailable[str(rank)] = "py-spy exited %d: %s" % (
                    result.returncode, text.strip()[-300:])
                continue
            sections.append("=== rank %s (pid %d), py-spy ===\n%s" % (rank, pid, text))
            dumped.append(rank)
    else:
        read_new_output()
        signalled = []
        for pid, rank in sorted(ranks.items()):
            if not catches_signal(pid, signal.SIGUSR1):
                unavailable[str(rank)] = ("py-spy is not installed and the rank did not "
                                          "register faulthandler for SIGUSR1")
                continue
            stopped = is_stopped(pid)
            try:
                os.kill(pid, signal.SIGUSR1)
                # A stopped process runs its handler only once continued (and SIGCONT
                # does nothing to one that runs, so a stop in flight cannot defeat this).
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                unavailable[str(rank)] = "process gone"
                continue
            signalled.append((pid, rank, stopped))
        if signalled:
            method = "faulthandler"
            text = _collect(read_new_output, settle)
            for pid, _rank, stopped in signalled:
                if stopped:
                    try:
                        os.kill(pid, signal.SIGSTOP)  # keep the evidence as it was
                    except ProcessLookupError:
                        pass
            sections.append("=== ranks %s, faulthandler (SIGUSR1) ===\n%s" % (
                ", ".join(str(r) for _p, r, _s in signalled), text))
            dumped.extend(r for _p, r, _s in signalled)
    outcome: Dict[str, Any] = {"method": method, "file": None, "ranks": dumped,
                               "unavailable": unavailable}
    if sections:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text("\n".join(sections), encoding="utf-8")
        outcome["file"] = str(out_path)
    return outcome
