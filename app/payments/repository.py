"""All SQL on payments."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import fields
from datetime import datetime, timedelta
from typing import Any

from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from app.db.database import Connection
from app.ids import created_window, within
from app.operations.values import SubjectWrite
from app.payments import attempts
from app.payments.rows import PaymentRow
from app.payments.schemas import CreatePaymentCommand
from app.payments.status import CAPTURE_WINDOW_S, CaptureMode, PaymentStatus
from app.provider.keys import split_attempt_key

_COLUMNS = ", ".join(f.name for f in fields(PaymentRow))
# By its operation's id and day: a payment's `created_at` is its operation's (written from
# the operation's row, in its claim's statement), a parameter: the planner keeps that day's
# partition alone; for several operations, their days' (`created_at = ANY`).
_FOR_OPERATION = (
    f"SELECT {_COLUMNS} FROM payments"
    " WHERE operation_id = %(operation_id)s AND created_at = %(created_at)s"
)
_FOR_OPERATIONS = (
    f"SELECT {_COLUMNS} FROM payments"
    " WHERE operation_id = ANY(%(operation_ids)s) AND created_at = ANY(%(days)s)"
)
# By id: within the window of `created_at` the id tells (`app/ids.py`), so that only the
# days of `payments` in it are read (every day for an id made before v7 ids).
BY_ID = f"id = %(id)s AND {within('created_at', 'id')}"
_FOR_TENANT = f"SELECT {_COLUMNS} FROM payments WHERE {BY_ID} AND tenant_id = %(tenant_id)s"
# Subject writes: made inside the operations verb's statement (see SubjectWrite). The
# payment's `created_at` is its operation's, named from the row the claim inserted: both
# tables are partitioned by it, so a payment is always in its operation's day. The updates
# below are of the payment's own operation's payment: they match it on the verb's
# `%(created_at)s`, so the write reads the payment's day alone.
_INSERT_WITH_CLAIM = """
    INSERT INTO payments (id, tenant_id, operation_id, provider_key, route, status,
                          amount_minor, currency, account_id, merchant_reference,
                          description, metadata, created_at)
    SELECT %(s_id)s, %(s_tenant_id)s, id, %(s_provider_key)s, %(s_route)s, %(s_status)s,
           %(s_amount_minor)s, %(s_currency)s, %(s_account_id)s, %(s_merchant_reference)s,
           %(s_description)s, %(s_metadata)s, created_at
    FROM changed
"""
# A manual payment's claim: its hold lapses a capture window after the claim (the claim's
# statement's time, `now()`, as `as_claimed` is told it).
_INSERT_MANUAL_WITH_CLAIM = """
    INSERT INTO payments (id, tenant_id, operation_id, provider_key, route, status,
                          amount_minor, currency, account_id, merchant_reference,
                          description, metadata, capture_mode, capture_before, created_at)
    SELECT %(s_id)s, %(s_tenant_id)s, id, %(s_provider_key)s, %(s_route)s, %(s_status)s,
           %(s_amount_minor)s, %(s_currency)s, %(s_account_id)s, %(s_merchant_reference)s,
           %(s_description)s, %(s_metadata)s, 'manual',
           now() + make_interval(secs => %(s_capture_window_s)s), created_at
    FROM changed
"""
_RESULT_WITH_OUTCOME = """
    UPDATE payments
    SET status = %(s_status)s, provider_charge_id = %(s_provider_charge_id)s,
        decline_code = %(s_decline_code)s, attempt = %(s_attempt)s, updated_at = %(s_at)s
    WHERE id = %(s_id)s AND tenant_id = %(tenant_id)s AND created_at = %(created_at)s
      AND EXISTS (SELECT FROM changed)
"""
# The failover's own write: the payment moves to its next attempt in the statement that
# moves the operation (fenced), before anything is sent under the new attempt's key.
_NEXT_ATTEMPT = """
    UPDATE payments SET attempt = %(s_attempt)s, updated_at = now()
    WHERE id = %(s_id)s AND attempt = %(s_attempt)s - 1 AND tenant_id = %(tenant_id)s
      AND created_at = %(created_at)s AND EXISTS (SELECT FROM changed)
