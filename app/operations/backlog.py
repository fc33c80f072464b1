"""The operations record's backlog, as the backlog gauges read it (`app/backlog.py`).

Each figure from an index, never a scan of the table (which holds every operation ever
made): the oldest in flight is the first entry of each in-flight state in
ix_operations_state_created (state, created_at, id), the unknown ones are counted in
ix_operations_recovery_due (partial: only those rows), the flagged ones in
ix_operations_needs_attention (partial too). So a scrape costs what the backlog holds,
not what the table does: on 150,000 operations 2,500 of them in flight, one statement
over the whole table took about 100 ms; these take well under a millisecond.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.db.database import Connection
from app.operations.states import IN_FLIGHT, State

_OLDEST_IN_FLIGHT = " , ".join(
    f"(SELECT min(created_at) FROM operations WHERE state = '{state.value}')"
    for state in sorted(IN_FLIGHT)
)
BACKLOG_SQL = f"""
    SELECT
      coalesce(extract(epoch FROM now() - least({_OLDEST_IN_FLIGHT})), 0) AS oldest,
      (SELECT count(*) FROM operations
        WHERE state = '{State.UNKNOWN_REQUIRES_RECOVERY.value}') AS unknown,
      (SELECT count(*) FROM operations WHERE needs_attention) AS attention
    """


@dataclass(frozen=True)
class Backlog:
    """The oldest in-flight operation's age (0 when none is), the unknown ones, the
    flagged ones."""

    oldest_in_flight_s: float
    unknown: int
    needs_attention: int


async def backlog(conn: Connection) -> Backlog:
    """The record's backlog as it is now, in one statement through indexes only."""
    row = await (await conn.execute(BACKLOG_SQL)).fetchone()
    assert row is not None, "an aggregate always has a row"
    oldest, unknown, attention = row
    return Backlog(float(oldest), int(unknown), int(attention))
