"""What a job's lifecycle events say: which hosts their agent gave up on, and how a job
that exited ended."""

from __future__ import annotations

from cockpit.analysis.lifecycle import (
    current_run_started,
    exit_reading,
    hosts_given_up,
    is_partly_paused,
    partly_paused_note,
    parts_still_running,
)


def _event(host: str, kind: str, ts: float, retry: bool | None = None,
           exclusion: dict | None = None) -> dict:
    data: dict = {}
    if retry is not None:
        data["decision"] = {"retry": retry}
    if exclusion is not None:
        data["exclusion"] = exclusion
    return {"host": host, "kind": kind, "ts": ts, "seq": int(ts), "data": data}


def test_a_host_is_given_up_until_it_starts_again() -> None:
    events = [_event("a", "job_started", 1), _event("b", "job_started", 1),
              _event("a", "interruption", 5, retry=False),
              _event("b", "interruption", 6, retry=True), _event("b", "job_started", 7)]
    assert hosts_given_up(events) == ["a"]
    assert hosts_given_up([*events, _event("a", "job_started", 9)]) == []


def test_an_excluded_host_is_not_a_failed_job() -> None:
    """An elastic job goes on without a host it excluded as faulty."""
    events = [_event("a", "interruption", 5, retry=False, exclusion={"host": "a"})]
    assert hosts_given_up(events) == []


def _exit(host: str, ts: float, **data: object) -> dict:
    return {"host": host, "kind": "job_exited", "ts": ts, "seq": int(ts), "data": data}


def test_a_clean_exit_at_the_end_is_finished_and_reads_so_in_state_and_note() -> None:
    events = [_event("a", "job_started", 1), _event("b", "job_started", 1),
              _exit("a", 9, returncode=0), _exit("b", 10, returncode=0)]
    assert exit_reading(events, 1.0) == ("finished", "finished")
    assert exit_reading(events, None) == ("finished", "finished")  # no total declared
    assert exit_reading(events, 0.6) == ("exited", "exited before its end")


def test_an_exit_with_an_error_is_never_finished() -> None:
    """Whatever the steps say: the first host to end badly says how the job ended."""
    events = [_exit("a", 9, returncode=1), _exit("b", 10, returncode=-15)]
    assert exit_reading(events, 1.0) == ("exited", "exited with code 1")
    assert exit_reading([_exit("b", 10, returncode=-9)], 1.0) == (
        "exited", "killed by signal 9")
    assert exit_reading([_exit("a", 9, returncode=0), _exit("b", 10, returncode=2)], 1.0) == (
        "exited", "exited with code 2")
    assert exit_reading([_exit("a", 9, returncode=0, ended_for="stop")], 1.0) == (
        "stopped", "stopped on request")
    assert exit_reading([_exit("a", 9, returncode=None)], 1.0) == (
        "exited", "exited, its exit status unknown")


def test_only_each_hosts_newest_event_counts() -> None:
    """A host that failed once and then ran to a clean end finished."""
    events = [_exit("a", 5, returncode=1), _event("a", "job_started", 6),
              _exit("a", 9, returncode=0)]
    assert exit_reading(events, 1.0) == ("finished", "finished")


def test_the_current_run_started_with_the_newest_start_not_the_first_launch() -> None:
    launch = [_event("a", "job_started", 1), _event("b", "job_started", 2)]
    assert current_run_started(launch) == 1  # b joined the rendezvous a opened
    assert current_run_started([]) is None
    recovered = [*launch, _exit("a", 50, returncode=1), _exit("b", 50, returncode=-15),
                 _event("a", "job_started", 60), _event("b", "job_started", 61)]
    assert current_run_started(recovered) == 60
    finished = [*recovered, _exit("a", 90, returncode=0), _exit("b", 90, returncode=0)]
    assert current_run_started(finished) == 60  # the run that ran last


def test_a_host_that_left_the_job_keeps_its_old_start_out_of_the_current_run() -> None:
    events = [_event("a", "job_started", 1), _event("b", "job_started", 1),
              _exit("b", 40, returncode=0, ended_for="scale"),
              _exit("a", 40, returncode=-15, ended_for="scale"), _event("a", "job_started", 45)]
    assert current_run_started(events) == 45


