"""What every link does regardless of how it reaches the agent.

A link owns one thread that connects, streams, and reconnects after any failure, asking
the consumer's high-water mark at each (re)connect so that a consumer deduplicating on
(host, seq) receives every record exactly once. Subclasses only say how one attempt
reaches the agent (`_attempt`).
"""

from __future__ import annotations

import abc
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from cockpit.printable import printable
from cockpit.transport.connect_slots import ConnectSlots
from cockpit.transport.host_keys import KnownHosts
from cockpit.transport.identities import IdentityCache
from cockpit.transport.inventory import HostSpec
from cockpit.transport.pump import PumpResult, StderrTail, StreamPump, StreamSource
from cockpit.transport.ssh_config import SshConfig
from cockpit.transport.states import (
    AGENT_FAILED,
    BACKOFF_BASE,
    BACKOFF_CAP,
    CONNECTING,
    FAILED_STATES,
    STALE,
    STOPPED,
    STREAMING,
    UNREACHABLE,
    Backoff,
    ChunkCallback,
    HighWater,
    StateCallback,
    shown,
)

log = logging.getLogger(__name__)


class LinkNotStreaming(RuntimeError):
    """A control op was sent to a host whose stream is not up."""


class ConsumerError(RuntimeError):
    """The chunk consumer raised; the link reconnects from the high-water mark."""


@dataclass
class LinkOptions:
    """Tuning and trust settings shared by the links of one cockpit."""

    known_hosts: KnownHosts = field(default_factory=KnownHosts)
    ssh_config: SshConfig | None = None
    connect_timeout: float = 10.0
    keepalive: float = 15.0
    # Agents sample at 1 Hz: this many seconds without a record means the stream is dead
    # even if TCP has not noticed yet.
    stale_after: float = 20.0
    backoff_base: float = BACKOFF_BASE
    backoff_cap: float = BACKOFF_CAP
    # Handshakes in flight at once across the fleet: a cockpit that opens 256 links at
    # start (or after a network blip) would otherwise do 256 key exchanges in one burst,
    # time itself out on a busy box and retry them all again. Enough to overlap the
    # round trips of a WAN handshake (16 made 256 hosts at 100 ms take 13 s or more);
    # few enough that the CPU they cost at once stays a fraction of a second.
    max_concurrent_connects: int = 64
    # Handshakes in flight to one SSH server (the first hop: a jump host serves every
    # host behind it), under OpenSSH's default MaxStartups of 10 (`connect_slots`).
    max_connects_per_server: int = 8
    connect_slots: ConnectSlots = field(init=False, repr=False)
    # Identity files are loaded once for all links (`identities`).
    identities: IdentityCache = field(default_factory=IdentityCache, repr=False)

    def __post_init__(self) -> None:
        self.connect_slots = ConnectSlots(self.max_concurrent_connects,
                                          self.max_connects_per_server)

    def config(self) -> SshConfig:
        if self.ssh_config is None:
            self.ssh_config = SshConfig()
        return self.ssh_config


