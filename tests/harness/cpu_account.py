"""CPU time per test, its own and its processes': the figure that decides how long the
suite takes on a small machine.

The suite is CPU-bound on two cores: a test that waits costs the others nothing, a test
that starts torchrun three times costs them all. Wall-clock durations (`--durations`)
mix the two, so with `--cpu-durations N` the summary also lists the N tests that used the
most CPU: the test process's own time plus that of every process it started and reaped
(an agent, its torchrun, the ranks: each level reaps the one below).
"""

from __future__ import annotations

import resource
from collections.abc import Iterator

import pytest

KEY = "cpu_s"


def _cpu_now() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


class CpuAccount:
    """Registered as a plugin by tests/conftest.py. Under pytest-xdist each worker
    measures its tests and the figure travels to the controller in the report."""

    def __init__(self, show: int) -> None:
        self.show = show
        self.started: dict[str, float] = {}
        self.spent: dict[str, float] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Iterator[None]:
        self.started[item.nodeid] = _cpu_now()
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Iterator[None]:
        yield
        start = self.started.pop(item.nodeid, None)
        if start is not None:
            item.user_properties.append((KEY, round(_cpu_now() - start, 2)))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        for key, value in report.user_properties:
            if key == KEY and isinstance(value, (int, float)):
                self.spent[report.nodeid] = float(value)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.spent:
            return
        ranked = sorted(self.spent.items(), key=lambda kv: kv[1], reverse=True)
        total = sum(self.spent.values())
        terminalreporter.write_sep(
            "=", f"most CPU: {self.show} of {len(ranked)} tests "
            f"(all tests: {total:.0f} CPU-s, the test's and its processes')")
        for nodeid, seconds in ranked[:self.show]:
            terminalreporter.write_line(f"{seconds:8.1f}s cpu  {nodeid}")
