"""CPU time per test, its own and its processes': the figure that decides how long the
suite takes on a small machine.

The suite is CPU-bound on two cores: a test that waits costs the others nothing, a test
that starts torchrun three times costs them all. Wall-clock durations (`--durations`)
mix the two, so with `--cpu-durations N` the summary also lists the N tests that used the
most CPU: the test process's own time plus that of every process it started and reaped
(an agent, its torchrun, the ranks: each level reaps the one below), and of that the test
process's own (the cockpit's sessions, stores and apps that a test runs in-process).
"""

from __future__ import annotations

import resource
from collections.abc import Iterator

import pytest

KEY = "cpu_s"  # (all, own)


def _cpu_now() -> tuple[float, float]:
    """CPU seconds so far: this process's and its reaped children's, and its own."""
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                         resource.RUSAGE_CHILDREN))
    mine = own.ru_utime + own.ru_stime
    return mine + children.ru_utime + children.ru_stime, mine


class CpuAccount:
    """Registered as a plugin by tests/conftest.py. Under pytest-xdist each worker
    measures its tests and the figure travels to the controller in the report."""

    def __init__(self, show: int) -> None:
        self.show = show
        self.started: dict[str, tuple[float, float]] = {}
        self.spent: dict[str, tuple[float, float]] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Iterator[None]:
        self.started[item.nodeid] = _cpu_now()
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Iterator[None]:
        yield
        start = self.started.pop(item.nodeid, None)
        if start is not None:
            now = _cpu_now()
            item.user_properties.append((KEY, (round(now[0] - start[0], 2),
                                               round(now[1] - start[1], 2))))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        for key, value in report.user_properties:
            if key == KEY and isinstance(value, (list, tuple)) and len(value) == 2:
                self.spent[report.nodeid] = (float(value[0]), float(value[1]))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.spent:
            return
        ranked = sorted(self.spent.items(), key=lambda kv: kv[1][0], reverse=True)
        total = sum(spent for spent, _ in self.spent.values())
        own = sum(mine for _, mine in self.spent.values())
        terminalreporter.write_sep(
            "=", f"most CPU: {self.show} of {len(ranked)} tests (all tests: {total:.0f} "
            f"CPU-s, the test's and its processes'; {own:.0f} in the tests' own processes)")
        for nodeid, (seconds, mine) in ranked[:self.show]:
            terminalreporter.write_line(f"{seconds:8.1f}s cpu ({mine:5.1f}s own)  {nodeid}")
        ranked.sort(key=lambda kv: kv[1][1], reverse=True)
        terminalreporter.write_sep("=", f"most CPU in the test's own process: {self.show}")
        for nodeid, (seconds, mine) in ranked[:self.show]:
            terminalreporter.write_line(f"{mine:8.1f}s own (of {seconds:5.1f}s)  {nodeid}")
