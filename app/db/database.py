"""The runtime's connection pool and the one place that owns transactions.

The service talks to PostgreSQL through psycopg 3 directly, on a pool sized to the
concurrency it serves: the schema is declared with SQLAlchemy (models, Alembic migrations),
but the request path sends plain SQL, each statement a constant in its repository. Measured,
the ORM unit of work and statement compilation were half the API's CPU per payment.

Connections are in autocommit mode: a statement sent through `connection()` is its own
transaction (one round trip), and `transaction()` wraps several statements in one, committing
when the block ends normally and rolling back on any exception. Repositories execute; they
never commit. Every transaction is short: none is open across a provider call. psycopg
prepares a statement on the server once it has run a few times, so the hot statements are
parsed and planned once per connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from app.settings import Settings

Connection = AsyncConnection[TupleRow]


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


class Database:
    """A pool of autocommit connections, and the transaction scope."""

    def __init__(self, pool: AsyncConnectionPool[Connection]):
        self._pool = pool

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """A pooled connection; each statement on it commits on its own."""
        async with self._pool.connection() as conn:
            yield conn

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        """One short transaction: commit on success, roll back on any exception."""
        async with self._pool.connection() as conn, conn.transaction():
            yield conn

    async def close(self) -> None:
        await self._pool.close()


@asynccontextmanager
async def open_database(settings: Settings, *, application_name: str) -> AsyncIterator[Database]:
    """A `Database` on `settings.database_url`, its pool open for the block's duration.

    The pool holds `PAYMENTS_DB_POOL_SIZE` connections, opened at start and kept: a pool
    smaller than the concurrency it serves makes requests open and close connections (and
    PostgreSQL fork a backend) on the hot path.
    """
    if settings.database_url is None:
        raise ValueError("DATABASE_URL is not set")
    pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
        conninfo(settings.database_url),
        min_size=settings.db_pool_size,
        max_size=settings.db_pool_size,
        timeout=10,
        max_lifetime=1800,
        open=False,
        kwargs={
            "autocommit": True,
            "options": session_options(settings),
            "application_name": application_name,
            "connect_timeout": 5,
        },
    )
    await pool.open(wait=False)
    try:
        yield Database(pool)
    finally:
        await pool.close()
