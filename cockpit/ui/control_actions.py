"""The app's job-control keys: p, r, R, f, c, e, l, s, S.

Each goes through `source.controller`, in a worker (controllers talk to hosts). With no
controller the operator is told so plainly; nothing pretends to have happened. "Sent" is
not "done": the agents' answers are followed, and a refusal or silence is told too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from textual import work
from textual.notifications import SeverityLevel
from textual.worker import get_current_worker

from agent.wire import ops
from cockpit.analysis.gpu_state import host_problem
from cockpit.analysis.markers import knob_in_force
from cockpit.analysis.op_policy import CHECKPOINT, EVAL
from cockpit.control.controller import SPEC_OPERATIONS, ControlError
from cockpit.read.source import Controller, Source
from cockpit.snapshot import Snapshot
from cockpit.ui import job_control as jc
from cockpit.ui.messages import ControlAcked, ControlDone, ControlPlanned
from cockpit.ui.screens.confirm import ConfirmScreen
from cockpit.ui.screens.prompt import PromptScreen

ACK_WAIT_S = 30.0  # an agent answers within a second or two; its link may be reconnecting
ACK_POLL_S = 0.5
# After the wait, a silent host's answer is still followed this long (a link reconnecting
# after a network cut, an agent restarted: its inbox answers the op when it reads it), at
# this pace, so that the operator hears it and a scale or relaunch is adopted as it lands.
LATE_ACK_WAIT_S = 900.0
LATE_ACK_POLL_S = 2.0

if TYPE_CHECKING:  # the mixin's view of the App it is mixed into
    from textual.app import App

    _AppBase = App[Any]
else:
    _AppBase = object


@runtime_checkable
class FollowsAcks(Protocol):
    """A source that can read the agents' answers to the ops it sent (a live one)."""

    def acks(self, op_ids: list[str]) -> dict[str, tuple[bool, str]]: ...


@runtime_checkable
class RefusesOperations(Protocol):
    """A controller that does not offer every key (a Slurm job's: no fork, no live LR
    change); it says why, and the screen says so before any prompt or dialog opens."""

    def refuses(self, action: str) -> str | None: ...


@runtime_checkable
class Abandons(Protocol):
    """A controller whose operations may wait minutes (a Slurm job's pause waits for its
    checkpoint): told when the screen closes, so that the wait ends and the cockpit
    exits at once."""

    def abandon(self) -> None: ...


@runtime_checkable
class SettlesChanges(Protocol):
    """A controller that adopts a scale or a relaunch once the agents accepted it
    (`Controller.settle`): its hosts are the confirmed ones, not those merely sent to."""

    def settle(self, answers: dict[str, tuple[bool, str] | None]) -> list[str]: ...


