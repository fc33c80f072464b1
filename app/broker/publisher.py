"""Publishing to the events exchange with publisher confirms, and what the broker confirmed.

One connection and one channel in confirm mode per worker, opened at the first publish
(declaring the exchange, `exchange.py`) and again after any failure that may have broken
them. A batch's messages are all written at once and their confirms awaited together, and
the answer is how many of the batch, counted from its first, the broker confirmed: only
those may be marked published. Nothing raises out of `publish`; every failure is one of:

    connect      no connection, channel or exchange: refused, unreachable, a wrong
                 password, an exchange of another type (nothing was sent)
    nack         the broker refused a message (`Basic.Nack`: a queue at its length limit
                 with `reject-publish`, an internal error); the channel stays usable
    unconfirmed  no confirm came: the connection or channel was lost (the exchange deleted
                 meanwhile closes the channel), or the deadline passed. The message may
                 have got through: it is published again, and consumers dedupe by id

Order: every message of a batch is handed to the channel before any is awaited, and the
channel writes them in that order (aiormq takes each through one lock, first come first
served, and none waits before it), so a queue gets them in the batch's order. A nack or a
lost confirm in the middle leaves those after it unconfirmed too, whatever came back.

Every attempt, connecting included, is bounded by PAYMENTS_BROKER_EVENTS_TIMEOUT_S.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import aio_pika
from aio_pika import Message
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractExchange
from aio_pika.exceptions import DeliveryError

from app.broker.exchange import declare

logger = logging.getLogger("payments.broker")


def describe(exc: BaseException) -> str:
    """An exception as a failed attempt's error: its type, and its message if it has one."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class Failure(StrEnum):
    CONNECT = "connect"
    NACK = "nack"
    UNCONFIRMED = "unconfirmed"


@dataclass(frozen=True)
class Outgoing:
    """One message and where the exchange routes it."""

    routing_key: str
    message: Message


@dataclass(frozen=True)
class Confirmed:
    """What came of a batch: its first `count` messages were confirmed; if `failure`, the
    one after them was not (nor, for this attempt, any later one)."""

    count: int
    failure: Failure | None = None
    error: str | None = None


@dataclass(frozen=True)
class _Link:
    connection: AbstractConnection
    channel: AbstractChannel
    exchange: AbstractExchange

    @property
    def usable(self) -> bool:
        return not (self.connection.is_closed or self.channel.is_closed)


class ConfirmedPublisher:
    """Publishes batches to one exchange over one connection, waiting for the confirms."""

    def __init__(self, url: str, exchange: str, *, timeout_s: float) -> None:
        self._url = url
        self.exchange = exchange
        self._timeout_s = timeout_s
        self._link: _Link | None = None
        # One connect at a time: batches under way together share what it opens.
        self._connecting = asyncio.Lock()

    async def publish(self, batch: Sequence[Outgoing]) -> Confirmed:
        """Publish `batch` in order and wait for the broker's confirms (see the module)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_s
        try:
            async with asyncio.timeout_at(deadline):
                link = await self._open()
        except Exception as exc:
            return Confirmed(0, Failure.CONNECT, describe(exc))
        # Created in the batch's order, all before any runs: see "Order" above.
        tasks = [
            asyncio.create_task(
                link.exchange.publish(out.message, out.routing_key, mandatory=False)
            )
            for out in batch
        ]
        try:
            if tasks:
                await asyncio.wait(tasks, timeout=max(0.0, deadline - loop.time()))
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        confirmed = _confirmed(tasks, self._timeout_s)
        if confirmed.failure is Failure.UNCONFIRMED:
            # The connection or channel may be broken, or a confirm still due on it: the
            # next attempt starts on a new one.
            await self._drop(link)
        return confirmed

    @property
    def connected(self) -> bool:
        """Whether a connection is open that the next batch would use."""
        return self._link is not None and self._link.usable

    async def aclose(self) -> None:
        """Close the connection, if one is open."""
        if self._link is not None:
            await self._drop(self._link)

    async def _open(self) -> _Link:
        async with self._connecting:
            if self._link is not None:
                if self._link.usable:
                    return self._link
                # Closed by the broker (a restart), or its channel only (an error on it).
                stale, self._link = self._link, None
                await _close(stale.connection)
            connection = await aio_pika.connect(self._url, timeout=self._timeout_s)
            try:
                channel = await connection.channel(publisher_confirms=True)
                exchange = await declare(channel, self.exchange)
            except BaseException:
                await _close(connection)
                raise
            self._link = _Link(connection, channel, exchange)
            return self._link

    async def _drop(self, link: _Link) -> None:
        # Only the link this batch used: another batch may have opened a new one already.
        if self._link is link:
            self._link = None
        await _close(link.connection)


def _confirmed(tasks: Sequence[asyncio.Task[Any]], timeout_s: float) -> Confirmed:
    """How many of the batch, from its first, the broker confirmed; why the next was not."""
    for count, task in enumerate(tasks):
        if task.cancelled():
            return Confirmed(count, Failure.UNCONFIRMED, f"no confirm within {timeout_s:g}s")
        exc = task.exception()
        if isinstance(exc, DeliveryError):
            return Confirmed(count, Failure.NACK, "the broker refused it (nack)")
        if exc is not None:
            return Confirmed(count, Failure.UNCONFIRMED, describe(exc))
        # Returned: on a channel in confirm mode, only once the broker acked it.
    return Confirmed(len(tasks))


async def _close(connection: AbstractConnection) -> None:
    # A broken connection may not answer its close: bounded, and nothing to report.
    with contextlib.suppress(Exception):
        async with asyncio.timeout(1.0):
            await connection.close()
