"""A job spec that leaves every optional field out means the same to the cockpit's check
(cockpit.control.jobspec) and to the agent's (agent.job.launch): both take the defaults
of agent.wire.launch_spec."""

from __future__ import annotations

from agent.job.launch import LaunchSpec
from agent.wire.launch_spec import DEFAULTS
from cockpit.control.jobspec import parse_jobspec

MINIMAL = """
name = "j"
hosts = ["gpu1"]
nproc_per_node = 2
script = "train.py"
run_dir = "/runs/j"
"""


def test_the_cockpit_and_the_agent_take_the_same_defaults() -> None:
    spec = parse_jobspec(MINIMAL)
    launch = LaunchSpec(spec.for_host("gpu1"))
    sides = {
        "python": (spec.python, launch.python),
        "checkpoint_dir": (spec.checkpoint_dir, launch.checkpoint_rel),
        "override_args": (list(spec.override_args), launch.override_args),
        "rendezvous.backend": (spec.rdzv_backend, launch.rdzv_backend),
        "max_restarts": (spec.max_restarts, launch.max_restarts),
        "recovery.restart_budget": (spec.restart_budget, launch.restart_budget),
        "recovery.backoff": (spec.backoff, launch.backoff),
        "recovery.backoff_max": (spec.backoff_max, launch.backoff_max),
        "recovery.window": (spec.budget_window, launch.budget_window),
        "hang.k": (spec.hang_k, launch.hang_k),
        "hang.floor": (spec.hang_floor, launch.hang_floor),
        "hang.startup": (spec.hang_startup, launch.hang_startup),
        "pg_timeout": (spec.pg_timeout, launch.pg_timeout),
        "pause_timeout": (spec.pause_timeout, launch.pause_timeout),
        "stop_grace": (spec.stop_grace, launch.stop_grace),
    }
    for name, (cockpit_side, agent_side) in sides.items():
        default = DEFAULTS[name]
        expected = list(default) if isinstance(default, tuple) else default
        assert cockpit_side == agent_side == expected, name
    # An agent given a spec without them (an older cockpit) fills in the same.
    bare = LaunchSpec({"name": "j", "script": "train.py", "run_dir": "/runs/j"})
    assert (bare.nproc_per_node, bare.exclude_on) == (
        DEFAULTS["nproc_per_node"], list(DEFAULTS["recovery.exclude_on"]))
