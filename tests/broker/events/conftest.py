"""The events tests' broker: RabbitMQ, each test's own exchange and queues, and the
worker's publishing job run pass by pass in the test's event loop.

RabbitMQ is the machine's (amqp://guest:guest@127.0.0.1:5672/); without it the tests are
skipped, saying so. Every test gets an exchange and queues of its own (unique names,
deleted at its end) and publishes to that exchange only. Publishing begins per exchange
(`app/events/publication.py`), so a test's publisher sees the events written after its
first pass and none of an earlier test's. PostgreSQL is the session's (tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import aio_pika
import psycopg
import pytest
from aio_pika.abc import (
    AbstractChannel,
    AbstractConnection,
    AbstractIncomingMessage,
    AbstractQueue,
)
from psycopg.rows import DictRow

from app.broker.events import PACE, PublishJob
from app.broker.exchange import declare
from app.broker.publisher import ConfirmedPublisher
from app.events.publication import Claimed
from app.jobs.loop import WorkLoop
from app.observability.metrics import Metrics
from app.settings import Settings
from tests.support.fixtures.repository import AsyncDb

AMQP_HOST = "127.0.0.1"
AMQP_PORT = 5672
AMQP_URL = f"amqp://guest:guest@{AMQP_HOST}:{AMQP_PORT}/"
# Every pass of a test ends well within this.
PASS_TIMEOUT_S = 15.0


@pytest.fixture(scope="session")
def amqp_url() -> str:
    try:
        with socket.create_connection((AMQP_HOST, AMQP_PORT), timeout=2):
            pass
    except OSError as exc:
        pytest.skip(f"RabbitMQ does not answer at {AMQP_HOST}:{AMQP_PORT} ({exc})")
    return AMQP_URL


@dataclass
class Rabbit:
    """The test's side of the broker: its exchange, queues bound to it, what they hold."""

    db: AsyncDb
    connection: AbstractConnection
    channel: AbstractChannel
    exchange: str
    queues: list[AbstractQueue] = field(default_factory=list)

    def queue(self, binding: str = "#", arguments: dict[str, Any] | None = None) -> AbstractQueue:
        """A queue of the test's, bound to its exchange with `binding`."""

        async def declare_and_bind() -> AbstractQueue:
            queue = await self.channel.declare_queue(
                f"test.events.{uuid.uuid4().hex}", arguments=arguments
            )
            await queue.bind(self.exchange, binding)
            return queue

        queue = self.db.run(declare_and_bind())
        self.queues.append(queue)
        return queue

    def drain(self, queue: AbstractQueue) -> list[AbstractIncomingMessage]:
        """Every message `queue` holds now, in its order. A confirmed message is already in
        its queues, so after a pass nothing is on its way."""

        async def take() -> list[AbstractIncomingMessage]:
            taken = []
            while (message := await queue.get(no_ack=True, fail=False)) is not None:
                taken.append(message)
            return taken

        return self.db.run(take())

    def ids(self, queue: AbstractQueue) -> list[str]:
        """The message ids (event ids) of every message `queue` holds now, in its order."""
        return [str(message.message_id) for message in self.drain(queue)]

    def close(self) -> None:
        async def clean() -> None:
            for queue in self.queues:
                await queue.delete(if_unused=False, if_empty=False)
            await self.channel.exchange_delete(self.exchange)
            await self.connection.close()

        self.db.run(clean())


@pytest.fixture
def rabbit(amqp_url: str, async_db: AsyncDb, db: psycopg.Connection[DictRow]) -> Iterator[Rabbit]:
    async def connect() -> tuple[AbstractConnection, AbstractChannel]:
        connection = await aio_pika.connect(amqp_url, timeout=5)
        channel = await connection.channel()
        return connection, channel

    connection, channel = async_db.run(connect())
    exchange = f"test.events.{uuid.uuid4().hex}"
    # Declared as every publisher declares it, so the test's queues can bind before any.
    async_db.run(declare(channel, exchange))
    helper = Rabbit(async_db, connection, channel, exchange)
    yield helper
    helper.close()
    # Forget the exchange: its cursors would show every later test's events as its backlog.
    db.execute("DELETE FROM event_publications WHERE exchange = %s", (exchange,))


@dataclass
class Publishing:
    """One worker's publishing job, run a pass at a time in the test's event loop."""

    db: AsyncDb
    job: PublishJob
    publisher: ConfirmedPublisher
    metrics: Metrics

    def loop(self) -> WorkLoop[Claimed]:
        """The worker's loop over the job, as `worker/main.py` makes it."""
        return WorkLoop(self.job, PACE, stopping=asyncio.Event())

    def run_pass(self) -> int:
        """One pass of the worker's loop: claim and publish until nothing is due; the
        tenants claimed. A pass that does not end (a tenant claimed again and again) fails
        the test."""
        return self.db.run(asyncio.wait_for(self.loop().run(), PASS_TIMEOUT_S))

    def count(self, name: str, labels: dict[str, str] | None = None) -> float:
        return self.metrics.registry.get_sample_value(name, labels or {}) or 0.0


Publishers = Callable[..., Publishing]


@pytest.fixture
def publishers(
    database_url: str, amqp_url: str, async_db: AsyncDb, rabbit: Rabbit
) -> Iterator[Publishers]:
    """Makes publishing jobs on the test's exchange: `make(url=..., worker=..., **settings)`
    (settings by field name; the backoff is long, so a failed tenant is not due again
    until the test says the time has passed)."""
    made: list[Publishing] = []

    def make(url: str = amqp_url, worker: str = "worker:test", **settings: Any) -> Publishing:
        values = {
            "DATABASE_URL": database_url,
            "broker_url": url,
            "broker_events_exchange": rabbit.exchange,
            "broker_events_backoff_base_s": 60,
            "broker_events_backoff_max_s": 60,
            **settings,
        }
        configured = Settings.model_validate(values)
        assert configured.broker_url is not None
        publisher = ConfirmedPublisher(
            configured.broker_url.get_secret_value(),
            configured.broker_events_exchange,
            timeout_s=configured.broker_events_timeout_s,
        )
        metrics = Metrics()
        job = PublishJob(
            settings=configured, db=async_db.db, publisher=publisher, worker=worker, metrics=metrics
        )
        publishing = Publishing(async_db, job, publisher, metrics)
        made.append(publishing)
        return publishing

    yield make
    for publishing in made:
        async_db.run(publishing.publisher.aclose())