"""


_OPERATION_FOR_KEY = "SELECT operation_id FROM payments WHERE provider_key = %(key)s"


async def operation_for_key(conn: Connection, provider_key: str) -> uuid.UUID | None:
    """The operation of the payment whose attempt was sent under `provider_key` (its stored
    key for attempt 0, `<stored key>:<n>` for attempt n), or None."""
    split = split_attempt_key(provider_key)
    stored = provider_key if split is None else split[0]
    row = await (await conn.execute(_OPERATION_FOR_KEY, {"key": stored})).fetchone()
    return None if row is None else row[0]


async def get_for_operation(
    conn: Connection, operation_id: uuid.UUID, created_at: datetime
) -> PaymentRow:
    """The payment an operation (its id and `created_at`) created (every operation has
    exactly one)."""
    params = {"operation_id": operation_id, "created_at": created_at}
    payment = await _one(conn, _FOR_OPERATION, params)
    if payment is None:
        raise LookupError(f"operation {operation_id} has no payment")
    return payment


async def get_for_operations(
    conn: Connection, operations: Mapping[uuid.UUID, datetime]
) -> dict[uuid.UUID, PaymentRow]:
    """The payments of several operations (their ids and `created_at`) in one statement,
    by operation id."""
    params = {"operation_ids": list(operations), "days": sorted(set(operations.values()))}
    async with conn.cursor(row_factory=class_row(PaymentRow)) as cur:
        await cur.execute(_FOR_OPERATIONS, params)
        return {payment.operation_id: payment for payment in await cur.fetchall()}


async def get(
    conn: Connection, *, tenant_id: uuid.UUID, payment_id: uuid.UUID
) -> PaymentRow | None:
    """The tenant's payment by id; None for another tenant's."""
    return await _one(conn, _FOR_TENANT, by_id(payment_id) | {"tenant_id": tenant_id})


def for_operation_sql(*, many: bool = False) -> str:
    """The read of an operation's payment (of several operations', `many`), as
    `get_for_operation` (`get_for_operations`) runs it (the plan tests read it)."""
    return _FOR_OPERATIONS if many else _FOR_OPERATION


def get_sql() -> str:
    """The read of a payment by id and tenant, as `get` runs it (the plan tests read it)."""
    return _FOR_TENANT


def by_id(payment_id: uuid.UUID) -> dict[str, Any]:
    """The parameters of `BY_ID` for `payment_id`."""
    return {"id": payment_id} | created_window(payment_id).params("id")


async def _one(conn: Connection, sql: str, params: dict[str, Any]) -> PaymentRow | None:
    async with conn.cursor(row_factory=class_row(PaymentRow)) as cur:
        await cur.execute(sql, params)
        return await cur.fetchone()


def created_with_claim(
    *,
    payment_id: uuid.UUID,
    tenant_id: uuid.UUID,
    provider_key: str,
    route: tuple[str, ...],
    command: CreatePaymentCommand,
    capture_window_s: int = CAPTURE_WINDOW_S,
) -> SubjectWrite:
    """The payment, PENDING with its derived provider key and its route across providers,
    created by the claim that wins; a manual one with its `capture_before`."""
    manual = command.capture is CaptureMode.MANUAL
    return SubjectWrite(
        _INSERT_MANUAL_WITH_CLAIM if manual else _INSERT_WITH_CLAIM,
        {
            **({"s_capture_window_s": capture_window_s} if manual else {}),
            "s_id": payment_id,
            "s_tenant_id": tenant_id,
            "s_provider_key": provider_key,
            "s_route": list(route),
            "s_status": PaymentStatus.PENDING.value,
            "s_amount_minor": command.amount_minor,
            "s_currency": command.currency,
            "s_account_id": command.account_id,
            "s_merchant_reference": command.merchant_reference,
            "s_description": command.description,
            "s_metadata": Jsonb(command.metadata),
        },
    )


def as_claimed(
    *,
    payment_id: uuid.UUID,
    tenant_id: uuid.UUID,
    operation_id: uuid.UUID,
    provider_key: str,
    route: tuple[str, ...],
    command: CreatePaymentCommand,
    at: datetime,
    capture_window_s: int = CAPTURE_WINDOW_S,
) -> PaymentRow:
    """The row `created_with_claim` wrote, as it now stands (created and updated at `at`)."""
    manual = command.capture is CaptureMode.MANUAL
    return PaymentRow(
        id=payment_id,
        tenant_id=tenant_id,
        operation_id=operation_id,
        provider_key=provider_key,
        route=list(route),
        attempt=0,
        status=PaymentStatus.PENDING.value,
        amount_minor=command.amount_minor,
        currency=command.currency,
        account_id=command.account_id,
        merchant_reference=command.merchant_reference,
        description=command.description,
        metadata=dict(command.metadata),
        provider_charge_id=None,
        decline_code=None,
        created_at=at,
        updated_at=at,
        capture_mode=command.capture.value,
        capture_before=at + timedelta(seconds=capture_window_s) if manual else None,
    )


def result_with_outcome(
    payment_id: uuid.UUID,
    *,
    status: PaymentStatus,
    provider_charge_id: str | None,
    decline_code: str | None,
    attempt: int,
    at: datetime,
) -> SubjectWrite:
    """The provider's definite answer on the payment, written with the operation's outcome;
    `attempt` is the attempt it came from (its provider holds the charge)."""
    return SubjectWrite(
        _RESULT_WITH_OUTCOME,
        {
            "s_id": payment_id,
            "s_attempt": attempt,
            "s_status": status.value,
            "s_provider_charge_id": provider_charge_id,
            "s_decline_code": decline_code,
            "s_at": at,
        },
    )


def next_attempt(payment: PaymentRow, cause: str, detail: str | None) -> SubjectWrite:
    """The payment at its next attempt, and the failover's record (`attempts.py`), both
    written by the failover's fenced statement."""
    params = {
        "s_id": payment.id,
        "s_tenant_id": payment.tenant_id,
        "s_attempt": payment.attempt + 1,
        "s_from_provider": payment.provider,
        "s_to_provider": payment.route[payment.attempt + 1],
        "s_cause": cause,
        "s_detail": detail,
    }
    return SubjectWrite(_NEXT_ATTEMPT, params, also=(attempts.RECORD_SQL,))
