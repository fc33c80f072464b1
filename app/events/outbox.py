"""The outbox write: an event, and its webhook deliveries, in the outcome's own statement.

A driver that records a final outcome (the charge driver today, a refund driver alike)
passes `outcome_event(...)` to the operations verb; the verb appends these CTEs to its
statement. They read `changed`, the operation row the fenced write touched: a fenced-out or
rolled-back outcome leaves no event, and a recorded one never lacks it. The event fans out
to the tenant's endpoints subscribed to its type at that moment, one delivery each.

`ON CONFLICT DO NOTHING` on (tenant, operation, type) keeps one event of a type per
operation: the needs-attention event is offered with every check past the attempts limit
and written only by the first.
"""

from __future__ import annotations

import uuid
from typing import Any

from psycopg.types.json import Jsonb

from app.events.rows import EventType
from app.operations.values import EventWrite

_EVENT = """
    INSERT INTO events (id, tenant_id, type, operation_id, data)
    SELECT %(e_id)s, %(e_tenant_id)s, %(e_type)s, id, %(e_data)s FROM changed
    ON CONFLICT (tenant_id, operation_id, type) DO NOTHING
    RETURNING id, tenant_id, type
"""
_FANOUT = """
    INSERT INTO webhook_deliveries (id, tenant_id, event_id, endpoint_id)
    SELECT gen_random_uuid(), event.tenant_id, event.id, endpoint.id
    FROM event
    JOIN webhook_endpoints AS endpoint ON endpoint.tenant_id = event.tenant_id
    WHERE endpoint.deleted_at IS NULL
      AND (endpoint.event_types IS NULL OR event.type = ANY (endpoint.event_types))
"""
_CTES = (("event", _EVENT), ("fanout", _FANOUT))


def outcome_event(
    *,
    tenant_id: uuid.UUID,
    type: EventType,
    data: dict[str, Any],
    event_id: uuid.UUID | None = None,
) -> EventWrite:
    """The event for an outcome: `data` is the business object's representation."""
    return EventWrite(
        _CTES,
        {
            "e_id": event_id or uuid.uuid4(),
            "e_tenant_id": tenant_id,
            "e_type": type.value,
            "e_data": Jsonb(data),
        },
    )
