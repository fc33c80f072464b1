"""Operators' reads of webhook deliveries, across tenants: an operation's events with their
deliveries, the deliveries that gave up, and a window's attempts (the dashboard's).

Reads by operation go through the tenant's keys (`events (tenant_id, operation_id, type)`,
`webhook_deliveries (tenant_id, event_id, endpoint_id)`): the caller passes the operation's
tenant, and the events are read in the partition of the operation's day only (the
operation's `created_at`, which `events` is partitioned by), the operation and its events
planned in the days its id tells. The failed list walks the
partial index `ix_webhook_deliveries_failed`, newest failure first: a failed delivery
stays failed until someone redelivers it, so the newest are the ones nobody has looked at
yet. It leaves out deliveries to endpoints the tenant has deleted since: a redelivery
would not go there, so nobody can act on them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.db.database import Connection
from app.db.fragments import Fragment
from app.ids import created_window, within

MAX_PAGE = 100

# The last attempt's latency comes from webhook_attempts (the delivery row keeps its
# status code and error); one index probe per delivery.
_LAST_ATTEMPT = """
    LEFT JOIN LATERAL (
        SELECT a.latency_ms FROM webhook_attempts AS a
        WHERE a.delivery_id = d.id ORDER BY a.id DESC LIMIT 1
    ) AS last ON true
"""
_DELIVERY_COLUMNS = """
    d.id, d.endpoint_id, e.url, e.deleted_at IS NOT NULL, d.status, d.attempt_count,
    d.last_attempt_at, d.last_status_code, d.last_error, last.latency_ms,
    d.next_attempt_at, d.completed_at
"""
# The operation is read by its id within the window of `created_at` its id tells
# (`app/ids.py`), and its events within that window too: the planner keeps the window's days
# of both tables (every day for a v4 id), and the run reads the operation's day's events.
EVENTS_SQL = f"""
    SELECT id, type, created_at FROM events
    WHERE tenant_id = %(tenant_id)s AND operation_id = %(operation_id)s
      AND operation_created_at = (SELECT created_at FROM operations
                                  WHERE id = %(operation_id)s AND tenant_id = %(tenant_id)s
                                    AND {within("created_at", "op")})
      AND {within("operation_created_at", "op")}
    ORDER BY seq
"""
DELIVERIES_SQL = f"""
    SELECT d.event_id, {_DELIVERY_COLUMNS}
    FROM webhook_deliveries AS d
    JOIN webhook_endpoints AS e ON e.id = d.endpoint_id
    {_LAST_ATTEMPT}
    WHERE d.tenant_id = %(tenant_id)s AND d.event_id = ANY (%(event_ids)s)
    ORDER BY d.created_at, d.id
"""
FAILED_SQL = f"""
    SELECT {_DELIVERY_COLUMNS}, d.tenant_id, ev.id, ev.type, ev.operation_id
    FROM webhook_deliveries AS d
    JOIN webhook_endpoints AS e ON e.id = d.endpoint_id
    JOIN events AS ev ON ev.id = d.event_id
    {_LAST_ATTEMPT}
    WHERE d.status = 'failed' AND e.deleted_at IS NULL
      AND (%(after)s::uuid IS NULL OR (d.completed_at, d.id) < (
            SELECT completed_at, id FROM webhook_deliveries WHERE id = %(after)s))
    ORDER BY d.completed_at DESC, d.id DESC
    LIMIT %(limit)s
"""
_CURSOR_FAILED = (
    "SELECT EXISTS (SELECT FROM webhook_deliveries WHERE id = %(id)s AND status = 'failed')"
)
_COUNT_FAILED = """
    SELECT count(*) FROM webhook_deliveries AS d
    JOIN webhook_endpoints AS e ON e.id = d.endpoint_id
    WHERE d.status = 'failed' AND e.deleted_at IS NULL
