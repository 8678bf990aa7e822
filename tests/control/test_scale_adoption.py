"""A scale under way outlives the agent: an agent killed (-9) between the operator's
scale and the new group's first step leaves the change in the job's saved state, so the
adopting agent still reads the regroup as the scale and says it was done. No torchrun:
the regroup is driven through the membership's own entry points."""

from __future__ import annotations

import time
from pathlib import Path

from agent.job.launch import LaunchSpec
from agent.job.managed import ManagedJob
from agent.journal.journal import Journal, JournalReader
from agent.wire import jobstate
from tests.control.test_standby_adoption import NAME, spare_spec


def _saved(journal: Journal) -> dict:
    saved = jobstate.read(jobstate.path(journal.state_dir, NAME))
    assert saved is not None
    return saved


def _scale_events(journal: Journal) -> list[dict]:
    return [r for r in JournalReader(journal.state_dir).records(0)
            if r.get("t") == "event" and r.get("kind") == "scale"]


def test_a_regroup_under_way_is_still_the_scale_after_an_agent_restart(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "state")
    first = ManagedJob(LaunchSpec(spare_spec(tmp_path, "a")), journal)
    first.membership.scale({"id": "op7-a", "change": "add", "host": "c",
                            "hosts": ["a", "b", "c"]})
    expect = _saved(journal)["membership"]["expect"]
    assert expect["id"] == "op7-a" and expect["until"] > time.time()
    since = time.time()
    first.membership._begin(since, "scale")  # torchrun formed the new group
    saved = _saved(journal)  # and the agent is killed: nothing more is saved

    second = ManagedJob(LaunchSpec(saved["spec"]), journal)
    second._restore(saved)
    regroup = second.membership.first_step(since + 3)
    assert regroup is not None and regroup["why"] == "scale"
    second.membership.completed(regroup, 120, since + 3)
    done = _scale_events(journal)[-1]
    assert done["data"]["ok"] is True and done["step"] == 120
    assert (done["data"]["id"], done["data"]["change"], done["data"]["host"]) == (
        "op7-a", "add", "c")
    # Said once: a third agent adopting from here on has no regroup to complete.
    third = ManagedJob(LaunchSpec(saved["spec"]), journal)
    third._restore(_saved(journal))
    assert third.membership.first_step(since + 9) is None


def test_a_scale_window_that_ran_out_while_no_agent_ran_is_closed_at_the_next_look(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path / "state")
    first = ManagedJob(LaunchSpec(spare_spec(tmp_path, "a")), journal)
    first.membership.scale({"id": "op8-a", "change": "remove", "host": "b",
                            "hosts": ["a", "c"]})
    saved = _saved(journal)
    saved["membership"]["expect"]["until"] = time.time() - 1  # the agent stayed down long
    second = ManagedJob(LaunchSpec(saved["spec"]), journal)
    second._restore(saved)
    second.membership.tick(time.time())
    closed = _scale_events(journal)[-1]
    assert closed["data"]["ok"] is False and closed["data"]["id"] == "op8-a"
    assert "not seen here within" in closed["msg"]


def test_a_state_saved_without_membership_adopts_no_change_under_way(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "state")
    job = ManagedJob(LaunchSpec(spare_spec(tmp_path, "a")), journal)
    for saved in (None, {"expect": "x", "regroup": [], "between": {"since": "y"}}):
        job.membership.restore(saved)
        assert (job.membership.expect, job.membership.regroup, job.membership.between) == (
            None, None, None)
