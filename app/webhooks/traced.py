"""A webhook delivery as a trace of its own, linked to its event's operation (docs/tracing.md).

A delivery runs in a worker long after the request that made its event, so its span is a
new root; its link leads to the trace of the request that claimed the operation, whose
context the operation row keeps. The span names the delivery, its event and operation and
the attempt; never the endpoint's secrets or the payload. httpx's instrumentation adds the
POST under it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from opentelemetry.trace import Link

from app.db.database import Database
from app.tracing.spans import links_to
from app.webhooks.deliveries import Claimed

_OPERATION = """
    SELECT o.id, o.traceparent FROM events e JOIN operations o ON o.id = e.operation_id
    WHERE e.id = %(id)s
"""


async def delivery_trace(
    db: Database, delivery: Claimed
) -> tuple[dict[str, object], Sequence[Link]]:
    """The delivery span's attributes and its link to the operation's request, if stored."""
    attributes: dict[str, object] = {
        "payments.delivery_id": str(delivery.id),
        "payments.event_id": str(delivery.event.id),
        "payments.event_type": delivery.event.type,
        "payments.attempt": delivery.attempt_count + 1,
        "payments.fence": delivery.fence,
    }
    try:
        async with db.connection() as conn:
            row = await (await conn.execute(_OPERATION, {"id": delivery.event.id})).fetchone()
    except Exception:
        return attributes, ()  # only the link is lost; recording meets the same database
    if row is None:
        return attributes, ()
    operation_id, stored = row
    attributes["payments.operation_id"] = str(uuid.UUID(str(operation_id)))
    return attributes, links_to(stored)
