"""Link states a transport reports through `on_state(host, state, detail)`.

They are plain strings so that the store and the UI can record and show them without
importing the transport.
"""

from __future__ import annotations

import random
from collections.abc import Callable

CONNECTING = "connecting"
STREAMING = "streaming"
STALE = "stale"
UNREACHABLE = "unreachable"
AUTH_FAILED = "auth-failed"
HOSTKEY_UNKNOWN = "hostkey-unknown"
HOSTKEY_CHANGED = "hostkey-changed"
AGENT_MISSING = "agent-missing"
# The agent ran but its stream exited with an error (bad arguments, broken install…).
AGENT_FAILED = "agent-failed"
DEPLOYING = "deploying"
STOPPED = "stopped"
# No transport's word: what the read layer says of a host it has no record from yet
# (a replay or a store without a live link), so not in ALL_STATES.
UNKNOWN = "unknown"

ALL_STATES = (
    CONNECTING,
    STREAMING,
    STALE,
    UNREACHABLE,
    AUTH_FAILED,
    HOSTKEY_UNKNOWN,
    HOSTKEY_CHANGED,
    AGENT_MISSING,
    AGENT_FAILED,
    DEPLOYING,
    STOPPED,
)
# States that will not fix themselves: retried only at the slowest pace.
NEEDS_OPERATOR = frozenset({AUTH_FAILED, HOSTKEY_UNKNOWN, HOSTKEY_CHANGED, AGENT_MISSING})
# States of a link that is not delivering because something is wrong (not on its way).
FAILED_STATES = NEEDS_OPERATOR | {UNREACHABLE, AGENT_FAILED}


def retrying_after(state: str, failure: tuple[str, str] | None) -> bool:
    """Whether a link in `state`, with `failure` (state, reason) since it last streamed,
    is connecting again after that failure: a retry, not a first try nor a remedy under
    way (the agent being deployed after it was missing)."""
    return failure is not None and state == CONNECTING


def shown(state: str, detail: str, failure: tuple[str, str] | None) -> tuple[str, str]:
    """The state and reason to tell the operator: for a retry, the failure it retries
    after. A host that is down flips between the failure and a retry's "connecting",
    which alone would hide that it refused (and read differently at each look)."""
    if failure is not None and retrying_after(state, failure):
        return failure
    return state, detail


ChunkCallback = Callable[[str, bytes], None]
StateCallback = Callable[[str, str, str], None]
HighWater = Callable[[], int]


# A link's reconnect back-off (`Backoff`, `LinkOptions.backoff_base`/`backoff_cap`): the
# first delay's ceiling, and the most it grows to, in seconds.
BACKOFF_BASE = 0.5
BACKOFF_CAP = 30.0


class Backoff:
    """Capped exponential backoff with jitter.

    Jitter spreads the reconnects of hundreds of hosts that dropped together (a switch
    reboot) so that they do not hit the network and the store in one burst.
    """

    def __init__(
        self,
        base: float = BACKOFF_BASE,
        cap: float = BACKOFF_CAP,
        factor: float = 2.0,
        rng: random.Random | None = None,
    ) -> None:
        self.base = base
        self.cap = cap
        self.factor = factor
        self.attempt = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.base * self.factor**self.attempt)
        self.attempt += 1
        return ceiling / 2 + self._rng.uniform(0, ceiling / 2)

    def slowest(self) -> float:
        self.attempt += 1
        return self.cap / 2 + self._rng.uniform(0, self.cap / 2)

    def reset(self) -> None:
        self.attempt = 0
