"""A payment's events on the exchange: ids, routing keys, headers and body, each tenant's
in its feed's order, once, however many workers publish."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict

import httpx
import psycopg
from aio_pika import DeliveryMode
from psycopg.rows import DictRow

from app.backlog import read_backlog
from app.observability.metrics import Backlog
from tests.broker.events.conftest import Publishers, Rabbit
from tests.broker.events.rows import cursor, feed, write_events
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle, make_tenant
from tests.support.fixtures.repository import AsyncDb

Db = psycopg.Connection[DictRow]


def _backlog(async_db: AsyncDb) -> Backlog:
    async def read() -> Backlog:
        async with async_db.db.connection() as conn:
            return await read_backlog(conn)

    return async_db.run(read())


def test_a_payments_events_arrive_with_their_ids_routing_keys_headers_and_body(
    client: httpx.Client,
    tenant: TenantHandle,
    db: Db,
    async_db: AsyncDb,
    rabbit: Rabbit,
    publishers: Publishers,
) -> None:
    everything = rabbit.queue("#")
    declines = rabbit.queue("payment.declined")
    publishing = publishers()
    # The first pass begins publishing to the exchange: every event from here on.
    assert publishing.run_pass() == 0
    assert post_payment(client, key=new_key()).status_code == 201
    declined = payment_body(account_id="acc_decline_insufficient_funds")
    assert post_payment(client, declined, key=new_key()).status_code == 402
    events = client.get("/events").json()["data"]
    assert [event["type"] for event in events] == ["payment.succeeded", "payment.declined"]
    backlog = _backlog(async_db)
    assert backlog.broker_events_unpublished[rabbit.exchange] == 2
    assert backlog.broker_oldest_unpublished_s[rabbit.exchange] > 0

    assert publishing.run_pass() == 1

    received = rabbit.drain(everything)
    assert [message.message_id for message in received] == [event["id"] for event in events]
    assert [message.routing_key for message in received] == [event["type"] for event in events]
    for message, event in zip(received, events, strict=True):
        assert message.delivery_mode == DeliveryMode.PERSISTENT
        assert message.content_type == "application/json"
        assert message.type == event["type"]
        assert message.headers == {
            "tenant_id": str(tenant.id),
            "event_type": event["type"],
            "created_at": event["created_at"],
        }
        # The webhook's body: the event as `GET /events/{id}` shows it, compact.
        assert json.loads(message.body) == client.get(f"/events/{event['id']}").json() == event
        assert b" " not in message.body.split(b'"data"')[0]
    assert rabbit.ids(declines) == [events[1]["id"]]
    position = cursor(db, tenant.id, rabbit.exchange)
    assert position is not None
    assert position["after"] == events[-1]["id"]
    assert position["attempts"] == 0
    assert position["last_error"] is None
    assert position["lease_owner"] is None
    assert publishing.count("payments_broker_events_published_total") == 2
    backlog = _backlog(async_db)
    assert backlog.broker_events_unpublished[rabbit.exchange] == 0
    assert backlog.broker_oldest_unpublished_s[rabbit.exchange] == 0
    # Nothing more to publish: the next pass claims no one and sends nothing again.
    assert publishing.run_pass() == 0
    assert rabbit.drain(everything) == []


def test_two_workers_publish_every_tenants_events_once_in_its_feeds_order(
    db: Db, async_db: AsyncDb, rabbit: Rabbit, publishers: Publishers
) -> None:
    everything = rabbit.queue("#")
    first = publishers(worker="worker:first", broker_events_batch_size=7)
    second = publishers(worker="worker:second", broker_events_batch_size=7)
    first.run_pass()
    # More tenants than a worker takes at once, each with more events than a batch, in
    # two transactions; made after publishing began, so their cursors are made by a claim.
    tenants = [make_tenant(db, f"publishing {n}") for n in range(10)]
    for tenant in tenants:
        write_events(db, tenant.id, 10)
        write_events(db, tenant.id, 10, "refund.succeeded")

    async def both() -> tuple[int, int]:
        return await asyncio.gather(first.loop().run(), second.loop().run())

    async_db.run(both())

    by_tenant: dict[str, list[str]] = defaultdict(list)
    for message in rabbit.drain(everything):
        assert message.headers is not None
        by_tenant[str(message.headers["tenant_id"])].append(str(message.message_id))
    assert set(by_tenant) == {str(tenant.id) for tenant in tenants}
    for tenant in tenants:
        # Every event, once, in the feed's order.
        assert by_tenant[str(tenant.id)] == feed(db, tenant.id)
    published = [
        worker.count("payments_broker_events_published_total") for worker in (first, second)
    ]
    assert sum(published) == 200
    assert all(published), "both workers took part"
