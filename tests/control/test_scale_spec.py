"""Elastic jobs without processes: the spec (`nnodes = "MIN:MAX"`, spares), the torchrun
argv it becomes, the controller's scale ops and membership, the `scale` command line, and
the agent's exclusion and spare-claim rules."""

from __future__ import annotations

import itertools
import signal
import textwrap
from pathlib import Path

import pytest

from agent.job.launch import LaunchSpec
from agent.job.managed import ManagedJob
from agent.job.membership import _diagnose, _own_failure, claim_spare, read_claim
from agent.job.recovery import Diagnosis
from agent.journal.journal import Journal
from agent.wire.causes import GPU_FAULT, KILLED, NCCL, OOM, USER_CODE
from agent.wire.op_error import OpError
from cockpit.app.cli import build_parser
from cockpit.control.controller import ControlError, Controller
from cockpit.control.jobspec import JobSpecError, parse_jobspec, with_inventory_spares

ELASTIC = textwrap.dedent("""\
    name = "el"
    hosts = ["gpu1", "gpu2"]
    nnodes = "2:3"
    spares = ["gpu9"]
    nproc_per_node = 8
    script = "train.py"
    run_dir = "/runs/el"

    [resume]
    args = ["--resume", "{checkpoint}"]
    newest_args = ["--resume", "auto"]

    [rendezvous]
    endpoint = "10.0.0.1:29400"
    host = "gpu1"
    last_call = 2
    keep_alive = 1

    [recovery]
    exclude_on = ["gpu_fault", "killed"]
""")
INVENTORY = ["gpu1", "gpu2", "gpu3", "gpu4", "gpu9"]


def _flags(argv: list[str]) -> dict[str, str]:
    flags, i = {}, 3
    while i < len(argv) and argv[i].startswith("--"):
        flags[argv[i]] = argv[i + 1]
        i += 2
    return flags