"""
_EVENT_TENANT = "SELECT tenant_id FROM events WHERE id = %(id)s"
# The delivery's part of the operators' search (`app/admin/search.py`), in the search's
# columns: kind, matched, id, tenant_id, operation_id (its event's), payment_id, state,
# amount_minor, currency, created_at.
_SEARCHED = (
    "SELECT 'delivery', 'id', d.id, d.tenant_id, e.operation_id, NULL::uuid, d.status,"
    " NULL::bigint, NULL::text, d.created_at FROM webhook_deliveries d"
    " JOIN events e ON e.id = d.event_id WHERE d.id = %(delivery_id)s"
)


@dataclass(frozen=True)
class DeliveryView:
    """One delivery as operators see it: where to, how it stands, its last attempt."""

    id: uuid.UUID
    endpoint_id: uuid.UUID
    url: str
    endpoint_deleted: bool
    status: str
    attempt_count: int
    last_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    last_latency_ms: int | None
    next_attempt_at: datetime | None
    completed_at: datetime | None


@dataclass(frozen=True)
class EventDeliveries:
    """One of an operation's events and its deliveries, oldest first."""

    id: uuid.UUID
    type: str
    created_at: datetime
    deliveries: list[DeliveryView]


@dataclass(frozen=True)
class FailedDelivery:
    """A delivery that gave up, with the event and operation it belongs to."""

    delivery: DeliveryView
    tenant_id: uuid.UUID
    event_id: uuid.UUID
    event_type: str
    operation_id: uuid.UUID


async def for_operation(
    conn: Connection, *, tenant_id: uuid.UUID, operation_id: uuid.UUID
) -> list[EventDeliveries]:
    """The operation's events in the order they were written, each with its deliveries."""
    params: dict[str, Any] = {"tenant_id": tenant_id, "operation_id": operation_id}
    params |= created_window(operation_id).params("op")
    events = await (await conn.execute(EVENTS_SQL, params)).fetchall()
    if not events:
        return []
    ids = [row[0] for row in events]
    found: dict[uuid.UUID, list[DeliveryView]] = {i: [] for i in ids}
    cursor = await conn.execute(DELIVERIES_SQL, {"tenant_id": tenant_id, "event_ids": ids})
    for row in await cursor.fetchall():
        found[row[0]].append(DeliveryView(*row[1:]))
    return [EventDeliveries(id, type_, at, found[id]) for id, type_, at in events]


async def failed(
    conn: Connection, *, after: uuid.UUID | None, limit: int
) -> tuple[list[FailedDelivery], bool]:
    """Up to `limit` failed deliveries across tenants, newest failure first, after the
    delivery `after` if given; and whether more follow. Raises LookupError if `after` is
    not a failed delivery (any more: a redelivery takes it off the list)."""
    if after is not None:
        row = await (await conn.execute(_CURSOR_FAILED, {"id": after})).fetchone()
        if row is None or not row[0]:
            raise LookupError("no such failed delivery")
    params = {"after": after, "limit": limit + 1}
    rows = await (await conn.execute(FAILED_SQL, params)).fetchall()
    items = [FailedDelivery(DeliveryView(*row[:12]), *row[12:]) for row in rows[:limit]]
    return items, len(rows) > limit


async def count_failed(conn: Connection) -> int:
    row = await (await conn.execute(_COUNT_FAILED)).fetchone()
    return 0 if row is None else int(row[0])


async def event_tenant(conn: Connection, event_id: uuid.UUID) -> uuid.UUID | None:
    """The tenant whose event this is; None if there is no such event."""
    row = await (await conn.execute(_EVENT_TENANT, {"id": event_id})).fetchone()
    return None if row is None else uuid.UUID(str(row[0]))


def search_by_id(delivery_id: uuid.UUID) -> Fragment:
    """Any tenant's delivery with this id (typed as `wd_...`), by primary key, with its
    event's operation."""
    return Fragment(_SEARCHED, {"delivery_id": delivery_id})


# The dashboard's delivery attempts (`app/admin/activity.py`): a window's, across tenants,
# through the BRIN index on attempted_at (ix_webhook_attempts_attempted_brin).
ATTEMPTS_SQL = """
    SELECT floor(extract(epoch FROM now() - attempted_at) / %(step)s)::int, succeeded, count(*)
    FROM webhook_attempts WHERE attempted_at > now() - make_interval(secs => %(span)s)
    GROUP BY 1, 2
"""


async def attempts(conn: Connection, *, step_s: int, span_s: int) -> list[tuple[int, bool, int]]:
    """(bucket, succeeded, count) of the delivery attempts made in the last `span_s`
    seconds, in buckets of `step_s` seconds (0 the most recent, on the database clock)."""
    rows = await (await conn.execute(ATTEMPTS_SQL, {"step": step_s, "span": span_s})).fetchall()
    return [(int(ago), bool(succeeded), int(n)) for ago, succeeded, n in rows]
