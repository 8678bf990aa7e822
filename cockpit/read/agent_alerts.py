"""The alerts the agents raised that still stand at the cursor.

An agent raises an alert once and never takes it back; whether it is over is read from
what the recording holds since (`cockpit.analysis.alert_ends`): the operator's starts,
stops and pauses, a host taken out of its job, and for an alert about a failed start,
a step that host's part made after it. The alerts and the lifecycle events are read
once per change of theirs; the steps, a probe per such alert still standing, only
while one stands, since a refresh during training moves the train table every time.
"""

from __future__ import annotations

from cockpit.analysis import alerts as rules
from cockpit.analysis.alert_ends import (
    ENDING_EVENT_KINDS,
    AlertEnds,
    awaiting_a_step,
    operator_ends,
)
from cockpit.snapshot import Alert
from cockpit.store.earlier_runs import is_earlier_run
from cockpit.store.queries import Frontiers, StoreReader
from cockpit.store.queries_base import Row, of_kinds

# Newest lifecycle events (starts, stops, pauses, relaunches) read to tell which agent
# alerts the operator's actions ended.
LIFECYCLE_READ = 500


def standing_agent_alerts(reader: StoreReader, job: str | None, fr: Frontiers,
                          until_ts: float | None) -> list[Alert]:
    """The agents' alerts that are not over, for the screen of `job`. An earlier run
    filed away by a fresh launch of its name is over: its alerts do not stand against
    the new run (they stay in its own report)."""
    rows_key = (fr.key("alert"), reader.event_version(
        "agent_alert_rows", fr, until_ts, of_kinds(*ENDING_EVENT_KINDS)), job)

    def read() -> tuple[list[Row], AlertEnds]:
        rows = [a for a in reader.alerts(until_ts=until_ts, frontiers=fr)
                if a.get("job") == job or not is_earlier_run(a.get("job"))]
        ends = operator_ends(reader.events(until_ts=until_ts, kinds=ENDING_EVENT_KINDS,
                                           limit=LIFECYCLE_READ, frontiers=fr))
        return rows, ends

    rows, ends = reader.memo("agent_alert_rows", rows_key, read)
    marks = awaiting_a_step(rows, ends)
    stepped = frozenset(reader.memo(
        "agent_alert_steps", (tuple(marks), fr.key("train")),
        lambda: reader.stepped_after(marks, until_ts=until_ts))) if marks else frozenset()
    return reader.memo("alerts", (rows_key, stepped), lambda: rules.stored_alerts(
        rows, ends.started, ends.started_on, stopped=ends.stopped, left=ends.left,
        stepped=stepped))
