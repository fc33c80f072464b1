"""The fan-out of an event to its endpoints: one `webhook_deliveries` row per endpoint.

An event is written by its outcome's own statement (`app/events/outbox.py`); its deliveries
are one more data-modifying CTE of that statement, `DELIVERIES`, which reads the event's CTE
(`EVENT_CTE`: the event written, or none when the outcome was fenced out or the operation
already has an event of that type). So an event fans out exactly when it is written, to the
tenant's endpoints subscribed to its type at that moment, in the same transaction. The
composition root has every driver append it to each event it writes
(`outbox.followed_by`); a redelivery is `deliveries.py`'s.
"""

from __future__ import annotations

from app.events.outbox import EVENT_CTE

_SQL = f"""
    INSERT INTO webhook_deliveries (id, tenant_id, event_id, endpoint_id)
    SELECT gen_random_uuid(), event.tenant_id, event.id, endpoint.id
    FROM {EVENT_CTE} AS event
    JOIN webhook_endpoints AS endpoint ON endpoint.tenant_id = event.tenant_id
    WHERE endpoint.deleted_at IS NULL
      AND (endpoint.event_types IS NULL OR event.type = ANY (endpoint.event_types))
"""
# (name, sql): a CTE to follow the event's in its statement.
DELIVERIES: tuple[str, str] = ("fanout", _SQL)
