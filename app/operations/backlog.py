"""The operations record's backlog: as the backlog gauges read it (`app/backlog.py`), and
its history, for the dashboard's chart (`app/admin/activity.py`).

Each gauge's figure from an index, never a scan of the table (which holds every operation ever
made): the oldest in flight is the first entry of each in-flight state in
ix_operations_state_created (state, created_at, id), the unknown ones are counted in
ix_operations_recovery_due (partial: only those rows), the flagged ones in
ix_operations_needs_attention (partial too). So a scrape costs what the backlog holds,
not what the table does: on 150,000 operations 2,500 of them in flight, one statement
over the whole table took about 100 ms; these take well under a millisecond.

The history is rebuilt from the audit trail: an operation is in the recovery backlog from
the transition that took it into UNKNOWN_REQUIRES_RECOVERY (from another state) until the
first one that took it out. The entries are read through ix_operation_transitions_recovery
(partial: entries only), each one's way out through ix_operation_transitions_operation_id.
Entries into recovery are incidents, a few in a thousand payments, so reading them all is
cheap whatever the tables hold.
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


# Seconds ago each stay in recovery began and ended (NULL: not yet).
RECOVERY_STAYS_SQL = """
    SELECT extract(epoch FROM now() - t.created_at)::float8,
           (SELECT extract(epoch FROM now() - min(n.created_at))::float8
            FROM operation_transitions n
            WHERE n.operation_id = t.operation_id AND n.id > t.id
              AND n.to_state <> 'UNKNOWN_REQUIRES_RECOVERY')
    FROM operation_transitions t
    WHERE t.to_state = 'UNKNOWN_REQUIRES_RECOVERY'
      AND t.from_state IS DISTINCT FROM 'UNKNOWN_REQUIRES_RECOVERY'
"""


async def recovery_stays(conn: Connection) -> list[tuple[float, float | None]]:
    """Every stay in recovery, as (began, ended) in seconds ago on the database clock;
    ended is None while the operation is still in it."""
    rows = await (await conn.execute(RECOVERY_STAYS_SQL)).fetchall()
    return [(float(began), None if ended is None else float(ended)) for began, ended in rows]
