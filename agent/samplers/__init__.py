"""UI-free samplers for GPUs (NVML or simulated) and the host (psutil).

Usable on their own, without the daemon:

    from agent.samplers import Nvml, HostSampler
    gpus = Nvml()
    if gpus.init():
        print(gpus.sample())
    else:
        print(gpus.state)          # "no NVIDIA driver", "pynvml not installed", ...

Each sampler returns plain dicts shaped like the `gpu` / `host` records of
docs/protocol.md (without `t`, `seq`, `ts`); a field a source cannot give is None.
"""

from agent.samplers.host import HostSampler
from agent.samplers.nvml import Nvml, XidWatcher, xid_records
from agent.samplers.sim import SimGpus

__all__ = ["HostSampler", "Nvml", "SimGpus", "XidWatcher", "xid_records"]
