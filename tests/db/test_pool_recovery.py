"""The pool after its server went away: one failed request, then every idle connection is
checked and the dead ones replaced, instead of each failing a request of its own.

This test runs its own embedded PostgreSQL, so restarting it touches no other test.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from app.db.database import Database, open_database
from app.db.embedded import EmbeddedPostgres
from app.settings import Settings

POOL_SIZE = 5


@pytest.fixture
def own_server() -> Iterator[EmbeddedPostgres]:
    data_dir = Path(tempfile.mkdtemp(prefix="payments-pool-pg-"))
    server = EmbeddedPostgres(data_dir, durable=False, database="payments_pool")
    server.start()
    yield server
    server.stop(mode="immediate")
    shutil.rmtree(data_dir, ignore_errors=True)


async def _select_one(db: Database) -> None:
    async with db.connection() as conn:
        await conn.execute("SELECT 1")


async def _server_restarted_under_an_idle_pool(server: EmbeddedPostgres) -> list[str]:
    settings = Settings.model_validate({"DATABASE_URL": server.url(), "db_pool_size": POOL_SIZE})
    failures: list[str] = []
    async with open_database(settings, application_name="pool-recovery-test") as db:
        pool = db._pool
        await pool.wait(timeout=20)
        assert pool.get_stats()["pool_available"] == POOL_SIZE
        # Every pooled connection now points at a server process that is about to die.
        server.stop(mode="immediate")
        server.start()
        with pytest.raises(psycopg.OperationalError):
            await _select_one(db)
        checking = db._checking
        assert checking is not None, "a failed connection starts a check of the pool"
        await checking
        for _ in range(POOL_SIZE * 2):
            try:
                await _select_one(db)
            except psycopg.OperationalError as exc:
                failures.append(str(exc))
    return failures


def test_one_failure_then_the_pool_replaces_its_dead_connections(
    own_server: EmbeddedPostgres,
) -> None:
    failures = asyncio.run(_server_restarted_under_an_idle_pool(own_server))
    assert failures == []
