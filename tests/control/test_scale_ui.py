"""The scale key: the operator names a host, the real controller says what will happen
on which hosts, and only a confirmed answer sends the ops."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from textual.widgets import Input

from cockpit.control.controller import Controller
from cockpit.control.jobspec import parse_jobspec
from cockpit.sessions.static_source import StaticSource
from cockpit.ui.app_factory import make_app
from cockpit.ui.demo_static import demo_details, demo_snapshot
from cockpit.ui.keymap import SPECS
from cockpit.ui.screens.confirm import ConfirmScreen
from cockpit.ui.screens.main import MainScreen
from cockpit.ui.screens.prompt import PromptScreen
from tests.ui.helpers import notifications, settle, text

# The demo snapshot's hosts are gpu-node-a … d.
SPEC_TEXT = """
name = "demo-7b"  # the demo snapshot's job
hosts = ["gpu-node-a", "gpu-node-b"]
nnodes = "1:3"
spares = ["gpu-node-d"]
nproc_per_node = 8
script = "train.py"
run_dir = "/runs/demo"
[resume]
newest_args = ["--resume", "auto"]
[rendezvous]
endpoint = "gpu-node-a:29400"
"""
SPEC = parse_jobspec(SPEC_TEXT)


def _source() -> tuple[StaticSource, list[tuple[str, dict]]]:
    sent: list[tuple[str, dict]] = []
    ids = (f"op{i}" for i in itertools.count())
    controller = Controller(SPEC, lambda host, op: sent.append((host, op)),
                            new_id=lambda: next(ids))  # fmt: skip
    return StaticSource(demo_snapshot(), demo_details(), controller=controller,
                        label="LIVE"), sent  # fmt: skip


async def _answer(pilot, value: str) -> None:
    pilot.app.screen.query_one(Input).value = value
    await pilot.press("enter")
    await settle(pilot)


async def test_scale_key_adds_a_host_after_confirming_where() -> None:
    source, sent = _source()
    app = make_app(source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press(SPECS["scale_job"].key)
        await settle(pilot)
        assert isinstance(app.screen, PromptScreen)
        assert "gpu-node-a, gpu-node-b" in text(app, "#dialog-body")
        assert "spares: gpu-node-d" in text(app, "#dialog-body")
        await _answer(pilot, "+gpu-node-zz")  # not a connected host: said, not sent
        assert "unknown host gpu-node-zz" in text(app, "#prompt-error")
        await _answer(pilot, "gpu-node-c")
        assert "+HOST to add" in text(app, "#prompt-error")
        await _answer(pilot, "+gpu-node-c")
        assert isinstance(app.screen, ConfirmScreen)
        body = text(app, "#dialog-body")
        assert "torchrun starts on gpu-node-c" in body
        assert "gpu-node-a, gpu-node-b keep running" in body
        assert sent == []  # nothing happens before the answer
        await pilot.press("y")
        await settle(pilot)
        assert [(h, op["op"]) for h, op in sent] == [
            ("gpu-node-a", "scale"), ("gpu-node-b", "scale"), ("gpu-node-c", "scale")]
        assert sent[-1][1]["spec"]["host"] == "gpu-node-c"
        assert any("Scale the job: scale sent to" in n for n in notifications(app))


async def test_scale_key_removes_a_host_or_cancels() -> None:
    source, sent = _source()
    app = make_app(source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press(SPECS["scale_job"].key)
        await settle(pilot)
        await _answer(pilot, "-gpu-node-c")
        assert "gpu-node-c is not one of the job's hosts" in text(app, "#prompt-error")
        await _answer(pilot, "-gpu-node-a")  # the controller's own refusal, before confirming
        assert "serves the rendezvous store" in text(app, "#prompt-error")
        await _answer(pilot, "-gpu-node-b")
        body = text(app, "#dialog-body")
        assert "Remove gpu-node-b" in body and "gpu-node-a keep running" in body
        await pilot.press("n")
        await settle(pilot)
        assert isinstance(app.screen, MainScreen) and sent == []
        assert "Scale the job: cancelled" in notifications(app)


async def test_scale_key_on_a_job_that_is_not_elastic_says_so_before_any_prompt() -> None:
    fixed = parse_jobspec(SPEC_TEXT.replace('nnodes = "1:3"\n', "").replace(
        'spares = ["gpu-node-d"]\n', ""))
    sent: list = []
    source = StaticSource(demo_snapshot(), demo_details(),
                          controller=Controller(fixed, lambda h, op: sent.append(op)),
                          label="LIVE")
    app = make_app(source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press(SPECS["scale_job"].key)
        await settle(pilot)
        assert isinstance(app.screen, MainScreen) and sent == []
        assert "is not elastic" in notifications(app)[-1]


class AnsweringSource(StaticSource):
    """A live source whose agents answer each op id as `answer(op_id)` says (None: not
    yet, which the screen waits for)."""

    def __init__(self, controller: Controller,
                 answer: Callable[[str], tuple[bool, str] | None]) -> None:
        super().__init__(demo_snapshot(), demo_details(), controller=controller,
                         label="LIVE")  # fmt: skip
        self.answer = answer

    def acks(self, op_ids: list[str]) -> dict[str, tuple[bool, str]]:
        found = {i: self.answer(i) for i in op_ids}
        return {i: a for i, a in found.items() if a is not None}


async def test_a_host_whose_join_was_refused_is_not_offered_as_one_of_the_jobs() -> None:
    """gpu-node-c's agent refused the join: the next scale prompt (and the confirmation
    after it) name the hosts the job has, not the one the refused scale would have added."""
    sent: list[tuple[str, dict]] = []
    ids = (f"op{i}" for i in itertools.count())
    controller = Controller(SPEC, lambda host, op: sent.append((host, op)),
                            new_id=lambda: next(ids))  # fmt: skip
    source = AnsweringSource(controller, lambda op_id: (
        (False, "job 'demo-7b' is already running here") if op_id.endswith("gpu-node-c")
        else (True, "ok")))
    app = make_app(source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press(SPECS["scale_job"].key)
        await settle(pilot)
        await _answer(pilot, "+gpu-node-c")
        await pilot.press("y")
        await settle(pilot)
        assert any("refused by gpu-node-c" in n for n in notifications(app))
        await pilot.press(SPECS["scale_job"].key)
        await settle(pilot)
        assert isinstance(app.screen, PromptScreen)
        body = text(app, "#dialog-body")
        assert "Hosts now: gpu-node-a, gpu-node-b (spares" in body, body
        await _answer(pilot, "-gpu-node-c")  # not a host of the job: said, not sent
        assert "gpu-node-c is not one of the job's hosts" in text(app, "#prompt-error")
    assert controller.hosts == ("gpu-node-a", "gpu-node-b")


async def test_an_accepted_join_is_offered_as_one_of_the_jobs_hosts() -> None:
    sent: list[tuple[str, dict]] = []
    controller = Controller(SPEC, lambda host, op: sent.append((host, op)))
    app = make_app(AnsweringSource(controller, lambda op_id: (True, "ok")))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press(SPECS["scale_job"].key)
        await settle(pilot)
        await _answer(pilot, "+gpu-node-d")  # the spare
        await pilot.press("y")
        await settle(pilot)
        await pilot.press(SPECS["scale_job"].key)
        await settle(pilot)
        body = text(app, "#dialog-body")
        assert "Hosts now: gpu-node-a, gpu-node-b, gpu-node-d." in body, body
        assert "spares" not in body


async def test_the_fork_toast_says_what_was_sent_not_that_the_fork_exists() -> None:
    """An agent acks a fork as accepted; the fork exists once each host's fork event
    says its checkpoint was copied and its part started (which can still fail)."""
    source, sent = _source()
    app = make_app(source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press(SPECS["fork_job"].key)
        await settle(pilot)
        await _answer(pilot, "lr=0.001")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
        assert {op["op"] for _h, op in sent} == {"fork"}
        said = next(n for n in notifications(app) if n.startswith("Fork the job:"))
        name = sent[0][1]["name"]
        assert said.startswith(f"Fork the job: fork {name} sent to gpu-node-a, gpu-node-b "
                               "(op op"), said
        assert "not started yet" in said and f"job {name}" not in said
