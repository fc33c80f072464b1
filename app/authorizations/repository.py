"""All SQL on captures and voids, and their writes to their payment.

Why the claim locks the payment row: "one capture or void in flight per payment, never
beyond what the authorization has left, never once it lapsed" is a decision over the
payment and its modifications, so a capture or void claim is one statement that takes the
payment's row lock (`FOR NO KEY UPDATE`, as a refund's claim does) before anything else,
checks the payment as the lock returns it, and claims only if it passes (`claim_guard`, the
claim's `ClaimGuard`): the lock lasts until that statement commits. The claim's statement
also marks the payment with the modification's operation (`modifying_operation_id`), and
its outcome's statement clears it: a row lock that waited for another claim returns the row
as that claim left it (READ COMMITTED re-reads a row it waited for), so the mark of a claim
committed a moment ago is seen, in the one statement that locks. The worker's expiry locks
the same rows and skips a marked one. The partial unique index on pending modifications is
the last line of defence behind the mark; the payment's CHECKs (captured <= amount) behind
the amounts.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from psycopg.rows import class_row

from app.authorizations.rows import ModificationRow, ModificationStatus, ModificationType
from app.db.database import Connection
from app.ids import created_window, within
from app.operations.values import ClaimGuard, SubjectWrite
from app.payments import repository as payments
from app.payments.money import CURRENCY_EXPONENTS
from app.payments.rows import PaymentRow
from app.payments.status import CAPTURABLE, PaymentStatus

_COLUMNS = ", ".join(f.name for f in fields(ModificationRow))
_TABLE = "payment_modifications"
_FOR_OPERATION = f"SELECT {_COLUMNS} FROM {_TABLE} WHERE operation_id = %(operation_id)s"
_FOR_OPERATIONS = f"SELECT {_COLUMNS} FROM {_TABLE} WHERE operation_id = ANY(%(operation_ids)s)"
_FOR_PAYMENT = f"""
    SELECT {_COLUMNS} FROM {_TABLE}
    WHERE tenant_id = %(tenant_id)s AND payment_id = %(payment_id)s AND type = %(type)s
    ORDER BY created_at, id
    LIMIT %(limit)s
"""
_PAYMENT_COLUMNS = ", ".join(f.name for f in fields(PaymentRow))
_CAPTURABLE = ", ".join(f"'{status.value}'" for status in sorted(CAPTURABLE))
# What an authorization has left to capture (`PaymentRow.amount_capturable_minor`).
_CAPTURABLE_MINOR = (
    f"CASE WHEN status IN ({_CAPTURABLE}) THEN amount_minor - amount_captured_minor ELSE 0 END"
)
# A capture's amount in its payment's minor units: the one of its currency's exponent.
_AMOUNT_BY_EXPONENT = (
    "CASE "
    + " ".join(
        f"WHEN currency IN ({', '.join(repr(c) for c in sorted(codes))}) "
        f"THEN %(g_amount_{exponent})s::bigint"
        for exponent, codes in sorted(
            {
                e: [c for c, x in CURRENCY_EXPONENTS.items() if x == e]
                for e in set(CURRENCY_EXPONENTS.values())
            }.items()
        )
    )
    + " END"
)
EXPONENTS = sorted(set(CURRENCY_EXPONENTS.values()))
# The claim's guard: the payment, locked, and whether it takes the capture or void. `ok`:
# nothing in flight, an open authorization, and for a capture a hold not lapsed and an
# amount that fits the currency and what is left. The kind explains a refusal from the row.
_GUARD = """
    SELECT modifying_operation_id IS NULL AND status IN ({capturable}){capture} AS ok,
           claimed.amount, capture_before <= now() AS lapsed, {columns}
    FROM payments, LATERAL (SELECT {amount} AS amount) AS claimed
    WHERE id = %(g_payment_id)s AND {within}
      AND tenant_id = %(g_tenant_id)s
    FOR NO KEY UPDATE OF payments
"""
_CAPTURE_OK = """
        AND NOT coalesce(capture_before <= now(), false)
        AND claimed.amount IS NOT NULL AND claimed.amount <= {capturable_minor}"""
_GUARD_COLUMNS = ("ok", "amount", "lapsed", *(f.name for f in fields(PaymentRow)))


def _guard_sql(*, capture: bool, amount: str) -> str:
    return _GUARD.format(
        capturable=_CAPTURABLE,
        capture=_CAPTURE_OK.format(capturable_minor=_CAPTURABLE_MINOR) if capture else "",
        amount=amount,
        columns=_PAYMENT_COLUMNS,
        within=within("payments.created_at", "g_payment"),
    )


# (a capture?, of an amount?): a void and a capture of the rest take what is capturable.
_GUARDS = {
    (False, False): _guard_sql(capture=False, amount=_CAPTURABLE_MINOR),
    (True, False): _guard_sql(capture=True, amount=_CAPTURABLE_MINOR),
    (True, True): _guard_sql(capture=True, amount=_AMOUNT_BY_EXPONENT),
}


# Subject writes: made inside the operations verb's statement (see SubjectWrite). The claim's
# reads the guard's row (`claim_guard`): the payment's charge, provider (its route is 1-based
# in SQL), amount and currency.
_INSERT_WITH_CLAIM = f"""
    INSERT INTO {_TABLE} (id, tenant_id, payment_id, operation_id, type, provider_key,
                          charge_id, provider, status, amount_minor, currency)
    SELECT %(s_id)s, guard.tenant_id, guard.id, changed.id, %(s_type)s, %(s_provider_key)s,
           guard.provider_charge_id, (guard.route)[guard.attempt + 1], 'PENDING',
           guard.amount, guard.currency
    FROM changed, guard
