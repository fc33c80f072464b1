"""The events table's own rules (`app/partitions/holds.py`): a day's events are kept while a
webhook delivery of one is pending or the broker has not confirmed one. On a database of
the test's own: a pending delivery or a publication in the shared one would be every other
test's worker's to send."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, date, datetime, time

import psycopg

from app.db.migrate import upgrade_head
from app.partitions.calendar import create_ahead
from app.partitions.holds import hold
from app.partitions.layout import PARTITIONED, day_bounds

DAY = date(2101, 3, 4)


def _made_ahead(url: str) -> None:
    """The day's partitions of the real tables, by the calendar (the migrations made the days
    from now on only)."""

    async def make() -> None:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        async with conn:
            for table in PARTITIONED:
                made = await create_ahead(conn, table, premake_days=2, today=DAY)
                assert made.partitioned
                assert table.day_partition(DAY) in made.created

    asyncio.run(make())


def _held(url: str, table: str) -> str | None:
    lower, upper = day_bounds(DAY)

    async def ask() -> str | None:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        async with conn:
            return await hold(conn, table, lower=lower, upper=upper)

    return asyncio.run(ask())


def test_an_events_day_is_kept_until_its_events_are_delivered_and_published(
    scratch_database: str,
) -> None:
    upgrade_head(scratch_database)
    _made_ahead(scratch_database)
    tenant, operation, event = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    endpoint, delivery = uuid.uuid4(), uuid.uuid4()
    created = datetime.combine(DAY, time(12), tzinfo=UTC)
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'events')", (tenant,))
        # A final operation of a settled day, its idempotency key released: only the
        # events' own rules can keep the day.
        conn.execute(
            "INSERT INTO operations (id, tenant_id, operation_name, idempotency_key,"
            " fingerprint, state, created_at, completed_at)"
            " VALUES (%s, %s, 'create_payment', NULL, %s, 'COMPLETED', %s, %s)",
            (operation, tenant, "0" * 64, created, created),
        )
        conn.execute(
            "INSERT INTO settlement_days (day, last_finished_at) VALUES (%s, now())", (DAY,)
        )
        conn.execute(
            "INSERT INTO events (id, tenant_id, type, operation_id, operation_created_at, data)"
            " VALUES (%s, %s, 'payment.succeeded', %s, %s, '{}')",
            (event, tenant, operation, created),
        )
        conn.execute(
            "INSERT INTO webhook_endpoints (id, tenant_id, url, secret)"
            " VALUES (%s, %s, 'https://example.invalid/hook', 'whsec_test')",
            (endpoint, tenant),
        )
        conn.execute(
            "INSERT INTO webhook_deliveries (id, tenant_id, event_id, endpoint_id)"
            " VALUES (%s, %s, %s, %s)",
            (delivery, tenant, event, endpoint),
        )

    assert _held(scratch_database, "events") == "webhook_pending"
    # The other tables of the family are not held by the events' deliveries: the
    # operations' day may go (and with it their payments' and trail's, `operation_kept`).
    assert _held(scratch_database, "operations") is None
    assert _held(scratch_database, "operation_transitions") == "operation_kept"

    with psycopg.connect(scratch_database, autocommit=True) as conn:
        conn.execute(
            "UPDATE webhook_deliveries SET status = 'succeeded' WHERE id = %s", (delivery,)
        )
        # Published to an exchange from before the event; the tenant has no cursor yet.
        conn.execute("INSERT INTO event_publications (exchange, start_txid) VALUES ('x', 0)")
    assert _held(scratch_database, "events") == "event_unpublished"

    with psycopg.connect(scratch_database, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO event_publication_cursors (tenant_id, exchange, after_txid, after_seq)"
            " SELECT tenant_id, 'x', txid, seq FROM events WHERE id = %s",
            (event,),
        )
    assert _held(scratch_database, "events") is None
