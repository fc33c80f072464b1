"""A refused command as a dead letter: the command as it came, and why it was refused.

The consumer publishes it to the command queue's dead-letter exchange itself (confirmed)
before it acks the delivery, because a plain reject could not say why: RabbitMQ's own
dead-lettering records only `rejected`. The dead letter keeps the command's body and
properties, adds `x-payments-reject-reason` (a `commands.Reason`) and
`x-payments-reject-detail` (the problem's detail), and leaves out the `authorization`
header: an API key is not kept in a queue for operators to read. (A command the queue
itself dead-letters after `x-delivery-limit` deliveries keeps every header, with RabbitMQ's
`x-first-death-reason: delivery_limit`.)
"""

from __future__ import annotations

import aio_pika
from aio_pika.abc import AbstractIncomingMessage, HeadersType

from app.broker.commands import Reason

REASON_HEADER = "x-payments-reject-reason"
DETAIL_HEADER = "x-payments-reject-detail"
# Kept out of the dead letter: the tenant's credentials.
_CREDENTIALS = "authorization"
# The detail is for a human; a long one is cut (an AMQP short string is 255 bytes at most
# for some clients, and the body is there for the rest).
_MAX_DETAIL = 240


def dead_letter(message: AbstractIncomingMessage, reason: Reason, detail: str) -> aio_pika.Message:
    """`message` as a dead letter refused for `reason`."""
    headers: HeadersType = {
        name: value
        for name, value in (message.headers or {}).items()
        if name.lower() != _CREDENTIALS
    }
    headers[REASON_HEADER] = reason.value
    headers[DETAIL_HEADER] = detail[:_MAX_DETAIL]
    return aio_pika.Message(
        body=message.body,
        headers=headers,
        content_type=message.content_type,
        content_encoding=message.content_encoding,
        correlation_id=message.correlation_id,
        reply_to=message.reply_to,
        message_id=message.message_id,
        timestamp=message.timestamp,
        type=message.type,
        app_id=message.app_id,
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
    )
