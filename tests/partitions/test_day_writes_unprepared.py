"""The statements that write one day of a partitioned table are planned with their day.

The pool prepares every statement at its first use (app/db/database.py), and PostgreSQL
plans a prepared statement generically after five executions when that plan looks no
dearer. A generic plan of a write to a day-partitioned table names every partition kept
and sets each up on every execution before pruning to the day's: on 37 days of
PostgreSQL 15, the final transition took 8 to 11 ms so against 1.4 to 1.7 ms planned with
its day (docs/benchmark.md, "20 million, partitioned"). So a verb's statement
(`statements.transition_sql`) and the recovery claim (`leases._CLAIM_DUE`) are sent
unprepared, and are never among the connection's prepared statements, however often they
run on it; the claim of a key beside them is (the connection does prepare).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from app.db.database import open_database
from app.db.migrate import upgrade_head
from app.operations import leases
from app.operations import repository as operations
from app.operations.values import Claimed, Schedule
from app.settings import Settings
from tests.support.control.database import throwaway_database
from tests.support.factories.claims import claim_payment
from tests.support.factories.payments import new_key

RUNS = 7  # more than the five executions after which PostgreSQL may plan generically
_PREPARED = "SELECT statement FROM pg_prepared_statements"


@pytest.fixture
def url(database_url: str) -> Iterator[str]:
    """A database of its own: the operations left unknown here have no payment, which the
    session's workers would try to reconcile."""
    with throwaway_database(database_url, "payments_day_writes") as url:
        upgrade_head(url)
        yield url


async def _run(url: str, tenant: uuid.UUID) -> tuple[set[uuid.UUID], list[str]]:
    """RUNS payments claimed and lost on one connection, then claimed for recovery on it:
    the operations claimed again and the connection's prepared statements."""
    settings = Settings.model_validate({"DATABASE_URL": url})
    async with (
        open_database(settings, application_name="day-writes") as db,
        db.connection() as conn,
    ):
        ids = set()
        for _ in range(RUNS):
            claimed = await claim_payment(
                conn, tenant_id=tenant, operation_id=uuid.uuid4(), key=new_key()
            )
            assert isinstance(claimed, Claimed), claimed
            lost = await operations.mark_unknown(
                conn,
                claimed.ref,
                actor="api:test",
                reason="timed out",
                schedule=Schedule(attempts=1, delay_s=0, needs_attention=False),
            )
            assert lost is not None
            ids.add(lost.id)
        due = await leases.claim_due(conn, owner="worker:test", lease_s=30, limit=1000)
        rows = await (await conn.execute(_PREPARED)).fetchall()
    return ids & {d.ref.id for d in due}, [" ".join(str(row[0]).split()) for row in rows]


def test_verbs_and_the_recovery_claim_are_planned_with_their_day_every_time(url: str) -> None:
    tenant = uuid.uuid4()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'day writes')", (tenant,))
    claimed_again, texts = asyncio.run(_run(url, tenant))
    assert len(claimed_again) == RUNS
    assert any("INSERT INTO idempotency_keys" in text for text in texts), texts
    assert not [t for t in texts if "WITH changed AS ( UPDATE operations" in t]
    assert not [t for t in texts if "WITH stale AS" in t]
