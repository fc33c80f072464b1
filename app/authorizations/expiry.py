"""The worker's expiry of holds that lapsed: an authorization past its `capture_before` becomes
EXPIRED (nothing captured) or CAPTURED (the rest released), with `payment.expired`.

A batch is claimed tenant by tenant (`app/jobs/tenants.py`): the tenants with a lapsed hold
are found by a plain read (no lock), a loose scan of `ix_payments_open_holds`, which leads
with tenant_id, then each tenant's fair share is statements naming it alone: on Citus a
statement that locks rows must route to one shard group, and `tenant_id` is the distribution
column (docs/scaling.md). The tenants' statements are sent together
(`KeptTenants.claim_together`): the tenants asked together share one short transaction, one
pipeline, their UPDATEs first, then their events, two round trips where one tenant at a time
took three and one more per event; an error rolls back those tenants together. The
tenants found are kept between batches, as the recovery's are. A tenant's first statement
locks its lapsed payments, longest lapsed first, with `FOR NO KEY UPDATE SKIP LOCKED`, the
lock every capture and void claim takes (a payment a claim is deciding on is skipped: the
next pass takes it), and moves those with no capture or void in flight
(`modifying_operation_id`, set by the claim's statement; a row the lock waited for is read
again as its last writer left it, so a mark committed a moment ago is seen). A payment with
one in flight keeps its hold until the modification is final (a capture claimed in time is
sent, and resent by recovery, under its key: the provider holds the authorization and
decides), and a later pass expires it. Then each moved payment's event is written, fanned
out to the tenant's endpoints like every event (`app/events/outbox.py`), in the same
transaction. Nothing is sent to the provider: its own hold lapses on its own clock, and a
capture is refused locally once ours has.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import fields

from psycopg.rows import class_row

from app.db.database import Database
from app.events.outbox import EVENT_CTE, outcome_event
from app.events.rows import EventType
from app.jobs.tenants import KEEP_TENANTS_S, KeptTenants
from app.operations.values import EventWrite
from app.payments.rows import PaymentRow
from app.payments.status import PaymentStatus
from app.payments.views import payment_json

logger = logging.getLogger("payments.authorizations")

_OPEN = f"('{PaymentStatus.AUTHORIZED.value}', '{PaymentStatus.PARTIALLY_CAPTURED.value}')"
_COLUMNS = ", ".join(f"p.{f.name}" for f in fields(PaymentRow))
# One tenant's lapsed holds, longest lapsed first. The locked rows are a CTE of their own
# (materialized: read once): a locking subquery under `IN` may be run again for each row
# the UPDATE looks at, SKIP LOCKED then taking other rows each time, past the LIMIT.
_EXPIRE = f"""
    WITH due AS MATERIALIZED (
        SELECT id FROM payments
        WHERE tenant_id = %(tenant_id)s
          AND status IN {_OPEN} AND capture_before <= now() AND modifying_operation_id IS NULL
        ORDER BY capture_before
        LIMIT %(limit)s
        FOR NO KEY UPDATE SKIP LOCKED
    )
    UPDATE payments p
    SET status = CASE WHEN p.amount_captured_minor = 0 THEN '{PaymentStatus.EXPIRED.value}'
                      ELSE '{PaymentStatus.CAPTURED.value}' END,
        updated_at = now()
    WHERE p.tenant_id = %(tenant_id)s AND p.id IN (SELECT id FROM due)
      AND p.status IN {_OPEN} AND p.modifying_operation_id IS NULL
    RETURNING {_COLUMNS}
