"""`StepLrScaler`: the operator's scale is in the update, never in the scheduler's LR."""

from __future__ import annotations

import pytest
import torch

from agent.hook.lr_scale import StepLrScaler


def _sgd_step(opt: torch.optim.Optimizer, weight: torch.nn.Parameter) -> float:
    """One SGD step with gradient 1; returns how far the weight moved (the LR used)."""
    before = weight.item()
    weight.grad = torch.ones_like(weight)
    opt.step()
    return before - weight.item()


def test_a_chainable_scheduler_does_not_compound_the_scale() -> None:
    weight = torch.nn.Parameter(torch.zeros((), dtype=torch.float64))
    opt = torch.optim.SGD([weight], lr=0.5)
    schedule = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    seen = []
    scaler = StepLrScaler(lambda _opt, lr: seen.append(lr))
    assert scaler.attach([opt]) is None
    moved = [_sgd_step(opt, weight)]  # scale 1: the schedule's own LR
    schedule.step()
    scaler.scale = 0.1
    for _ in range(3):
        moved.append(_sgd_step(opt, weight))
        schedule.step()
    expected = [0.5, 0.25 * 0.1, 0.125 * 0.1, 0.0625 * 0.1]
    assert moved == pytest.approx(expected)
    assert seen == pytest.approx(expected)  # what a record carries: the LR the step used
    assert opt.param_groups[0]["lr"] == pytest.approx(0.5 ** 5)  # between steps: unscaled
    assert opt.state_dict()["param_groups"][0]["lr"] == pytest.approx(0.5 ** 5)
    assert scaler.steps_scaled == 3

    scaler.detach()  # hooks gone: the next step is the schedule's alone
    assert _sgd_step(opt, weight) == pytest.approx(0.5 ** 5)


def test_every_param_group_is_scaled() -> None:
    a = torch.nn.Parameter(torch.zeros((), dtype=torch.float64))
    b = torch.nn.Parameter(torch.zeros((), dtype=torch.float64))
    opt = torch.optim.SGD([{"params": [a], "lr": 1.0}, {"params": [b], "lr": 0.2}])
    scaler = StepLrScaler()
    scaler.attach([opt])
    scaler.scale = 0.5
    a.grad, b.grad = torch.ones_like(a), torch.ones_like(b)
    opt.step()
    assert (a.item(), b.item()) == pytest.approx((-0.5, -0.1))
    assert [g["lr"] for g in opt.param_groups] == [1.0, 0.2]


def test_an_optimizer_without_step_hooks_is_refused_with_the_reason() -> None:
    class Bare:
        param_groups = [{"lr": 1.0}]

    scaler = StepLrScaler()
    why = scaler.attach([Bare()])
    assert why is not None and "Bare has no step hooks" in why
    assert not scaler.attached
