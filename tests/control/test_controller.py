"""The controller: which host gets which op for each operation, and what it says first."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from cockpit.control.controller import ControlError, Controller, missed_hosts_text
from cockpit.control.jobspec import parse_jobspec

SPEC_TEXT = """
name = "big"
hosts = ["gpu1", "gpu2", "gpu3"]
nproc_per_node = 8
script = "train.py"
run_dir = "/runs/big"
[rendezvous]
endpoint = "gpu1:29400"
"""
SPEC = parse_jobspec(SPEC_TEXT)


class Links:
    """Stands in for `Fleet.send`: records ops; hosts in `down` refuse like a dead link."""

    def __init__(self, down: tuple[str, ...] = ()) -> None:
        self.sent: list[tuple[str, dict]] = []
        self.down = down

    def __call__(self, host: str, op: dict) -> None:
        if host in self.down:
            raise ConnectionError(f"host {host} is unreachable")
        self.sent.append((host, op))

    def by_host(self) -> dict[str, dict]:
        return dict(self.sent)


def _controller(links: Links) -> Controller:
    ids = (f"id{i}" for i in itertools.count())
    return Controller(SPEC, links, new_id=lambda: next(ids))


def acked(c: Controller, refused: tuple[str, ...] = (), silent: tuple[str, ...] = ()
          ) -> list[str]:  # fmt: skip
    """The agents answer the op `c` sent last, as the screen hands their acks on: each
    host accepts, but those `refused` (their agent says why) and those `silent`."""
    return c.settle({op_id: None if host in silent else (host not in refused, "refused")
                     for host, op_id in c.last_ops.items()})


def test_launch_gives_each_host_its_node_rank() -> None:
    links = Links()
    result = _controller(links).launch()
    assert result == "launch sent to gpu1, gpu2, gpu3 (op id0)"
    ops = links.by_host()
    assert [ops[h]["spec"]["node_rank"] for h in SPEC.hosts] == [0, 1, 2]
    assert {ops[h]["id"] for h in SPEC.hosts} == {"id0-gpu1", "id0-gpu2", "id0-gpu3"}


def test_pause_checkpoints_on_rank0s_host_and_the_others_follow() -> None:
    links = Links()
    _controller(links).pause()
    ops = links.by_host()
    assert ops["gpu1"] == {"op": "pause", "id": "id0-gpu1", "job": "big", "follow": False}
    assert ops["gpu2"]["follow"] is True and ops["gpu3"]["follow"] is True
    links = Links()
    _controller(links).pause(freeze=True, hold=30)
    assert all(op["freeze"] is True and op["hold"] == 30 for _h, op in links.sent)


def test_adjust_goes_to_rank0_only() -> None:
    links = Links()
    c = _controller(links)
    # Each result says what was asked, not the op that carries it.
    assert c.adjust(lr_scale=0.5) == "adjust (lr_scale=0.5) sent to gpu1 (op id0)"
    assert c.checkpoint_now() == "checkpoint request sent to gpu1 (op id1)"
    assert c.eval_now() == "evaluation request sent to gpu1 (op id2)"
    assert [(h, op["knobs"]) for h, op in links.sent] == [
        ("gpu1", {"lr_scale": 0.5}), ("gpu1", {"checkpoint_now": True}),
        ("gpu1", {"eval_now": True})]  # fmt: skip
    with pytest.raises(ControlError, match="at least one knob"):
        c.adjust()


def test_relaunch_excluding_rank0s_host_moves_the_rendezvous() -> None:
    links = Links()
    c = _controller(links)
    c.relaunch(exclude=["gpu1"])
    ops = links.by_host()
    assert ops["gpu1"] == {"op": "relaunch", "id": "id0-gpu1", "job": "big",
                           "exclude_self": True}  # fmt: skip
    assert (ops["gpu2"]["spec"]["nnodes"], ops["gpu2"]["spec"]["node_rank"]) == (2, 0)
    assert ops["gpu3"]["spec"]["node_rank"] == 1
    assert ops["gpu2"]["spec"]["rendezvous"]["endpoint"] == "gpu2:29400"
    assert c.hosts == SPEC.hosts  # sent, not yet accepted
    assert acked(c) == ["id0"]
    assert c.hosts == ("gpu2", "gpu3") and c.rank0_host == "gpu2"
    with pytest.raises(ControlError, match="not hosts of job big"):
        c.relaunch(exclude=["gpu9"])


def test_fork_derives_name_run_dir_and_port_and_returns_its_controller() -> None:
    links = Links()
    child = _controller(links).fork({"optim.lr": 1e-4}, name="big-lr4", step=300)
    ops = links.by_host()
    assert ops["gpu2"]["name"] == "big-lr4" and ops["gpu2"]["step"] == 300
    assert ops["gpu2"]["overrides"] == {"optim.lr": 1e-4}
    spec = ops["gpu2"]["spec"]
    assert spec["run_dir"] == "/runs/big-lr4" and spec["rendezvous"]["endpoint"] == "gpu1:29401"
    assert child.job == "big-lr4" and str(child) == "job big-lr4 on gpu1, gpu2, gpu3"


def test_a_fork_of_a_job_on_the_last_port_takes_the_one_below() -> None:
    top = dataclasses.replace(SPEC, rdzv_endpoint="gpu1:65535")
    child = Controller(top, Links(), new_id=lambda: "id").forked("big-fork-1")
    assert child.spec.rdzv_endpoint == "gpu1:65534"


def test_the_controller_of_a_shown_job_is_the_parent_or_one_of_its_forks() -> None:
    links = Links()
    parent = _controller(links)
    assert parent.controller_for("big") is parent
    assert parent.controller_for(None) is parent  # nothing shown yet: the job started for
    made = parent.fork({}, name="big-fork-a1b2c3")
    assert parent.controller_for("big-fork-a1b2c3") is made  # the one `fork` returned
    # A fork started elsewhere (an earlier cockpit, the command line): the same spec
    # `fork` would have given it, and the same controller on every later lookup.
    other = parent.controller_for("big-fork-d4e5f6")
    assert other is not None and other is parent.controller_for("big-fork-d4e5f6")
    assert (other.spec.run_dir, other.spec.rdzv_endpoint, other.hosts) == (
        "/runs/big-fork-d4e5f6", "gpu1:29401", SPEC.hosts)
    grandchild = parent.controller_for("big-fork-d4e5f6-fork-777777")
    assert grandchild is not None and grandchild.spec.rdzv_endpoint == "gpu1:29402"
    assert grandchild is other.controller_for("big-fork-d4e5f6-fork-777777")
    for unknown in ("small", "bigger", "big-fork-", "big-lr4"):
        assert parent.controller_for(unknown) is None, unknown
    links.sent.clear()
    other.pause()
    assert {op["job"] for _h, op in links.sent} == {"big-fork-d4e5f6"}


def test_a_fork_starts_on_the_hosts_the_parent_has_now() -> None:
    links = Links()
    parent = _controller(links)
    parent.relaunch(exclude=["gpu3"])
    acked(parent)
    child = parent.fork({})
    assert child.hosts == ("gpu1", "gpu2")
    assert [h for h, op in links.sent if op["op"] == "fork"] == ["gpu1", "gpu2"]


def test_unreachable_hosts_are_named_and_the_rest_still_get_the_op() -> None:
    links = Links(down=("gpu2",))
    with pytest.raises(ControlError, match=r"resume of job big not sent to gpu2 \(gpu2: host "
                       r"gpu2 is unreachable\); sent to gpu1, gpu3"):  # fmt: skip
        _controller(links).resume()
    assert [h for h, _op in links.sent] == ["gpu1", "gpu3"]


def test_describe_names_hosts_for_every_ui_operation() -> None:
    from cockpit.ui.job_control import OPERATIONS

    c = _controller(Links())
    for name in OPERATIONS:
        text = c.describe(name)
        assert "big" in text and "gpu1" in text, (name, text)
    assert "gpu2, gpu3 stop when gpu1's part does" in c.describe("pause")
    one_other = Controller(parse_jobspec(SPEC_TEXT.replace(', "gpu3"]', "]")), Links())
    assert "gpu2 stops when gpu1's part does" in one_other.describe("pause")
    with pytest.raises(ValueError, match="unknown job operation"):
        c.describe("explode")


@pytest.mark.parametrize(("name", "step", "what"), [
    ("a/b", None, "fork name: 'a/b' cannot name a folder"),
    ("-x", None, "cannot name a folder"),
    (" ", None, "fork name: must be a non-empty string"),
    ("a\nb", None, "control character"),
    ("ok", -1, "step must be a step number >= 0, got -1"),
    ("ok", True, "step must be a step number"),
])
def test_a_fork_the_agents_would_refuse_is_refused_before_anything_is_sent(
        name: str, step, what: str) -> None:
    links = Links()
    with pytest.raises(ControlError, match=what):
        _controller(links).fork({"lr": 1}, name=name, step=step)
    assert links.sent == []


def test_the_fork_description_is_true_whether_the_parent_runs_or_not() -> None:
    text = _controller(Links()).describe("fork")
    assert "running" not in text and "job big itself is left as it is" in text


@pytest.mark.parametrize("value", [-1, 0, float("nan"), float("inf"), 1e6, "2", True])
def test_adjust_refuses_an_lr_scale_the_ui_would_refuse(value) -> None:
    links = Links()
    with pytest.raises(ControlError, match="lr_scale must be"):
        _controller(links).adjust(lr_scale=value)
    assert links.sent == []
    _controller(links).adjust(lr_scale=0.001)
    _controller(links).adjust(lr_scale=100)
    assert [op["knobs"]["lr_scale"] for _h, op in links.sent] == [0.001, 100]


def _watched(tmp_path, links: Links, text: str = SPEC_TEXT):
    """A job file and the controller `cockpit watch --job` makes of it."""
    from cockpit.app.watch import watch_controller
    from cockpit.transport.inventory import parse_inventory

    inventory = parse_inventory("".join(f'[[hosts]]\nname = "{h}"\naddress = "{h}"\n'
                                        for h in ("gpu1", "gpu2", "gpu3")))  # fmt: skip
    path = tmp_path / "job.toml"
    path.write_text(text)
    return path, watch_controller(path, inventory, links)


def test_the_screens_relaunch_and_fork_start_the_job_file_as_it_is_now(tmp_path) -> None:
    """The operator edits the file and launches from the command line while the cockpit
    stays open: the screen's relaunch must not restart the job with the old arguments."""
    links = Links()
    path, controller = _watched(tmp_path, links)
    controller.relaunch()
    assert {op["spec"]["script"] for _h, op in links.sent} == {"train.py"}
    path.write_text(SPEC_TEXT.replace('script = "train.py"',
                                      'script = "train.py"\nargs = ["--d-model", "96"]'))
    links.sent.clear()
    controller.relaunch()
    assert [op["spec"]["args"] for _h, op in links.sent] == [["--d-model", "96"]] * 3
    links.sent.clear()
    controller.fork({})
    assert [op["spec"]["args"] for _h, op in links.sent] == [["--d-model", "96"]] * 3


