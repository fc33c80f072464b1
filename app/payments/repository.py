"""All SQL on payments."""

from __future__ import annotations

import uuid
from dataclasses import fields
from datetime import datetime
from typing import Any

from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from app.db.database import Connection
from app.payments.models import PaymentRow
from app.payments.schemas import CreatePaymentCommand
from app.payments.status import PaymentStatus

_COLUMNS = ", ".join(f.name for f in fields(PaymentRow))
_INSERT = f"""
    INSERT INTO payments (id, tenant_id, operation_id, provider_key, status, amount_minor,
                          currency, account_id, merchant_reference, description, metadata)
    VALUES (%(id)s, %(tenant_id)s, %(operation_id)s, %(provider_key)s, %(status)s,
            %(amount_minor)s, %(currency)s, %(account_id)s, %(merchant_reference)s,
            %(description)s, %(metadata)s)
    RETURNING {_COLUMNS}
"""
_FOR_OPERATION = f"SELECT {_COLUMNS} FROM payments WHERE operation_id = %(operation_id)s"
_FOR_TENANT = f"SELECT {_COLUMNS} FROM payments WHERE id = %(id)s AND tenant_id = %(tenant_id)s"
_RECORD_RESULT = """
    UPDATE payments
    SET status = %(status)s, provider_charge_id = %(provider_charge_id)s,
        decline_code = %(decline_code)s, updated_at = %(at)s
    WHERE id = %(id)s
"""


async def insert_payment(
    conn: Connection,
    *,
    payment_id: uuid.UUID,
    tenant_id: uuid.UUID,
    operation_id: uuid.UUID,
    provider_key: str,
    command: CreatePaymentCommand,
) -> PaymentRow:
    """Insert the payment, PENDING, with its derived provider key; the row as stored."""
    params = {
        "id": payment_id,
        "tenant_id": tenant_id,
        "operation_id": operation_id,
        "provider_key": provider_key,
        "status": PaymentStatus.PENDING.value,
        "amount_minor": command.amount_minor,
        "currency": command.currency,
        "account_id": command.account_id,
        "merchant_reference": command.merchant_reference,
        "description": command.description,
        "metadata": Jsonb(command.metadata),
    }
    payment = await _one(conn, _INSERT, params)
    assert payment is not None, "an INSERT ... RETURNING returns its row"
    return payment


async def get_for_operation(conn: Connection, operation_id: uuid.UUID) -> PaymentRow:
    """The payment an operation created (every operation has exactly one)."""
    payment = await _one(conn, _FOR_OPERATION, {"operation_id": operation_id})
    if payment is None:
        raise LookupError(f"operation {operation_id} has no payment")
    return payment


async def get(
    conn: Connection, *, tenant_id: uuid.UUID, payment_id: uuid.UUID
) -> PaymentRow | None:
    """The tenant's payment by id; None for another tenant's."""
    return await _one(conn, _FOR_TENANT, {"id": payment_id, "tenant_id": tenant_id})


async def record_result(
    conn: Connection,
    payment_id: uuid.UUID,
    *,
    status: PaymentStatus,
    provider_charge_id: str | None,
    decline_code: str | None,
    at: datetime,
) -> None:
    """Write the provider's definite answer onto the payment."""
    await conn.execute(
        _RECORD_RESULT,
        {
            "id": payment_id,
            "status": status.value,
            "provider_charge_id": provider_charge_id,
            "decline_code": decline_code,
            "at": at,
        },
    )


async def _one(conn: Connection, sql: str, params: dict[str, Any]) -> PaymentRow | None:
    async with conn.cursor(row_factory=class_row(PaymentRow)) as cur:
        await cur.execute(sql, params)
        return await cur.fetchone()