class ControlActions(_AppBase):
    """Mixed into the App, whose `source` holds the controller and whose `snapshot` says
    which job is on screen."""

    source: Source
    snapshot: Snapshot | None
    # The operation being carried out (its title), from its start to its worker's end:
    # one at a time, so that a key pressed meanwhile never cancels it and loses its
    # outcome, and a controller never runs two operations at once.
    operation_under_way: str | None = None

    def _controller(self) -> Controller | None:
        """The controller of the job on screen (the one `j` chose), so a key never acts
        on a job other than the one the operator is looking at."""
        base = self.source.controller
        if base is None:
            self.notify(jc.NO_CONTROLLER, title="Read-only", severity="warning")
            return None
        snapshot = self.snapshot
        shown = snapshot.job if snapshot is not None else None
        controller = base.controller_for(shown)
        if controller is None:
            self.notify(jc.not_controlled(shown, base.job), title="Not this job",
                        severity="warning")
        return controller

    def _not_offered(self, controller: Controller, name: str) -> bool:
        """True (and the operator told why) when `controller` does not offer `name`."""
        why = controller.refuses(name) if isinstance(controller, RefusesOperations) else None
        if why is not None:
            self.notify(why, title=jc.OPERATIONS[name].title, severity="warning")
        return why is not None

    def request_operation(self, name: str, kwargs: dict[str, Any] | None = None,
                          controller: Controller | None = None) -> None:
        controller = controller or self._controller()
        if controller is None or self._not_offered(controller, name):
            return
        if self.operation_under_way is not None:
            self.notify(f"{self.operation_under_way} is still under way: its outcome comes "
                        "first", title=jc.OPERATIONS[name].title, severity="warning")
            return
        snapshot = self.snapshot
        if snapshot is not None and snapshot.job == controller.job:
            why = jc.refusal(name, snapshot.job, snapshot.progress.state,
                             snapshot.progress.eta_note)
            if why is not None:
                self.notify(why, title=jc.OPERATIONS[name].title, severity="warning")
                return
        op = jc.OPERATIONS[name]
        shown_here = snapshot is not None and snapshot.job == controller.job
        warning = jc.state_warning(name, snapshot.job, snapshot.progress.state) \
            if shown_here and snapshot is not None else ""
        if op.destructive or warning:
            links = {h.host: h.state for h in snapshot.health.hosts} if snapshot else {}
            self._plan_operation(controller, name, kwargs or {}, warning + jc.link_warning(
                controller.hosts, links, name))
        else:
            self._start_operation(controller, name, kwargs or {})

    def _start_operation(self, controller: Controller, name: str,
                         kwargs: dict[str, Any]) -> None:
        self.operation_under_way = jc.OPERATIONS[name].title
        self._run_operation(controller, name, kwargs)

    def operation_ended(self) -> None:
        """The operation's worker ended (done, failed or cancelled): the next may start."""
        self.operation_under_way = None

    def abandon_operations(self) -> None:
        """The screen closes: an operation still waiting (on Slurm) stops waiting."""
        controller = getattr(self.source, "controller", None)
        if isinstance(controller, Abandons):
            controller.abandon()

    @work(thread=True, exclusive=True, exit_on_error=False, group="control plan")
    def _plan_operation(self, controller: Controller, name: str, kwargs: dict[str, Any],
                        warning: str = "") -> None:  # fmt: skip
        op = jc.OPERATIONS[name]
        if name in SPEC_OPERATIONS:  # say what will really start
            controller.refresh()
        text = jc.plan_text(controller, op, kwargs) + warning
        self.post_message(ControlPlanned(name, kwargs, text, controller))

    # Not exclusive: a worker started in its group would cancel this one, whose failure
    # then goes unsaid (a cancelled thread worker runs on, its error dropped).
    @work(thread=True, exit_on_error=False, group="control")
    def _run_operation(self, controller: Controller, name: str, kwargs: dict[str, Any]
                       ) -> None:  # fmt: skip
        op = jc.OPERATIONS[name]
        severity: SeverityLevel = "information"
        try:
            result = op.call(controller, kwargs)
        except ControlError as exc:
            if not exc.sent:
                raise
            # Sent to some hosts: their answers are followed like any others', and the
            # operator learns what the missed hosts do meanwhile, not "control failed".
            result, severity = jc.partly_sent_text(name, exc.sent, exc.unsent), "warning"
        ops = dict(controller.last_ops)
        self.post_message(ControlDone(name, result, controller.job, ops, severity))

    @work(thread=True, exit_on_error=False, group="acks")
    def _follow_acks(self, action: str, job: str | None, ops: dict[str, str],
                     controller: Controller | None = None) -> None:
        """Wait for the agents' answers to an op the screen said was sent: a refusal
        ("job 'duo' is paused") or silence must reach the operator, not only the events
        list. Reads through the source, like every other worker. The `controller` that
        sent it adopts a scale or a relaunch only as its agents accepted it (`settle`),
        so that later prompts and confirmations name the hosts the job really has.

        A host silent after `ACK_WAIT_S` is told as silent, and its answer is followed
        `LATE_ACK_WAIT_S` more: told when it comes (`ControlAcked.late`), and settled
        then, so a scale an agent accepted late is the job's, not lost."""
        source = self.source
        if not isinstance(source, FollowsAcks):
            return
        worker = get_current_worker()
        started = time.monotonic()
        found = self._acks_until(source, ops, started + ACK_WAIT_S, ACK_POLL_S)
        self._settle(controller, ops, found)
        answers = {host: found.get(op_id) for host, op_id in ops.items()}
        self.post_message(ControlAcked(action, job, answers))
        while len(found) < len(ops) and not worker.is_cancelled:
            more = self._acks_until(source, ops, time.monotonic() + LATE_ACK_POLL_S,
                                    LATE_ACK_POLL_S)
            new = {op_id: answer for op_id, answer in more.items() if op_id not in found}
            if new:
                found.update(new)
                self._settle(controller, ops, found)
                self.post_message(ControlAcked(
                    action, job, {host: new[op_id] for host, op_id in ops.items()
                                  if op_id in new}, late=time.monotonic() - started))
            elif time.monotonic() - started > ACK_WAIT_S + LATE_ACK_WAIT_S:
                break

    @staticmethod
    def _acks_until(source: FollowsAcks, ops: dict[str, str], deadline: float,
                    poll: float) -> dict[str, tuple[bool, str]]:
        """The answers stored by `deadline` (or once every op has one), read every
        `poll` s; the worker's cancellation (the app closing) ends the wait early."""
        worker = get_current_worker()
        while True:
            found = source.acks(list(ops.values()))
            if len(found) == len(ops) or time.monotonic() > deadline or worker.is_cancelled:
                return found
            end = time.monotonic() + poll
            while time.monotonic() < end and not worker.is_cancelled:
                time.sleep(min(0.1, poll))

    @staticmethod
    def _settle(controller: Controller | None, ops: dict[str, str],
                found: dict[str, tuple[bool, str]]) -> None:
        if isinstance(controller, SettlesChanges):  # unanswered yet: None, kept pending
            controller.settle({op_id: found.get(op_id) for op_id in ops.values()})

    def on_control_acked(self, message: ControlAcked) -> None:
        op = jc.OPERATIONS[message.action]
        if message.late is not None:
            text, severity = jc.late_ack_text(op, message.answers, message.late)
        else:
            text, severity = jc.ack_text(op, message.answers, ACK_WAIT_S, LATE_ACK_WAIT_S)
        if text:
            title = f"Job control · {message.job}" if message.job else "Job control"
            self.notify(text, title=title, severity=severity, timeout=8)

    def on_control_planned(self, message: ControlPlanned) -> None:
        op = jc.OPERATIONS[message.action]

        def answered(yes: bool | None) -> None:
            if yes:
                self._start_operation(message.controller, message.action, message.kwargs)
            else:
                self.notify(f"{op.title}: cancelled", timeout=3)

        self.push_screen(ConfirmScreen(op.title + "?", message.description), answered)

    def on_control_done(self, message: ControlDone) -> None:
        op = jc.OPERATIONS[message.action]
        title = f"Job control · {message.job}" if message.job else "Job control"
        self.notify(jc.result_text(op, message.result), title=title, severity=message.severity,
                    timeout=8 if message.severity == "warning" else None)
        if message.ops:
            base = self.source.controller  # the one that sent it: the job's, or a fork's
            self._follow_acks(message.action, message.job, message.ops,
                              base.controller_for(message.job) if base is not None else None)

    def _prompt(self, title: str, help_text: str, parse: Callable[[str], object],
                then: Callable[[Any, Controller], None], value: str = "",
                controller: Controller | None = None) -> None:
        """Ask, then `then(answer, controller)`: the controller is chosen before the
        prompt opens, so a refresh that changes the shown job meanwhile cannot redirect
        the answer to another job."""
        controller = controller or self._controller()
        if controller is None:
            return

        def done(result: object) -> None:
            if result is not None:
                then(result, controller)

        self.push_screen(PromptScreen(title, help_text, parse, value), done)

    def action_pause_job(self) -> None:
        self.request_operation(ops.PAUSE)

    def action_resume_job(self) -> None:
        self.request_operation(ops.RESUME)

    def action_stop_job(self) -> None:
        self.request_operation(ops.STOP)

    def action_checkpoint_now(self) -> None:
        self.request_operation(CHECKPOINT)

    def action_eval_now(self) -> None:
        self.request_operation(EVAL)

    def action_adjust_lr(self) -> None:
        controller = self._controller()
        if controller is None or self._not_offered(controller, ops.ADJUST):
            return
        low, high = jc.LR_SCALE_RANGE
        snapshot = self.snapshot
        now = knob_in_force(snapshot.effect.markers, "lr_scale") if snapshot else None
        try:  # as the prompt writes scales: 2, not 2.0 beside "1, as configured"
            now = f"{float(now):g}" if now is not None else None
        except ValueError:
            pass
        self._prompt("Change LR scale", "LR scale relative to the configured schedule, "
                     f"replacing the one in force (now {now or '1, as configured'}; "
                     f"{low:g}–{high:g}):",
                     jc.parse_lr_scale,
                     lambda scale, c: self.request_operation(ops.ADJUST, {"lr_scale": scale}, c),
                     controller=controller)

    def action_fork_job(self) -> None:
        controller = self._controller()
        if controller is None or self._not_offered(controller, ops.FORK):
            return
        self._prompt("Fork the job", "Config overrides for the fork, key=value, comma "
                     "separated (empty: same config):", jc.parse_overrides,
                     lambda o, c: self.request_operation(ops.FORK, {"overrides": o}, c),
                     controller=controller)

    def action_relaunch_job(self) -> None:
        controller = self._controller()
        if controller is None or self._not_offered(controller, ops.RELAUNCH):
            return
        snapshot = self.snapshot
        hosts = [h for h in snapshot.health.hosts] if snapshot else []
        failing = " ".join(h.host for h in hosts if host_problem(h) == "error")
        members = controller.hosts
        self._prompt("Relaunch the job", "Hosts to exclude (space separated; prefilled "
                     "with failing hosts, empty: none):",
                     lambda text: jc.parse_exclusions(text, [h.host for h in hosts], members),
                     lambda ex, c: self.request_operation(ops.RELAUNCH, {"exclude": ex}, c),
                     failing, controller=controller)

    def action_scale_job(self) -> None:
        controller = self._controller()
        if controller is None or self._not_offered(controller, ops.SCALE):
            return
        if not controller.spec.elastic:  # said before anything is typed
            self.notify(controller.describe(ops.SCALE), title="Scale the job",
                        severity="warning")
            return
        snapshot = self.snapshot
        known = [h.host for h in snapshot.health.hosts] if snapshot else []
        members = list(controller.hosts)
        spares = list(controller.spares)
        offer = " (spares: " + ", ".join(spares) + ")" if spares else ""

        def parse(text: str) -> dict[str, str]:
            kwargs = jc.parse_scale(text, members, known)
            jc.check_scale(controller, kwargs)
            return kwargs

        self._prompt("Scale the job", f"Hosts now: {', '.join(members) or 'none'}{offer}. "
                     "+HOST adds a host, -HOST removes one:", parse,
                     lambda kw, c: self.request_operation(ops.SCALE, kw, c),
                     controller=controller)
