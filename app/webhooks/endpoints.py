"""All SQL on webhook endpoints: create, list, read, delete, rotate the secret.

A tenant has at most PAYMENTS_WEBHOOK_MAX_ENDPOINTS live endpoints. Creating one counts
them with the tenant's row locked (`app/tenants/repository.py`'s `lock_tenant`, `FOR NO KEY
UPDATE`: payments inserting rows that refer to the tenant are not held up, another create
is), in the transaction that inserts it, so concurrent creates cannot pass the limit
together.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from app.db.database import Connection
from app.tenants.repository import lock_tenant

# How long the old secret keeps signing after a rotation.
ROTATION_OVERLAP_S = 86_400

_COLUMNS = "id, url, event_types, secret, created_at"
_INSERT = f"""
    INSERT INTO webhook_endpoints (id, tenant_id, url, event_types, secret)
    VALUES (%(id)s, %(tenant_id)s, %(url)s, %(event_types)s, %(secret)s)
    RETURNING {_COLUMNS}
"""
_LIVE = "tenant_id = %(tenant_id)s AND deleted_at IS NULL"
_COUNT_LIVE = f"SELECT count(*) FROM webhook_endpoints WHERE {_LIVE}"
_ONE = f"SELECT {_COLUMNS} FROM webhook_endpoints WHERE {_LIVE} AND id = %(id)s"
_LIST = f"""
    SELECT {_COLUMNS} FROM webhook_endpoints
    WHERE {_LIVE}
      AND (%(after)s::uuid IS NULL OR (created_at, id) > (
            SELECT created_at, id FROM webhook_endpoints
            WHERE tenant_id = %(tenant_id)s AND id = %(after)s))
    ORDER BY created_at, id
    LIMIT %(limit)s
"""
# Deleting stops what is still pending for the endpoint, in the same statement.
_DELETE = f"""
    WITH gone AS (
        UPDATE webhook_endpoints SET deleted_at = now()
        WHERE {_LIVE} AND id = %(id)s
        RETURNING id
    ), stopped AS (
        UPDATE webhook_deliveries SET status = 'cancelled', next_attempt_at = NULL,
            completed_at = now(), updated_at = now(), last_error = 'endpoint deleted'
        WHERE tenant_id = %(tenant_id)s AND endpoint_id IN (SELECT id FROM gone)
          AND status = 'pending'
    )
    SELECT id FROM gone
"""
_ROTATE = f"""
    UPDATE webhook_endpoints
    SET previous_secret = secret,
        previous_secret_expires_at = now() + make_interval(secs => %(overlap_s)s),
        secret = %(secret)s
    WHERE {_LIVE} AND id = %(id)s
    RETURNING {_COLUMNS}
"""


@dataclass(frozen=True)
class EndpointRow:
    id: uuid.UUID
    url: str
    event_types: list[str] | None
    secret: str
    created_at: datetime


async def lock_and_count(conn: Connection, *, tenant_id: uuid.UUID) -> int:
    """Lock the tenant's row until the transaction ends; its live endpoints, counted after."""
    await lock_tenant(conn, tenant_id)
    # Each statement in the transaction sees what committed before it started (READ
    # COMMITTED): the count, after the lock is held, sees every endpoint a create before it
    # inserted.
    row = await (await conn.execute(_COUNT_LIVE, {"tenant_id": tenant_id})).fetchone()
    assert row is not None, "count(*) always has a row"
    return int(row[0])


async def create(
    conn: Connection,
    *,
    tenant_id: uuid.UUID,
    url: str,
    event_types: list[str] | None,
    secret: str,
) -> EndpointRow:
    params = {
        "id": uuid.uuid4(),
        "tenant_id": tenant_id,
        "url": url,
        "event_types": event_types,
        "secret": secret,
    }
    row = await (await conn.execute(_INSERT, params)).fetchone()
    assert row is not None, "INSERT ... RETURNING returns the row"
    return EndpointRow(*row)


async def get(
    conn: Connection, *, tenant_id: uuid.UUID, endpoint_id: uuid.UUID
) -> EndpointRow | None:
    row = await (await conn.execute(_ONE, {"tenant_id": tenant_id, "id": endpoint_id})).fetchone()
    return None if row is None else EndpointRow(*row)


async def listing(
    conn: Connection, *, tenant_id: uuid.UUID, after: uuid.UUID | None, limit: int
) -> tuple[list[EndpointRow], bool]:
    params = {"tenant_id": tenant_id, "after": after, "limit": limit + 1}
    rows = [EndpointRow(*row) for row in await (await conn.execute(_LIST, params)).fetchall()]
    return rows[:limit], len(rows) > limit


async def delete(conn: Connection, *, tenant_id: uuid.UUID, endpoint_id: uuid.UUID) -> bool:
    """True if the endpoint existed; its pending deliveries are cancelled with it."""
    row = await (
        await conn.execute(_DELETE, {"tenant_id": tenant_id, "id": endpoint_id})
    ).fetchone()
    return row is not None


async def rotate(
    conn: Connection, *, tenant_id: uuid.UUID, endpoint_id: uuid.UUID, secret: str
) -> EndpointRow | None:
    """A new secret; the old one keeps signing for ROTATION_OVERLAP_S."""
    params = {
        "tenant_id": tenant_id,
        "id": endpoint_id,
        "secret": secret,
        "overlap_s": ROTATION_OVERLAP_S,
    }
    row = await (await conn.execute(_ROTATE, params)).fetchone()
    return None if row is None else EndpointRow(*row)