def test_a_job_file_broken_mid_edit_refuses_what_would_start_it_but_not_a_pause(
    tmp_path,
) -> None:
    links = Links()
    path, controller = _watched(tmp_path, links)
    path.write_text(SPEC_TEXT.replace("nproc_per_node = 8", "nproc_per_node = 0"))
    with pytest.raises(ControlError, match=rf"job file changed.*{path.name}.*nproc_per_node"):
        controller.relaunch()
    assert links.sent == []
    controller.pause()
    assert {h for h, _op in links.sent} == {"gpu1", "gpu2", "gpu3"}
    path.write_text(SPEC_TEXT.replace('name = "big"', 'name = "other"'))
    with pytest.raises(ControlError, match="now names job other, not big"):
        controller.fork({})
    path.write_text(SPEC_TEXT)
    links.sent.clear()
    controller.relaunch(exclude=["gpu3"])  # fixed: read again, and the exclusion holds
    assert [h for h, _op in links.sent] == ["gpu3", "gpu1", "gpu2"]
    acked(controller)
    assert controller.hosts == ("gpu1", "gpu2")


def test_a_launch_is_refused_while_some_hosts_run_the_job() -> None:
    """A host that missed the first launch must not start its part afresh beside the
    running one: its fresh start would set the running part's checkpoints aside."""
    controller = _controller(Links())
    ended = {"gpu1": {"job": "big", "state": "failed"}, "gpu2": None,
             "gpu3": {"job": "big", "state": "stopped"}}
    controller.check_launch(ended)  # a job over everywhere launches again
    with pytest.raises(ControlError) as refused:
        controller.check_launch({"gpu1": {"job": "big", "state": "running"},
                                 "gpu2": {"job": "big", "state": "paused"}, "gpu3": None})
    assert str(refused.value) == (
        "job big already runs on gpu1 (running), gpu2 (paused) but not on gpu3: a launch "
        "would start its part afresh and set aside the checkpoints the running part writes "
        "in /runs/big; stop the job and launch it again")
    with pytest.raises(ControlError, match=r"already runs on gpu1 \(running\), gpu2 "
                       r"\(running\), gpu3 \(backoff\): stop it to launch it afresh"):
        controller.check_launch({h: {"job": "big", "state": s} for h, s in
                                 zip(SPEC.hosts, ("running", "running", "backoff"), strict=True)})
    elastic_text = SPEC_TEXT.replace("nproc", 'nnodes = "2:3"\nnproc')
    elastic = Controller(parse_jobspec(elastic_text + "[resume]\nnewest_args = []\n"), Links())
    with pytest.raises(ControlError, match="add gpu3 to the running job with scale --add "
                       "gpu3, or stop the job"):
        elastic.check_launch({"gpu1": {"job": "big", "state": "running"},
                              "gpu2": {"job": "big", "state": "running"}})
    with pytest.raises(ControlError, match=r"job big is paused on gpu1, gpu2, gpu3: resume it "
                       r"to go on from its checkpoint, or stop it to launch it afresh"):
        controller.check_launch({h: {"job": "big", "state": "paused"} for h in SPEC.hosts})
    # A spare in standby runs no part of its own.
    elastic.check_launch({"gpu1": {"job": "big", "state": "standby"}})


