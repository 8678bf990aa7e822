"""A port that answers but is not SSH (a web server, a closed service) is named as such."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cockpit.transport.inventory import HostSpec
from cockpit.transport.ssh_link import HostLink
from tests.transport.support import Collector, options_for


@pytest.fixture()
def web_port() -> Iterator[int]:
    """A loopback port that answers every connection like a web server, then hangs up."""
    server = socket.create_server(("127.0.0.2", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=2)
    server.close()


def test_a_port_without_ssh_is_named_and_nothing_reaches_stderr(
        web_port: int, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    collector = Collector()
    spec = HostSpec(name="web", address="127.0.0.2", port=web_port, user="nobody")
    link = HostLink(spec, lambda: 0, collector.on_chunk, collector.on_state,
                    options_for([], tmp_path, connect_timeout=5.0))
    link.start()
    try:
        assert collector.wait_for(lambda: collector.saw_state("web", "unreachable"))
        detail = collector.detail_of("web", "unreachable")
        assert f"port {web_port} answered but no SSH server spoke on it" in detail
        assert "check the host's SSH port" in detail
    finally:
        link.stop()
    assert "Traceback" not in capfd.readouterr().err
