"""The causes the Slurm watcher names are those the exporter keeps as labels."""

from __future__ import annotations

from agent.wire.causes import CAUSES, LAUNCH_FAILED
from cockpit.analysis.causes import SCANCEL, SLURM_REQUEUE, cause_label, slurm_cause
from cockpit.control.slurm import FAILED_ENDS


def test_every_cause_the_agent_and_slurm_name_is_its_own_label() -> None:
    named = [*CAUSES, LAUNCH_FAILED, SCANCEL, SLURM_REQUEUE,
             *(slurm_cause(state) for state in FAILED_ENDS)]
    assert slurm_cause("NODE_FAIL") == "slurm_node_fail"
    assert [cause_label(c) for c in named] == named
    for free in ("rank 11 killed", "slurm_" + "x" * 30, "OOM", ""):
        assert cause_label(free) == "other"
