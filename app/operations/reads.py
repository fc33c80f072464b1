"""Reads of operations and their audit trail (all writes are in `repository.py`)."""

from __future__ import annotations

import uuid
from typing import Any

from psycopg.rows import class_row

from app.db.database import Connection
from app.operations.refs import (
    OPERATION_COLUMNS,
    OperationRow,
    OwnedRef,
    Snapshot,
    TransitionRow,
)
from app.operations.states import State

# The flags are computed on the database clock. A key expires only once its operation is
# terminal (in-flight work never expires), and its TTL counts from when the outcome became
# known.
_SNAPSHOT = f"""
    SELECT {OPERATION_COLUMNS},
        lease_expires_at IS NOT NULL AND lease_expires_at > now() AS lease_live,
        state IN ('COMPLETED', 'FAILED') AND (
            response_expired_at IS NOT NULL
            OR completed_at < now() - make_interval(secs => %(key_ttl_s)s)
        ) AS key_expired
    FROM operations
"""
_BY_KEY = (
    _SNAPSHOT
    + " WHERE tenant_id = %(tenant_id)s AND operation_name = %(operation_name)s"
    + " AND idempotency_key = %(idempotency_key)s"
)
_BY_ID = _SNAPSHOT + " WHERE id = %(id)s"
_BY_ID_FOR_TENANT = _BY_ID + " AND tenant_id = %(tenant_id)s"
_HISTORY = """
    SELECT from_state, to_state, trigger, actor, reason, fence, created_at
    FROM operation_transitions WHERE operation_id = %(id)s ORDER BY id
"""
_OWNED = "SELECT state, attempts FROM operations WHERE id = %(id)s AND fence = %(fence)s"


async def find_by_key(
    conn: Connection,
    *,
    tenant_id: uuid.UUID,
    operation_name: str,
    idempotency_key: str,
    key_ttl_s: int,
) -> Snapshot | None:
    """The tenant's operation with this key, if any."""
    params = {
        "tenant_id": tenant_id,
        "operation_name": operation_name,
        "idempotency_key": idempotency_key,
        "key_ttl_s": key_ttl_s,
    }
    return await _snapshot(conn, _BY_KEY, params)


async def get_snapshot(
    conn: Connection,
    operation_id: uuid.UUID,
    *,
    key_ttl_s: int,
    tenant_id: uuid.UUID | None = None,
) -> Snapshot | None:
    """The operation by id; scoped to `tenant_id` when given."""
    params = {"id": operation_id, "tenant_id": tenant_id, "key_ttl_s": key_ttl_s}
    return await _snapshot(conn, _BY_ID if tenant_id is None else _BY_ID_FOR_TENANT, params)


async def history(conn: Connection, operation_id: uuid.UUID) -> list[TransitionRow]:
    """The operation's audited transitions, oldest first."""
    async with conn.cursor(row_factory=class_row(TransitionRow)) as cur:
        await cur.execute(_HISTORY, {"id": operation_id})
        return await cur.fetchall()


async def owned(conn: Connection, ref: OwnedRef) -> OwnedRef | None:
    """The operation's current state and attempts, if `ref`'s fence still holds it."""
    row = await (await conn.execute(_OWNED, {"id": ref.id, "fence": ref.fence})).fetchone()
    if row is None:
        return None
    return OwnedRef(id=ref.id, fence=ref.fence, state=State(row[0]), attempts=int(row[1]))


async def _snapshot(conn: Connection, sql: str, params: dict[str, Any]) -> Snapshot | None:
    row = await (await conn.execute(sql, params)).fetchone()
    if row is None:
        return None
    *columns, lease_live, key_expired = row
    return Snapshot(OperationRow(*columns), bool(lease_live), bool(key_expired))