@pytest.mark.parametrize(("op", "count", "advice"), [
    ("pause", 1, "its agent ends its part the same way once it sees in the job's shared run "
                 "dir that the other hosts' parts ended; check it once it is back"),
    ("launch", 2, "their part of the job is not started; once they are back, add them with "
                  "scale --add (an elastic job), or stop the job and launch it again"),
    ("resume", 1, "its agent resumes its part too once it sees in the job's shared run dir "
                  "that the others resumed, if it was paused or stopped with them; check it "
                  "once it is back: a part still not running leaves the others waiting for "
                  "it in the rendezvous (an elastic job trains on without it), so relaunch "
                  "the job then: every part starts again from the newest checkpoint"),
    ("resume", 2, "their agents resume their part too once they see in the job's shared run "
                  "dir that the others resumed, if they were paused or stopped with them; check "
                  "them once they are back: a part still not running leaves the others waiting for "
                  "it in the rendezvous (an elastic job trains on without it), so relaunch the "
                  "job then: every part starts again from the newest checkpoint"),
    ("relaunch", 1, "its part is left as it was, and the others wait for it in the "
                    "rendezvous (an elastic job trains on without it); once it is back, "
                    "relaunch the job: every part starts again from the newest checkpoint"),
    ("fork", 1, "its part of the fork is not started; once it is back, stop the fork and "
                "fork again"),
    ("adjust", 1, "its part of the job is left as it was; send the adjust again once it is "
                  "back"),
])
def test_what_to_do_for_a_missed_host_fits_what_the_operation_left(
        op: str, count: int, advice: str) -> None:
    """Sending a launch or a resume again would not help (a second launch is refused while
    a part runs, a second resume finds the job running): the advice names what does. A
    part paused with the others follows their resume by itself (agent.job.peer_end)."""
    assert missed_hosts_text(op, count) == advice


