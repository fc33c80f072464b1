"""The worker process: without PAYMENTS_BROKER_URL it publishes nothing and writes nothing
for the broker; with it, `payments worker --once` publishes what is due."""

from __future__ import annotations

import psycopg
from psycopg.rows import DictRow

from app.events import publication
from tests.broker.events.conftest import Rabbit
from tests.broker.events.rows import feed, write_events
from tests.support.control.spawner import Spawner
from tests.support.factories.tenants import TenantHandle
from tests.support.fixtures.repository import AsyncDb

Db = psycopg.Connection[DictRow]


def _cursors(db: Db, exchange: str) -> int:
    row = db.execute(
        "SELECT count(*) AS n FROM event_publication_cursors WHERE exchange = %s", (exchange,)
    ).fetchone()
    assert row is not None
    return int(row["n"])


def test_a_worker_without_a_broker_publishes_nothing_and_keeps_nothing_for_it(
    spawn: Spawner,
    db: Db,
    tenant: TenantHandle,
    async_db: AsyncDb,
    amqp_url: str,
    rabbit: Rabbit,
) -> None:
    everything = rabbit.queue("#")

    async def begin() -> None:
        # Publishing to the exchange began: a worker with the broker ran once.
        async with async_db.db.connection() as conn:
            await publication.begin(conn, exchange=rabbit.exchange)

    async_db.run(begin())
    write_events(db, tenant.id, 1)
    exchange = {"PAYMENTS_BROKER_EVENTS_EXCHANGE": rabbit.exchange}

    unconfigured = spawn.worker(once=True, **exchange)
    assert unconfigured.wait_exit() == 0, unconfigured.log()
    assert rabbit.drain(everything) == []
    assert _cursors(db, rabbit.exchange) == 0

    configured = spawn.worker(once=True, PAYMENTS_BROKER_URL=amqp_url, **exchange)
    assert configured.wait_exit() == 0, configured.log()
    # Only this tenant's: the worker's other jobs may write events of other tests' tenants
    # (a hold another test left lapsed expires), and those are published too.
    published = [
        str(message.message_id)
        for message in rabbit.drain(everything)
        if (message.headers or {}).get("tenant_id") == str(tenant.id)
    ]
    assert published == feed(db, tenant.id)
    assert _cursors(db, rabbit.exchange) > 0
