"""Consumers and builders shared by the transport tests."""

from __future__ import annotations

import json
import shlex
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from cockpit.transport.host_keys import KnownHosts
from cockpit.transport.inventory import HostSpec
from cockpit.transport.link import LinkOptions
from cockpit.transport.ssh_config import SshConfig
from tests.harness.sshd import SshdHost, agent_command

HERE = Path(__file__).resolve().parent


def stream_agent_command() -> str:
    """The `agent` command string that runs this checkout's agent on a pretend host."""
    return shlex.join(agent_command())


def script_command(name: str) -> str:
    return shlex.join([sys.executable, str(HERE / name)])


def options_for(hosts: list[SshdHost], tmp: Path, **changes) -> LinkOptions:
    """Trust only the harness's known_hosts file; ignore the user's SSH setup."""
    known = KnownHosts(
        extra_files=[hosts[0].known_hosts_path] if hosts else [],
        use_system=False,
        use_user=False,
        record_file=tmp / "cockpit_known_hosts",
        accept_new=changes.pop("accept_new", False),
    )
    settings = {"stale_after": 5.0, "backoff_base": 0.1, "backoff_cap": 1.0, "keepalive": 5.0}
    settings.update(changes)
    return LinkOptions(known_hosts=known, ssh_config=SshConfig(None), **settings)


def spec_for(host: SshdHost, **changes) -> HostSpec:
    fields = {
        "name": host.name,
        "address": host.address,
        "port": host.port,
        "user": host.user,
        "identity_file": str(host.key_path),
        "state_dir": str(host.state_dir),
        "agent": stream_agent_command(),
    }
    fields.update(changes)
    return HostSpec(**fields)


class Collector:
    """A consumer that behaves like the store: dedupes on seq, serves the high-water mark."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.chunks: dict[str, list[bytes]] = {}
        self.seqs: dict[str, list[int]] = {}
        self.headers: dict[str, list[dict]] = {}
        self.duplicates: dict[str, int] = {}
        self.malformed: dict[str, int] = {}
        self.records: dict[str, list[dict]] = {}
        self.states: list[tuple[str, str, str]] = []
        self.changed = threading.Condition(self.lock)

    def high_water(self, host: str) -> int:
        with self.lock:
            seqs = self.seqs.get(host)
            return seqs[-1] if seqs else 0

    def on_chunk(self, host: str, chunk: bytes) -> None:
        assert chunk.endswith(b"\n"), "chunks must end on a line boundary"
        with self.lock:
            self.chunks.setdefault(host, []).append(chunk)
            seqs = self.seqs.setdefault(host, [])
            for line in chunk.splitlines():
                try:
                    record = json.loads(line)
                    seq = record["seq"]
                    if not isinstance(record, dict) or not isinstance(seq, int):
                        raise ValueError
                except (ValueError, KeyError, TypeError):
                    self.malformed[host] = self.malformed.get(host, 0) + 1
                    continue
                if record.get("t") == "stream":
                    self.headers.setdefault(host, []).append(record)
                elif seqs and seq <= seqs[-1]:
                    self.duplicates[host] = self.duplicates.get(host, 0) + 1
                else:
                    seqs.append(seq)
                    self.records.setdefault(host, []).append(record)
            self.changed.notify_all()

    def on_state(self, host: str, state: str, detail: str) -> None:
        with self.lock:
            self.states.append((host, state, detail))
            self.changed.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
        """Wait until `predicate()` holds; it is looked at on every record or state
        change and every 0.1 s, since some predicates watch the link, not the collector."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(min(left, 0.1))
            return True

    def saw_state(self, host: str, state: str) -> bool:
        return any(h == host and s == state for h, s, _ in self.states)

    def last_state(self, host: str) -> tuple[str, str] | None:
        for h, s, d in reversed(self.states):
            if h == host:
                return s, d
        return None

    def detail_of(self, host: str, state: str) -> str:
        """The detail of the latest report of `state` for `host`."""
        with self.lock:
            for h, s, d in reversed(self.states):
                if h == host and s == state:
                    return d
        raise AssertionError(f"{host} never reported {state!r}: {self.state_names(host)}")

    def state_names(self, host: str) -> list[str]:
        return [s for h, s, _ in self.states if h == host]


class JournalFeeder:
    """Writes records into a host's journal from a thread, as the agent daemon would."""

    def __init__(self, state_dir: Path, interval: float = 0.01) -> None:
        from agent.journal.journal import Journal

        self.journal = Journal(state_dir)
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(self.interval):
            n += 1
            self.journal.append("gpu", {"gpu": n % 8, "util": float(n % 100)})

    def start(self) -> JournalFeeder:
        self._thread.start()
        return self

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.journal.head

    def close(self) -> None:
        if self._thread.is_alive():
            self.stop()
        self.journal.close()
