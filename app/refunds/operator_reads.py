"""The operators' list of refunds, across tenants, newest first: the payments' list's keyset
and filter (`app/payments/operator_reads.py`), on `refunds` (its account and needs-attention
fields are the payments' only, and ignored here)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from psycopg.rows import class_row

from app.db.database import Connection
from app.payments.operator_reads import Cursor, RecordFilter, RecordPage
from app.payments.operator_reads import list_sql as payments_list_sql
from app.refunds.rows import RefundRow

_COLUMNS = ", ".join(f.name for f in fields(RefundRow))


def list_sql(flt: RecordFilter, *, limit: int) -> tuple[str, dict[str, Any]]:
    return payments_list_sql(flt, table="refunds", limit=limit, columns=_COLUMNS)


async def list_refunds(conn: Connection, flt: RecordFilter, *, limit: int) -> RecordPage[RefundRow]:
    """Up to `limit` refunds matching `flt`, newest first, before the cursor if any."""
    sql, params = list_sql(flt, limit=limit)
    async with conn.cursor(row_factory=class_row(RefundRow)) as cur:
        await cur.execute(sql, params)
        rows = await cur.fetchall()
    items = rows[:limit]
    more = len(rows) > limit
    return RecordPage(items, Cursor(items[-1].created_at, items[-1].id) if more else None)
