"""Taking ownership of an operation whose owner's lease is gone: one, or the worker's batch.

A new owner gets a fence one higher than the last owner's and a new lease, in one
conditional UPDATE, only where nobody holds a live lease (the rule webhook deliveries share,
`app/jobs/leases.py`). Of two contenders only one can move the fence from N to N+1; every
later write by the other is refused by the fence.

    take_over      one operation (a client's retry): fence N -> N+1, a new lease
    claim_due      the worker's batch of the same, FOR UPDATE SKIP LOCKED
    release        an owner gives its lease back without changing state

Every write an owner makes names the operation's tenant (`OwnedRef.tenant_id`), as the
takeover and the release here do.
"""

from __future__ import annotations

from app.db.database import Connection
from app.jobs.leases import new_owner
from app.operations.states import State
from app.operations.values import DueRef, OwnedRef, Snapshot

# A new owner: a fence one higher than the last owner's, and a new lease. Only where nobody
# holds a live lease; a row another transaction holds is skipped, not waited for.
_TAKE_OVER = f"""
    UPDATE operations
    SET {new_owner()}
    WHERE id = (
            SELECT id FROM operations WHERE id = %(id)s AND tenant_id = %(tenant_id)s
            FOR UPDATE SKIP LOCKED)
      AND tenant_id = %(tenant_id)s
      AND fence = %(fence)s
      AND state NOT IN ('COMPLETED', 'FAILED')
      AND (lease_expires_at IS NULL OR lease_expires_at <= now())
    RETURNING fence, state, attempts
"""

# The worker's batch: in-flight operations whose owner's lease ran out (the owner crashed
# or hung), then unknown operations whose next check has come. FOR UPDATE SKIP LOCKED lets
# any number of workers claim at once without waiting on, or sharing, a row.
_CLAIM_DUE = f"""
    WITH stale AS (
        SELECT id FROM operations
        WHERE state IN ('RECEIVED', 'PROVIDER_REQUEST_SENT')
          AND (lease_expires_at IS NULL OR lease_expires_at <= now())
        ORDER BY lease_expires_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ), due AS (
        SELECT id FROM operations
        WHERE state = 'UNKNOWN_REQUIRES_RECOVERY'
          AND next_check_at <= now()
          AND (lease_expires_at IS NULL OR lease_expires_at <= now())
        ORDER BY next_check_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ), picked AS (
        SELECT id FROM (SELECT id, 0 AS rank FROM stale UNION ALL SELECT id, 1 FROM due) ids
        ORDER BY rank
        LIMIT %(limit)s
    )
    UPDATE operations
    SET {new_owner()}
    WHERE id IN (SELECT id FROM picked)
    RETURNING id, tenant_id, fence, state, attempts, operation_name
"""


async def take_over(
    conn: Connection, snapshot: Snapshot, *, owner: str, lease_s: float
) -> OwnedRef | None:
    """Become the operation's owner if nobody holds a live lease on it; None otherwise.

    A conditional UPDATE on the fence the caller saw: of two contenders only one can move
    the fence from N to N+1, the other matches no row.
    """
    op = snapshot.operation
    params = {"id": op.id, "tenant_id": op.tenant_id, "fence": op.fence}
    params |= {"owner": owner, "lease_s": lease_s}
    row = await (await conn.execute(_TAKE_OVER, params)).fetchone()
    if row is None:
        return None
    fence, state, attempts = row
    return OwnedRef(
        id=op.id,
        tenant_id=op.tenant_id,
        fence=int(fence),
        state=State(state),
        attempts=int(attempts),
    )


async def claim_due(conn: Connection, *, owner: str, lease_s: float, limit: int) -> list[DueRef]:
    """Take recovery ownership of up to `limit` operations that need it, of any name."""
    params = {"owner": owner, "lease_s": lease_s, "limit": limit}
    rows = await (await conn.execute(_CLAIM_DUE, params)).fetchall()
    return [
        DueRef(
            operation_name=name,
            ref=OwnedRef(
                id=row_id,
                tenant_id=tenant_id,
                fence=int(fence),
                state=State(state),
                attempts=int(attempts),
            ),
        )
        for row_id, tenant_id, fence, state, attempts, name in rows
    ]


async def release(conn: Connection, ref: OwnedRef, *, owner: str) -> bool:
    """End `owner`'s lease on `ref` without changing state; False if a newer owner holds it.

    For an owner that decided to do nothing (an operator's refused resolution): the
    operation is at once free for the worker again, instead of after the lease runs out.
    Fenced like every owner write.
    """
    row = await (
        await conn.execute(
            "UPDATE operations SET lease_owner = NULL, lease_expires_at = NULL"
            " WHERE id = %s AND tenant_id = %s AND fence = %s AND lease_owner = %s"
            " RETURNING id",
            (ref.id, ref.tenant_id, ref.fence, owner),
        )
    ).fetchone()
    return row is not None
