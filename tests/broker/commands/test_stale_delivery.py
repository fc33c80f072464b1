"""A delivery whose channel closed while it was being answered is neither answered nor
acked: its tag meant something on that channel only, and the broker delivers it again.

The consumer runs in this process against the real broker, its channel's connection cut
under a delivery in hand; the handler is a stand-in that answers at once (the keyed flow's
part is the other tests'), since what is tested is what the consumer does with the answer.
"""

from __future__ import annotations

import asyncio
import json
import logging

import aio_pika
import pytest
from prometheus_client import CollectorRegistry

from app.broker.commands import Command
from app.broker.consumer import Consumer
from app.broker.kinds import COMMANDS
from app.broker.metrics import CommandMetrics
from app.broker.topology import declare
from app.failpoints import Failpoints
from app.idempotency.replies import Reply
from app.tenants.keys import generate_api_key
from tests.broker.conftest import DELIVERY_LIMIT, MAX_BODY_BYTES, Rig
from tests.support.factories.payments import new_key, payment_body


class AnswersAtOnce:
    """Answers every command `201` without looking at it."""

    def __init__(self) -> None:
        self.answered: list[Command] = []

    async def answer(self, command: Command) -> Reply:
        self.answered.append(command)
        return Reply(status=201, body=b'{"answered": true}')


def test_a_delivery_whose_channel_closed_is_delivered_again_not_acked(
    rig: Rig, broker_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    handler = AnswersAtOnce()
    registry = CollectorRegistry()

    async def scenario() -> tuple[bool, int]:
        connection = await aio_pika.connect_robust(broker_url)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            topology = await declare(channel, rig.names, delivery_limit=DELIVERY_LIMIT)
            replies = await channel.declare_queue(exclusive=True)
            consumer = Consumer(
                handler,
                channel=channel,
                topology=topology,
                max_body_bytes=MAX_BODY_BYTES,
                failpoints=Failpoints(),
                metrics=CommandMetrics(registry, commands=COMMANDS),
            )
            command = aio_pika.Message(
                body=json.dumps(payment_body()).encode(),
                type="create_payment",
                headers={
                    "authorization": f"Bearer {generate_api_key()}",
                    "idempotency-key": new_key(),
                },
                reply_to=replies.name,
            )
            await channel.default_exchange.publish(command, routing_key=rig.names.queue)
            delivery = await topology.queue.get(timeout=10)
            # The channel the delivery came on goes away (a lost connection does the same);
            # the robust channel opens another, on which delivery tags start again at 1.
            await (await channel.get_underlay_channel()).close()
            await channel.ready()

            await consumer.on_delivery(delivery)

            again = await topology.queue.get(timeout=10)
            await again.ack()
            answered = await channel.get_underlay_channel()
            unanswered = await answered.queue_declare(replies.name, passive=True)
            return bool(again.redelivered), int(unanswered.message_count or 0)

    with caplog.at_level(logging.WARNING, logger="payments.consumer"):
        redelivered, replies = asyncio.run(scenario())

    assert len(handler.answered) == 1
    # Not acked: the broker delivered it again. Not answered: the reply waits for that.
    assert redelivered
    assert replies == 0
    assert "the delivery's channel closed before its ack" in caplog.text
    # Counted as neither acked nor requeued, and no longer under way.
    labels = {"command": "create_payment"}
    for outcome, count in (("unsettled", 1), ("acked", 0), ("requeued", 0)):
        sample = registry.get_sample_value(
            "payments_broker_commands_total", {**labels, "outcome": outcome}
        )
        assert (sample or 0) == count, outcome
    assert registry.get_sample_value("payments_broker_commands_in_flight") == 0
