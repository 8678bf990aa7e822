"""NVML's clock-throttle reason bits (`nvmlClocksEventReasons`, formerly
`ClocksThrottleReasons`), as a `gpu` record's `throttle` mask carries them: the same on
every driver that reports them. The simulated sampler (agent.samplers.sim) sets them and
the cockpit reads them (cockpit.analysis.throttle), so they are spelt here once.
"""

IDLE = 0x1
APP_CLOCKS = 0x2
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x08
SYNC_BOOST = 0x10
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
DISPLAY_CLOCKS = 0x100
