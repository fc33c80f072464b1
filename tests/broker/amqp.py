"""A test's side of the broker: its command queue declared, commands sent, replies and dead
letters read, all awaited as conditions (a message arriving), never as fixed sleeps.

A synchronous face on aio-pika for the synchronous tests: one event loop per client, run
while the client waits for something; the broker's frames wait in the socket meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aio_pika
from aio_pika.abc import (
    AbstractChannel,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustConnection,
)
from aiormq import spec

from app.broker.topology import Names, Topology, declare


@dataclass(frozen=True)
class Received:
    """A reply or a dead letter, as read."""

    body: bytes
    headers: dict[str, Any]
    content_type: str | None
    correlation_id: str | None
    type: str | None

    @property
    def status(self) -> int:
        status = self.headers["status"]
        assert isinstance(status, int), status
        return status

    def json(self) -> Any:
        return json.loads(self.body)


def _received(message: AbstractIncomingMessage) -> Received:
    return Received(
        body=message.body,
        headers=dict(message.headers or {}),
        content_type=message.content_type,
        correlation_id=message.correlation_id,
        type=message.type,
    )


class Amqp:
    """One connection: the command queue's topology, a reply queue, the dead letters."""

    def __init__(self, url: str, names: Names, *, delivery_limit: int) -> None:
        self.names = names
        self._runner = asyncio.Runner()
        self._replies: asyncio.Queue[Received] = asyncio.Queue()
        self._dead: asyncio.Queue[Received] = asyncio.Queue()
        self._connection: AbstractRobustConnection
        self._channel: AbstractChannel
        self._topology: Topology
        self._reply_queue: AbstractQueue
        self._runner.run(self._open(url, delivery_limit))

    async def _open(self, url: str, delivery_limit: int) -> None:
        # No heartbeats: this connection's event loop runs only while a test calls it, so a
        # session's connection, idle while other tests run, would miss the broker's heartbeats
        # and be reset after two intervals (its queues then left undeleted at the end).
        self._connection = await aio_pika.connect_robust(url, heartbeat=0)
        self._channel = await self._connection.channel(publisher_confirms=True)
        # The same declaration as the consumer's: whichever comes first makes the queue.
        self._topology = await declare(self._channel, self.names, delivery_limit=delivery_limit)
        self._reply_queue = await self._channel.declare_queue(exclusive=True, auto_delete=True)

        async def on_reply(message: AbstractIncomingMessage) -> None:
            await self._replies.put(_received(message))

        async def on_dead(message: AbstractIncomingMessage) -> None:
            await self._dead.put(_received(message))

        await self._reply_queue.consume(on_reply, no_ack=True)
        dead = await self._channel.declare_queue(
            self.names.dead_letter_queue, durable=True, passive=True
        )
        await dead.consume(on_dead, no_ack=True)

    def send(
        self,
        body: bytes | Mapping[str, Any],
        *,
        type: str | None = "create_payment",
        headers: Mapping[str, Any] | None = None,
        reply: bool = True,
        reply_to: str | None = None,
        message_id: str | None = None,
    ) -> str:
        """Publish a command to the queue (confirmed); its correlation id. Its replies come to
        this client's reply queue, or to `reply_to`, or nowhere (`reply=False`)."""
        correlation_id = str(uuid.uuid4())
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        message = aio_pika.Message(
            body=raw,
            type=type,
            headers=dict(headers or {}),
            content_type="application/json",
            correlation_id=correlation_id,
            reply_to=(reply_to or self._reply_queue.name) if reply else None,
            message_id=message_id,
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        )
        self._runner.run(self._channel.default_exchange.publish(message, self.names.queue))
        return correlation_id

    def reply(self, *, timeout: float = 20.0) -> Received:
        """The next reply to arrive."""
        return self._runner.run(asyncio.wait_for(self._replies.get(), timeout))

    def replies(self, count: int, *, timeout: float = 20.0) -> list[Received]:
        return [self.reply(timeout=timeout) for _ in range(count)]

    def dead_letter(self, *, timeout: float = 20.0) -> Received:
        """The next dead letter to arrive in the command queue's dead-letter queue."""
        return self._runner.run(asyncio.wait_for(self._dead.get(), timeout))

    def full_queue(self) -> str:
        """A queue that refuses every message published to it (the broker nacks the
        publish): a reply queue or a dead-letter queue that is full. Gone with the client."""

        async def declare() -> str:
            queue = await self._channel.declare_queue(
                exclusive=True, arguments={"x-max-length": 0, "x-overflow": "reject-publish"}
            )
            return queue.name

        return self._runner.run(declare())

    def bind_to_dead_letters(self, queue: str, *, bound: bool = True) -> None:
        """Bind `queue` to the dead-letter exchange (or unbind it)."""

        async def bind() -> None:
            channel = await self._channel.get_underlay_channel()
            exchange = self.names.dead_letter_exchange
            if bound:
                await channel.queue_bind(queue, exchange)
            else:
                await channel.queue_unbind(queue, exchange)

        self._runner.run(bind())

    def forget(self) -> None:
        """Drop the replies and dead letters received and not read (an earlier test's)."""
        for queue in (self._replies, self._dead):
            while not queue.empty():
                queue.get_nowait()

    def consumers(self) -> int:
        """Consumers the command queue has now."""
        return int(self._runner.run(self._declared()).consumer_count or 0)

    def waiting(self) -> int:
        """Commands waiting in the queue, not delivered to any consumer."""
        return int(self._runner.run(self._declared()).message_count or 0)

    async def _declared(self) -> spec.Queue.DeclareOk:
        # On the channel underneath: aio-pika's channel answers a declaration it made once
        # from its own memory, counts included.
        channel = await self._channel.get_underlay_channel()
        result = await channel.queue_declare(self.names.queue, passive=True)
        assert isinstance(result, spec.Queue.DeclareOk)
        return result

    def close(self) -> None:
        """Delete the test's queues and exchange, and disconnect."""

        async def close() -> None:
            for name in (self.names.queue, self.names.dead_letter_queue):
                await self._channel.queue_delete(name)
            await self._channel.exchange_delete(self.names.dead_letter_exchange)
            await self._connection.close()

        try:
            self._runner.run(close())
        finally:
            self._runner.close()


def reachable(url: str, *, timeout: float = 3.0) -> str | None:
    """None when a broker answers at `url`; else why not."""

    async def probe() -> None:
        connection = await aio_pika.connect(url, timeout=timeout)
        await connection.close()

    try:
        asyncio.run(asyncio.wait_for(probe(), timeout + 1))
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
