"""The command queue and where its dead letters go, declared by the consumer at its start.

    <queue>         a quorum queue (replicated, durable): the commands. A delivery that is
                    requeued, or held by a consumer that dies, counts against its
                    `x-delivery-limit`; past it the queue dead-letters the command
                    (`x-first-death-reason: delivery_limit`). A limit of N allows N + 1
                    deliveries. Dead-lettering is at-least-once (`x-dead-letter-strategy`,
                    which needs `x-overflow: reject-publish`): a dead letter is never lost
                    on the way.
    <queue>.dlx     a fanout exchange: every dead letter, the queue's and the consumer's own
                    (`dead_letters.py`), whatever its routing key
    <queue>.dead    a quorum queue bound to it, where operators read them

Declaring is idempotent with the same arguments. A queue that already exists with others (a
changed delivery limit) is refused by the broker (`PRECONDITION_FAILED`), and the consumer
stops with a message saying so: a queue's arguments cannot change in place (use a policy,
or drain and delete the queue).
"""

from __future__ import annotations

from dataclasses import dataclass

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractQueue, FieldValue

QUORUM: dict[str, FieldValue] = {"x-queue-type": "quorum"}


@dataclass(frozen=True)
class Names:
    """The names the one queue setting (`PAYMENTS_BROKER_COMMAND_QUEUE`) gives everything."""

    queue: str

    @property
    def dead_letter_exchange(self) -> str:
        return f"{self.queue}.dlx"

    @property
    def dead_letter_queue(self) -> str:
        return f"{self.queue}.dead"


@dataclass(frozen=True)
class Topology:
    """What a consumer reads from and dead-letters to."""

    queue: AbstractQueue
    dead_letters: AbstractExchange


def queue_arguments(names: Names, *, delivery_limit: int) -> dict[str, FieldValue]:
    """The command queue's arguments: whoever declares it must pass the same."""
    return {
        **QUORUM,
        "x-dead-letter-exchange": names.dead_letter_exchange,
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
        "x-delivery-limit": delivery_limit,
    }


async def declare(channel: AbstractChannel, names: Names, *, delivery_limit: int) -> Topology:
    """Declare the queue, the dead-letter exchange and queue (idempotent); the handles."""
    dead_letters = await channel.declare_exchange(
        names.dead_letter_exchange, aio_pika.ExchangeType.FANOUT, durable=True
    )
    dead = await channel.declare_queue(names.dead_letter_queue, durable=True, arguments=QUORUM)
    await dead.bind(dead_letters)
    queue = await channel.declare_queue(
        names.queue,
        durable=True,
        arguments=queue_arguments(names, delivery_limit=delivery_limit),
    )
    return Topology(queue=queue, dead_letters=dead_letters)