class BaseLink(abc.ABC):
    """Thread, states, control writes and the reconnect loop of one host's link."""

    def __init__(
        self,
        spec: HostSpec,
        high_water: HighWater,
        on_chunk: ChunkCallback,
        on_state: StateCallback,
        options: LinkOptions | None = None,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.options = options or LinkOptions()
        self._high_water = high_water
        self._on_chunk = on_chunk
        self._on_state = on_state
        self._state = STOPPED
        self._detail = ""
        # The failure since the link last streamed (state, reason): what its retries
        # read as (`states.shown`) and what a stop met mid-retry leaves it in.
        self._failure: tuple[str, str] | None = None
        self._stopping = threading.Event()
        # Set by `reconnect`, cleared by the stream it ended: that end is ours, not the
        # host's, so it reads no exit status and reports no lost connection.
        self._restart = threading.Event()
        self._thread: threading.Thread | None = None
        self._send_lock = threading.Lock()
        self._writer: Callable[[bytes], None] | None = None
        self.stderr = StderrTail()
        self.bytes_received = 0
        self.connections = 0
        self.last_from_seq: int | None = None

    # -- public ---------------------------------------------------------------------

    @property
    def state(self) -> str:
        return self._state

    @property
    def failure(self) -> tuple[str, str] | None:
        """The failure (state, reason) since the link last streamed, None when none:
        what a retry, reported as "connecting", is retrying after."""
        return self._failure

    @property
    def detail(self) -> str:
        return self._detail

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name=f"link-{self.name}", daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        """Ask the thread to end without waiting (lets a fleet stop links in parallel)."""
        self._stopping.set()
        self._interrupt()

    def stop(self, timeout: float = 10.0) -> None:
        self.request_stop()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def reconnect(self) -> None:
        """End the current stream so the link reconnects from the consumer's high-water
        mark at once (used when the consumer saw the host's journal reset and re-keyed
        it). The stream ends within its pump's next look (a second at most); an SSH link
        then opens the new stream on the same connection. A reconnect asked while no
        stream is up ends the next one as it starts, since that one may have asked from
        the mark before the re-key."""
        if not self._stopping.is_set():
            self._restart.set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def send_control(self, op: dict) -> None:
        """Write one control op as a JSON line to the agent's stdin."""
        if not isinstance(op, dict) or "op" not in op:
            raise ValueError(f"a control op is a dict with an 'op' key, got {op!r}")
        line = (json.dumps(op, separators=(",", ":"), allow_nan=False) + "\n").encode()
        with self._send_lock:
            writer = self._writer
            if writer is None or self._state != STREAMING:
                state, detail = shown(self._state, self._detail, self._failure)
                raise LinkNotStreaming(
                    f"host {self.name} is {state}" + (f" ({detail})" if detail else "")
                    + f": control op {op.get('op')!r} not sent")
            try:
                writer(line)
            except OSError as exc:
                raise LinkNotStreaming(
                    f"host {self.name}: control op {op.get('op')!r} not sent: {exc}"
                ) from exc

    # -- for subclasses -------------------------------------------------------------

    @abc.abstractmethod
    def _attempt(self, backoff: Backoff) -> float:
        """Connect and stream once; return how long to wait before the next attempt."""

    @abc.abstractmethod
    def _interrupt(self) -> None:
        """Unblock the thread's current wait (close the connection or process)."""

    def _set_state(self, state: str, detail: str = "") -> None:
        if state in FAILED_STATES and self._stopping.is_set():
            # Met while stopping, a failure comes of the stop itself (the connection it
            # closed under a read, a connect or a channel being opened), not of the
            # host: the link ends as stopped, keeping only a failure from before.
            return
        # The detail quotes the host (its agent's stderr, its SSH server's words), and
        # goes to the screen, the recording and the CLI's stderr: as text, from here on.
        detail = printable(detail, multiline=True)
        self._state, self._detail = state, detail
        if state in FAILED_STATES:
            self._failure = (state, detail)
        elif state == STREAMING:
            self._failure = None
        self._report(state, detail)

    def _report(self, state: str, detail: str) -> None:
        try:
            self._on_state(self.name, state, detail)
        except Exception as exc:  # a broken state listener must not take the link down
            log.error("link %s: the state listener failed on %r: %s: %s",
                      self.name, state, type(exc).__name__, exc)

    def _set_writer(self, writer: Callable[[bytes], None] | None) -> None:
        with self._send_lock:
            self._writer = writer

    def _deliver(self, chunk: bytes) -> None:
        self.bytes_received += len(chunk)
        try:
            self._on_chunk(self.name, chunk)
        except Exception as exc:
            raise ConsumerError(f"consumer failed on a chunk from {self.name}: {exc!r}") from exc

    # What pumps a stream: this link's own thread, or a reader shared by many links.
    _pump_with: Callable[[StreamPump], PumpResult] = staticmethod(StreamPump.run_alone)

    def _pump(self, source: StreamSource, from_seq: int) -> PumpResult:
        """Pump one connected source until it ends: the same for every kind of link."""
        self._set_writer(source.write)
        return self._pump_with(StreamPump(
            source,
            self._deliver,
            self.stderr,
            self.options.stale_after,
            lambda: self._stopping.is_set() or self._restart.is_set(),
            lambda: self._set_state(STREAMING, f"from seq {from_seq}"),
        ))

    def _from_seq(self) -> int:
        seq = int(self._high_water())
        self.last_from_seq = seq
        return seq

    def _stopping_now(self) -> bool:
        return self._stopping.is_set()

    def _take_restart(self, result: PumpResult, from_seq: int) -> bool:
        """Whether the stream that just ended was ended by `reconnect`; if so it says so
        and the flag is spent."""
        if self._stopping_now() or not self._restart.is_set():
            return False
        self._restart.clear()
        note = (f"; dropped a partial line of {result.dropped_partial} bytes"
                if result.dropped_partial else "")
        self._set_state(CONNECTING, "restarting the stream from the store's mark, as asked "
                        f"(it streamed from seq {from_seq}){note}")
        return True

    def _after_stream(self, result: PumpResult, backoff: Backoff, from_seq: int) -> float:
        """State and retry delay once a stream has ended for any reason but a missing agent."""
        if result.got_data:
            backoff.reset()
        note = (
            f"; dropped a partial line of {result.dropped_partial} bytes"
            if result.dropped_partial
            else ""
        )
        if self._stopping_now() or self._take_restart(result, from_seq):
            return 0.0
        if result.reason == "stopped":
            return 0.0
        if result.reason == "stale":
            self._set_state(
                STALE,
                f"no records for {self.options.stale_after:g} s after seq {from_seq}; "
                f"reconnecting{note}",
            )
            return backoff.next_delay()
        status = result.exit_status
        if status is None:
            self._set_state(UNREACHABLE, f"connection lost{note}")
        elif status == 0:
            self._set_state(CONNECTING, f"agent stream ended{note}")
        else:
            tail = self.stderr.summary()
            how = f"killed by signal {-status}" if status < 0 else f"exited with status {status}"
            self._set_state(
                AGENT_FAILED, f"agent stream {how}" + (f": {tail}" if tail else "") + note
            )
        return backoff.next_delay()

    # -- thread ---------------------------------------------------------------------

    def _run(self) -> None:
        backoff = Backoff(self.options.backoff_base, self.options.backoff_cap)
        while not self._stopping.is_set():
            try:
                delay = self._attempt(backoff)
            except ConsumerError as exc:
                self._set_state(CONNECTING, f"{exc}; reconnecting from the high-water mark")
                delay = backoff.next_delay()
            except Exception as exc:  # keep the link alive: report, back off, retry
                self._set_state(UNREACHABLE, f"unexpected error: {exc!r}")
                delay = backoff.next_delay()
            finally:
                self._set_writer(None)
            if self._stopping.wait(delay):
                break
        if self._state not in FAILED_STATES:
            # A link that failed keeps its state and reason, in the recording too: why a
            # host never connected (or was lost at the end) outlives the session. So does
            # one stopped while it retried after a failure: the retry had not changed it.
            if self._failure is not None:
                self._state, self._detail = self._failure
                self._report(*self._failure)
            else:
                self._set_state(STOPPED, "")
