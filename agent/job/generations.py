"""Generations of a host's part of a job: which operator start began it, and which
earlier parts it has left. A peer's end marker of an earlier generation is stale whatever
its time; the clocks judge only where no generation is known.

Its own module so that the job's narrow interface (`agent.job.handle`) can name the type
without importing the peer-end machinery that uses the interface.
"""

from __future__ import annotations

from typing import Optional, Tuple

# Generations a host remembers having left: a marker of an older one is long cleared.
KEEP = 16


def generation(op_id: object, host: Optional[str]) -> Optional[str]:
    """The generation an operator start's op brings: the cockpit sends one operation to
    each host as `BASE-HOST`, so BASE is what every host it reached has in common. An id
    of any other shape (an older cockpit, a hand-made op) brings none: the clocks judge."""
    if not isinstance(op_id, str) or not host:
        return None
    suffix = "-%s" % host
    if len(op_id) > len(suffix) and op_id.endswith(suffix):
        return op_id[:-len(suffix)]
    return None


class Generations:
    """The generation of this host's part, and those of its parts the operator has since
    started again: a marker of one of those is an earlier part's, whatever its time."""

    def __init__(self, current: Optional[str] = None, past: Tuple[str, ...] = ()) -> None:
        self.current = current
        self.past = list(past)[-KEEP:]

    def begin(self, new: Optional[str]) -> None:
        """The operator starts this host's part again, with the generation `new`."""
        old = self.current
        if old is not None and old != new:
            kept = [g for g in self.past if g != old and g != new]
            self.past = [*kept[-(KEEP - 1):], old]
        elif new in self.past:
            self.past.remove(new)  # current again (an op sent twice): not an earlier part
        self.current = new

    def take_over(self, new: Optional[str]) -> None:
        """A spare joins the part another host started: its generation, when the claim
        names one. A claim without one (an older agent's) leaves the clocks to judge, and
        the spare's own launch is no earlier part: the others may still run it."""
        if new is None:
            self.current = None
        else:
            self.begin(new)

    def judge(self, marker: Optional[str]) -> Optional[bool]:
        """Whether a marker of generation `marker` counts here; None: the clocks decide."""
        if marker is None:
            return None
        if marker == self.current:
            return True
        return False if marker in self.past else None

    def state(self) -> dict:
        return {"current": self.current, "past": list(self.past)}

    @classmethod
    def restore(cls, saved: object) -> "Generations":
        """As `state` left it; nothing usable (a state saved by an older agent): none
        known, so the clocks judge as they did."""
        if not isinstance(saved, dict):
            return cls()
        current = saved.get("current")
        past = saved.get("past")
        return cls(current if isinstance(current, str) else None,
                   tuple(g for g in past if isinstance(g, str)) if isinstance(past, list)
                   else ())
