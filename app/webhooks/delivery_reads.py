"""Reading an endpoint's deliveries, newest first, each with its attempts."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from app.db.database import Connection

_LIST = """
    SELECT d.id, d.event_id, ev.type, d.status, d.attempt_count, d.next_attempt_at,
           d.last_status_code, d.last_error, d.created_at, d.updated_at, d.completed_at
    FROM webhook_deliveries AS d JOIN events AS ev ON ev.id = d.event_id
    WHERE d.tenant_id = %(tenant_id)s AND d.endpoint_id = %(endpoint_id)s
      AND (%(after)s::uuid IS NULL OR (d.created_at, d.id) < (
            SELECT created_at, id FROM webhook_deliveries
            WHERE tenant_id = %(tenant_id)s AND id = %(after)s))
    ORDER BY d.created_at DESC, d.id DESC
    LIMIT %(limit)s
"""
_ATTEMPTS = """
    SELECT delivery_id, attempted_at, succeeded, status_code, error, latency_ms
    FROM webhook_attempts
    WHERE tenant_id = %(tenant_id)s AND delivery_id = ANY (%(ids)s)
    ORDER BY id
"""


@dataclass(frozen=True)
class AttemptRow:
    delivery_id: uuid.UUID
    attempted_at: datetime
    succeeded: bool
    status_code: int | None
    error: str | None
    latency_ms: int


@dataclass(frozen=True)
class DeliveryRow:
    id: uuid.UUID
    event_id: uuid.UUID
    event_type: str
    status: str
    attempt_count: int
    next_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None


async def for_endpoint(
    conn: Connection,
    *,
    tenant_id: uuid.UUID,
    endpoint_id: uuid.UUID,
    after: uuid.UUID | None,
    limit: int,
) -> tuple[list[tuple[DeliveryRow, list[AttemptRow]]], bool]:
    """Up to `limit` deliveries older than `after` (newest first), with their attempts."""
    params = {"tenant_id": tenant_id, "endpoint_id": endpoint_id, "after": after}
    rows = await (await conn.execute(_LIST, {**params, "limit": limit + 1})).fetchall()
    deliveries = [DeliveryRow(*row) for row in rows[:limit]]
    ids = [d.id for d in deliveries]
    attempts: dict[uuid.UUID, list[AttemptRow]] = {i: [] for i in ids}
    if ids:
        cursor = await conn.execute(_ATTEMPTS, {"tenant_id": tenant_id, "ids": ids})
        for row in await cursor.fetchall():
            attempts[row[0]].append(AttemptRow(*row))
    return [(d, attempts[d.id]) for d in deliveries], len(rows) > limit
