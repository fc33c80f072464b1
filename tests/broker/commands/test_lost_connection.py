"""The consumer's connection to the broker lost: it reconnects and carries on, the delivery
it held is answered again by replay (never acked on the channel that is gone), and a stop
asked for while the broker is away still stops it.

The consumer reaches the broker through a proxy the test cuts (`tests/broker/proxy.py`); it
reconnects every 0.2 s (`reconnect_interval` in its URL) rather than aio-pika's 5.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg.rows import DictRow

from tests.broker.conftest import Rig
from tests.broker.proxy import Proxy
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body
from tests.support.factories.tenants import TenantHandle
from tests.support.readers.operations import operation_by_key, payment_for

Db = psycopg.Connection[DictRow]
# aio-pika's line when the robust connection has lost its connection and will open another.
RECONNECTING = "Reconnecting after"


@pytest.fixture
def proxy(broker_url: str) -> Iterator[Proxy]:
    parts = urlsplit(broker_url)
    with Proxy((parts.hostname or "127.0.0.1", parts.port or 5672)) as made:
        yield made


def _through(proxy: Proxy, broker_url: str) -> str:
    parts = urlsplit(broker_url)
    netloc = parts.netloc.rsplit("@", 1)
    where = f"127.0.0.1:{proxy.port}"
    auth = f"{netloc[0]}@" if len(netloc) == 2 else ""
    return f"{parts.scheme}://{auth}{where}{parts.path or '/'}?reconnect_interval=0.2"


def _headers(tenant: TenantHandle, key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {tenant.api_key}", "idempotency-key": key}


def test_a_delivery_held_when_the_connection_drops_is_answered_again_by_replay(
    proxy: Proxy, rig: Rig, broker_url: str, tenant: TenantHandle, db: Db, provider: Process
) -> None:
    # Each delivery waits 1 s after its outcome is committed: the connection is cut then.
    consumer = rig.consumers.start(
        PAYMENTS_BROKER_URL=_through(proxy, broker_url),
        PAYMENTS_FAILPOINTS="command_before_ack=1",
    )
    key = new_key()
    correlation_id = rig.amqp.send(payment_body(), headers=_headers(tenant, key))

    def committed() -> bool:
        op = operation_by_key(db, tenant, key)
        return op is not None and op["state"] == "COMPLETED"

    wait_until(committed, message="the outcome to be committed")
    proxy.cut(refuse=False)
    reply = rig.amqp.reply()

    # The first delivery's answer was never sent (its channel was gone); the broker gave the
    # command to the reconnected consumer, which replayed the stored outcome.
    assert reply.correlation_id == correlation_id
    assert reply.status == 201
    assert reply.headers["idempotent-replayed"] == "true"
    log = consumer.log()
    assert RECONNECTING in log
    assert "the delivery's channel closed before its ack" in log
    op = operation_by_key(db, tenant, key)
    assert op is not None
    assert provider.url is not None
    provider_key = payment_for(db, op["id"])["provider_key"]
    assert len(FaultInjector(provider.url).charges(idempotency_key=provider_key)) == 1
    # Still consuming, on its new connection.
    rig.amqp.send(payment_body(), headers=_headers(tenant, new_key()))
    assert rig.amqp.reply().status == 201


def test_a_consumer_stops_on_sigterm_while_the_broker_is_away(
    proxy: Proxy, rig: Rig, broker_url: str
) -> None:
    consumer = rig.consumers.start(PAYMENTS_BROKER_URL=_through(proxy, broker_url))
    proxy.cut(refuse=True)
    wait_until(lambda: RECONNECTING in consumer.log(), message="the consumer to lose the broker")

    consumer.signal(signal.SIGTERM)

    assert consumer.wait_exit(timeout=20) == 0
    assert "could not cancel the consuming" in consumer.log()
