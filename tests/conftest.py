"""Fixtures shared by every test package: real sshd hosts, a temporary store path and
the recorded real run loaded into a store.

Subpackages add their own fixtures in their own conftest files.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.harness import leftovers, tiers, toasts
from tests.harness.cpu_account import CpuAccount
from tests.harness.recording import load_recording
from tests.harness.sshd import SshdHost, require_sshd_or_explain
from tests.harness.sshd import sshd_hosts as _sshd_hosts
from tests.harness.thresholds import configured  # noqa: F401  (a fixture: thresholds a test sets are put back)
from tests.harness.workers import worker_index


def _need_sshd() -> None:
    reason = require_sshd_or_explain()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"the SSH tests need a real sshd and CI must run them: {reason}")
    pytest.skip(f"no real sshd here: {reason}")


# Fixtures that start real processes (sshd, an agent daemon, torchrun, a trainer): a test
# using one is in the slow tier whatever its own markers say, so `make check` (the fast
# tier, `-m "not e2e and not slow and not starts"`) needs no marker kept by hand.
PROCESS_FIXTURES = frozenset({
    "sshd_hosts", "two_hosts", "agent_daemon", "procs", "run_charlm", "charlm_data",
    "charlm_shards",
})


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tier", choices=tiers.TIERS, default="all",
        help="pure: no process, no app, no training framework (make check); app: the "
        "Textual app by Pilot (make check-app); all: everything (make test)")
    parser.addoption(
        "--cpu-durations", type=int, default=0, metavar="N",
        help="list the N tests that used the most CPU, their processes' included")


TESTS_ROOT = Path(__file__).resolve().parent


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A test module none of whose tests can be in the chosen tier is not imported (its
    imports may cost more than the tier's tests; tests/harness/tiers.py)."""
    tier = config.getoption("--tier")
    if tier == "all" or collection_path.suffix != ".py" \
            or not collection_path.name.startswith("test_"):
        return None
    return True if tiers.module_is_outside(tier, collection_path, TESTS_ROOT) else None


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--cpu-durations") > 0:
        config.pluginmanager.register(CpuAccount(config.getoption("--cpu-durations")),
                                      "cpu-account")
    config.addinivalue_line(
        "markers", "starts: starts real processes (sshd, agent, torchrun, tmux); set "
        "automatically from the fixtures a test uses")
    config.addinivalue_line(
        "markers", "pilot: drives the Textual app (Pilot, snapshots); set automatically "
        "for tests under tests/ui/ and coroutine tests")


# In CI every test runs: `make test` installs what each needs (sshd, tmux, Slurm, torch,
# transformers, lightning), so a test that skips there hides a capability nobody tested
# (a broken install, a fixture that could not start its cluster). Outside CI a skip says
# what is missing and the rest of the suite goes on.
def _skip_fails_in_ci(report: pytest.CollectReport | pytest.TestReport) -> None:
    if not os.environ.get("CI") or not report.skipped or hasattr(report, "wasxfail"):
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else longrepr
    report.outcome = "failed"
    report.longrepr = f"skipped in CI, where every test must run: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    _skip_fails_in_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):  # type: ignore[no-untyped-def]
    outcome = yield
    _skip_fails_in_ci(outcome.get_result())

def _drives_the_app(item: pytest.Item) -> bool:
    """The second tier: a test that runs the Textual app (Pilot, snapshots) or the
    screens' pieces, every test under tests/ui/ and every coroutine test (Pilot's)."""
    return ("tests/ui/" in item.nodeid
            or inspect.iscoroutinefunction(getattr(item, "obj", None)))


