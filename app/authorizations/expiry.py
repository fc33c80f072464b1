"""The worker's expiry of holds that lapsed: an authorization past its `capture_before`
becomes EXPIRED (nothing captured) or CAPTURED (the rest released), with `payment.expired`.

A batch is one short transaction. Its first statement locks lapsed payments with `FOR NO KEY
UPDATE SKIP LOCKED`, the lock every capture and void claim takes (a payment a claim is
deciding on is skipped: the next pass takes it), and moves those with no capture or void in
flight (`modifying_operation_id`, set by the claim's statement; a row the lock waited for is
read again as its last writer left it, so a mark committed a moment ago is seen). A payment
with one in flight keeps its hold until the modification is final (a capture claimed in
time is sent, and resent by recovery, under its key: the provider holds the authorization
and decides), and a later pass expires it. Then each moved payment's event is written,
fanned out to the tenant's endpoints like every event (`app/events/outbox.py`), in the same
transaction. Nothing is sent to the provider: its own hold lapses on its own clock, and a
capture is refused locally once ours has.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import fields

from psycopg.rows import class_row

from app.db.database import Database
from app.events.outbox import EVENT_CTE, outcome_event
from app.events.rows import EventType
from app.operations.values import EventWrite
from app.payments.rows import PaymentRow
from app.payments.status import PaymentStatus
from app.payments.views import payment_json

logger = logging.getLogger("payments.authorizations")

_OPEN = f"('{PaymentStatus.AUTHORIZED.value}', '{PaymentStatus.PARTIALLY_CAPTURED.value}')"
_COLUMNS = ", ".join(f"p.{f.name}" for f in fields(PaymentRow))
_EXPIRE = f"""
    UPDATE payments p
    SET status = CASE WHEN p.amount_captured_minor = 0 THEN '{PaymentStatus.EXPIRED.value}'
                      ELSE '{PaymentStatus.CAPTURED.value}' END,
        updated_at = now()
    WHERE p.id IN (
        SELECT id FROM payments
        WHERE status IN {_OPEN} AND capture_before <= now() AND modifying_operation_id IS NULL
        ORDER BY capture_before
        LIMIT %(limit)s
        FOR NO KEY UPDATE SKIP LOCKED)
      AND p.status IN {_OPEN} AND p.modifying_operation_id IS NULL
    RETURNING {_COLUMNS}
"""


def _event_sql(event: EventWrite) -> str:
    # The event's CTE reads the operation's id and its day (`changed`, as a verb's does):
    # the event goes to the partition of the payment's operation's day.
    ctes = ",\n".join(f"{name} AS ({sql})" for name, sql in event.ctes)
    return (
        "WITH changed AS (SELECT id, created_at FROM operations"
        " WHERE id = %(operation_id)s AND tenant_id = %(e_tenant_id)s),\n"
        f"{ctes}\n"
        f"SELECT count(*) FROM {EVENT_CTE}"
    )


class HoldExpiry:
    """Expires lapsed authorizations, one batch per `run`; events go through `deliver`."""

    name = "expire_holds"

    def __init__(self, db: Database, deliver: Callable[[EventWrite], EventWrite]):
        self._db = db
        self._deliver = deliver

    async def run(self, limit: int) -> int:
        """Expire up to `limit` lapsed holds with nothing in flight; how many it expired
        (fewer than `limit`: done for this pass)."""
        async with self._db.connection() as conn, conn.transaction():
            async with conn.cursor(row_factory=class_row(PaymentRow)) as cur:
                await cur.execute(_EXPIRE, {"limit": limit})
                expired = await cur.fetchall()
            for payment in expired:
                event = self._deliver(
                    outcome_event(
                        tenant_id=payment.tenant_id,
                        type=EventType.PAYMENT_EXPIRED,
                        data=payment_json(payment),
                    )
                )
                params = {**event.params, "operation_id": payment.operation_id}
                await conn.execute(_event_sql(event), params)
        if expired:
            logger.info("authorizations expired", extra={"fields": {"expired": len(expired)}})
        return len(expired)
