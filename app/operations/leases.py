"""Taking ownership of an operation whose owner's lease is gone: one, or the worker's batch.

A new owner gets a fence one higher than the last owner's and a new lease, in one
conditional UPDATE, only where nobody holds a live lease (the rule webhook deliveries share,
`app/jobs/leases.py`). Of two contenders only one can move the fence from N to N+1; every
later write by the other is refused by the fence.

    take_over      one operation (a client's retry): fence N -> N+1, a new lease
    claim_due      the worker's batch of the same, FOR UPDATE SKIP LOCKED, tenant by tenant
    release        an owner gives its lease back without changing state

The worker's statements read the days from the backlog's horizon on (`horizon.py`), so
that on an `operations` partitioned by day they read the last few days' partitions, not
every day kept. Every statement here names the operation's tenant: a row lock and a fence
bump are one tenant's, and on Citus only a statement routed to one shard group may take them
(docs/scaling.md). The worker's batch therefore first reads which tenants have due work (a
plain read across tenants, no locks), then claims for each (`app/jobs/tenants.py`), the
tenants' statements sent together, one pipeline a round trip.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from psycopg import AsyncCursor
from psycopg.rows import TupleRow

from app.db.database import Connection
from app.jobs.leases import new_owner
from app.jobs.tenants import KeptTenants
from app.operations.horizon import Horizon
from app.operations.statements import PREPARED
from app.operations.states import State
from app.operations.values import DueRef, OwnedRef, Snapshot

# A new owner: a fence one higher than the last owner's, and a new lease. Only where nobody
# holds a live lease; a row another transaction holds is skipped, not waited for. The row is
# named by its id and its day (`created_at`, as the snapshot read it): one partition.
_TAKE_OVER = f"""
    UPDATE operations
    SET {new_owner()}
    WHERE id = (
            SELECT id FROM operations
            WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND created_at = %(created_at)s
            FOR UPDATE SKIP LOCKED)
      AND tenant_id = %(tenant_id)s
      AND created_at = %(created_at)s
      AND fence = %(fence)s
      AND state NOT IN ('COMPLETED', 'FAILED')
      AND (lease_expires_at IS NULL OR lease_expires_at <= now())
    RETURNING fence, state, attempts, created_at
"""

# Which tenants have work due: a plain read across tenants (no lock, so on Citus it may span
# every shard), a loose index scan of the worker's partial indexes, which lead with
# tenant_id: one probe per tenant with in-flight or unknown operations finds its earliest
# lease end (a lease given back, NULL, first) and its earliest next check. A tenant has
# work due when its earliest lease has ended, or when its earliest check has come and one
# of its due checks is not under way (a worker reconciling one holds its lease, and its
# next check stays past until it records what came of it: that walk is bounded by the
# checks under way). It reads a few index entries per such tenant whatever the backlog; a
# DISTINCT over the due rows read every one of them on every claim (100,000 due: 83 ms a
# claim, against 0.5 ms for this over 50 tenants; docs/scaling.md). Every tenant found is
# returned, in no particular order: a LIMIT here would favour the tenants that sort first.
_DUE_TENANTS = """
    WITH RECURSIVE in_flight AS (
        (SELECT tenant_id, lease_expires_at AS free_at FROM operations
         WHERE state IN ('RECEIVED', 'PROVIDER_REQUEST_SENT') AND created_at >= %(since)s
         ORDER BY tenant_id, lease_expires_at NULLS FIRST
         LIMIT 1)
        UNION ALL
        SELECT later.* FROM in_flight, LATERAL (
            SELECT tenant_id, lease_expires_at FROM operations
            WHERE state IN ('RECEIVED', 'PROVIDER_REQUEST_SENT') AND created_at >= %(since)s
              AND tenant_id > in_flight.tenant_id
            ORDER BY tenant_id, lease_expires_at NULLS FIRST
            LIMIT 1) AS later
    ), unknown AS (
        (SELECT tenant_id, next_check_at AS due_at FROM operations
         WHERE state = 'UNKNOWN_REQUIRES_RECOVERY' AND created_at >= %(since)s
         ORDER BY tenant_id, next_check_at
         LIMIT 1)
        UNION ALL
        SELECT later.* FROM unknown, LATERAL (
            SELECT tenant_id, next_check_at FROM operations
            WHERE state = 'UNKNOWN_REQUIRES_RECOVERY' AND created_at >= %(since)s
              AND tenant_id > unknown.tenant_id
            ORDER BY tenant_id, next_check_at
            LIMIT 1) AS later
    )
    SELECT tenant_id FROM in_flight WHERE free_at IS NULL OR free_at <= now()
    UNION
    SELECT tenant_id FROM unknown
    WHERE due_at <= now()
      AND EXISTS (
          SELECT FROM operations
          WHERE tenant_id = unknown.tenant_id
            AND state = 'UNKNOWN_REQUIRES_RECOVERY'
            AND created_at >= %(since)s
            AND next_check_at <= now()
            AND (lease_expires_at IS NULL OR lease_expires_at <= now()))
