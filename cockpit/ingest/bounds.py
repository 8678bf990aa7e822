"""The ranges the cockpit accepts, at the wire, for the integers and times it keys on.

Everything a host sends is untrusted (docs/protocol.md): one record with a seq of
`99999999999999999999` used to become the host's mark and fail every later flush on the
BIGINT column, and a `ts` of 1e300 failed every chart fold of the whole store. A value
outside these ranges makes its record malformed (counted, kept in `wire_errors` with its
host), decided where the record enters: seqs by the router (`cockpit.ingest.route`), `ts`
and `step` by the loader's SQL over a whole flush (`cockpit.store.loader`), so the checks
cost no per-record Python on the hot path.

The ranges are far beyond any real run and well inside what the store computes with: a
seq of 15 digits is 31 years at a million records a second, and leaves room for about
9,000 journal resets of a host before `seq + seq_offset` could pass BIGINT.
"""

from __future__ import annotations

from agent.wire.record_check import MAX_TS

SEQ_DIGITS = 15
SEQ_MAX = 10**SEQ_DIGITS - 1
# Seconds since the epoch: up to the year 2286. A negative time is no sample's.
TS_MIN = 0.0
TS_MAX = MAX_TS  # what the agent's own check of a record allows
# A training step (and so a chart's x): exact in a double, far from BIGINT's edge.
STEP_MAX = 2**53
# `hosts.seq_offset` after a journal reset: a new journal's seqs stored above it must
# still fit BIGINT.
OFFSET_MAX = 2**63 - 1 - SEQ_MAX


def seq_ok(value: object) -> bool:
    """Whether `value` is a seq the cockpit stores (an int, not a bool, 0..SEQ_MAX)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= SEQ_MAX
