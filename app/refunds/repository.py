"""All SQL on refunds, and the refund's writes to its payment.

Why the claim locks the payment row: the rule "succeeded plus in-flight refunds never exceed
what the payment captured" is a decision over several rows (every refund of the payment), so a
unique constraint cannot make it. Two claims of different keys for one payment would each
read the sum, see room, and both insert. The refund claim therefore runs in one short
transaction that first takes the payment's row lock (`FOR NO KEY UPDATE`: refund claims of
one payment queue on it; reads, and the payment's own writes by other operations, do not
wait on it), then sums the refunds in a new statement (under READ COMMITTED each statement
sees everything committed before it began, so the sum includes every refund whose claim
held the lock before us), checks, and inserts. Every refund claim of a payment takes the
same lock, so the check and the insert are one step for all of them, whichever API process
they run in. The lock is held for three short statements and never across a provider call.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from app.db.database import Connection
from app.ids import created_window, within
from app.operations.values import SubjectWrite
from app.payments.status import PaymentStatus
from app.refunds.rows import RefundRow, RefundStatus
from app.refunds.schemas import CreateRefundCommand

_COLUMNS = ", ".join(f.name for f in fields(RefundRow))
_FOR_OPERATION = f"SELECT {_COLUMNS} FROM refunds WHERE operation_id = %(operation_id)s"
_FOR_OPERATIONS = f"SELECT {_COLUMNS} FROM refunds WHERE operation_id = ANY(%(operation_ids)s)"
_FOR_TENANT = f"SELECT {_COLUMNS} FROM refunds WHERE id = %(id)s AND tenant_id = %(tenant_id)s"
_FOR_PAYMENT = f"""
    SELECT {_COLUMNS} FROM refunds
    WHERE tenant_id = %(tenant_id)s AND payment_id = %(payment_id)s
    ORDER BY created_at, id
    LIMIT %(limit)s
"""
# What the payment took, in SQL (`PaymentRow.taken_minor`): only that is refunded. A one-step
# payment is refunded only once it succeeded, which took all of it.
_TAKEN = "CASE WHEN capture_mode = 'automatic' THEN amount_minor ELSE amount_captured_minor END"
_LOCK_PAYMENT = f"""
    SELECT status, {_TAKEN}, currency, provider_charge_id, route[attempt + 1]
    FROM payments
    WHERE id = %(payment_id)s AND {within("created_at", "payment")} AND tenant_id = %(tenant_id)s
    FOR NO KEY UPDATE
"""
# A statement of its own, after the lock: its snapshot sees every refund committed so far.
_HELD = """
    SELECT coalesce(sum(amount_minor), 0) FROM refunds
    WHERE tenant_id = %(tenant_id)s AND payment_id = %(payment_id)s
      AND status IN ('PENDING', 'SUCCEEDED')
"""
# Subject writes: made inside the operations verb's statement (see SubjectWrite).
_INSERT_WITH_CLAIM = """
    INSERT INTO refunds (id, tenant_id, payment_id, operation_id, provider_key, charge_id,
                         provider, status, amount_minor, currency, reason, metadata)
    SELECT %(s_id)s, %(s_tenant_id)s, %(s_payment_id)s, id, %(s_provider_key)s,
           %(s_charge_id)s, %(s_provider)s, %(s_status)s, %(s_amount_minor)s, %(s_currency)s,
           %(s_reason)s, %(s_metadata)s
    FROM changed
"""
_RESULT_WITH_OUTCOME = """
    UPDATE refunds
    SET status = %(s_status)s, provider_refund_id = %(s_provider_refund_id)s,
        updated_at = %(s_at)s
    WHERE id = %(s_id)s AND tenant_id = %(tenant_id)s AND EXISTS (SELECT FROM changed)
"""
# A succeeded refund adds to the payment's refunded amount, in the same statement. The
# payment is of its own day, not the refund's: named by the window its id tells, as the
# claim's lock read it (the refund's row does not hold the payment's `created_at`). The
# payment's CHECK (refunded <= captured) is the last line of defence behind the claim's lock.
_PAYMENT_REFUNDED = f"""
    UPDATE payments
    SET amount_refunded_minor = amount_refunded_minor + %(s_amount_minor)s,
        status = CASE WHEN amount_refunded_minor + %(s_amount_minor)s >= {_TAKEN}
                      THEN '{PaymentStatus.REFUNDED.value}'
                      ELSE '{PaymentStatus.PARTIALLY_REFUNDED.value}' END,
        updated_at = %(s_at)s
    WHERE id = %(s_payment_id)s AND {within("created_at", "s_payment")}
      AND tenant_id = %(tenant_id)s AND EXISTS (SELECT FROM changed)
