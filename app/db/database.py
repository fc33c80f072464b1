"""The runtime's connection pool and the one place that owns transactions.

The service talks to PostgreSQL through psycopg 3 directly, on a pool sized to the
concurrency it serves: the schema is declared with SQLAlchemy (models, Alembic migrations),
but the request path sends plain SQL, each statement a constant in its repository. Measured,
the ORM unit of work and statement compilation were half the API's CPU per payment.

Connections are in autocommit mode: a statement sent through `connection()` is its own
transaction (one round trip), and `transaction()` wraps several statements in one, committing
when the block ends normally and rolling back on any exception. Repositories execute; they
never commit. Every transaction is short: none is open across a provider call. Every
statement is prepared on the server at its first use on a connection (`prepare_threshold`
0; psycopg's default waits for five uses per connection and per parameter types): the
service sends a small fixed set of statements, and parsing and planning its CTE statements
was most of PostgreSQL's CPU per payment until a connection had warmed up. Behind a
transaction pooler that cannot carry prepared statements the start is refused
(app/db/pooler.py), unless `PAYMENTS_DB_PREPARE=false` turns preparing off.

Failover (see docs/operations.md): `DATABASE_URL` may name several hosts in libpq's form
with `target_session_attrs=read-write`; libpq then connects to whichever accepts writes.
When the primary dies, a pooled connection to it fails on its next use with
`OperationalError`, which the API answers `503` with `Retry-After`. That first failure also
makes the pool check its idle connections at once (`AsyncConnectionPool.check`), so the
other dead ones are dropped instead of each failing one more request, and replacements are
opened against the hosts in order until the promoted standby answers. Reconnection attempts
back off for at most `reconnect_timeout`; a slot given up is opened again on demand by the
next request, so a long outage does not leave the pool waiting out an ever longer backoff.

Synchronous replication: a commit whose wait for the synchronous standby is cancelled
stands on the primary alone, and PostgreSQL reports it as a success with a warning. The
pool's connections watch for that warning (`watch_replication`), and such a commit raises
`UnreplicatedCommit` (an `OperationalError`, answered `503`) instead of being acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg import AsyncConnection, OperationalError
from psycopg.errors import Diagnostic, ReadOnlySqlTransaction
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from app.db.pooler import refuse_unsafe_pooler
from app.settings import Settings
from app.tracing.state import statements as traced_statements
from app.tracing.statements import TracedCursor

Connection = AsyncConnection[TupleRow]

logger = logging.getLogger("payments.db")

# How long a failed pool slot keeps retrying its connection (with psycopg_pool's doubling
# backoff from 1 s) before it is given up and left to be reopened on demand.
RECONNECT_TIMEOUT_S = 4.0

# PostgreSQL's warning when a commit's wait for its synchronous standby is cancelled (by
# `statement_timeout`, say): the transaction "has already committed locally, but might not
# have been replicated to the standby", and COMMIT reports success all the same.
SYNC_WAIT_CANCELLED = "canceling wait for synchronous replication"
# Connections on which that warning came, until the statement that drew it returns.
_unreplicated: weakref.WeakSet[Connection] = weakref.WeakSet()


class UnreplicatedCommit(OperationalError):
    """A commit stands on the primary alone: its wait for the synchronous standby was cut.

    Raised instead of reporting success: a failover before a standby catches up would lose
    it, so nothing may be acknowledged on it. Like any `OperationalError` it is answered
    `503`, and what the transaction recorded is recovered as after a lost commit.
    """


async def watch_replication(conn: Connection) -> None:
    """The pool's `configure`: note a commit whose synchronous replication wait was cut."""

    def on_notice(diagnostic: Diagnostic) -> None:
        if (diagnostic.message_primary or "").startswith(SYNC_WAIT_CANCELLED):
            _unreplicated.add(conn)

    conn.add_notice_handler(on_notice)


def _refuse_unreplicated(conn: Connection) -> None:
    if conn in _unreplicated:
        _unreplicated.discard(conn)
        logger.warning("a commit was not replicated to the synchronous standby in time")
        raise UnreplicatedCommit("the commit was not replicated to a synchronous standby")


def conninfo(database_url: str) -> str:
    """A libpq connection string for a `postgresql://` URL (SQLAlchemy's form accepted)."""
    for prefix in ("postgresql+psycopg://", "postgres://"):
        if database_url.startswith(prefix):
            return "postgresql://" + database_url.removeprefix(prefix)
    return database_url


def session_options(settings: Settings) -> str:
    """Server-side limits for every connection, so one stuck request cannot hold locks."""
    return " ".join(
        [
            f"-c statement_timeout={settings.db_statement_timeout_ms}",
            f"-c lock_timeout={settings.db_lock_timeout_ms}",
            f"-c idle_in_transaction_session_timeout={settings.db_idle_in_transaction_timeout_ms}",
            "-c timezone=UTC",
        ]
    )


