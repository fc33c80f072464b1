"""The calendar: every partitioned table has its day partitions made ahead of the rows.

A row whose day has no partition is refused (`no partition of relation ... found for
row`): the INSERT fails, and with it the request. So the worker keeps
PAYMENTS_PARTITION_PREMAKE_DAYS (7) days ahead of today (UTC, by the database's clock):
today's partition and the next seven days' exist whenever a pass has run, at every start of
the worker and then every PAYMENTS_PARTITION_INTERVAL_S. `payments_partition_days_ahead`
says, per table, how many days from today on have a partition (docs/operations.md: the
alert).

Each missing day is made the way that never blocks the table's writers: a new table
`(LIKE parent INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`, then `ATTACH PARTITION`, which
takes only a SHARE UPDATE EXCLUSIVE lock on the parent (`CREATE TABLE ... PARTITION OF`
would take an ACCESS EXCLUSIVE one, queueing every read and write of the table behind it);
the attach clones the parent's indexes and foreign keys onto it. Each table's days are made
in one transaction under a transaction-level advisory lock of that table's: two workers
making the same days queue on it, and the second finds them made
(`tests/partitions/test_calendar.py` runs two at once). The attach clones the table's
foreign keys, which locks each table they reference (`tenants`) against writes until
the transaction ends, and writes arriving while it waits queue behind it: so every lock is
waited for `LOCK_TIMEOUT` (1 s) at most, then asked for again, five times in all
(`tests/partitions/test_real_tables.py`: a write waits a second at most).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import date, timedelta

from psycopg import sql
from psycopg.errors import LockNotAvailable

from app.db.database import Connection
from app.partitions.layout import PartitionedTable, day_bounds
from app.partitions.present import database_today, shape_of

logger = logging.getLogger("payments.partitions")

# One lock per table, shared by every worker: the key is the hash of its qualified name.
_LOCK = "SELECT pg_advisory_xact_lock(hashtext('payments.partitions:' || %(table)s))"
_EXISTS = "SELECT to_regclass(%(name)s) IS NOT NULL"
# Attaching a day clones the table's foreign keys onto it, which takes a SHARE ROW EXCLUSIVE
# lock on each table they reference (`tenants`) until the transaction ends:
# it waits for the writes under way there, and every write that comes meanwhile queues
# behind it. Waiting at most this long bounds that queue; the days ahead leave time to ask
# again.
LOCK_TIMEOUT = "1s"
ATTEMPTS = 5


@dataclass(frozen=True)
class Made:
    """What one pass did for one table."""

    table: str
    # False: the table is not partitioned in this database (not converted yet).
    partitioned: bool
    created: tuple[str, ...]
    days_ahead: int


def days_wanted(today: date, premake_days: int) -> list[date]:
    """Today and the `premake_days` days after it."""
    return [today + timedelta(days=offset) for offset in range(premake_days + 1)]


async def _create_day(conn: Connection, table: PartitionedTable, schema: str, day: date) -> None:
    name = table.day_partition(day)
    start, end = day_bounds(day)
    parent = sql.Identifier(schema, table.table)
    child = sql.Identifier(schema, name)
    await conn.execute(
        sql.SQL(
            "CREATE TABLE {child} (LIKE {parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
        ).format(child=child, parent=parent)
    )
    await conn.execute(
        sql.SQL(
            "ALTER TABLE {parent} ATTACH PARTITION {child} FOR VALUES FROM ({lo}) TO ({hi})"
        ).format(parent=parent, child=child, lo=sql.Literal(start), hi=sql.Literal(end))
    )


async def create_ahead(
    conn: Connection, table: PartitionedTable, *, premake_days: int, today: date | None = None
) -> Made:
    """Make `table`'s missing partitions of today and the next `premake_days` days (today by
    the database's clock unless given); what was made. Idempotent; safe beside another
    worker doing the same. A lock not had within `LOCK_TIMEOUT` is given up and asked for
    again, `ATTEMPTS` times in all (then `LockNotAvailable`)."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return await _create_ahead(conn, table, premake_days=premake_days, today=today)
        except LockNotAvailable:
            if attempt == ATTEMPTS:
                raise
            logger.warning(
                "day partitions: a lock was not had in time; asking again",
                extra={"fields": {"table": table.table, "attempt": attempt}},
            )
    raise AssertionError("unreachable")


async def _create_ahead(
    conn: Connection, table: PartitionedTable, *, premake_days: int, today: date | None
) -> Made:
    async with conn.transaction():
        shape = await shape_of(conn, table)
        if shape is None:
            return Made(table.table, partitioned=False, created=(), days_ahead=0)
        await conn.execute(_LOCK, {"table": f"{shape.schema}.{table.table}"})
        # Once this worker's turn has come: every lock from here on is waited for briefly.
        await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        when = today if today is not None else await database_today(conn)
        # Read again under the lock: another worker may have made some while we waited.
        shape = await shape_of(conn, table)
        assert shape is not None
        created: list[str] = []
        for day in days_wanted(when, premake_days):
            if any(partition.covers(day) for partition in shape.partitions):
                continue
            name = table.day_partition(day)
            exists = await (
                await conn.execute(_EXISTS, {"name": f"{shape.schema}.{name}"})
            ).fetchone()
            if exists is not None and exists[0]:
                # A table of that name attached to nothing (a day detached and not yet
                # dropped): never made over; the retention pass finishes it.
                logger.warning(
                    "a day's partition name is taken by a detached table",
                    extra={"fields": {"table": table.table, "partition": name}},
                )
                continue
            await _create_day(conn, table, shape.schema, day)
            created.append(name)
        after = await shape_of(conn, table)
        assert after is not None
    if created:
        logger.info(
            "day partitions made ahead",
            extra={"fields": {"table": table.table, "created": created}},
        )
    return Made(table.table, True, tuple(created), after.days_ahead(when))
