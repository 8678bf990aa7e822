"""How many SSH handshakes one cockpit has in flight: across the fleet, and to one server.

A handshake costs a key exchange and a signature at each end plus a few round trips.
Over a WAN the round trips dominate, so hundreds of hosts come up quickly only when many
handshakes overlap; on a busy cockpit machine too many at once make each one slow
enough to time out and be retried. The fleet-wide bound keeps the CPU in flight
bounded. The per-server bound keeps the handshakes that meet at one sshd under its
MaxStartups (OpenSSH's default 10:30:100 starts refusing new connections at random from
10 unauthenticated ones on): every host of a fleet behind one jump host meets there.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

# How often a wait for a slot looks whether the link is being stopped.
STOP_CHECK_S = 0.5


class ConnectSlots:
    """Slots for handshakes: `total` at once, `per_server` at once to one address."""

    def __init__(self, total: int, per_server: int) -> None:
        self.total = max(1, total)
        self.per_server = max(1, per_server)
        self._fleet = threading.BoundedSemaphore(self.total)
        self._lock = threading.Lock()
        self._servers: dict[tuple[str, int], threading.BoundedSemaphore] = {}

    def fleet(self, stopping: Callable[[], bool] | None = None
              ) -> contextlib.AbstractContextManager[bool]:  # fmt: skip
        """Hold one of the fleet's slots; yields False (holding none) if `stopping()`
        turned true while waiting."""
        return _held(self._fleet, stopping)

    def server(self, address: tuple[str, int], stopping: Callable[[], bool] | None = None
               ) -> contextlib.AbstractContextManager[bool]:  # fmt: skip
        """Hold one of the slots of the SSH server at `address` (host, port): the first
        hop a connection takes, which is the one it opens a TCP connection to."""
        with self._lock:
            slots = self._servers.get(address)
            if slots is None:
                slots = self._servers[address] = threading.BoundedSemaphore(self.per_server)
        return _held(slots, stopping)


@contextlib.contextmanager
def _held(slots: threading.BoundedSemaphore, stopping: Callable[[], bool] | None
          ) -> Iterator[bool]:  # fmt: skip
    while True:
        acquired = slots.acquire(timeout=STOP_CHECK_S)
        if stopping is not None and stopping():
            # Looked at after a slot came free too: a link stopped while it waited must
            # not go on to connect (and take the slot from a link that still wants it).
            if acquired:
                slots.release()
            yield False
            return
        if acquired:
            break
    try:
        yield True
    finally:
        slots.release()
