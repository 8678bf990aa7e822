"""When a job reached a step: `cockpit report --at STEP` reports as of that instant.

Reports and snapshots are drawn "as of a time" (`until_ts`); a step is turned into the
time of the record that first reached it, on the job's reference rank (its lowest, the
one the screen's progress follows). A step trained twice (a restart from an older
checkpoint trains some steps again) is the first time it was reached.
"""

from __future__ import annotations

from cockpit.store.database import Store


def step_ts(store: Store, job: str, step: int) -> tuple[float | None, int | None]:
    """(the ts of the first record of `job`'s reference rank at or past `step`, the
    highest step the job recorded); (None, highest) when it never got that far."""
    with store.read_cursor() as cur:
        row = cur.execute(
            "WITH ref AS (SELECT min(coalesce(rank, -1)) AS r FROM train WHERE job = $job) "
            "SELECT (SELECT min(ts) FROM train, ref WHERE job = $job AND step >= $step "
            "        AND coalesce(rank, -1) = ref.r), "
            "       (SELECT max(step) FROM train WHERE job = $job)",
            {"job": job, "step": step}).fetchone()
    ts, top = row if row is not None else (None, None)
    return (None if ts is None else float(ts)), (None if top is None else int(top))