"""

# One tenant's batch: in-flight operations whose owner's lease ran out (the owner crashed
# or hung), then unknown operations whose next check has come. FOR UPDATE SKIP LOCKED lets
# any number of workers claim at once without waiting on, or sharing, a row. Each row is
# changed by its primary key, id and day, and returns its day for the owner's reference.
# Sent unprepared (`statements.PREPARED`): planned with the horizon each time, it names
# only the days from the horizon on, where a generic plan would lock and set up every day.
_CLAIM_DUE = f"""
    WITH stale AS (
        SELECT id, created_at FROM operations
        WHERE tenant_id = %(tenant_id)s
          AND state IN ('RECEIVED', 'PROVIDER_REQUEST_SENT')
          AND created_at >= %(since)s
          AND (lease_expires_at IS NULL OR lease_expires_at <= now())
        ORDER BY lease_expires_at NULLS FIRST
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ), due AS (
        SELECT id, created_at FROM operations
        WHERE tenant_id = %(tenant_id)s
          AND state = 'UNKNOWN_REQUIRES_RECOVERY'
          AND created_at >= %(since)s
          AND next_check_at <= now()
          AND (lease_expires_at IS NULL OR lease_expires_at <= now())
        ORDER BY next_check_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ), picked AS (
        SELECT id, created_at FROM (
            SELECT id, created_at, 0 AS rank FROM stale
            UNION ALL SELECT id, created_at, 1 FROM due) ids
        ORDER BY rank
        LIMIT %(limit)s
    )
    UPDATE operations
    SET {new_owner()}
    WHERE tenant_id = %(tenant_id)s AND created_at >= %(since)s
      AND (id, created_at) IN (SELECT id, created_at FROM picked)
    RETURNING id, created_at, fence, state, attempts, operation_name
"""

# An owner gives its lease back: fenced, on the operation's day.
_RELEASE = """
    UPDATE operations SET lease_owner = NULL, lease_expires_at = NULL
    WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND created_at = %(created_at)s
      AND fence = %(fence)s AND lease_owner = %(owner)s
    RETURNING id