"""
# The claim marks its payment: the capture or void in flight. The payment is of its own
# day: the one the guard read it from (and the window its id tells, which the guard read).
_PAYMENT_MARKED = f"""
    UPDATE payments SET modifying_operation_id = (SELECT id FROM changed)
    WHERE id = %(s_payment_id)s AND {within("created_at", "g_payment")}
      AND created_at = (SELECT created_at FROM guard)
      AND tenant_id = %(tenant_id)s AND EXISTS (SELECT FROM changed)
"""
_RESULT_WITH_OUTCOME = f"""
    UPDATE {_TABLE}
    SET status = %(s_status)s, provider_reference = %(s_provider_reference)s,
        updated_at = %(s_at)s
    WHERE id = %(s_id)s AND tenant_id = %(tenant_id)s AND EXISTS (SELECT FROM changed)
"""
# The outcome's writes to the payment name its day (`created_at`), as the payment was read
# with the capture or void: the payment is of its own day, not the modification's.
# A succeeded capture adds to the payment's captured amount in the same statement.
_PAYMENT_CAPTURED = f"""
    UPDATE payments
    SET amount_captured_minor = amount_captured_minor + %(s_amount_minor)s,
        status = CASE WHEN amount_captured_minor + %(s_amount_minor)s >= amount_minor
                      THEN '{PaymentStatus.CAPTURED.value}'
                      ELSE '{PaymentStatus.PARTIALLY_CAPTURED.value}' END,
        modifying_operation_id = NULL, updated_at = %(s_at)s
    WHERE id = %(s_payment_id)s AND created_at = %(s_payment_created_at)s
      AND tenant_id = %(tenant_id)s AND EXISTS (SELECT FROM changed)
"""
# A succeeded void releases the rest: VOIDED when nothing was captured, else CAPTURED.
_PAYMENT_VOIDED = f"""
    UPDATE payments
    SET status = CASE WHEN amount_captured_minor = 0 THEN '{PaymentStatus.VOIDED.value}'
                      ELSE '{PaymentStatus.CAPTURED.value}' END,
        modifying_operation_id = NULL, updated_at = %(s_at)s
    WHERE id = %(s_payment_id)s AND created_at = %(s_payment_created_at)s
      AND tenant_id = %(tenant_id)s AND EXISTS (SELECT FROM changed)
"""
# A failed one leaves the payment as it was, with nothing in flight.
_PAYMENT_RELEASED = """
    UPDATE payments SET modifying_operation_id = NULL
    WHERE id = %(s_payment_id)s AND created_at = %(s_payment_created_at)s
      AND tenant_id = %(tenant_id)s AND EXISTS (SELECT FROM changed)
