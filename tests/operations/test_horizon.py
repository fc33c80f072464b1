"""The recovery claim reads the days from the backlog's horizon on, and an operation older
than a kept horizon is claimed once the horizon is read again.

The horizon (`app/operations/horizon.py`) is the start of the day of the oldest operation in
a state the recovery scans look for. These tests make operations days old on a database of
their own and claim them as the worker does; which partitions the statements read is
tests/partitions/test_pruning.py's.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, time

import psycopg
import pytest
from psycopg.rows import DictRow, dict_row

from app.db.database import open_database
from app.db.migrate import upgrade_head
from app.operations import leases
from app.operations.horizon import HORIZON_REFRESH_S, Horizon, read_horizon
from app.operations.values import DueRef
from app.settings import Settings
from tests.support.control.database import throwaway_database

Db = psycopg.Connection[DictRow]

_INSERT = """
    INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint,
                            state, next_check_at, created_at, completed_at)
    VALUES (%(id)s, %(tenant)s, 'create_payment', %(key)s, 'f', %(state)s::text,
            CASE WHEN %(state)s::text = 'UNKNOWN_REQUIRES_RECOVERY' THEN now() END,
            now() - make_interval(days => %(days_ago)s),
            CASE WHEN %(state)s::text IN ('COMPLETED', 'FAILED') THEN now() END)
"""


@pytest.fixture(scope="module")
def horizon_url(database_url: str) -> Iterator[str]:
    with throwaway_database(database_url, "payments_horizon") as url:
        upgrade_head(url)
        yield url


@pytest.fixture
def horizon_db(horizon_url: str) -> Iterator[Db]:
    with psycopg.connect(horizon_url, autocommit=True, row_factory=dict_row) as conn:
        yield conn
        conn.execute("DELETE FROM operations")
        conn.execute("DELETE FROM idempotency_keys")
        conn.execute("DELETE FROM tenants")


@pytest.fixture
def tenant(horizon_db: Db) -> uuid.UUID:
    tenant_id = uuid.uuid4()
    horizon_db.execute("INSERT INTO tenants (id, name) VALUES (%s, 'horizon')", (tenant_id,))
    return tenant_id


def _operation(db: Db, tenant: uuid.UUID, state: str, *, days_ago: int) -> uuid.UUID:
    """An operation made `days_ago` days ago, in `state` now, without an owner."""
    operation_id = uuid.uuid4()
    params = {"id": operation_id, "tenant": tenant, "state": state, "days_ago": days_ago}
    db.execute(_INSERT, params | {"key": f"horizon-{operation_id}"})
    return operation_id


def _day_start(db: Db, days_ago: int) -> datetime:
    row = db.execute(
        "SELECT (now() - make_interval(days => %s))::date AS day", (days_ago,)
    ).fetchone()
    assert row is not None
    return datetime.combine(row["day"], time(0), tzinfo=UTC)


def _read(url: str) -> datetime:
    async def read() -> datetime:
        settings = Settings.model_validate({"DATABASE_URL": url})
        opened = open_database(settings, application_name="horizon")
        async with opened as db, db.connection() as conn:
            return await read_horizon(conn)

    return asyncio.run(read())


def test_the_horizon_is_the_day_of_the_oldest_operation_the_scans_look_for(
    horizon_url: str, horizon_db: Db, tenant: uuid.UUID
) -> None:
    assert _read(horizon_url) == _day_start(horizon_db, 0)
    # Final ones, and one waiting for its client's retry: not what the scans look for.
    _operation(horizon_db, tenant, "COMPLETED", days_ago=10)
    _operation(horizon_db, tenant, "FAILED", days_ago=9)
    _operation(horizon_db, tenant, "FAILED_RETRYABLE", days_ago=8)
    assert _read(horizon_url) == _day_start(horizon_db, 0)

    _operation(horizon_db, tenant, "UNKNOWN_REQUIRES_RECOVERY", days_ago=3)
    assert _read(horizon_url) == _day_start(horizon_db, 3)
    _operation(horizon_db, tenant, "PROVIDER_REQUEST_SENT", days_ago=4)
    assert _read(horizon_url) == _day_start(horizon_db, 4)
    _operation(horizon_db, tenant, "RECEIVED", days_ago=5)
    assert _read(horizon_url) == _day_start(horizon_db, 5)


def test_an_operation_back_in_flight_from_before_the_kept_horizon_is_claimed_once_read_again(
    horizon_url: str, horizon_db: Db, tenant: uuid.UUID
) -> None:
    waiting = _operation(horizon_db, tenant, "FAILED_RETRYABLE", days_ago=3)
    clock = [0.0]
    horizon = Horizon(clock=lambda: clock[0])

    async def claims() -> tuple[datetime, list[DueRef], list[DueRef]]:
        settings = Settings.model_validate({"DATABASE_URL": horizon_url})
        opened = open_database(settings, application_name="horizon")
        async with opened as db, db.connection() as conn:

            async def claim() -> list[DueRef]:
                return await leases.claim_due(
                    conn, owner="worker:horizon", lease_s=30, limit=10, horizon=horizon
                )

            kept = await horizon.since(conn)
            assert await claim() == []
            # Its client retried and the request's process died: in flight, no owner,
            # older than the horizon the worker keeps.
            horizon_db.execute(
                "UPDATE operations SET state = 'PROVIDER_REQUEST_SENT' WHERE id = %s",
                (waiting,),
            )
            before = await claim()
            clock[0] += HORIZON_REFRESH_S
            after = await claim()
            return kept, before, after

    kept, before, after = asyncio.run(claims())
    assert kept == _day_start(horizon_db, 0)
    assert before == []
    assert [due.ref.id for due in after] == [waiting]
