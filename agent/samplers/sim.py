"""Simulated GPUs for demos and tests, always labelled as such (`sim: true`).

The numbers behave like a real training GPU so the cockpit's panes and alerts have
something believable to show: utilisation follows the job (the CPU activity of the
ranks mapped to each GPU when pids are given, a training-like duty cycle otherwise),
power follows utilisation, temperature follows power with thermal inertia, and clocks
drop with a throttle reason when the card runs hot or at its power cap.
"""

from __future__ import annotations

import random
import time
from typing import Callable, Dict, List, Mapping, Optional

from agent.wire import states
from agent.wire import throttle as reasons

STATE_SIMULATED = states.GPU_SIMULATED
GIB = 1 << 30

# NVML clocks-event-reason bits used by the simulation.
THROTTLE_IDLE = reasons.IDLE
THROTTLE_POWER_CAP = reasons.SW_POWER_CAP
THROTTLE_THERMAL = reasons.SW_THERMAL


class _Card:
    def __init__(self, index: int, rng: random.Random) -> None:
        self.index = index
        self.uuid = "GPU-SIM-%08x-%04d" % (rng.getrandbits(32), index)
        self.util = 0.0
        self.power = 70.0
        self.temp = 34.0 + rng.random() * 3
        self.mem_used = 512 << 20
        self.hot_until = 0.0


class SimGpus:
    """Same interface as `agent.samplers.nvml.Nvml`, with `state == "simulated"`."""

    name = "Simulated H100 80GB"
    mem_total = 80 * GIB
    power_limit = 700.0
    idle_power = 70.0
    max_sm_clock = 1980
    mem_clock = 2619

    def __init__(self, count: int, seed: Optional[int] = None, follow_job: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if count < 1:
            raise ValueError("simulated GPU count must be at least 1 (got %d)" % count)
        self._rng = random.Random(seed)
        self._clock = clock
        self.cards = [_Card(i, self._rng) for i in range(count)]
        self.state = STATE_SIMULATED
        # With a job attached, GPUs with no rank on them idle; without one (a demo host)
        # they run a training-like duty cycle.
        self.follow_job = follow_job
        self.driver: Optional[str] = None
        self._last = clock()
        self._start = self._last

    def init(self) -> bool:
        return True

    def shutdown(self) -> None:
        """Nothing to release (same interface as Nvml)."""

    def inventory(self) -> List[dict]:
        return [{"index": c.index, "uuid": c.uuid, "name": self.name,
                 "mem_total": self.mem_total, "simulated": True} for c in self.cards]

    def sample(self, pid_ranks: Optional[Mapping[int, Optional[int]]] = None,
               activity: Optional[Mapping[int, Optional[float]]] = None) -> List[dict]:
        """One `gpu` record body per card; `activity` is CPU % per pid when known."""
        now = self._clock()
        dt = max(1e-3, now - self._last)
        self._last = now
        ranked = {pid: rank for pid, rank in (pid_ranks or {}).items() if rank is not None}
        by_card: Dict[int, List[int]] = {}
        for pid, rank in ranked.items():
            by_card.setdefault(rank % len(self.cards), []).append(pid)
        return [self._step(card, by_card.get(card.index, []), ranked, activity or {},
                           now, dt) for card in self.cards]

    def _target_util(self, pids: List[int], job_known: bool,
                     activity: Mapping[int, Optional[float]], now: float) -> float:
        rng = self._rng
        if job_known:
            if not pids:
                return 0.0
            busy = [activity.get(pid) for pid in pids]
            known = [b for b in busy if b is not None]
            if known and max(known) < 20.0:
                return 2.0 + rng.random() * 3  # the rank is waiting (data, sync, paused)
            return 88.0 + rng.random() * 10
        # No job attached: a training-like duty cycle with a short dip every minute.
        phase = (now - self._start) % 60.0
        return 8.0 if phase > 55.0 else 85.0 + rng.random() * 12

    def _step(self, card: _Card, pids: List[int], ranked: Mapping[int, int],
              activity: Mapping[int, Optional[float]], now: float, dt: float) -> dict:
        rng = self._rng
        job_known = self.follow_job or bool(ranked)
        target = self._target_util(pids, job_known, activity, now)
        card.util += (target - card.util) * min(1.0, dt / 1.5)
        card.util = min(100.0, max(0.0, card.util + rng.gauss(0, 1.5)))
        if rng.random() < 0.002 * dt:
            card.hot_until = now + 20.0 + rng.random() * 40  # a blocked air inlet, briefly
        power_target = self.idle_power + (self.power_limit - self.idle_power) * card.util / 100
        card.power += (power_target - card.power) * min(1.0, dt / 2.0)
        card.power = min(self.power_limit, card.power + rng.gauss(0, 3))
        ambient = 30.0 + (25.0 if now < card.hot_until else 0.0)
        temp_target = ambient + card.power * 0.075
        card.temp += (temp_target - card.temp) * min(1.0, dt / 30.0)
        mem_target = min(int(self.mem_total * 0.92),
                         (512 << 20) + (len(pids) * 61 * GIB if job_known else 0))
        if not job_known:
            mem_target = int(self.mem_total * 0.7)
        card.mem_used += int((mem_target - card.mem_used) * min(1.0, dt / 5.0))
        throttle = 0
        if card.util < 5:
            throttle |= THROTTLE_IDLE
        if card.power >= 0.97 * self.power_limit:
            throttle |= THROTTLE_POWER_CAP
        if card.temp >= 83.0:
            throttle |= THROTTLE_THERMAL
        sm_clock = self.max_sm_clock
        if throttle & THROTTLE_THERMAL:
            sm_clock = int(sm_clock * 0.7)
        elif throttle & THROTTLE_POWER_CAP:
            sm_clock = int(sm_clock * 0.9)
        elif throttle & THROTTLE_IDLE:
            sm_clock = 345
        per_proc = card.mem_used // max(1, len(pids))
        return {
            "gpu": card.index, "uuid": card.uuid, "sim": True,
            "util": round(card.util, 1), "mem_util": round(card.util * 0.45, 1),
            "mem_used": card.mem_used, "mem_total": self.mem_total,
            "temp": round(card.temp, 1), "power": round(card.power, 1),
            "power_limit": self.power_limit, "sm_clock": sm_clock,
            "mem_clock": self.mem_clock, "fan": None, "throttle": throttle,
            "ecc_vol_corr": 0, "ecc_vol_unc": 0, "ecc_agg_corr": 0, "ecc_agg_unc": 0,
            "retired_pages": 0, "remap_pending": False,
            "pcie_tx": round(card.util * 120.0, 1), "pcie_rx": round(card.util * 150.0, 1),
            "pcie_replay": 0, "nvlink_err": 0,
            "procs": [{"pid": pid, "mem": per_proc, "rank": ranked[pid]}
                      for pid in sorted(pids)],
        }
