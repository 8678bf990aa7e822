"""`HostLink`: one long-lived SSH connection per host carrying the agent's stream.

One exec channel runs `agent stream --from SEQ`; records come back on stdout, control
ops go out on stdin. Everything that can go wrong on the way (network, host keys,
authentication, a missing agent) becomes a link state with a message that says what
happened and what to do, and the link keeps retrying with capped, jittered backoff.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import paramiko
from paramiko.pipe import make_pipe

from cockpit.printable import printable
from cockpit.transport import commands
from cockpit.transport.deploy import DeployedAgent, DeployError, ZipappBuilder, push_agent
from cockpit.transport.host_keys import HostKeyError, changed_key_message, known_hosts_name
from cockpit.transport.identities import CachingClient
from cockpit.transport.inventory import AUTO_AGENT, HostSpec
from cockpit.transport.link import BaseLink, LinkOptions
from cockpit.transport.pump import READ_SIZE
from cockpit.transport.shared_reader import read_shared
from cockpit.transport.ssh_config import Endpoint, SshConfigError
from cockpit.transport.states import (
    AGENT_MISSING,
    AUTH_FAILED,
    CONNECTING,
    DEPLOYING,
    HOSTKEY_CHANGED,
    UNREACHABLE,
    Backoff,
    ChunkCallback,
    HighWater,
    StateCallback,
)

# paramiko logs a failed handshake, traceback included, and with no handler of its own
# Python prints that on stderr, over the cockpit's screen; the link reports every such
# failure as its state instead.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

# paramiko's default 2 MiB window stalls a fast stream on long round trips.
WINDOW_SIZE = 8 << 20
# paramiko's transport thread wakes every 0.1 s to look for a close request; with
# hundreds of idle-most-of-the-time links that polling is most of the cockpit's CPU.
# Closing shuts the socket down, which wakes the thread at once, so a slow poll is free.
TRANSPORT_POLL = 1.0
# AES-GCM first: one AEAD pass per packet, where paramiko's default (AES-CTR) needs a
# separate HMAC-SHA2 pass, on both ends. Measured on a stream over loopback sshd, it
# halves the CPU the stream costs sshd on the GPU host and this process together (0.86 ->
# 0.47 core-s for 228 MB) and cuts a 256-host fleet's transport CPU by 15 %. A server
# without it (OpenSSH before 6.2) negotiates the next of paramiko's usual list.
PREFERRED_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")


class _ReadySide:
    """One buffer's half of the channel's "something to read" pipe.

    paramiko's own `Channel.fileno()` joins stdout and stderr with an `OrPipe` whose
    halves are updated under two different buffer locks: a stderr arrival racing a
    stdout drain can leave data buffered with the pipe cleared, and the stream then
    sleeps until the next poll or goes stale. Both halves here share one lock.
    """

    def __init__(self, pipe: Any, lock: threading.Lock) -> None:
        self._pipe = pipe
        self._lock = lock
        self.ready = False
        self.partner: _ReadySide | None = None

    def set(self) -> None:
        with self._lock:
            self.ready = True
            self._pipe.set()

    def clear(self) -> None:
        with self._lock:
            self.ready = False
            if self.partner is None or not self.partner.ready:
                self._pipe.clear()


class ChannelSource:
    """A paramiko exec channel seen as a `StreamSource`."""

    def __init__(self, channel: paramiko.Channel) -> None:
        self.channel = channel
        self._pipe = make_pipe()
        lock = threading.Lock()
        out, err = _ReadySide(self._pipe, lock), _ReadySide(self._pipe, lock)
        out.partner, err.partner = err, out
        channel.in_buffer.set_event(out)
        channel.in_stderr_buffer.set_event(err)
        self._fd = self._pipe.fileno()

    def filenos(self) -> list[int]:
        return [self._fd]

    def close(self) -> None:
        self.channel.close()
        self._pipe.close()

    def read_out(self) -> bytes | None:
        if self.channel.recv_ready():
            return self.channel.recv(READ_SIZE) or None
        return None

    def read_err(self) -> bytes | None:
        if self.channel.recv_stderr_ready():
            return self.channel.recv_stderr(READ_SIZE) or None
        return None

    def finished(self) -> bool:
        chan = self.channel
        if chan.recv_ready() or chan.recv_stderr_ready():
            return False
        return chan.closed or chan.eof_received

    def exit_status(self) -> int | None:
        # paramiko leaves -1 when the connection died before an exit status arrived.
        if self.channel.status_event.wait(5.0) and self.channel.exit_status >= 0:
            return self.channel.exit_status
        return None

    def write(self, data: bytes) -> None:
        self.channel.sendall(data)


@dataclass
class Connection:
    """The target's SSH client, plus the jump hosts' clients it tunnels through."""

    client: paramiko.SSHClient
    jumps: list[paramiko.SSHClient] = field(default_factory=list)

    def close(self) -> None:
        for client in [self.client, *reversed(self.jumps)]:
            transport = client.get_transport()
            if transport is not None and isinstance(transport.sock, socket.socket):
                try:  # wakes the transport thread's recv() now, not at its next poll
                    transport.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            try:
                client.close()
            except Exception:  # teardown of a link already given up:
                pass  # nothing is left to tell, and the next connect starts afresh


class _ConnectFailed(Exception):
    def __init__(self, state: str, detail: str, slow: bool) -> None:
        # paramiko quotes the server (`Indecipherable protocol version "<its banner>"`),
        # and the caller prints this (`cockpit hosts trust`, the pre-flight check) or
        # makes a link's state of it: as text, wherever it is shown.
        detail = printable(detail, multiline=True)
        super().__init__(detail)
        self.state, self.detail, self.slow = state, detail, slow


# What `connect` raises, for callers outside the link (the pre-flight check, `hosts trust`).
ConnectFailed = _ConnectFailed


def connect(spec: HostSpec, options: LinkOptions,
            stopping: Callable[[], bool] | None = None) -> Connection:  # fmt: skip
    """Open an authenticated SSH connection to the host (through its ProxyJump chain).

    Raises `_ConnectFailed` carrying the link state to report; `slow` marks failures that
    need the operator (keys, trust) and are retried at the slowest pace. The first hop's
    handshake waits for one of its server's slots (`LinkOptions.connect_slots`), giving
    up as unreachable if `stopping()` turns true meanwhile.
    """
    try:
        endpoint = options.config().resolve(spec)
    except SshConfigError as exc:
        raise _ConnectFailed(UNREACHABLE, str(exc), slow=True) from exc
    hops = [*endpoint.proxy_jump, endpoint]
    jumps: list[paramiko.SSHClient] = []
    sock: socket.socket | paramiko.Channel | None = None
    for number, hop in enumerate(hops):
        is_target = number == len(hops) - 1
        label = spec.name if is_target else f"{spec.name} via jump host {hop.hostname}"
        timeout = hop.connect_timeout or options.connect_timeout
        if sock is None:
            client = _first_hop(hop, label, is_target, options, timeout, stopping)
        else:
            try:
                client = _handshake(hop, sock, label, options, timeout)
            except BaseException:
                _close_all(jumps)
                raise
        if is_target:
            return Connection(client, jumps)
        jumps.append(client)
        nxt = hops[number + 1]
        try:
            transport = client.get_transport()
            if transport is None:
                raise paramiko.SSHException("connection closed")
            sock = transport.open_channel(
                "direct-tcpip", (nxt.hostname, nxt.port), ("127.0.0.1", 0), timeout=timeout
            )
        except (paramiko.SSHException, OSError) as exc:
            _close_all(jumps)
            raise _ConnectFailed(
                UNREACHABLE,
                f"jump host {hop.label()} cannot reach {nxt.hostname}:{nxt.port}: {exc}",
                slow=False,
            ) from exc
    raise AssertionError("unreachable: the hop list always ends with the target")


def _first_hop(hop: Endpoint, label: str, is_target: bool, options: LinkOptions,
               timeout: float, stopping: Callable[[], bool] | None) -> paramiko.SSHClient:
    """TCP connect and handshake to the first hop, holding one of its server's slots
    until the server has authenticated us (what its MaxStartups counts)."""
    where = hop.label() if is_target else f"jump host {hop.label()}"
    with options.connect_slots.server((hop.hostname, hop.port), stopping) as held:
        if not held:
            raise _ConnectFailed(UNREACHABLE, f"{where}: stopped before connecting",
                                 slow=False)
        try:
            sock = socket.create_connection((hop.hostname, hop.port), timeout=timeout)
        except OSError as exc:
            raise _ConnectFailed(
                UNREACHABLE, f"{where}: cannot connect: {exc}", slow=False
            ) from exc
        return _handshake(hop, sock, label, options, timeout)


def _close_all(clients: list[paramiko.SSHClient]) -> None:
    for client in clients:
        client.close()


def ssh_transport(sock: socket.socket | paramiko.Channel, **kwargs: Any) -> paramiko.Transport:
    """A paramiko transport that offers `PREFERRED_CIPHERS` first (`SSHClient.connect`'s
    `transport_factory`)."""
    transport = paramiko.Transport(sock, **kwargs)
    options = transport.get_security_options()
    offered = tuple(options.ciphers)
    options.ciphers = (*(c for c in PREFERRED_CIPHERS if c in offered),
                       *(c for c in offered if c not in PREFERRED_CIPHERS))
    return transport


def _handshake(
    hop: Endpoint,
    sock: socket.socket | paramiko.Channel,
    label: str,
    options: LinkOptions,
    timeout: float,
) -> paramiko.SSHClient:
    client = CachingClient(options.identities)
    # The host's SSH config entry: its known_hosts files and StrictHostKeyChecking.
    known = options.known_hosts.for_config(hop.user_known_hosts, hop.global_known_hosts,
                                           hop.strict_host_key_checking)
    # IdentitiesOnly: only the configured keys, not every key ssh-agent holds.
    only = hop.identities_only and bool(hop.identity_files)
    try:
        known.load_into(client, known_hosts_name(hop.key_name_host, hop.port))
        client.set_missing_host_key_policy(
            known.policy(label, behind_jump=isinstance(sock, paramiko.Channel)))
        client.connect(
            hop.key_name_host,
            port=hop.port,
            username=hop.user,
            key_filename=list(hop.identity_files) or None,
            sock=sock,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            allow_agent=not only,
            look_for_keys=not only,
            transport_factory=ssh_transport,
        )
    except HostKeyError as exc:
        client.close()
        raise _ConnectFailed(exc.state, str(exc), slow=True) from exc
    except paramiko.BadHostKeyException as exc:
        client.close()
        name = known_hosts_name(hop.key_name_host, hop.port)
        message = changed_key_message(label, name, exc.key, exc.expected_key, known.files())
        raise _ConnectFailed(HOSTKEY_CHANGED, message, slow=True) from exc
    except (OSError, EOFError, paramiko.SSHException) as exc:
        # paramiko reads the key files only once the server has answered, and fails on
        # one it cannot load with an OSError (a missing file) or a bare SSHException (not
        # a key): the host was reached, and what to fix is on this side.
        transport = client.get_transport()
        reached = transport is not None and transport.is_active()
        client.close()
        if isinstance(exc, OSError) and exc.filename in hop.identity_files:
            raise _ConnectFailed(
                AUTH_FAILED,
                f"{hop.label()}: cannot read the private key {exc.filename} "
                f"({exc.strerror or exc}). Check `identity_file` in the inventory or "
                "IdentityFile in ~/.ssh/config",
                slow=True,
            ) from exc
        if isinstance(exc, paramiko.AuthenticationException) or (
                reached and isinstance(exc, paramiko.SSHException)):
            raise _ConnectFailed(AUTH_FAILED, _auth_failed_text(hop, exc), slow=True) from exc
        raise _ConnectFailed(UNREACHABLE, _unreachable_text(hop, exc), slow=False) from exc
    transport = client.get_transport()
    if transport is not None:
        transport.set_keepalive(int(max(1, hop.server_alive_interval or options.keepalive)))
        transport.sock.settimeout(TRANSPORT_POLL)
    return client


def _auth_failed_text(hop: Endpoint, exc: BaseException) -> str:
    keys = ", ".join(hop.identity_files) or "the default keys in ~/.ssh"
    return (f"{hop.label()}: authentication failed ({exc}); tried ssh-agent and {keys}. "
            "Check `user` / `identity_file` in the inventory or User / IdentityFile in "
            "~/.ssh/config")


# What paramiko says when the port answered but no SSH server did (a web server, a
# database, a port that closes at once): its own words name no cause.
_NOT_SSH = ("protocol banner", "No existing session", "Error reading SSH")


def _unreachable_text(hop: Endpoint, exc: BaseException) -> str:
    said = str(exc) or type(exc).__name__
    if isinstance(exc, paramiko.SSHException | EOFError) and (
            isinstance(exc, EOFError) or any(s in said for s in _NOT_SSH)):
        return (f"{hop.label()}: port {hop.port} answered but no SSH server spoke on it "
                f"({said}); check the host's SSH port (`port` in the inventory, Port in "
                "~/.ssh/config)")
    return f"{hop.label()}: {said}"


class HostLink(BaseLink):
    """The SSH link to one host. Thread-safe: start(), stop(), send_control()."""

    # Every SSH link's stream is read by one thread (`shared_reader`): a fleet's links
    # would otherwise each wake for every message.
    _pump_with = staticmethod(read_shared)

    def __init__(
        self,
        spec: HostSpec,
        high_water: HighWater,
        on_chunk: ChunkCallback,
        on_state: StateCallback,
        options: LinkOptions | None = None,
        builder: ZipappBuilder | None = None,
    ) -> None:
        super().__init__(spec, high_water, on_chunk, on_state, options)
        self._builder = builder
        self._deployed: DeployedAgent | None = None
        self._connection: Connection | None = None
        self._conn_lock = threading.Lock()

    def _interrupt(self) -> None:
        with self._conn_lock:
            connection = self._connection
        if connection is not None:
            connection.close()

    def _argv(self) -> list[str]:
        if self._deployed is not None:
            return self._deployed.argv()
        return commands.agent_argv(self.spec.agent)

    def _attempt(self, backoff: Backoff) -> float:
        self._set_state(CONNECTING, self.spec.address)
        with self.options.connect_slots.fleet(self._stopping_now) as held:
            if not held:
                return 0.0
            try:
                connection = connect(self.spec, self.options, self._stopping_now)
            except _ConnectFailed as failure:
                self._set_state(failure.state, failure.detail)
                return backoff.slowest() if failure.slow else backoff.next_delay()
        with self._conn_lock:
            self._connection = connection
        if self._stopping_now():
            connection.close()
            return 0.0
        self.connections += 1
        try:
            return self._stream(connection, backoff)
        finally:
            with self._conn_lock:
                self._connection = None
            connection.close()

    def _stream(self, connection: Connection, backoff: Backoff) -> float:
        deployed_now = False
        while True:
            from_seq = self._from_seq()
            command = commands.stream(self._argv(), self.spec.state_dir, from_seq)
            try:
                transport = connection.client.get_transport()
                if transport is None or not transport.is_active():
                    raise paramiko.SSHException("connection closed")
                channel = transport.open_session(window_size=WINDOW_SIZE)
                channel.exec_command(command)
            except (paramiko.SSHException, OSError, EOFError) as exc:
                self._set_state(UNREACHABLE, f"cannot start the agent stream: {exc}")
                return backoff.next_delay()
            source = ChannelSource(channel)
            try:
                result = self._pump(source, from_seq)
            finally:
                self._set_writer(None)
                source.close()
            if self._take_restart(result, from_seq):
                continue  # a new stream on the same connection, from the store's mark
            missing = (
                result.reason == "eof"
                and not result.got_data
                and result.exit_status in commands.MISSING_STATUSES
            )
            if not missing:
                return self._after_stream(result, backoff, from_seq)
            if deployed_now or not self._may_deploy():
                self._set_state(AGENT_MISSING, self._missing_message(result.exit_status))
                return backoff.slowest()
            self._set_state(
                AGENT_MISSING,
                f"`{commands.agent_argv(self.spec.agent)[0]}` not found on {self.name}: "
                "pushing the agent",
            )
            self._set_state(DEPLOYING, f"copying the agent to {self.spec.deploy_dir}")
            try:
                self._deployed = push_agent(connection.client, self.spec, self._builder_())
            except DeployError as exc:
                self._set_state(AGENT_MISSING, str(exc))
                return backoff.slowest()
            deployed_now = True

    def _may_deploy(self) -> bool:
        return self.spec.agent == AUTO_AGENT and self._deployed is None

    def _builder_(self) -> ZipappBuilder:
        if self._builder is None:
            self._builder = ZipappBuilder()
        return self._builder

    def _missing_message(self, status: int | None) -> str:
        tail = self.stderr.summary(1)
        argv = self._argv()
        if self._deployed is not None:
            return (
                f"the pushed agent did not start on {self.name} (status {status}): is "
                f"{self.spec.python!r} the host's Python (>= 3.8)? Set `python` in the "
                f"inventory. {tail}"
            ).strip()
        return (
            f"agent command `{' '.join(argv)}` not found on {self.name} (status {status}): "
            'install it, fix `agent` in the inventory, or set agent = "auto" to push it. '
            f"{tail}"
        ).strip()
