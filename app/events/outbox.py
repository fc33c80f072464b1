"""The outbox write: an event, in the outcome's own statement.

Each kind hands `outcome_event(...)` to the driver with its outcome (or its needs-attention
event); the driver passes it to the operations verb, which appends its CTEs to its
statement. The event's CTE reads `changed`, the operation row the fenced write touched: a
fenced-out or rolled-back outcome leaves no event, and a recorded one never lacks it. What
else the statement writes with the event follows it as more CTEs reading it (`EVENT_CTE`),
appended by the driver to every event it writes (`followed_by`, given by the composition
root): the webhooks' fan-out to the tenant's endpoints (`app/webhooks/fanout.py`).

`ON CONFLICT DO NOTHING` on (tenant, operation, type) keeps one event of a type per
operation: the needs-attention event is offered with every check past the attempts limit
and written only by the first. The key holds the operation's day too
(`operation_created_at`, from `changed`): `events` is partitioned by it, a unique key of a
partitioned table must hold its partition column, and an operation has one day, so the key
is as exact as before.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from psycopg.types.json import Jsonb

from app.events.rows import EventType
from app.operations.values import EventWrite

# The event's CTE, by name: the event written (id, tenant_id, type), or no row when the
# outcome was fenced out or the operation already has an event of that type.
EVENT_CTE = "event"
_EVENT = """
    INSERT INTO events (id, tenant_id, type, operation_id, data, operation_created_at)
    SELECT %(e_id)s, %(e_tenant_id)s, %(e_type)s, id, %(e_data)s, created_at FROM changed
    ON CONFLICT (tenant_id, operation_id, type, operation_created_at) DO NOTHING
    RETURNING id, tenant_id, type
"""
_CTES = ((EVENT_CTE, _EVENT),)


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


def followed_by(*ctes: tuple[str, str]) -> Callable[[EventWrite], EventWrite]:
    """A driver's hook for every event it writes: the event with `ctes` (`(name, sql)`,
    each reading `EVENT_CTE` or an earlier one) after its own, in the same statement."""

    def follow(event: EventWrite) -> EventWrite:
        return EventWrite((*event.ctes, *ctes), event.params)

    return follow