def connection_limits(settings: Settings) -> dict[str, int]:
    """libpq parameters that bound how long a dead or unreachable server can hold us."""
    connect_s = max(1, round(settings.db_connect_timeout_s))
    return {
        # Per host: with several hosts each gets this long before the next is tried.
        "connect_timeout": connect_s,
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
        # Data sent but not acknowledged by the server's kernel for this long: gone.
        "tcp_user_timeout": 1000 * connect_s * 2,
    }


class Database:
    """A pool of autocommit connections, and the transaction scope."""

    def __init__(self, pool: AsyncConnectionPool[Connection]):
        self._pool = pool
        self._checking: asyncio.Task[None] | None = None

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """A pooled connection; each statement on it commits on its own."""
        try:
            async with self._pool.connection() as conn:
                _unreplicated.discard(conn)
                yield conn
                _refuse_unreplicated(conn)
        except OperationalError:
            self._check_pool_soon()
            raise
        except ReadOnlySqlTransaction:
            self._drain_pool_soon()
            raise

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        """One short transaction: commit on success, roll back on any exception.

        A connection lost during COMMIT leaves it unknown whether the transaction landed:
        the `OperationalError` goes up like any other (the API answers `503`), and what the
        caller owned is recovered as after a crash, once its lease expires.
        """
        try:
            async with self._pool.connection() as conn:
                _unreplicated.discard(conn)
                async with conn.transaction():
                    yield conn
                _refuse_unreplicated(conn)
        except OperationalError:
            self._check_pool_soon()
            raise
        except ReadOnlySqlTransaction:
            self._drain_pool_soon()
            raise

    def _check_pool_soon(self) -> None:
        """After a connection failed, test the idle ones and replace the dead (one at a time)."""
        if self._checking is not None and not self._checking.done():
            return
        logger.warning("database connection failed; checking the pool's connections")
        self._checking = asyncio.get_running_loop().create_task(self._check_pool())

    def _drain_pool_soon(self) -> None:
        """A write found a read-only server: the primary was demoted under live connections.

        They work, so a check would keep them: replace them all instead, and the new ones
        find the server that accepts writes (`target_session_attrs=read-write`).
        """
        if self._checking is not None and not self._checking.done():
            return
        logger.warning("the database is read-only (demoted?); replacing the pool's connections")
        self._checking = asyncio.get_running_loop().create_task(self._check_pool(drain=True))

    async def _check_pool(self, *, drain: bool = False) -> None:
        try:
            await (self._pool.drain() if drain else self._pool.check())
        except Exception:
            logger.warning("checking the pool's connections failed", exc_info=True)

    async def close(self) -> None:
        if self._checking is not None:
            await asyncio.gather(self._checking, return_exceptions=True)
        await self._pool.close()


@asynccontextmanager
async def open_database(settings: Settings, *, application_name: str) -> AsyncIterator[Database]:
    """A `Database` on `settings.database_url`, its pool open for the block's duration.

    The pool holds `PAYMENTS_DB_POOL_SIZE` connections, opened at start and kept: a pool
    smaller than the concurrency it serves makes requests open and close connections (and
    PostgreSQL fork a backend) on the hot path. Connecting, and waiting for a free pooled
    connection, each give up after `PAYMENTS_DB_CONNECT_TIMEOUT_S`; TCP keepalives and
    `tcp_user_timeout` drop a connection whose server vanished without closing it (a dead
    machine, a partition), so no request waits on it past that bound either.
    """
    if settings.database_url is None:
        raise ValueError("DATABASE_URL is not set")
    kwargs: dict[str, Any] = {
        "autocommit": True,
        # None: never prepare (PAYMENTS_DB_PREPARE=false, for a transaction pooler).
        "prepare_threshold": 0 if settings.db_prepare else None,
        "options": session_options(settings),
        "application_name": application_name,
        **connection_limits(settings),
    }
    if traced_statements():
        # Each statement a span under whatever sent it (app/tracing/statements.py).
        kwargs["cursor_factory"] = TracedCursor
    if settings.db_prepare:
        await refuse_unsafe_pooler(conninfo(settings.database_url), **kwargs)
    pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
        conninfo(settings.database_url),
        min_size=settings.db_pool_size,
        max_size=settings.db_pool_size,
        timeout=settings.db_connect_timeout_s,
        max_lifetime=1800,
        reconnect_timeout=RECONNECT_TIMEOUT_S,
        open=False,
        kwargs=kwargs,
        configure=watch_replication,
    )
    await pool.open(wait=False)
    try:
        yield Database(pool)
    finally:
        await pool.close()
