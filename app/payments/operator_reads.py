"""The operators' lists of payments (and the keyset machinery the refunds' list shares,
`app/refunds/operator_reads.py`), across tenants, newest first.

Paged by keyset on (created_at, id), descending: a support request is about something
recent. The cursor is the last row's `created_at` and id, so a page never shifts when rows
are added meanwhile. Each list walks an index in page order (migration 0012; the plans are
checked by tests/admin/test_admin_records.py):

    no tenant filter   ix_payments_created, ix_refunds_created           (created_at, id)
    a tenant           ix_payments_tenant_created, ix_refunds_tenant_...  (tenant_id, ...)
    an account         ix_payments_account_created                        (account_id, ...)
    a payment status   ix_payments_status_created                         (status, ...)

A refund's status, the time range, amount and currency are checked on the rows walked, so a
list filtered on those alone reads rows until it has a page: bound it by time, or by
tenant. "Needs attention" starts from the flagged operations' partial index (a handful).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Generic, TypeVar

from psycopg.rows import class_row

from app.db.database import Connection
from app.payments.repository import BY_ID, by_id
from app.payments.rows import PaymentRow

MAX_PAGE = 500
_PAYMENT_COLUMNS = ", ".join(f.name for f in fields(PaymentRow))


@dataclass(frozen=True)
class Cursor:
    """Where a page ended: the last row's creation time and id."""

    created_at: datetime
    id: uuid.UUID

    def __str__(self) -> str:
        return f"{self.created_at.isoformat()}_{self.id}"

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """The cursor `str()` made; ValueError for anything else."""
        at, _, ident = text.rpartition("_")
        moment = datetime.fromisoformat(at)
        if moment.tzinfo is None:
            raise ValueError("a cursor's time carries its offset")
        return cls(moment, uuid.UUID(ident))


@dataclass(frozen=True)
class RecordFilter:
    """What an operator asks of payments or refunds; every field optional. Amounts are in
    minor units of `currency`, the time range is [created_from, created_to)."""

    tenant_id: uuid.UUID | None = None
    status: str | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    amount_min: int | None = None
    amount_max: int | None = None
    currency: str | None = None
    # Payments only.
    account_id: str | None = None
    needs_attention: bool | None = None
    before: Cursor | None = None


T = TypeVar("T")


@dataclass(frozen=True)
class RecordPage(Generic[T]):
    """One page, newest first, and the cursor of the next (None on the last page)."""

    items: list[T]
    next: Cursor | None


def _where(flt: RecordFilter, *, payments: bool) -> tuple[list[str], dict[str, Any]]:
    where: list[str] = []
    params: dict[str, Any] = {}
    simple = {
        "tenant_id": flt.tenant_id,
        "status": flt.status,
        "currency": flt.currency,
    }
    if payments:
        simple["account_id"] = flt.account_id
    for column, value in simple.items():
        if value is not None:
            where.append(f"{column} = %({column})s")
            params[column] = value
    bounds = (
        ("created_at >= %(created_from)s", "created_from", flt.created_from),
        ("created_at < %(created_to)s", "created_to", flt.created_to),
        ("amount_minor >= %(amount_min)s", "amount_min", flt.amount_min),
        ("amount_minor <= %(amount_max)s", "amount_max", flt.amount_max),
    )
    for clause, name, bound in bounds:
        if bound is not None:
            where.append(clause)
            params[name] = bound
    if payments and flt.needs_attention is not None:
        # From the partial index of flagged operations: a handful, whatever the table holds.
        flagged = "operation_id IN (SELECT id FROM operations WHERE needs_attention)"
        where.append(flagged if flt.needs_attention else f"NOT {flagged}")
    if flt.before is not None:
        # The row comparison is the cursor; the plain bound beside it is what lets a
        # partitioned table skip the days after the cursor when the statement is planned.
        where.append("created_at <= %(before_at)s")
        where.append("(created_at, id) < (%(before_at)s, %(before_id)s)")
        params["before_at"] = flt.before.created_at
        params["before_id"] = flt.before.id
    return where, params


def list_sql(
    flt: RecordFilter, *, table: str, limit: int, columns: str | None = None
) -> tuple[str, dict[str, Any]]:
    """The list's statement on `payments` (or `table`, with its `columns`): one row more
    than `limit`, to tell whether more follow."""
    payments = table == "payments"
    where, params = _where(flt, payments=payments)
    params["limit"] = limit + 1
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    sql = (
        f"SELECT {columns or _PAYMENT_COLUMNS} FROM {table} {clause}"
        " ORDER BY created_at DESC, id DESC LIMIT %(limit)s"
    )
    return sql, params


async def list_payments(
    conn: Connection, flt: RecordFilter, *, limit: int
) -> RecordPage[PaymentRow]:
    """Up to `limit` payments matching `flt`, newest first, before the cursor if any."""
    sql, params = list_sql(flt, table="payments", limit=limit)
    async with conn.cursor(row_factory=class_row(PaymentRow)) as cur:
        await cur.execute(sql, params)
        rows = await cur.fetchall()
    items = rows[:limit]
    more = len(rows) > limit
    return RecordPage(items, Cursor(items[-1].created_at, items[-1].id) if more else None)


async def payment_by_id(conn: Connection, payment_id: uuid.UUID) -> PaymentRow | None:
    """Any tenant's payment by its id (read within the window its id tells)."""
    async with conn.cursor(row_factory=class_row(PaymentRow)) as cur:
        sql = f"SELECT {_PAYMENT_COLUMNS} FROM payments WHERE {BY_ID}"
        await cur.execute(sql, by_id(payment_id))
        return await cur.fetchone()