def test_an_elastic_spec_launches_torchrun_with_a_node_range() -> None:
    spec = parse_jobspec(ELASTIC, "job.toml", known_hosts=INVENTORY)
    assert (spec.elastic, spec.min_nodes, spec.max_nodes) == (True, 2, 3)
    assert spec.spares == ("gpu9",) and spec.max_restarts == 100
    wire = spec.for_host("gpu2")
    assert wire["nnodes"] == "2:3" and wire["hosts"] == ["gpu1", "gpu2"]
    assert wire["spares"] == ["gpu9"] and wire["rendezvous"]["is_host"] is False
    assert spec.for_host("gpu1")["rendezvous"]["is_host"] is True
    launch = LaunchSpec(wire)
    argv = launch.argv("/ck/ckpt-00000100.pt")
    flags = _flags(argv)
    assert flags["--nnodes"] == "2:3" and flags["--max-restarts"] == "100"
    assert flags["--rdzv-conf"] == "is_host=0,last_call_timeout=2,keep_alive_interval=1"
    assert "--node-rank" not in flags  # the rendezvous orders elastic nodes
    assert float(flags["--monitor-interval"]) > 0.1  # the agent sees a failed rank first
    # torchrun restarts the workers with this same command after a membership change:
    # the trainer finds the newest checkpoint itself, never the one of the first start.
    assert argv[-3:] == ["train.py", "--resume", "auto"]
    assert launch.argv(None)[-2:] == ["--resume", "auto"]
    env = launch.environment("/ck/ckpt-00000100.pt")
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert launch.run_dir == Path("/runs/el/nodes/gpu2")
    spare = LaunchSpec(spec.for_host("gpu9"))
    assert spare.host == "gpu9" and spare.rdzv_is_host is False
    assert spare.hosts == ["gpu1", "gpu2"] and spare.run_dir == Path("/runs/el/nodes/gpu9")
    fixed = parse_jobspec(ELASTIC.replace('nnodes = "2:3"\nspares = ["gpu9"]\n', "")
                          .replace("last_call = 2\nkeep_alive = 1\n", "")
                          .replace('[recovery]\nexclude_on = ["gpu_fault", "killed"]\n', ""),
                          "job.toml")  # fmt: skip
    assert not fixed.elastic and fixed.max_restarts == 0
    fixed_argv = LaunchSpec(fixed.for_host("gpu2")).argv("/ck/c.pt")
    assert _flags(fixed_argv)["--nnodes"] == "2" and "--rdzv-conf" not in fixed_argv
    assert fixed_argv[-2:] == ["--resume", "/ck/c.pt"]
    fixed_launch = LaunchSpec(fixed.for_host("gpu2"))
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in fixed_launch.environment()
    # torchrun restarting workers in place (max_restarts > 0) needs the same setting
    restarting = LaunchSpec({**fixed.for_host("gpu2"), "max_restarts": 3})
    assert restarting.environment()["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"


def _line(text: str, start: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith(start))


@pytest.mark.parametrize(
    ("change", "at", "field", "what"),
    [
        (('nnodes = "2:3"', "nnodes = 3"), "nnodes", "nnodes", "must equal the number of hosts"),
        (('nnodes = "2:3"', 'nnodes = "3:4"'), "nnodes", "nnodes", "1 <= MIN <= number of hosts"),
        (('nnodes = "2:3"', 'nnodes = "2:1"'), "nnodes", "nnodes", "<= MAX"),
        (('nnodes = "2:3"', 'nnodes = "two"'), "nnodes", "nnodes", 'or "MIN:MAX"'),
        (('spares = ["gpu9"]', 'spares = ["gpu2"]'), "spares", "spares", "also in 'hosts'"),
        (('spares = ["gpu9"]', 'spares = ["gpu7"]'), "spares", "spares",
         "not in the inventory: gpu7"),
        (('newest_args = ["--resume", "auto"]', 'newest_args = ["--resume", "{checkpoint}"]'),
         "newest_args", "resume.newest_args", "must not name a checkpoint"),
        (('host = "gpu1"', 'host = "gpu5"'), "host =", "rendezvous.host", "not one of the job"),
        (("nproc_per_node = 8", "nproc_per_node = 8\nmax_restarts = 0"), "max_restarts",
         "max_restarts",
         "needs torchrun's own restarts"),
        (('exclude_on = ["gpu_fault", "killed"]', 'exclude_on = ["cosmic_rays"]'),
         "exclude_on", "recovery.exclude_on", "unknown cause"),
        (("keep_alive = 1", "keep_alive = 0"), "keep_alive", "rendezvous.keep_alive", ">= 1"),
    ],
)
def test_elastic_mistakes_name_file_line_and_field(change, at, field, what) -> None:
    text = ELASTIC.replace(*change)
    with pytest.raises(JobSpecError) as info:
        parse_jobspec(text, "job.toml", known_hosts=INVENTORY)
    err = info.value
    assert (err.line, err.field) == (_line(text, at), field), str(err)
    assert str(err).startswith(f"job.toml:{err.line}: field '{field}': ") and what in str(err)


def test_elastic_requirements_that_are_missing_are_named() -> None:
    def error(text: str) -> str:
        with pytest.raises(JobSpecError) as info:
            parse_jobspec(text, "job.toml", known_hosts=INVENTORY)
        return str(info.value)

    no_newest = ELASTIC.replace('newest_args = ["--resume", "auto"]\n', "")
    assert "field 'resume.newest_args': missing" in error(no_newest)
    no_store = ELASTIC.replace('host = "gpu1"\n', "")
    assert "field 'rendezvous.host': missing" in error(no_store)
    # The endpoint naming a job host is enough to know where the store is.
    named = parse_jobspec(no_store.replace("10.0.0.1:", "gpu2:"), "job.toml")
    assert named.store_host() == "gpu2"
    fixed = ELASTIC.replace('nnodes = "2:3"\n', "")
    assert "field 'spares': a spare takes over inside torchrun's elastic" in error(fixed)
    assert "only an elastic job" in error(fixed.replace('spares = ["gpu9"]\n', ""))


def test_the_agent_rechecks_an_elastic_spec() -> None:
    wire = parse_jobspec(ELASTIC).for_host("gpu1")
    for change, what in (({"nnodes": "3:2"}, "MIN:MAX"), ({"nnodes": 0}, "at least 1"),
                         ({"resume": {"args": []}}, "resume.newest_args"),
                         ({"rendezvous": {**wire["rendezvous"], "is_host": "yes"}},
                          "true or false")):  # fmt: skip
        with pytest.raises(OpError, match=what):
            LaunchSpec({**wire, **change})


def test_an_elastic_job_without_spares_of_its_own_takes_the_inventorys() -> None:
    spec = parse_jobspec(ELASTIC.replace('spares = ["gpu9"]\n', ""), "job.toml")
    assert with_inventory_spares(spec, ["gpu9", "gpu1"]).spares == ("gpu9",)
    own = parse_jobspec(ELASTIC, "job.toml")
    assert with_inventory_spares(own, ["gpu4"]).spares == ("gpu9",)


def test_watch_with_a_job_gives_its_controller_the_inventorys_spares(tmp_path: Path) -> None:
    from cockpit.app.watch import watched_job
    from cockpit.transport.inventory import load_inventory

    inventory = tmp_path / "hosts.toml"
    inventory.write_text("".join(
        f'[[hosts]]\nname = "{h}"\naddress = "10.0.0.{i}"\n'
        + ("spare = true\n" if h == "gpu9" else "")
        for i, h in enumerate(INVENTORY, start=1)))
    job = tmp_path / "job.toml"
    job.write_text(ELASTIC.replace('spares = ["gpu9"]\n', ""))
    spec = watched_job(job, load_inventory(inventory))
    assert spec.spares == ("gpu9",)
    assert Controller(spec, Links()).spares == ("gpu9",)


class Links:
    """Stands in for `Fleet.send`: records ops in the order they were sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict]] = []

    def __call__(self, host: str, op: dict) -> None:
        self.sent.append((host, op))


def _controller(links: Links, text: str = ELASTIC) -> Controller:
    ids = (f"id{i}" for i in itertools.count())
    return Controller(parse_jobspec(text, "job.toml"), links, new_id=lambda: next(ids))


def _accepted(c: Controller) -> None:
    """Every agent accepted the op `c` sent last (the screen hands their acks on)."""
    c.settle({op_id: (True, "ok") for op_id in c.last_ops.values()})


def test_launch_puts_the_spares_in_standby_and_stop_ends_it() -> None:
    links = Links()
    c = _controller(links)
    c.launch()
    ops = dict(links.sent)
    assert "standby" not in ops["gpu1"] and ops["gpu9"]["standby"] is True
    assert ops["gpu9"]["spec"]["host"] == "gpu9"
    assert "Spares gpu9 wait in standby" in c.describe("launch")
    links.sent.clear()
    c.stop()
    assert [h for h, _op in links.sent] == ["gpu1", "gpu2", "gpu9"]


def test_scale_tells_the_members_first_then_the_host_that_joins_or_leaves() -> None:
    links = Links()
    c = _controller(links)
    text = c.describe("scale", add="gpu3")
    assert "torchrun starts on gpu3" in text and "gpu1, gpu2 keep running" in text
    c.scale(add="gpu3")
    assert [h for h, _op in links.sent] == ["gpu1", "gpu2", "gpu3"]
    ops = dict(links.sent)
    assert ops["gpu1"] == {"op": "scale", "id": "id0-gpu1", "job": "el", "change": "add",
                           "host": "gpu3", "hosts": ["gpu1", "gpu2", "gpu3"]}
    joiner = ops["gpu3"]["spec"]
    assert joiner["host"] == "gpu3" and joiner["nnodes"] == "2:3"
    assert joiner["rendezvous"]["is_host"] is False and LaunchSpec(joiner).hosts[-1] == "gpu3"
    _accepted(c)
    assert c.hosts == ("gpu1", "gpu2", "gpu3")

    links.sent.clear()
    assert "Remove gpu3" in c.describe("scale", remove="gpu3")
    c.scale(remove="gpu3")
    assert [h for h, _op in links.sent] == ["gpu1", "gpu2", "gpu3"]
    ops = dict(links.sent)
    assert ops["gpu2"]["change"] == "remove" and "leave" not in ops["gpu2"]
    assert ops["gpu3"]["leave"] is True and ops["gpu3"]["hosts"] == ["gpu1", "gpu2"]
    _accepted(c)
    assert c.hosts == ("gpu1", "gpu2")


def test_a_host_whose_join_was_refused_or_unanswered_is_not_one_of_the_jobs_hosts() -> None:
    """A scale is sent; the controller's hosts (the scale prompt's "Hosts now", every
    later confirmation) change once the agent of the host that joins or leaves accepted."""
    c = _controller(Links())
    c.scale(add="gpu9")
    assert c.hosts == ("gpu1", "gpu2") and c.spares == ("gpu9",)  # sent, not accepted
    assert "on gpu1, gpu2 (" in c.describe("launch")
    ids = c.last_ops
    c.settle({ids["gpu1"]: (True, "ok"), ids["gpu2"]: (True, "ok"),
              ids["gpu9"]: (False, "job 'el' is already running here")})
    assert c.hosts == ("gpu1", "gpu2") and c.spares == ("gpu9",) and c.pending == {}
    c.scale(add="gpu9")
    ids = c.last_ops
    c.settle({ids["gpu1"]: (True, "ok"), ids["gpu2"]: (True, "ok"), ids["gpu9"]: None})
    assert c.hosts == ("gpu1", "gpu2") and c.spares == ("gpu9",)  # unanswered: not joined
    awaited = list(c.pending)
    assert len(awaited) == 1  # its answer is still awaited
    # gpu9's agent answers after the screen's wait (its link was reconnecting): the join
    # it accepted is the job's then, so a later stop or scale reaches gpu9.
    assert c.settle({ids["gpu9"]: (True, "accepted")}) == awaited
    assert c.hosts == ("gpu1", "gpu2", "gpu9") and c.spares == () and c.pending == {}
    assert "gpu9" in c.describe("stop")
    c.scale(remove="gpu9")
    _accepted(c)
    assert c.hosts == ("gpu1", "gpu2")
    # A change sent after one still unanswered, and adopted, supersedes it: the older
    # one's late answer no longer changes the hosts.
    c.scale(add="gpu9")
    first = c.last_ops
    c.settle({op_id: None for op_id in first.values()})
    c.scale(add="gpu9")
    _accepted(c)
    assert c.pending == {} and c.hosts == ("gpu1", "gpu2", "gpu9")
    assert c.settle({op_id: (True, "ok") for op_id in first.values()}) == []
    c.scale(remove="gpu9")
    ids = c.last_ops
    c.settle({ids["gpu1"]: (True, "ok"), ids["gpu2"]: (True, "ok"),
              ids["gpu9"]: (False, "job 'el' is not running here")})
    assert c.hosts == ("gpu1", "gpu2", "gpu9")  # it did not leave: still a host


def test_scale_refuses_what_torchrun_could_not_do() -> None:
    links = Links()
    c = _controller(links)
    for kw, what in (({"add": "gpu1"}, "already runs"), ({"remove": "gpu4"}, "not one of"),
                     ({"remove": "gpu2"}, "below the job's nnodes minimum 2"),
                     ({}, "one host to add or one host to remove"),
                     ({"add": "gpu3", "remove": "gpu2"}, "one host")):  # fmt: skip
        with pytest.raises(ControlError, match=what):
            c.scale(**kw)
    c.scale(add="gpu3")
    _accepted(c)
    with pytest.raises(ControlError, match="above the job's nnodes maximum 3"):
        c.scale(add="gpu4")
    with pytest.raises(ControlError, match="serves the rendezvous store"):
        c.scale(remove="gpu1")
    fixed = _controller(Links(), ELASTIC.replace('nnodes = "2:3"\nspares = ["gpu9"]\n', "")
                        .replace("last_call = 2\nkeep_alive = 1\n", "")
                        .replace('[recovery]\nexclude_on = ["gpu_fault", "killed"]\n', ""))
    with pytest.raises(ControlError, match="not elastic"):
        fixed.scale(add="gpu3")
    assert len(links.sent) == 3  # only the one scale that was allowed went out


def test_a_member_that_is_only_not_connected_is_not_called_a_stranger_to_the_spec() -> None:
    """gpu2 runs its part but its link is down: the command says it is not connected and
    must be sent the operation again, not that the spec does not know it."""
    from cockpit.app.operations import out_of_reach_text

    c = _controller(Links())
    unreachable = c.sync({"gpu1": {"job": "el", "state": "running",
                                   "hosts": ["gpu1", "gpu2", "gpu4"]}})
    assert unreachable == ["gpu2", "gpu4"]
    assert out_of_reach_text(c, "gpu2") == (
        "gpu2 takes part in job el but is not connected: the operation is not sent there; "
        "its part of the job is left as it was; send the operation again once it is back")
    assert "neither a host nor a spare" in out_of_reach_text(c, "gpu4")
    # Its agent follows a pause of the others by itself, which the command cannot confirm.
    assert "its agent ends its part the same way" in out_of_reach_text(c, "gpu2", "pause")


def test_sync_adopts_the_membership_the_agents_report() -> None:
    c = _controller(Links())
    unreachable = c.sync({
        "gpu1": {"job": "el", "state": "running", "hosts": ["gpu1", "gpu9", "gpu4"]},
        "gpu2": {"job": "el", "state": "excluded", "hosts": ["gpu1", "gpu9"]},
        "gpu9": {"job": "el", "state": "running", "hosts": ["gpu1", "gpu9"]},
    })
    assert c.hosts == ("gpu1", "gpu9") and c.spares == ()
    assert unreachable == ["gpu4"]
    fresh = _controller(Links())
    fresh.sync({"gpu1": None, "gpu2": None, "gpu9": None})  # nothing launched yet
    assert fresh.hosts == ("gpu1", "gpu2") and fresh.spares == ("gpu9",)
    # A spare that was stopped while in standby never counted itself among the hosts.
    stopped = _controller(Links())
    stopped.sync({"gpu1": {"state": "stopped", "hosts": ["gpu1", "gpu2"]},
                  "gpu2": {"state": "stopped", "hosts": ["gpu1", "gpu2"]},
                  "gpu9": {"state": "stopped", "hosts": ["gpu1", "gpu2"]}})
    assert stopped.hosts == ("gpu1", "gpu2") and stopped.spares == ("gpu9",)


def test_the_scale_command_takes_exactly_one_host(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    args = parser.parse_args(["scale", "job.toml", "--add", "gpu3"])
    assert (args.command, args.add, args.remove) == ("scale", "gpu3", None)
    for bad in (["scale", "job.toml"], ["scale", "job.toml", "--add", "a", "--remove", "b"]):
        with pytest.raises(SystemExit) as info:
            parser.parse_args(bad)
        assert info.value.code == 2
    assert "--add" in capsys.readouterr().err


def _job(tmp_path: Path, host: str, text: str = ELASTIC) -> ManagedJob:
    spec = parse_jobspec(text.replace("/runs/el", str(tmp_path / "run")), "job.toml")
    return ManagedJob(LaunchSpec(spec.for_host(host)), Journal(tmp_path / f"state-{host}"))


def test_a_faulty_host_is_excluded_and_claims_the_spare(tmp_path: Path) -> None:
    job = _job(tmp_path, "gpu2")
    fault = Diagnosis(GPU_FAULT, ["GPU XID error(s) during the attempt: 79"])
    info, decision = job.membership.exclusion(fault)
    assert info == {"host": "gpu2", "spare": "gpu9", "hosts": ["gpu1", "gpu9"],
                    "cause": GPU_FAULT}
    assert not decision.retry and "the spare gpu9 takes its place" in decision.reason
    claim = read_claim(job.spec, "gpu9")
    assert claim["replaced"] == "gpu2" and claim["hosts"] == ["gpu1", "gpu9"]
    # The spare is taken: another faulty host cannot have it, and the job (MIN 2) cannot
    # go on without that host, so it stays and is retried as before.
    other = _job(tmp_path, "gpu2")
    assert other.membership.exclusion(fault) is None
    assert job.membership.exclusion(Diagnosis(OOM, ["out of memory"])) is None  # not listed
    store = _job(tmp_path, "gpu1")
    assert store.membership.exclusion(fault) is None  # serves the rendezvous store
    roomy = _job(tmp_path / "roomy", "gpu2", ELASTIC.replace('"2:3"', '"1:3"'))
    (roomy.spec.shared_dir / "control" / "el.takeover").mkdir(parents=True)
    (roomy.spec.shared_dir / "control" / "el.takeover" / "gpu9.json").write_text("{}")
    info, decision = roomy.membership.exclusion(Diagnosis(KILLED, ["rank 1 killed"]))
    assert info["spare"] is None and info["hosts"] == ["gpu1"]
    assert "goes on with 1 node(s)" in decision.reason


def test_two_hosts_never_claim_the_same_spare(tmp_path: Path) -> None:
    text = ELASTIC.replace('spares = ["gpu9"]', 'spares = ["gpu8", "gpu9"]')
    spec = LaunchSpec(parse_jobspec(text.replace("/runs/el", str(tmp_path)), "j.toml")
                      .for_host("gpu2"))  # fmt: skip
    hosts = ["gpu1", "gpu2", "gpu3"]
    assert claim_spare(spec, "gpu2", "gpu_fault", hosts) == "gpu8"
    assert claim_spare(spec, "gpu3", "gpu_fault", hosts) == "gpu9"
    assert claim_spare(spec, "gpu1", "gpu_fault", hosts) is None
    assert read_claim(spec, "gpu9")["hosts"] == ["gpu1", "gpu2", "gpu9"]


def test_a_rank_killed_by_a_signal_is_named_from_its_exit_status() -> None:
    unknown = Diagnosis("unknown", ["torchrun exited with code None"])
    ended = [(0, 4242, 1, -signal.SIGKILL)]
    found = _own_failure(unknown, ended)
    assert found.cause == KILLED and found.evidence == ["rank 1 (pid 4242) killed by SIGKILL"]
    network = Diagnosis(NCCL, ["Connection reset by peer"])
    assert _own_failure(network, ended) is network
    assert _own_failure(unknown, [(0, 1, 0, 1)]) is unknown


GLOO = ("[rank{r}]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] "
        "Read error [127.0.0.1]:17643: Connection reset by peer.")


def test_a_failure_is_read_in_the_output_of_the_rank_that_failed_first() -> None:
    """Torchrun restarting workers in place gives no root-cause report: the agent names the
    first failing rank itself, so a peer's collective error on the same host is not taken
    for the cause, and a lost peer is told from a failure of this host's own."""
    no_xid = {"xid": []}
    peer = _diagnose([(0, 11, 1, 1)], [GLOO.format(r=1)], no_xid)
    assert peer.cause == NCCL
    broken = "[rank1]: RuntimeError: [gloo/transport/tcp/pair.cc:446] Write error: Broken pipe"
    assert _diagnose([(0, 11, 1, 1)], [broken], no_xid).cause == NCCL
    # Two ranks here: rank 0 was killed, rank 1 then failed on the collective.
    killed = _diagnose([(0, 10, 0, -signal.SIGKILL), (0, 11, 1, 1)], [GLOO.format(r=1)],
                       no_xid)  # fmt: skip
    assert killed.cause == KILLED and "rank 0 (pid 10) killed by SIGKILL" in killed.evidence
    # Rank 0 raised, rank 1 failed on the collective; torchrun names rank 0's pid first.
    lines = ["[rank0]: Traceback (most recent call last):", "[rank0]: ValueError: bad batch",
             GLOO.format(r=1),
             "E1130 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) "
             "local_rank: 0 (pid: 10) of binary: python"]
    own = _diagnose([(0, 11, 1, 1), (0, 10, 0, 1)], lines, no_xid)
    assert own.cause == USER_CODE and own.evidence == ["[rank0]: ValueError: bad batch"]
    assert _diagnose([(0, 11, 1, 1)], [GLOO.format(r=1)], {"xid": [79]}).cause == GPU_FAULT