def test_a_fork_or_adjustment_with_a_value_that_is_not_finite_sends_nothing() -> None:
    """`lr=nan` reads as a number (TOML and float() both take it); the screen's fork
    prompt and the command line both end here."""
    links = Links()
    with pytest.raises(ControlError, match=r"override lr=nan: not a finite number"):
        _controller(links).fork({"lr": float("nan"), "warmup": 10})
    with pytest.raises(ControlError, match=r"knob clip=inf: not a finite number"):
        _controller(links).adjust(clip=float("inf"))
    assert links.sent == []


def test_a_relaunch_changes_the_hosts_only_once_the_remaining_hosts_accepted() -> None:
    """The relaunch is sent; the hosts the screen then names (prompts, confirmations,
    a fork's spec) are the job's only once each remaining host's agent accepted it."""
    c = _controller(Links())
    c.relaunch(exclude=["gpu3"])
    assert c.hosts == SPEC.hosts and "on gpu1, gpu2, gpu3" in c.describe("stop")
    assert acked(c, refused=("gpu2",)) == ["id0"]  # settled: refused, not adopted
    assert c.hosts == SPEC.hosts and c.spec.hosts == SPEC.hosts
    c.relaunch(exclude=["gpu3"])
    acked(c, silent=("gpu1",))  # no answer yet: not adopted, still awaited
    assert c.hosts == SPEC.hosts and list(c.pending) == ["id1"]
    c.relaunch(exclude=["gpu3"])
    assert c.settle({"some-other-op-gpu1": (True, "ok")}) == []  # not its acks: it waits
    assert c.hosts == SPEC.hosts and list(c.pending) == ["id1", "id2"]
    # The excluded host's own answer does not decide it; adopted, it supersedes the one
    # sent before it, still unanswered.
    assert acked(c, refused=("gpu3",)) == ["id1", "id2"]
    assert c.hosts == c.spec.hosts == ("gpu1", "gpu2") and c.pending == {}
    assert "on gpu1, gpu2:" in c.describe("stop")