"""


@dataclass(frozen=True)
class LockedPayment:
    """The payment a capture or void is claimed against, read under its row lock."""

    payment: PaymentRow
    # Whether its hold has lapsed (`capture_before` passed, on the database clock).
    lapsed: bool
    # The operation of the capture or void in flight, if one is.
    in_flight: uuid.UUID | None
    # What the capture or void takes, in minor units (NULL: a capture's amount that does not
    # fit the payment's currency).
    amount_minor: int | None


def claim_guard(
    *,
    tenant_id: uuid.UUID,
    payment_id: uuid.UUID,
    capture: bool,
    amounts: Mapping[int, int | None] | None = None,
) -> ClaimGuard:
    """The claim's guard for a capture (`capture`) or a void of the tenant's payment:
    `amounts` is a capture's amount in minor units by currency exponent (None for one that
    does not fit it), or None for all that is capturable."""
    params: dict[str, Any] = {"g_tenant_id": tenant_id, "g_payment_id": payment_id}
    params |= created_window(payment_id).params("g_payment")
    if amounts is not None:
        params.update({f"g_amount_{e}": amounts.get(e) for e in EXPONENTS})
    sql = _GUARDS[capture, amounts is not None]
    return ClaimGuard(sql, params, width=len(_GUARD_COLUMNS))


def locked_payment(row: tuple[Any, ...]) -> LockedPayment:
    """The guard's row (`claim_guard`), as read under the payment's lock."""
    values = dict(zip(_GUARD_COLUMNS, row, strict=True))
    del values["ok"]  # the claim's flow read it: the row is refused or claimed from
    amount, lapsed = values.pop("amount"), values.pop("lapsed")
    payment = PaymentRow(**values)
    return LockedPayment(payment, bool(lapsed), payment.modifying_operation_id, amount)


async def operation_for_key(
    conn: Connection, provider_key: str, type: ModificationType
) -> uuid.UUID | None:
    """The operation of the capture (or void) sent under `provider_key`, or None."""
    sql = f"SELECT operation_id FROM {_TABLE} WHERE provider_key = %(key)s AND type = %(type)s"
    row = await (await conn.execute(sql, {"key": provider_key, "type": type.value})).fetchone()
    return None if row is None else row[0]


async def get_for_operation(conn: Connection, operation_id: uuid.UUID) -> ModificationRow:
    """The capture or void an operation created (each such operation has exactly one)."""
    async with conn.cursor(row_factory=class_row(ModificationRow)) as cur:
        await cur.execute(_FOR_OPERATION, {"operation_id": operation_id})
        found = await cur.fetchone()
    if found is None:
        raise LookupError(f"operation {operation_id} has no capture or void")
    return found


async def get_for_operations(
    conn: Connection, operation_ids: list[uuid.UUID]
) -> dict[uuid.UUID, ModificationRow]:
    """The captures and voids of several operations in one statement, by operation id."""
    async with conn.cursor(row_factory=class_row(ModificationRow)) as cur:
        await cur.execute(_FOR_OPERATIONS, {"operation_ids": operation_ids})
        return {row.operation_id: row for row in await cur.fetchall()}


async def payments_of(conn: Connection, rows: list[ModificationRow]) -> dict[uuid.UUID, PaymentRow]:
    """The payments of `rows`, by payment id."""
    found: dict[uuid.UUID, PaymentRow] = {}
    for row in rows:
        if row.payment_id not in found:
            payment = await payments.get(conn, tenant_id=row.tenant_id, payment_id=row.payment_id)
            if payment is not None:
                found[row.payment_id] = payment
    return found


async def list_for_payment(
    conn: Connection,
    *,
    tenant_id: uuid.UUID,
    payment_id: uuid.UUID,
    type: ModificationType,
    limit: int,
) -> list[ModificationRow]:
    """Up to `limit` of the payment's captures (or voids), oldest first."""
    params: dict[str, Any] = {
        "tenant_id": tenant_id,
        "payment_id": payment_id,
        "type": type.value,
        "limit": limit,
    }
    async with conn.cursor(row_factory=class_row(ModificationRow)) as cur:
        await cur.execute(_FOR_PAYMENT, params)
        return await cur.fetchall()


def created_with_claim(
    *, id: uuid.UUID, type: ModificationType, provider_key: str, payment_id: uuid.UUID
) -> SubjectWrite:
    """The capture or void, PENDING with its derived provider key, created by the claim that
    wins: its charge, provider, amount and currency are the locked payment's (the guard's
    row, `claim_guard`)."""
    return SubjectWrite(
        _INSERT_WITH_CLAIM,
        {
            "s_id": id,
            "s_payment_id": payment_id,
            "s_type": type.value,
            "s_provider_key": provider_key,
        },
        also=(_PAYMENT_MARKED,),
    )


def result_with_outcome(
    row: ModificationRow,
    *,
    payment_created_at: datetime,
    status: ModificationStatus,
    provider_reference: str | None,
    at: datetime,
) -> SubjectWrite:
    """The provider's definite answer on the capture or void (and, if it succeeded, on its
    payment, created at `payment_created_at`), written with the operation's outcome."""
    params = {
        "s_payment_created_at": payment_created_at,
        "s_id": row.id,
        "s_status": status.value,
        "s_provider_reference": provider_reference,
        "s_at": at,
        "s_payment_id": row.payment_id,
        "s_amount_minor": row.amount_minor,
    }
    also = (_PAYMENT_RELEASED,)
    if status is ModificationStatus.SUCCEEDED:
        capture = row.type == ModificationType.CAPTURE
        also = (_PAYMENT_CAPTURED if capture else _PAYMENT_VOIDED,)
    return SubjectWrite(_RESULT_WITH_OUTCOME, params, also)


_FOR_TENANT = f"""
    SELECT {_COLUMNS} FROM {_TABLE}
    WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND type = %(type)s
"""


async def get(
    conn: Connection, *, tenant_id: uuid.UUID, record_id: uuid.UUID, type: ModificationType
) -> ModificationRow | None:
    """The tenant's capture (or void) by id; None for another tenant's, or the other type."""
    params = {"id": record_id, "tenant_id": tenant_id, "type": type.value}
    async with conn.cursor(row_factory=class_row(ModificationRow)) as cur:
        await cur.execute(_FOR_TENANT, params)
        return await cur.fetchone()
