"""`payments consume`: answer each command, and ack it only once its outcome is committed.

One delivery:

    read its envelope (`commands.py`)        refused: dead letter with the reason, the
                                             problem to `reply_to`, then ack (a dead letter
                                             the broker does not confirm: requeued)
    answer it (`handler.py`)                 any answer, success or problem: the reply to
                                             `reply_to`, then ack
    the database cannot be reached           nack with requeue, after a short pause; the
                                             queue's delivery limit bounds the retries
    anything else (a bug)                    logged, requeued the same way

Ack after commit: the keyed flow returns only once the outcome, or the record of an
indefinite one (`UNKNOWN_REQUIRES_RECOVERY`, answered `202`), is committed. A consumer that
dies between that commit and its ack leaves the delivery unacked; the broker delivers it
again and the flow replays the stored answer, so nothing is charged twice. (Tests hold that
window open with the failpoint `command_before_ack`.)

No message ids are remembered here: a redelivery or a duplicate publish is deduplicated by
the keyed flow in the database, for as long as its key lives (`PAYMENTS_KEY_TTL_S`); after
that the key answers `422 IDEMPOTENCY_KEY_EXPIRED`, never a second payment.

The connection is aio-pika's robust one: it reconnects, reopens the channel, sets the
prefetch and consumes again. A delivery whose channel closed under it while it was being
answered cannot be acked or nacked any more (its delivery tag meant something on that
channel only): that is logged and nothing more, for the broker has put the command back
and its redelivery replays the stored answer.

SIGTERM or SIGINT stops the consuming (no new deliveries), lets the answers under way finish
(each bounded by the provider's deadline), then closes the connection; with the broker away,
it waits no more than a few seconds for the broker to confirm the cancel.

Each delivery is counted by what became of it, timed and counted while under way
(`metrics.py`); with `PAYMENTS_CONSUMER_METRICS_PORT` set the process serves its registry
on 127.0.0.1 at that port, as the worker does with its own.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol
from urllib.parse import urlsplit

import aio_pika
import uvloop
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage
from aio_pika.exceptions import (
    AMQPChannelError,
    AMQPConnectionError,
    ChannelInvalidStateError,
    ChannelPreconditionFailed,
    DeliveryError,
)
from prometheus_client import start_http_server

from app.broker.commands import Command, Refused, read_command
from app.broker.dead_letters import dead_letter
from app.broker.handler import CommandHandler
from app.broker.kinds import COMMANDS, PATH_HEADERS
from app.broker.metrics import CommandMetrics, Outcome, RequeueCause, served_registry
from app.broker.replies import problem_reply, reply_message
from app.broker.topology import Names, Topology, declare
from app.composition import runtime
from app.errors import is_transient_database_error
from app.failpoints import Failpoints
from app.http.request_id import HEADER as REQUEST_ID_HEADER
from app.http.request_id import request_id
from app.idempotency.flow import KeyedFlow
from app.idempotency.replies import REPLAYED_HEADER, Reply
from app.observability.logging import configure_logging, new_context
from app.observability.metrics import Metrics
from app.settings import Settings
from app.tenants.admin import api_key_cache
from app.tracing.setup import configure as configure_tracing

logger = logging.getLogger("payments.consumer")

# The failpoint between a command's committed outcome and its reply and ack.
BEFORE_ACK = "command_before_ack"
# The pause before a failed delivery is requeued: doubling with each failure in a row, so
# an outage does not spend every command's delivery limit in a few milliseconds.
_FIRST_PAUSE_S = 0.05
_MAX_PAUSE_S = 2.0
# How long a stop waits for the broker to confirm that the consuming is cancelled.
_CANCEL_TIMEOUT_S = 2.0
# What a delivery whose channel is gone raises when acked, nacked or answered.
_STALE = (ChannelInvalidStateError, AMQPConnectionError, AMQPChannelError)


class Answers(Protocol):
    """What the consumer needs of the handler (`handler.CommandHandler`)."""

    async def answer(self, command: Command) -> Reply: ...


class Consumer:
    """Answers the deliveries of one channel, and settles each once."""

    def __init__(
        self,
        handler: Answers,
        *,
        channel: AbstractChannel,
        topology: Topology,
        max_body_bytes: int,
        failpoints: Failpoints,
        metrics: CommandMetrics,
    ) -> None:
        self._handler = handler
        self._channel = channel
        self._topology = topology
        self._max_body_bytes = max_body_bytes
        self._failpoints = failpoints
        self._metrics = metrics
        self._under_way: set[asyncio.Task[None]] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        # Failed deliveries in a row, for the pause before the next requeue.
        self._failing = 0

    async def on_delivery(self, message: AbstractIncomingMessage) -> None:
        """aio-pika's consumer callback, which runs in a task of the channel's.

        The channel cancels its tasks when it closes (a lost connection), so the answer runs
        in a task of the consumer's own, shielded: a payment under way is carried to its
        recorded outcome rather than cut off between its provider call and its record, and
        the redelivery replays that outcome at once instead of meeting an operation in
        flight (`409`) until recovery takes it over.
        """
        task = asyncio.get_running_loop().create_task(self._deliver(message))
        self._under_way.add(task)
        self._idle.clear()
        task.add_done_callback(self._finished)
        await asyncio.shield(task)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._under_way.discard(task)
        if not self._under_way:
            self._idle.set()
        if not task.cancelled() and (exc := task.exception()) is not None:
            # Every failure of an answer is settled in `_deliver`; this is a bug there.
            logger.error("a delivery's task failed", exc_info=exc)

    async def drain(self) -> None:
        """Wait until no delivery is being answered."""
        await self._idle.wait()

    async def _deliver(self, message: AbstractIncomingMessage) -> None:
        """Answer and settle one delivery, and count what became of it."""
        started = time.monotonic()
        command = self._metrics.command(message.type)
        self._metrics.delivered(redelivered=bool(message.redelivered))
        outcome = Outcome.UNSETTLED
        try:
            outcome = await self._handle(message)
        finally:
            self._metrics.finished(command, outcome, time.monotonic() - started)

    async def _handle(self, message: AbstractIncomingMessage) -> Outcome:
        new_context(request_id=_request_id(message), command=message.type)
        try:
            command = read_command(
                body=message.body,
                type=message.type,
                headers=message.headers,
                path_headers=PATH_HEADERS,
                max_body_bytes=self._max_body_bytes,
            )
            reply = await self._handler.answer(command)
            await self._failpoints.reach(BEFORE_ACK)
        except Refused as refused:
            return await self._refuse(message, refused)
        except Exception as exc:
            return await self._requeue(message, exc)
        self._failing = 0
        if not await self._settle(message, "ack", lambda: self._answer(message, reply)):
            return Outcome.UNSETTLED
        return Outcome.REPLAYED if reply.headers.get(REPLAYED_HEADER) == "true" else Outcome.ACKED

    async def _answer(self, message: AbstractIncomingMessage, reply: Reply) -> None:
        await self._reply(message, reply)
        await message.ack()

    async def _refuse(self, message: AbstractIncomingMessage, refused: Refused) -> Outcome:
        async def send() -> None:
            letter = dead_letter(message, refused.reason, refused.problem.detail)
            # Confirmed before the ack: the command is in the dead-letter queue, or still
            # ours to deliver again.
            await self._topology.dead_letters.publish(letter, routing_key=message.routing_key or "")
            await self._reply(message, problem_reply(refused.problem))
            await message.ack()
            logger.warning(
                "command refused; dead-lettered",
                extra={"fields": {"reason": refused.reason, "detail": refused.problem.detail}},
            )

        try:
            settled = await self._settle(message, "dead-letter", send)
        except DeliveryError as exc:
            # The broker did not confirm the dead letter (a queue bound to the dead-letter
            # exchange refused it): the command is delivered again, and dead-lettered then.
            return await self._requeue(message, exc)
        if not settled:
            return Outcome.UNSETTLED
        self._metrics.dead_letters.labels(refused.reason.value).inc()
        return Outcome.DEAD_LETTERED

    async def _requeue(self, message: AbstractIncomingMessage, exc: Exception) -> Outcome:
        fields = {"error": type(exc).__name__, "deliveries": _delivery_count(message)}
        if isinstance(exc, DeliveryError):
            cause = RequeueCause.DEAD_LETTER_UNCONFIRMED
            logger.warning("dead letter not confirmed; command requeued", extra={"fields": fields})
        elif is_transient_database_error(exc):
            cause = RequeueCause.DATABASE_UNAVAILABLE
            logger.warning("database unavailable; command requeued", extra={"fields": fields})
        else:
            cause = RequeueCause.ERROR
            logger.error("command failed; requeued", exc_info=exc, extra={"fields": fields})
        self._failing += 1
        await asyncio.sleep(min(_MAX_PAUSE_S, _FIRST_PAUSE_S * 2 ** (self._failing - 1)))
        if not await self._settle(message, "requeue", lambda: message.nack(requeue=True)):
            return Outcome.UNSETTLED
        self._metrics.requeues.labels(cause.value).inc()
        return Outcome.REQUEUED

    async def _reply(self, message: AbstractIncomingMessage, reply: Reply) -> None:
        """Publish `reply` to the command's `reply_to`, if it has one (confirmed).

        A reply is a courtesy: the outcome is stored with its key, and
        `GET /operations?idempotency_key=` finds it. So it is not mandatory (a sender that
        went away leaves it unrouted), and a reply queue that refuses it (full, say) is
        logged and the command acked all the same: delivering the command again would
        answer it again, to the same full queue.
        """
        if not message.reply_to:
            return
        try:
            await self._channel.default_exchange.publish(
                reply_message(reply, correlation_id=message.correlation_id, command=message.type),
                routing_key=message.reply_to,
                mandatory=False,
            )
        except DeliveryError:
            logger.warning(
                "reply not delivered: its queue refused it",
                extra={"fields": {"status": reply.status}},
            )

    async def _settle(
        self, message: AbstractIncomingMessage, what: str, settle: Callable[[], Awaitable[None]]
    ) -> bool:
        """Run `settle` (reply, dead letter, ack or nack) unless the delivery's channel has
        closed under it: its tag means nothing on the channel that replaced it, and the
        broker delivers the command again. Whether it ran to its end."""
        try:
            # Raises at once when the delivery's channel is closed: nothing is sent for it.
            message.channel  # noqa: B018
            await settle()
        except _STALE as exc:
            logger.warning(
                "the delivery's channel closed before its %s; the broker delivers it again",
                what,
                extra={"fields": {"error": type(exc).__name__}},
            )
            return False
        return True


def _request_id(message: AbstractIncomingMessage) -> str:
    """The command's `message_id` when it is a sane request id (as `X-Request-Id`), else new."""
    if message.message_id is None:
        return str(uuid.uuid4())
    return request_id([(REQUEST_ID_HEADER.encode(), message.message_id.encode())])


