"""Refuse to start behind a transaction pooler that cannot carry prepared statements.

The service prepares every statement on the server at its first use on a connection
(`prepare_threshold` 0, app/db/database.py). A pooler in transaction mode (PgBouncer's
`pool_mode = transaction`) hands each transaction to whichever server session is free, so a
statement prepared by one client connection is missing on the next session ("prepared
statement does not exist"), or one client's `_pg3_0` is already there, prepared by another
("prepared statement already exists"). PgBouncer 1.21 and later rename and re-prepare them
itself when `max_prepared_statements` is above 0; older ones, and that setting left at 0,
cannot. Such a setup fails at random under load, so it is found at start instead:

Two connections are opened as the pool opens them, one after the other, and each runs one
prepared statement while the first stays connected. Each client connection has its own
server session when nothing pools in between (or a session pooler does), so both succeed
on two backends. A transaction pooler hands the second client the session the first one
just released (PgBouncer reuses the most recently freed one), and then either the second
`Parse` of `_pg3_0` fails with `DuplicatePreparedStatement` (no prepared statement support):
the start is refused with `PoolerRefused` (so it is when the first one already fails so,
given a session that another process's connection prepared in); or both succeed on the
same backend (the pooler carries prepared statements): the start goes on, and the sharing
is logged.

With `PAYMENTS_DB_PREPARE=false` nothing is prepared, any pooler works, and this check is
not made. A database that cannot be reached at start skips it (the pool then waits for the
database as usual, docs/operations.md).
"""

from __future__ import annotations

import logging
from typing import Any

from psycopg import AsyncConnection, OperationalError
from psycopg.errors import DuplicatePreparedStatement

logger = logging.getLogger("payments.db")

PROBE = "SELECT pg_backend_pid()"


class PoolerRefused(RuntimeError):
    """DATABASE_URL reaches a transaction pooler that cannot carry prepared statements."""


REFUSAL = (
    "payments: DATABASE_URL reaches a pooler in transaction mode (PgBouncer's pool_mode ="
    " transaction?) that does not carry prepared statements: two client connections were"
    " given the same server session, and the second could not prepare its statement"
    " ({error}). The service prepares every statement on the server. Either let the pooler"
    " carry them (PgBouncer 1.21 or later with max_prepared_statements > 0), use"
    " pool_mode = session, or set PAYMENTS_DB_PREPARE=false (docs/operations.md)."
)


async def _backend_pid(conn: AsyncConnection[Any]) -> int:
    cursor = await conn.execute(PROBE, prepare=True)
    row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def refuse_unsafe_pooler(conninfo: str, **kwargs: Any) -> None:
    """Raise `PoolerRefused` if the connections of `conninfo` share unprepared sessions."""
    try:
        first = await AsyncConnection.connect(conninfo, **kwargs)
    except OperationalError:
        logger.warning("the database is unreachable at start; the pooler check is skipped")
        return
    try:
        first_pid = await _backend_pid(first)
        second = await AsyncConnection.connect(conninfo, **kwargs)
        try:
            second_pid = await _backend_pid(second)
        finally:
            await second.close()
    except DuplicatePreparedStatement as error:
        # On the second connection; or on the first, given a session that another
        # client connection (an earlier process) prepared its `_pg3_0` in.
        raise PoolerRefused(REFUSAL.format(error=str(error).strip())) from None
    except OperationalError:
        logger.warning("the database went away during the pooler check; it is skipped")
        return
    finally:
        await first.close()
    if first_pid == second_pid:
        logger.info(
            "two client connections share server session %s: a transaction pooler that"
            " carries prepared statements",
            first_pid,
        )