"""


async def take_over(
    conn: Connection, snapshot: Snapshot, *, owner: str, lease_s: float
) -> OwnedRef | None:
    """Become the operation's owner if nobody holds a live lease on it; None otherwise.

    A conditional UPDATE on the fence the caller saw: of two contenders only one can move
    the fence from N to N+1, the other matches no row.
    """
    op = snapshot.operation
    params = {"id": op.id, "tenant_id": op.tenant_id, "created_at": op.created_at}
    params |= {"fence": op.fence, "owner": owner, "lease_s": lease_s}
    row = await (await conn.execute(_TAKE_OVER, params)).fetchone()
    if row is None:
        return None
    fence, state, attempts, created_at = row
    return OwnedRef(
        id=op.id,
        tenant_id=op.tenant_id,
        created_at=created_at,
        fence=int(fence),
        state=State(state),
        attempts=int(attempts),
    )


async def due_tenants(conn: Connection, since: datetime) -> list[uuid.UUID]:
    """Every tenant with an operation created from `since` on (the horizon) that the
    worker may claim now; nothing is locked."""
    rows = await (await conn.execute(_DUE_TENANTS, {"since": since})).fetchall()
    return [tenant_id for (tenant_id,) in rows]


async def claim_due(
    conn: Connection,
    *,
    owner: str,
    lease_s: float,
    limit: int,
    tenants: KeptTenants | None = None,
    horizon: Horizon | None = None,
) -> list[DueRef]:
    """Take recovery ownership of up to `limit` operations that need it, of any name.

    The tenants with due work (`due_tenants`), then one claim per tenant, in a shuffled
    order with fair shares (`app/jobs/tenants.py`). Each tenant's claim is its own
    statement; the tenants' statements are sent together, a pipeline each round trip
    (`KeptTenants.claim_together`): a claim over many tenants each due a little is a round
    trip or two instead of one per tenant. Those of one round trip are one transaction (the
    connection's autocommit commits at the pipeline's end, and an error rolls the whole
    round trip back, so no operation is left leased by a claim that raised), and `now()`,
    the leases' start, is its start in each. What the worker does with the rows claimed
    needs nothing more: each owner write after the claim is its own statement or
    transaction, fenced (docs/scaling.md). `tenants` keeps the tenants found between a
    worker's claims (its order and how long it keeps them); without it they are read on
    every claim. Every statement reads the days from the backlog's horizon on
    (`horizon.py`); `horizon` keeps it between claims, without it it is read on every claim.
    """
    since = await (Horizon(refresh_s=0) if horizon is None else horizon).since(conn)

    async def claim(asks: Sequence[tuple[uuid.UUID, int]]) -> list[list[DueRef]]:
        cursors: list[AsyncCursor[TupleRow]] = []
        async with conn.pipeline():
            for tenant_id, share in asks:
                params = {"tenant_id": tenant_id, "owner": owner, "lease_s": lease_s}
                params |= {"limit": share, "since": since}
                claimed = conn.execute(_CLAIM_DUE, params, prepare=PREPARED)
                cursors.append(await claimed)
        return [
            _owned(tenant_id, await cursor.fetchall())
            for (tenant_id, _), cursor in zip(asks, cursors, strict=True)
        ]

    kept = KeptTenants(refresh_s=0) if tenants is None else tenants
    return await kept.claim_together(limit, lambda: due_tenants(conn, since), claim)


def _owned(tenant_id: uuid.UUID, rows: Sequence[TupleRow]) -> list[DueRef]:
    """One tenant's claimed rows (`_CLAIM_DUE`'s RETURNING) as references."""
    return [
        DueRef(
            operation_name=name,
            ref=OwnedRef(
                id=row_id,
                tenant_id=tenant_id,
                created_at=created_at,
                fence=int(fence),
                state=State(state),
                attempts=int(attempts),
            ),
        )
        for row_id, created_at, fence, state, attempts, name in rows
    ]


async def release(conn: Connection, ref: OwnedRef, *, owner: str) -> bool:
    """End `owner`'s lease on `ref` without changing state; False if a newer owner holds it.

    For an owner that decided to do nothing (an operator's refused resolution): the
    operation is at once free for the worker again, instead of after the lease runs out.
    Fenced like every owner write, and on the operation's day.
    """
    params = {"id": ref.id, "tenant_id": ref.tenant_id, "created_at": ref.created_at}
    params |= {"fence": ref.fence, "owner": owner}
    row = await (await conn.execute(_RELEASE, params)).fetchone()
    return row is not None