def test_a_relaunch_excluding_a_host_that_is_down_is_adopted_as_the_others_accept() -> None:
    c = _controller(Links(down=("gpu3",)))
    with pytest.raises(ControlError) as partly:
        c.relaunch(exclude=["gpu3"])
    assert partly.value.sent == ("gpu1", "gpu2")
    acked(c)
    assert c.hosts == ("gpu1", "gpu2")
    # A remaining host it missed cannot accept it: the relaunch is never adopted.
    missed = _controller(Links(down=("gpu2",)))
    with pytest.raises(ControlError):
        missed.relaunch(exclude=["gpu3"])
    acked(missed)
    assert missed.hosts == SPEC.hosts and missed.pending == {}


def test_a_fork_says_it_was_sent_with_its_op_not_that_the_fork_exists() -> None:
    """Agents ack a fork as accepted; it exists once each host's fork event says its
    checkpoint copy and start went well. The screen's toast says what was sent."""
    from cockpit.ui import job_control as jc

    c = _controller(Links())
    child = c.fork({"lr": 1e-4}, name="big-lr4")
    assert child.job == "big-lr4"
    assert c.last_sent == "fork big-lr4 sent to gpu1, gpu2, gpu3 (op id0)"
    assert set(c.last_ops.values()) == {"id0-gpu1", "id0-gpu2", "id0-gpu3"}
    said = jc.result_text(jc.OPERATIONS["fork"],
                          jc.OPERATIONS["fork"].call(c, {"overrides": {"lr": 1e-4}}))
    assert said.startswith("Fork the job: fork big-fork-")
    assert " sent to gpu1, gpu2, gpu3 (op id2); not started yet" in said
    assert "fork event" in said and "job big-fork-" not in said and " on gpu1" not in said
