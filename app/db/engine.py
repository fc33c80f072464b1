"""Engine and the one place that owns transactions.

`transaction()` is the only way application code opens a transaction: it commits when the
block ends normally and rolls back on any exception. Services and repositories flush and
execute; they never commit. Every transaction is short: none is ever held open across a call
to the provider.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from app.settings import Settings


def sqlalchemy_url(database_url: str) -> str:
    """The SQLAlchemy URL for a `postgresql://` URL, on the psycopg 3 driver."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if database_url.startswith(prefix):
            return "postgresql+psycopg://" + database_url.removeprefix(prefix)
    raise ValueError("DATABASE_URL must be a postgresql:// URL")


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


def build_engine(settings: Settings, *, application_name: str) -> AsyncEngine:
    """An async engine for `settings.database_url` with pool and timeouts applied."""
    if settings.database_url is None:
        raise ValueError("DATABASE_URL is not set")
    return create_async_engine(
        sqlalchemy_url(settings.database_url),
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_pool_size,
        # No pre-ping: it costs a round trip per transaction. A connection found dead
        # (database restarted) fails that one transaction, which is answered 503 and
        # retried by the client, and SQLAlchemy then discards the pool's stale connections.
        pool_pre_ping=False,
        pool_recycle=1800,
        pool_timeout=10,
        # Statement parameters hold idempotency keys and request fields; a database error
        # must not copy them into the logs (see docs/operations.md, Logs).
        hide_parameters=True,
        connect_args={
            "options": session_options(settings),
            "application_name": application_name,
            "connect_timeout": 5,
        },
    )


SessionMaker = async_sessionmaker[AsyncSession]


def build_sessionmaker(engine: AsyncEngine) -> SessionMaker:
    """Sessions that never expire loaded objects on commit (we read after committing)."""
    return async_sessionmaker(engine, expire_on_commit=False, autoflush=False)


@asynccontextmanager
async def transaction(sessions: SessionMaker) -> AsyncIterator[AsyncSession]:
    """One short database transaction: commit on success, roll back on any exception."""
    async with sessions() as session, session.begin():
        yield session
