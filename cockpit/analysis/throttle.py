"""NVML's clock-throttle reasons, as words: `0x60` means nothing to an operator at 3 a.m.

The bits are NVML's `nvmlClocksEventReasons` (formerly `ClocksThrottleReasons`), the same
on every driver that reports them; a bit this table does not know stays in hex.
"""

from __future__ import annotations

IDLE = 0x1
APP_CLOCKS = 0x2
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x08
SYNC_BOOST = 0x10
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
DISPLAY_CLOCKS = 0x100

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
