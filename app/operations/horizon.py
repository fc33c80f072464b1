"""How far back the worker's recovery scans read: the backlog's horizon.

`operations` is partitioned by the day of `created_at` (docs/scaling.md, "Time partitions").
The recovery claim (`leases.py`) looks for in-flight operations whose lease ran out and
unknown ones whose check has come; read by state alone, every one of its statements would
descend the partial indexes of every day kept, a year of them perhaps, for a backlog that
lives in the last day or two. Bounded by `created_at >= horizon`, each reads only the days
from the horizon on: the others are pruned when the statement starts.

The horizon is the start of the UTC day of the oldest operation in a state the scans look
for (RECEIVED, PROVIDER_REQUEST_SENT, UNKNOWN_REQUIRES_RECOVERY), today's when there is
none. It is read without a bound, one index descent per state and day kept
(`ix_operations_state_created`, oldest day first), and kept for `HORIZON_REFRESH_S`
between reads.

What a kept horizon can miss, and for how long: an operation enters those states either
when it is claimed (created now, after the horizon) or from FAILED_RETRYABLE when its
client retries (created any time before). So an operation older than the horizon can come
back in flight: a client retrying a payment that failed retryably last week. Its owner,
the request, holds its lease, and the worker needs it only if that owner dies; then it is
claimed once the horizon is read again, at most `HORIZON_REFRESH_S` after its lease ran out,
instead of at once. Likewise a claim whose transaction began before the horizon was read
but committed after (its `created_at` is its transaction's start): the horizon is a day's
start, so only a claim begun on the day before, committed after, could be missed, and only
until the next read. Nothing is missed for longer than that: every read is unbounded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from app.db.database import Connection
from app.operations.states import State

# How long a read horizon serves the claims before it is read again: the longest an
# operation older than it, back in a scanned state, waits for the worker beyond its lease.
HORIZON_REFRESH_S = 60.0

SCANNED = (
    State.RECEIVED,
    State.PROVIDER_REQUEST_SENT,
    State.UNKNOWN_REQUIRES_RECOVERY,
)
# One min-max read per state (a descent of ix_operations_state_created per day kept, the
# oldest day first); `least` ignores the states with none.
HORIZON_SQL = "SELECT date_trunc('day', least({}, now()), 'UTC')".format(
    ", ".join(
        f"(SELECT min(created_at) FROM operations WHERE state = '{s.value}')" for s in SCANNED
    )
)


class Horizon:
    """The backlog's horizon as one worker keeps it: read again at the latest `refresh_s`
    after the last read."""

    def __init__(
        self,
        *,
        refresh_s: float = HORIZON_REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._refresh_s = refresh_s
        self._clock = clock
        self._since: datetime | None = None
        self._read_at = 0.0

    async def since(self, conn: Connection) -> datetime:
        """The horizon: kept, or read now when none is kept or it is `refresh_s` old."""
        now = self._clock()
        if self._since is None or now - self._read_at >= self._refresh_s:
            self._since = await read_horizon(conn)
            self._read_at = now
        return self._since


async def read_horizon(conn: Connection) -> datetime:
    """The horizon as it is now (unbounded: reads every day kept)."""
    row = await (await conn.execute(HORIZON_SQL)).fetchone()
    assert row is not None, "a SELECT without FROM has a row"
    since = row[0]
    assert isinstance(since, datetime)
    return since