def _pause(host: str, ts: float, ok: bool, mode: str = "follow") -> dict:
    return {"host": host, "kind": "pause", "ts": ts, "seq": int(ts),
            "data": {"mode": mode, "ok": ok}}


def test_a_pause_that_failed_on_one_host_leaves_that_part_running() -> None:
    """Rank 0's host paused; gpu2's pause failed ("it keeps running"): the job is not
    paused, and the part still running is named."""
    started = [_event("gpu1", "job_started", 1), _event("gpu2", "job_started", 1)]
    partly = [*started, _pause("gpu1", 10, True, "checkpoint"), _pause("gpu2", 70, False)]
    running = parts_still_running(partly)
    assert list(running) == ["gpu2"] and running["gpu2"]["kind"] == "job_started"
    assert partly_paused_note(running) == "partly paused: gpu2 still running"
    assert is_partly_paused("stalled (partly paused: gpu2 still running)")
    assert not is_partly_paused("paused") and not is_partly_paused(None)
    assert parts_still_running([*started, _pause("gpu1", 10, True, "checkpoint"),
                                _pause("gpu2", 11, True)]) == {}
    # The failed pause is the newest event of all: still gpu2's part runs.
    assert list(parts_still_running([*started, _pause("gpu2", 9, False),
                                     _pause("gpu1", 10, True, "checkpoint")])) == ["gpu2"]
    frozen = [*started, _pause("gpu1", 10, True, "freeze"), _pause("gpu2", 10, False, "freeze")]
    assert list(parts_still_running(frozen)) == ["gpu2"]


def test_hosts_that_left_the_job_do_not_keep_it_from_reading_paused() -> None:
    """A host scaled out, excluded from an elastic job or by a relaunch (silent since,
    as a host that is down is) has no part to run: the others' pause is the job's."""
    events = [_event("gpu1", "job_started", 1), _event("gpu2", "job_started", 1),
              _event("gpu3", "job_started", 1), _event("gpu4", "job_started", 1),
              _exit("gpu3", 5, returncode=-15, ended_for="scale"),
              _event("gpu4", "interruption", 6, retry=False, exclusion={"host": "gpu4"}),
              _pause("gpu1", 10, True, "checkpoint"), _pause("gpu2", 11, True)]
    assert parts_still_running(events) == {}
    dead = [_event("gpu1", "job_started", 1), _event("gpu2", "job_started", 1),
            _event("gpu3", "job_started", 1),
            {"host": "gpu1", "kind": "relaunch", "ts": 20, "seq": 20, "data": {}},
            {"host": "gpu2", "kind": "relaunch", "ts": 20, "seq": 21, "data": {}},
            _event("gpu1", "job_started", 22), _event("gpu2", "job_started", 22),
            _pause("gpu1", 30, True, "checkpoint"), _pause("gpu2", 31, True)]
    assert parts_still_running(dead) == {}  # gpu3, excluded while down, said nothing
    excluded = [*dead[:3], {"host": "gpu3", "kind": "relaunch", "ts": 20, "seq": 19,
                            "data": {"excluded": True}}, *dead[3:]]
    assert parts_still_running(excluded) == {}
    # A host that said something since the relaunch is the job's: its part runs.
    assert list(parts_still_running([*dead, _event("gpu3", "job_started", 25)])) == ["gpu3"]


def test_a_slurm_pause_ends_every_nodes_part() -> None:
    """Slurm's pause (the cockpit's own events for the job, which carry its Slurm job id)
    ended the whole allocation: the nodes' agents said job_started last, and went with it."""
    nodes = [_event("n1", "job_started", 1), _event("n2", "job_started", 1)]
    slurm = {"host": "slurm-job", "kind": "pause", "ts": 40, "seq": 3,
             "data": {"slurm_job_id": 743, "ok": True, "how": "usr1", "step": 15}}
    assert parts_still_running([*nodes, slurm]) == {}
    # A node's part that started again after it (a resume) runs again.
    assert list(parts_still_running([*nodes, slurm, _event("n1", "job_started", 50)])) \
        == ["n1"]