def _delivery_count(message: AbstractIncomingMessage) -> int:
    """Earlier deliveries of this command (the quorum queue's `x-delivery-count`)."""
    count = (message.headers or {}).get("x-delivery-count", 0)
    return count if isinstance(count, int) else 0


def broker_host(url: str) -> str:
    """The broker's host and port, for logs: never the URL, which holds the password."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or (5671 if parts.scheme == 'amqps' else 5672)}"


async def _consume(settings: Settings, stopping: asyncio.Event) -> int:
    metrics = Metrics()
    commands = CommandMetrics(metrics.registry, commands=COMMANDS)
    port = settings.consumer_metrics_port
    server = None
    if port:
        # As the worker's (`worker/main.py`): on 127.0.0.1 only, from this process's registry.
        try:
            server, _thread = start_http_server(
                port, addr="127.0.0.1", registry=served_registry(metrics)
            )
        except OSError as exc:
            logger.error(
                "cannot serve the metrics",
                extra={"fields": {"port": port, "error": type(exc).__name__}},
            )
            return 1
    try:
        return await _answer_commands(settings, stopping, metrics, commands)
    finally:
        if server is not None:
            await asyncio.to_thread(server.shutdown)
            server.server_close()


async def _answer_commands(
    settings: Settings, stopping: asyncio.Event, metrics: Metrics, commands: CommandMetrics
) -> int:
    assert settings.broker_url is not None
    url = settings.broker_url.get_secret_value()
    names = Names(settings.broker_command_queue)
    async with runtime(settings, metrics=metrics, application_name="payments-consumer") as parts:
        flows: dict[str, KeyedFlow[Any]] = {
            kind.operation.value: KeyedFlow(
                reconciler=parts.reconcilers[kind.operation],
                db=parts.db,
                policy=parts.policy,
                lease_s=settings.lease_s,
                key_ttl_s=settings.key_ttl_s,
                metrics=metrics,
            )
            for kind in COMMANDS.values()
        }
        handler = CommandHandler(
            db=parts.db,
            api_keys=api_key_cache(parts.db, max_entries=settings.api_key_cache_size),
            flows=flows,
        )
        try:
            connection = await aio_pika.connect_robust(
                url, client_properties={"connection_name": "payments-consumer"}
            )
        except (AMQPConnectionError, OSError) as exc:
            logger.error(
                "cannot reach the broker",
                extra={"fields": {"broker": broker_host(url), "error": type(exc).__name__}},
            )
            return 1
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            await channel.set_qos(prefetch_count=settings.broker_prefetch)
            try:
                topology = await declare(
                    channel, names, delivery_limit=settings.broker_delivery_limit
                )
            except ChannelPreconditionFailed:
                logger.error(
                    "the command queue exists with other arguments (a changed delivery "
                    "limit?); a queue's arguments cannot change in place: drain and delete "
                    "it, or name another with PAYMENTS_BROKER_COMMAND_QUEUE",
                    extra={"fields": {"queue": names.queue}},
                )
                return 1
            consumer = Consumer(
                handler,
                channel=channel,
                topology=topology,
                max_body_bytes=settings.broker_max_body_bytes,
                failpoints=Failpoints.parse(settings.failpoints),
                metrics=commands,
            )
            tag = await topology.queue.consume(consumer.on_delivery)
            logger.info(
                "consumer started",
                extra={
                    "fields": {
                        "broker": broker_host(url),
                        "queue": names.queue,
                        "prefetch": settings.broker_prefetch,
                        "metrics_port": settings.consumer_metrics_port or None,
                    }
                },
            )
            await stopping.wait()
            # No new deliveries; those under way are answered and settled before the close.
            # With the broker away, the cancel would wait for a reconnection: bounded, as
            # there is nothing to cancel then (the deliveries went back with the connection).
            try:
                await asyncio.wait_for(topology.queue.cancel(tag), _CANCEL_TIMEOUT_S)
            except (TimeoutError, *_STALE) as exc:
                logger.warning(
                    "could not cancel the consuming; the broker takes back what this consumer "
                    "holds when its connection closes",
                    extra={"fields": {"error": type(exc).__name__}},
                )
            await consumer.drain()
    logger.info("consumer stopped", extra={"fields": {"queue": names.queue}})
    return 0


async def _run(settings: Settings) -> int:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    return await _consume(settings, stopping)


def run_consumer(settings: Settings) -> int:
    """Consume commands until SIGTERM; the exit code."""
    if settings.broker_url is None:
        raise SystemExit("payments: PAYMENTS_BROKER_URL is not set (docs/broker.md)")
    if settings.database_url is None:
        raise SystemExit("payments: DATABASE_URL is not set (use `payments dev` to embed one)")
    configure_logging()
    configure_tracing("payments-consumer")
    # uvloop, as the API and the worker.
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_run(settings))
