"""Which SIGTERM-to-SIGKILL grace a stop op gets: the one the operator was told."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from agent.daemon import MAX_STOP_GRACE, Daemon
from agent.wire.op_error import OpError


class _Job:
    """A managed job as `Daemon._op_stop` sees it: its spec and its request queue."""

    def __init__(self, stop_grace: float) -> None:
        self.spec = SimpleNamespace(stop_grace=stop_grace)
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def request(self, action: str, args: dict[str, Any]) -> dict[str, Any]:
        self.requests.append((action, args))
        return {"job": "train", "state": "running"}


def _daemon(job: _Job, daemon_grace: float = 10.0) -> Any:
    return SimpleNamespace(jobs={"train": job}, supervisor=None,
                           config=SimpleNamespace(stop_grace=daemon_grace))


def test_a_managed_job_stops_with_its_specs_grace_not_the_daemons() -> None:
    # The stop dialog says "SIGKILL after 60 s" from the spec: the daemon's own
    # --stop-grace (10 s) is for a job started without one.
    job = _Job(stop_grace=60.0)
    reply = Daemon._op_stop(_daemon(job), {"op": "stop", "job": "train"})
    assert job.requests == [("stop", {"grace": 60.0})]
    assert reply["grace"] == 60.0


def test_a_grace_the_op_names_wins() -> None:
    job = _Job(stop_grace=60.0)
    Daemon._op_stop(_daemon(job), {"op": "stop", "job": "train", "grace": 2})
    assert job.requests == [("stop", {"grace": 2.0})]


@pytest.mark.parametrize("grace", [-1, float("inf"), float("nan"), MAX_STOP_GRACE + 1, True,
                                   "5"])
def test_a_grace_out_of_bounds_is_refused(grace: object) -> None:
    job = _Job(stop_grace=60.0)
    with pytest.raises(OpError, match="'grace' must be a number of seconds from 0 to"):
        Daemon._op_stop(_daemon(job), {"op": "stop", "job": "train", "grace": grace})
    assert job.requests == []