"""


@dataclass(frozen=True)
class LockedPayment:
    """The payment a refund is claimed against, read under its row lock."""

    status: str
    # What the payment took: its amount for a one-step payment, its captures' sum for a
    # manual one. Only captured money is refunded.
    captured_minor: int
    currency: str
    charge_id: str | None
    # The provider holding the payment's charge (its route's provider at its final attempt):
    # the one its refunds go to.
    provider: str
    # Succeeded and in-flight (PENDING) refunds: what no new refund may add beyond.
    held_minor: int

    @property
    def left_minor(self) -> int:
        return self.captured_minor - self.held_minor


async def lock_payment(
    conn: Connection, *, tenant_id: uuid.UUID, payment_id: uuid.UUID
) -> LockedPayment | None:
    """Lock the tenant's payment for a refund claim; None if there is no such payment.

    Call inside a transaction: the lock lasts until it ends.
    """
    params = {"tenant_id": tenant_id, "payment_id": payment_id}
    window = created_window(payment_id).params("payment")
    row = await (await conn.execute(_LOCK_PAYMENT, params | window)).fetchone()
    if row is None:
        return None
    held = await (await conn.execute(_HELD, params)).fetchone()
    assert held is not None, "an aggregate always has a row"
    status, captured_minor, currency, charge_id, provider = row
    return LockedPayment(status, int(captured_minor), currency, charge_id, provider, int(held[0]))


def lock_payment_sql() -> str:
    """The claim's read of its payment under its lock, as `lock_payment` runs it (the plan
    tests read it)."""
    return _LOCK_PAYMENT


async def operation_for_key(conn: Connection, provider_key: str) -> uuid.UUID | None:
    """The operation of the refund sent under `provider_key`, or None."""
    sql = "SELECT operation_id FROM refunds WHERE provider_key = %(key)s"
    row = await (await conn.execute(sql, {"key": provider_key})).fetchone()
    return None if row is None else row[0]


async def get_for_operation(conn: Connection, operation_id: uuid.UUID) -> RefundRow:
    """The refund an operation created (every refund operation has exactly one)."""
    refund = await _one(conn, _FOR_OPERATION, {"operation_id": operation_id})
    if refund is None:
        raise LookupError(f"operation {operation_id} has no refund")
    return refund


async def get_for_operations(
    conn: Connection, operation_ids: list[uuid.UUID]
) -> dict[uuid.UUID, RefundRow]:
    """The refunds of several operations in one statement, by operation id."""
    async with conn.cursor(row_factory=class_row(RefundRow)) as cur:
        await cur.execute(_FOR_OPERATIONS, {"operation_ids": operation_ids})
        return {refund.operation_id: refund for refund in await cur.fetchall()}


async def get(conn: Connection, *, tenant_id: uuid.UUID, refund_id: uuid.UUID) -> RefundRow | None:
    """The tenant's refund by id; None for another tenant's."""
    return await _one(conn, _FOR_TENANT, {"id": refund_id, "tenant_id": tenant_id})


async def list_for_payment(
    conn: Connection, *, tenant_id: uuid.UUID, payment_id: uuid.UUID, limit: int
) -> list[RefundRow]:
    """Up to `limit` of the payment's refunds, oldest first."""
    params = {"tenant_id": tenant_id, "payment_id": payment_id, "limit": limit}
    async with conn.cursor(row_factory=class_row(RefundRow)) as cur:
        await cur.execute(_FOR_PAYMENT, params)
        return await cur.fetchall()


async def _one(conn: Connection, sql: str, params: dict[str, Any]) -> RefundRow | None:
    async with conn.cursor(row_factory=class_row(RefundRow)) as cur:
        await cur.execute(sql, params)
        return await cur.fetchone()


def created_with_claim(
    *,
    refund_id: uuid.UUID,
    tenant_id: uuid.UUID,
    provider_key: str,
    charge_id: str,
    provider: str,
    command: CreateRefundCommand,
) -> SubjectWrite:
    """The refund, PENDING with its derived provider key, created by the claim that wins."""
    return SubjectWrite(
        _INSERT_WITH_CLAIM,
        {
            "s_id": refund_id,
            "s_tenant_id": tenant_id,
            "s_payment_id": command.payment_id,
            "s_provider_key": provider_key,
            "s_charge_id": charge_id,
            "s_provider": provider,
            "s_status": RefundStatus.PENDING.value,
            "s_amount_minor": command.amount_minor,
            "s_currency": command.currency,
            "s_reason": command.reason,
            "s_metadata": Jsonb(command.metadata),
        },
    )


def as_claimed(
    *,
    refund_id: uuid.UUID,
    tenant_id: uuid.UUID,
    operation_id: uuid.UUID,
    provider_key: str,
    charge_id: str,
    provider: str,
    command: CreateRefundCommand,
    at: datetime,
) -> RefundRow:
    """The row a winning claim writes (created and updated at `at`, the claim's time)."""
    return RefundRow(
        id=refund_id,
        tenant_id=tenant_id,
        payment_id=command.payment_id,
        operation_id=operation_id,
        provider_key=provider_key,
        charge_id=charge_id,
        provider=provider,
        status=RefundStatus.PENDING.value,
        amount_minor=command.amount_minor,
        currency=command.currency,
        reason=command.reason,
        metadata=dict(command.metadata),
        provider_refund_id=None,
        created_at=at,
        updated_at=at,
    )


def result_with_outcome(
    refund: RefundRow, *, status: RefundStatus, provider_refund_id: str | None, at: datetime
) -> SubjectWrite:
    """The provider's definite answer on the refund (and, if it succeeded, on its payment),
    written with the operation's outcome."""
    params = {
        "s_id": refund.id,
        "s_status": status.value,
        "s_provider_refund_id": provider_refund_id,
        "s_at": at,
        "s_payment_id": refund.payment_id,
        "s_amount_minor": refund.amount_minor,
        **created_window(refund.payment_id).params("s_payment"),
    }
    also = (_PAYMENT_REFUNDED,) if status is RefundStatus.SUCCEEDED else ()
    return SubjectWrite(_RESULT_WITH_OUTCOME, params, also)
