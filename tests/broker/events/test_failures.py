"""A broker that nacks, is unreachable, or goes silent: the events it did not confirm stay
unpublished, and go out once it is back, after the tenant's backoff."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.rows import DictRow

from tests.broker.events.conftest import AMQP_HOST, AMQP_PORT, Publishers, Rabbit
from tests.broker.events.proxy import Proxy
from tests.broker.events.rows import backoff_passed, cursor, feed, write_events
from tests.support.control.processes import free_port
from tests.support.control.waiting import wait_until
from tests.support.factories.tenants import TenantHandle
from tests.support.fixtures.repository import AsyncDb

Db = psycopg.Connection[DictRow]


@pytest.fixture
def proxy(amqp_url: str, async_db: AsyncDb) -> Iterator[Proxy]:
    running = Proxy((AMQP_HOST, AMQP_PORT))
    async_db.run(running.start())
    yield running
    async_db.run(running.close())


def test_a_nacked_event_stays_unpublished_until_the_broker_confirms_it(
    db: Db, tenant: TenantHandle, rabbit: Rabbit, publishers: Publishers
) -> None:
    # A queue that holds one message and has the broker nack any publish beyond it.
    full = rabbit.queue("#", {"x-max-length": 1, "x-overflow": "reject-publish"})
    publishing = publishers()
    publishing.run_pass()
    write_events(db, tenant.id, 3)
    first, second, third = feed(db, tenant.id)

    publishing.run_pass()

    assert rabbit.ids(full) == [first]
    position = cursor(db, tenant.id, rabbit.exchange)
    assert position is not None
    # Marked published as far as the broker confirmed: the first, not the nacked second.
    assert position["after"] == first
    assert position["attempts"] == 1
    assert "nack" in position["last_error"]
    assert publishing.count("payments_broker_events_published_total") == 1
    assert (
        publishing.count("payments_broker_event_publish_failures_total", {"failure": "nack"}) == 1
    )

    # The queue has room again (it was drained); once the backoff has passed, the second
    # goes out, and the third is nacked in its turn.
    backoff_passed(db, rabbit.exchange)
    publishing.run_pass()
    assert rabbit.ids(full) == [second]
    backoff_passed(db, rabbit.exchange)
    publishing.run_pass()
    assert rabbit.ids(full) == [third]
    position = cursor(db, tenant.id, rabbit.exchange)
    assert position is not None
    assert (position["after"], position["attempts"], position["last_error"]) == (third, 0, None)


def test_an_unreachable_broker_leaves_the_events_for_later_after_the_backoff(
    db: Db, tenant: TenantHandle, rabbit: Rabbit, publishers: Publishers
) -> None:
    everything = rabbit.queue("#")
    down = publishers(url=f"amqp://guest:guest@127.0.0.1:{free_port()}/", worker="worker:a")
    down.run_pass()
    write_events(db, tenant.id, 2)

    assert down.run_pass() == 1
    position = cursor(db, tenant.id, rabbit.exchange)
    assert position is not None
    assert position["after"] is None
    assert position["attempts"] == 1
    assert position["last_error"]
    assert down.count("payments_broker_event_publish_failures_total", {"failure": "connect"}) == 1

    # The broker is reachable now (another worker has the right address), but the tenant
    # waits out its backoff: nothing is claimed before it has passed.
    up = publishers(worker="worker:b")
    assert up.run_pass() == 0
    assert rabbit.drain(everything) == []
    backoff_passed(db, rabbit.exchange)
    assert up.run_pass() == 1
    assert rabbit.ids(everything) == feed(db, tenant.id)
    position = cursor(db, tenant.id, rabbit.exchange)
    assert position is not None
    assert (position["after"], position["attempts"]) == (feed(db, tenant.id)[-1], 0)


def test_a_connection_gone_silent_times_out_and_the_next_attempt_opens_another(
    db: Db, tenant: TenantHandle, rabbit: Rabbit, publishers: Publishers, proxy: Proxy
) -> None:
    everything = rabbit.queue("#")
    settings = {"broker_events_timeout_s": 1, "broker_events_lease_s": 5}
    publishing = publishers(url=f"amqp://guest:guest@127.0.0.1:{proxy.port}/", **settings)
    publishing.run_pass()
    write_events(db, tenant.id, 1)
    publishing.run_pass()
    [first] = feed(db, tenant.id)
    assert rabbit.ids(everything) == [first]

    # The network between worker and broker drops everything from now on, silently.
    proxy.cut()
    write_events(db, tenant.id, 1)
    publishing.run_pass()
    position = cursor(db, tenant.id, rabbit.exchange)
    assert position is not None
    assert position["after"] == first
    assert position["last_error"] == "no confirm within 1s"
    assert (
        publishing.count("payments_broker_event_publish_failures_total", {"failure": "unconfirmed"})
        == 1
    )

    # The silent connection still looks open; the next attempt does not trust it.
    backoff_passed(db, rabbit.exchange)
    publishing.run_pass()
    assert rabbit.ids(everything) == feed(db, tenant.id)[1:]
    position = cursor(db, tenant.id, rabbit.exchange)
    assert position is not None
    assert (position["after"], position["attempts"]) == (feed(db, tenant.id)[-1], 0)


def test_a_connection_closed_between_passes_is_opened_again_before_publishing(
    db: Db,
    tenant: TenantHandle,
    async_db: AsyncDb,
    rabbit: Rabbit,
    publishers: Publishers,
    proxy: Proxy,
) -> None:
    everything = rabbit.queue("#")
    publishing = publishers(url=f"amqp://guest:guest@127.0.0.1:{proxy.port}/")
    publishing.run_pass()
    write_events(db, tenant.id, 1)
    publishing.run_pass()
    assert publishing.publisher.connected

    # The broker restarts while the worker is idle: its connection is closed.
    proxy.reset()

    async def connected() -> bool:
        # The event loop runs a moment, for the connection to read what came.
        await asyncio.sleep(0.01)
        return publishing.publisher.connected

    wait_until(lambda: not async_db.run(connected()), message="the connection seen closed")
    write_events(db, tenant.id, 1)
    publishing.run_pass()
    # Published at the first attempt, on a new connection: no failure, no backoff.
    assert rabbit.ids(everything) == feed(db, tenant.id)
    failures = publishing.metrics.broker_publish_failures
    assert not [sample for metric in failures.collect() for sample in metric.samples]
