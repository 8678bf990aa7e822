"""NVML's clock-throttle reasons, as words: `0x60` means nothing to an operator at 3 a.m.

The bits are NVML's `nvmlClocksEventReasons` (formerly `ClocksThrottleReasons`), spelt in
`agent.wire.throttle`; a bit this table does not know stays in hex.
"""

from __future__ import annotations

from agent.wire.throttle import APP_CLOCKS as APP_CLOCKS
from agent.wire.throttle import DISPLAY_CLOCKS as DISPLAY_CLOCKS
from agent.wire.throttle import HW_POWER_BRAKE as HW_POWER_BRAKE
from agent.wire.throttle import HW_SLOWDOWN as HW_SLOWDOWN
from agent.wire.throttle import HW_THERMAL as HW_THERMAL
from agent.wire.throttle import IDLE as IDLE
from agent.wire.throttle import SW_POWER_CAP as SW_POWER_CAP
from agent.wire.throttle import SW_THERMAL as SW_THERMAL
from agent.wire.throttle import SYNC_BOOST as SYNC_BOOST

REASONS = {
    IDLE: "idle", APP_CLOCKS: "app clocks", SW_POWER_CAP: "power cap",
    HW_SLOWDOWN: "HW slowdown", SYNC_BOOST: "sync boost", SW_THERMAL: "thermal (SW)",
    HW_THERMAL: "thermal (HW)", HW_POWER_BRAKE: "power brake", DISPLAY_CLOCKS: "display clocks",
}
# Reasons that are no problem: an idle GPU, clocks an administrator set on purpose.
BENIGN = IDLE | APP_CLOCKS


def throttle_text(mask: int | None) -> str:
    """"thermal (SW), power cap" for 0x24; "none" for 0; "n/a" when unknown."""
    if mask is None:
        return "n/a"
    if mask == 0:
        return "none"
    words = [name for bit, name in REASONS.items() if mask & bit]
    unknown = mask & ~sum(REASONS)
    if unknown:
        words.append(f"{unknown:#x}")
    return ", ".join(words)
