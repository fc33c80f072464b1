"""A key claimed a millisecond before midnight and retried a millisecond after: one
operation, one charge, the first answer replayed.

`operations` is partitioned by the UTC day of its `created_at`, and a unique key of a
partitioned table holds within a partition only: the retry after midnight would go to the
next day's partition, where nothing holds its key. The key table (`idempotency_keys`,
never partitioned) decides the claim instead (docs/scaling.md). The protocol model checks
the rule with a clock that turns the day (its `unique-per-day` mutation charges twice);
this test runs the service itself across a real partition boundary.

The database's clock is the test's: `now()` in the service's statements resolves to
`clock.now()`, a function reading a one-row table, because the database's search path is
`clock, pg_catalog, public` (pg_catalog listed after the schema, so the schema's function
shadows the built-in one). The API, the fake provider and every statement are the real
ones; only the time they read is chosen. The midnight is the database's own: the end of the
first day partition its migration made (the day it was migrated on), with the next day's
made ahead, whatever the test's clock reads by then.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, time, timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import DictRow, dict_row

from app.db.migrate import upgrade_head
from app.partitions.layout import OPERATIONS
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.system import start_api
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle, api_client, make_tenant

Db = psycopg.Connection[DictRow]

# A millisecond either side of the midnight.
TICK = timedelta(milliseconds=1)

_CLOCK = (
    "CREATE SCHEMA clock",
    "CREATE TABLE clock.at (at timestamptz NOT NULL)",
    "CREATE FUNCTION clock.now() RETURNS timestamptz LANGUAGE sql STABLE"
    " AS 'SELECT at FROM clock.at'",
)


_DAY_PARTITIONS = (
    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
    " WHERE i.inhparent = %s::regclass"
)


@pytest.fixture
def midnight(scratch_database: str) -> datetime:
    """The scratch database at the head; the midnight after its migration's first day (the
    day it was migrated on), read from its partitions: that day's and the next are made."""
    upgrade_head(scratch_database)
    with psycopg.connect(scratch_database) as conn:
        names = [row[0] for row in conn.execute(_DAY_PARTITIONS, (OPERATIONS.table,))]
    days = sorted(day for name in names if (day := OPERATIONS.day_of(name)) is not None)
    assert days[1] == days[0] + timedelta(days=1), days
    return datetime.combine(days[1], time(), UTC)


@pytest.fixture
def clocked(scratch_database: str, midnight: datetime) -> Iterator[Db]:
    """The migrated scratch database, its `now()` the test's clock (a millisecond before
    `midnight`); a connection to it."""
    with psycopg.connect(scratch_database, autocommit=True, row_factory=dict_row) as conn:
        for statement in _CLOCK:
            conn.execute(statement)
        conn.execute("INSERT INTO clock.at VALUES (%s)", (midnight - TICK,))
        name = conn.execute("SELECT current_database() AS name").fetchone()
        assert name is not None
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET search_path = clock, pg_catalog, public").format(
                sql.Identifier(name["name"])
            )
        )
        yield conn


@pytest.fixture
def api(
    clocked: Db, scratch_database: str, base_env: dict[str, str], work_dir: Path
) -> Iterator[Process]:
    process = start_api(work_dir / "logs", {**base_env, "DATABASE_URL": scratch_database})
    try:
        yield process
    finally:
        process.stop()


def _set_clock(db: Db, at: datetime) -> None:
    db.execute("UPDATE clock.at SET at = %s", (at,))


def _operations_of(db: Db, tenant: TenantHandle, key: str) -> list[dict[str, object]]:
    return db.execute(
        "SELECT id, created_at, tableoid::regclass::text AS partition FROM operations"
        " WHERE tenant_id = %s AND idempotency_key = %s",
        (tenant.id, key),
    ).fetchall()


def test_the_clock_is_the_tests(clocked: Db, scratch_database: str, midnight: datetime) -> None:
    # A new connection (as the API's) reads the test's clock, and moves with it.
    with psycopg.connect(scratch_database) as conn:
        assert conn.execute("SELECT now()").fetchone() == (midnight - TICK,)
        _set_clock(clocked, midnight + TICK)
        assert conn.execute("SELECT now()").fetchone() == (midnight + TICK,)


def test_a_retry_after_midnight_replays_the_claim_made_before_it(
    clocked: Db, api: Process, faults: FaultInjector, midnight: datetime
) -> None:
    before, after = midnight - TICK, midnight + TICK
    tenant = make_tenant(clocked)
    key, body = new_key(), payment_body()
    with api_client(api, tenant) as client:
        first = post_payment(client, body, key=key)
        assert first.status_code == 201, first.text
        (claimed,) = _operations_of(clocked, tenant, key)
        assert claimed["created_at"] == before
        assert claimed["partition"] == OPERATIONS.day_partition(before.date())

        # The next day's partition alone would take the key again: nothing in it holds it.
        assert _inserted_and_rolled_back(clocked, tenant, key, after) == 1

        _set_clock(clocked, after)
        retry = post_payment(client, body, key=key)

    assert retry.status_code == 201, retry.text
    assert retry.content == first.content
    assert _operations_of(clocked, tenant, key) == [claimed]
    payment = clocked.execute(
        "SELECT provider_key, created_at FROM payments WHERE operation_id = %s", (claimed["id"],)
    ).fetchone()
    assert payment is not None
    assert payment["created_at"] == before
    charged = faults.charges(idempotency_key=payment["provider_key"])
    assert len(charged) == 1, charged


def _inserted_and_rolled_back(db: Db, tenant: TenantHandle, key: str, at: datetime) -> int:
    """How many rows `operations` takes for `key` at `at`, in a transaction rolled back."""
    with db.transaction():
        inserted = db.execute(
            "INSERT INTO operations (id, tenant_id, operation_name, idempotency_key,"
            " fingerprint, state, created_at)"
            " VALUES (%s, %s, 'create_payment', %s, 'f', 'RECEIVED', %s)",
            (uuid.uuid4(), tenant.id, key, at),
        ).rowcount
        raise psycopg.Rollback
    return inserted
