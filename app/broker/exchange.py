"""The events exchange as consumers see it: its declaration, and an event as a message.

A durable topic exchange (PAYMENTS_BROKER_EVENTS_EXCHANGE, `payments.events`), declared by
every publisher when it connects, so it survives a broker restart and exists before the
first publish. Each event is one persistent message (delivery mode 2), routed by its type
(`payment.succeeded`, `refund.failed`, ...: a queue bound with `payment.*` gets every
payment event, `#` everything):

    message_id    the event's id, `evt_...`: the webhooks' `webhook-id` and the body's `id`,
                  so a consumer of both dedupes them as one
    body          the webhook's body, byte for byte (`app/events/views.py`'s `event_body`):
                  `{id, type, created_at, tenant, data}`
    headers       `tenant_id`, `event_type`, `created_at` (RFC 3339 UTC), to route or filter
                  on without parsing the body
    properties    content type `application/json`, type = the event's type, timestamp =
                  its creation, app id `payments`

Messages are published without `mandatory`: an event no queue is bound for is dropped by
the broker and confirmed, as on any publish-subscribe exchange; bind a queue (or give the
exchange an alternate exchange) before relying on it.
"""

from __future__ import annotations

from aio_pika import DeliveryMode, ExchangeType, Message
from aio_pika.abc import AbstractChannel, AbstractExchange

from app.clock import iso
from app.events.reads import EventRow
from app.events.views import event_body, public_id

APP_ID = "payments"
CONTENT_TYPE = "application/json"


async def declare(channel: AbstractChannel, name: str) -> AbstractExchange:
    """The events exchange on `channel`: made if missing; one of another type or
    durability is refused by the broker (its channel closes: a failed connect)."""
    return await channel.declare_exchange(name, ExchangeType.TOPIC, durable=True)


def routing_key(event: EventRow) -> str:
    """An event is routed by its type."""
    return event.type


def event_message(event: EventRow) -> Message:
    """The event as the exchange carries it (see the module's docstring)."""
    created_at = iso(event.created_at)
    return Message(
        event_body(event),
        message_id=public_id(event.id),
        delivery_mode=DeliveryMode.PERSISTENT,
        content_type=CONTENT_TYPE,
        type=event.type,
        timestamp=event.created_at,
        app_id=APP_ID,
        headers={
            "tenant_id": str(event.tenant_id),
            "event_type": event.type,
            "created_at": created_at,
        },
    )