"""

# The tenants with a lapsed hold: a loose scan of ix_payments_open_holds (tenant_id,
# capture_before), one probe per tenant with an open hold, its earliest `capture_before`.
# No lock; every tenant found is returned (a LIMIT would favour those that sort first). A
# tenant whose lapsed holds all have a capture or void in flight is found too: its claim
# takes nothing.
_LAPSED_TENANTS = f"""
    WITH RECURSIVE open_holds AS (
        (SELECT tenant_id, capture_before FROM payments
         WHERE status IN {_OPEN}
         ORDER BY tenant_id, capture_before
         LIMIT 1)
        UNION ALL
        SELECT later.* FROM open_holds, LATERAL (
            SELECT tenant_id, capture_before FROM payments
            WHERE status IN {_OPEN} AND tenant_id > open_holds.tenant_id
            ORDER BY tenant_id, capture_before
            LIMIT 1) AS later
    )
    SELECT tenant_id FROM open_holds WHERE capture_before <= now()
"""


def event_sql(event: EventWrite) -> str:
    """The statement writing a moved payment's event. Its CTE reads the operation's id and
    its day (`changed`, as a verb's does): the event goes to the partition of the payment's
    operation's day. The operation is read on the payment's `created_at`, its operation's
    (the claim writes both from one row), a parameter: the planner keeps that day's
    partition of `operations` alone."""
    ctes = ",\n".join(f"{name} AS ({sql})" for name, sql in event.ctes)
    return (
        "WITH changed AS (SELECT id, created_at FROM operations"
        " WHERE id = %(operation_id)s AND tenant_id = %(e_tenant_id)s"
        " AND created_at = %(operation_created_at)s),\n"
        f"{ctes}\n"
        f"SELECT count(*) FROM {EVENT_CTE}"
    )


class HoldExpiry:
    """Expires lapsed authorizations, one batch per `run`, tenant by tenant; events go
    through `deliver`."""

    name = "expire_holds"

    def __init__(
        self,
        db: Database,
        deliver: Callable[[EventWrite], EventWrite],
        *,
        tenants: KeptTenants | None = None,
    ):
        self._db = db
        self._deliver = deliver
        # The tenants with lapsed holds, kept between this job's batches.
        self._tenants = KeptTenants(refresh_s=KEEP_TENANTS_S) if tenants is None else tenants

    async def run(self, limit: int) -> int:
        """Expire up to `limit` lapsed holds with nothing in flight, a fair share of each
        tenant with some; how many it expired (fewer than `limit`: done for this pass)."""
        async with self._db.connection() as conn:

            async def lapsed_tenants() -> list[uuid.UUID]:
                rows = await (await conn.execute(_LAPSED_TENANTS)).fetchall()
                return [tenant_id for (tenant_id,) in rows]

            async def expire(asks: Sequence[tuple[uuid.UUID, int]]) -> list[list[PaymentRow]]:
                # One transaction: on this autocommit connection, what a pipeline sends
                # before its Sync (at its end) is one implicit transaction, committed by the
                # Sync, rolled back whole on an error. Each payment moved and its event
                # commit together, and so do the tenants asked together. (BEGIN and COMMIT
                # of `conn.transaction()` inside the pipeline cost three more round trips.)
                async with conn.pipeline():
                    cursors = []
                    for tenant_id, share in asks:
                        cursor = conn.cursor(row_factory=class_row(PaymentRow))
                        await cursor.execute(_EXPIRE, {"tenant_id": tenant_id, "limit": share})
                        cursors.append(cursor)
                    moved = [await cursor.fetchall() for cursor in cursors]
                    for payment in (payment for rows in moved for payment in rows):
                        event = self._deliver(
                            outcome_event(
                                tenant_id=payment.tenant_id,
                                type=EventType.PAYMENT_EXPIRED,
                                data=payment_json(payment),
                            )
                        )
                        params = {
                            **event.params,
                            "operation_id": payment.operation_id,
                            "operation_created_at": payment.created_at,
                        }
                        await conn.execute(event_sql(event), params)
                return moved

            expired = await self._tenants.claim_together(limit, lapsed_tenants, expire)
        if expired:
            logger.info("authorizations expired", extra={"fields": {"expired": len(expired)}})
        return len(expired)