def _needs_framework(item: pytest.Item, seen: dict[Path, bool]) -> bool:
    path = Path(item.path)
    if path not in seen:
        try:
            seen[path] = tiers.module_facts(path.read_text(encoding="utf-8")).frameworks
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            seen[path] = True
    return seen[path]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark tests that start processes, keep those of the chosen tier, then order: the
    slow and end-to-end tests first. On several workers the long ones then start early,
    and the suite ends on short tests the workers share, not on one long test that keeps
    one worker busy while the others wait."""
    for item in items:
        if (PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ()))
                or tiers.starts_a_process(getattr(item, "obj", None))):
            item.add_marker(pytest.mark.starts)
        if _drives_the_app(item):
            item.add_marker(pytest.mark.pilot)
    tier = config.getoption("--tier")
    if tier != "all":
        frameworks: dict[Path, bool] = {}
        keep, drop = [], []
        for item in items:
            markers = {m.name for m in item.iter_markers()}
            inside = tiers.item_is_inside(tier, markers, _drives_the_app(item),
                                          _needs_framework(item, frameworks))
            (keep if inside else drop).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
        items[:] = keep
    items.sort(key=lambda item: not (item.get_closest_marker("slow")
                                     or item.get_closest_marker("e2e")
                                     or item.get_closest_marker("starts")))


@pytest.fixture(autouse=True)
def _toasts_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once Textual is loaded in this worker (a test module imported it), every app
    keeps the notifications it raised for the test to read after their toasts timed
    out (`tests/harness/toasts.py`); the tiers that never load Textual are left alone."""
    textual_app = sys.modules.get("textual.app")
    if textual_app is not None:
        toasts.keep_notifications(monkeypatch, textual_app.App)


@pytest.fixture(autouse=True)
def _nothing_left_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test that starts processes, end any it left running (found by its
    tmp_path; `tests/harness/leftovers.py`) and warn, naming them."""
    starts = any(request.node.get_closest_marker(m) for m in ("starts", "e2e", "slow"))
    folder = (str(request.getfixturevalue("tmp_path"))
              if starts and "tmp_path" in request.fixturenames else None)
    yield
    if folder is None:
        return
    left = leftovers.settled(folder)
    if left:
        leftovers.end(list(left))
        warnings.warn(f"{request.node.nodeid} left {len(left)} processes running, ended "
                      f"now: " + "; ".join(f"{pid}: {cmd[:120]}" for pid, cmd in left.items()),
                      stacklevel=1)


# Loopback addresses per pytest-xdist worker: the second worker's hosts are 127.0.4.2 …,
# so two workers never bind the same address and port (an sshd restarted mid-test
# takes its port back; another worker's sshd must not have taken it meanwhile).
ADDRESSES_PER_WORKER = 4 * 254


@pytest.fixture
def sshd_hosts(tmp_path: Path) -> Iterator[Callable[..., list[SshdHost]]]:
    """Factory: `sshd_hosts(2)` starts two pretend hosts (127.0.0.2, .3 in the first
    worker), torn down after."""
    _need_sshd()
    with contextlib.ExitStack() as stack:
        count = ADDRESSES_PER_WORKER * worker_index()

        def start(n: int, hosts_per_process: int = 1) -> list[SshdHost]:
            nonlocal count
            base = tmp_path / f"sshd-{count}"
            hosts = stack.enter_context(
                _sshd_hosts(n, base, hosts_per_process, first_address=2 + count)
            )
            count += n
            return hosts

        yield start


@pytest.fixture
def two_hosts(sshd_hosts: Callable[..., list[SshdHost]]) -> list[SshdHost]:
    return sshd_hosts(2)


@pytest.fixture
def tmp_store_path(tmp_path: Path) -> Path:
    """A path for a fresh DuckDB file (not created yet)."""
    return tmp_path / "cockpit.duckdb"


@pytest.fixture(scope="session")
def recorded_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recording of a real run (tests/data/charlm-run.ndjson.gz) ingested once per
    session, because ingesting it per test would dominate the UI tests' runtime.

    Shared by every test that asks for it: open it read-only (`ReplaySource`, `cockpit
    report`), or copy the file first when a test writes to it.
    """
    return load_recording(tmp_path_factory.mktemp("recording") / "charlm-run.duckdb")
