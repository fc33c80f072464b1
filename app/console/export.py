"""The lists' CSV exports: every row a filter matches, streamed a page at a time.

Each page is its own short read (no transaction held while the operator's download
trickles out), walking the same index as the list by keyset; rows added meanwhile above the
cursor are not in the file. At most `MAX_ROWS` rows: past that, narrow the filter (the last
line says the export was cut). Text that a spreadsheet would run as a formula (a merchant
reference starting with `=`, `+`, `-`, `@`, a tab or a carriage return) is written with a
leading `'`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator, Iterable
from dataclasses import replace
from typing import Any

from app.admin.queries import OperationFilter
from app.clock import iso
from app.dependencies import Services
from app.payments import operator_reads as records
from app.payments.money import format_minor_units
from app.payments.operator_reads import RecordFilter
from app.refunds import operator_reads as refund_reads

MAX_ROWS = 100_000
PAGE = 1_000
_FORMULA = ("=", "+", "-", "@", "\t", "\r")

PAYMENT_COLUMNS = (
    "payment_id", "tenant_id", "operation_id", "status", "amount", "currency",
    "amount_refunded", "account_id", "merchant_reference", "provider_charge_id",
    "decline_code", "created_at", "updated_at",
)  # fmt: skip
REFUND_COLUMNS = (
    "refund_id", "tenant_id", "payment_id", "operation_id", "status", "amount", "currency",
    "reason", "provider_refund_id", "created_at", "updated_at",
)  # fmt: skip
OPERATION_COLUMNS = (
    "operation_id", "tenant_id", "operation", "idempotency_key", "state", "needs_attention",
    "attempts", "payment_id", "refund_id", "last_error", "created_at", "completed_at",
)  # fmt: skip


def cell(value: Any) -> str:
    """A value as a CSV cell a spreadsheet shows and never evaluates."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA) else text


def _line(values: Iterable[Any]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerow([cell(v) for v in values])
    return out.getvalue()


def _payment(p: Any) -> list[Any]:
    return [
        p.id, p.tenant_id, p.operation_id, p.status,
        format_minor_units(p.amount_minor, p.currency), p.currency,
        format_minor_units(p.amount_refunded_minor, p.currency), p.account_id,
        p.merchant_reference, p.provider_charge_id, p.decline_code, iso(p.created_at),
        iso(p.updated_at),
    ]  # fmt: skip


def _refund(r: Any) -> list[Any]:
    return [
        r.id, r.tenant_id, r.payment_id, r.operation_id, r.status,
        format_minor_units(r.amount_minor, r.currency), r.currency, r.reason,
        r.provider_refund_id, iso(r.created_at), iso(r.updated_at),
    ]  # fmt: skip


async def records_rows(services: Services, kind: str, flt: RecordFilter) -> AsyncIterator[str]:
    """The payments' or refunds' CSV, header first."""
    payments = kind == "payments"
    yield _line(PAYMENT_COLUMNS if payments else REFUND_COLUMNS)
    sent = 0
    cursor = flt.before
    while sent < MAX_ROWS:
        step = replace(flt, before=cursor)
        async with services.db.connection() as conn:
            if payments:
                found_p = await records.list_payments(conn, step, limit=PAGE)
                rows, cursor = [_payment(p) for p in found_p.items], found_p.next
            else:
                found_r = await refund_reads.list_refunds(conn, step, limit=PAGE)
                rows, cursor = [_refund(r) for r in found_r.items], found_r.next
        for row in rows[: MAX_ROWS - sent]:
            yield _line(row)
        sent += len(rows)
        if cursor is None:
            return
    yield _line([f"# cut at {MAX_ROWS} rows: narrow the filter"])


async def operations_rows(services: Services, flt: OperationFilter) -> AsyncIterator[str]:
    """The operations' CSV, header first, oldest first."""
    yield _line(OPERATION_COLUMNS)
    sent = 0
    after = flt.after
    while sent < MAX_ROWS:
        step = replace(flt, after=after)
        found = await services.operators.list(step, limit=min(PAGE, records.MAX_PAGE))
        for snapshot in found.items[: MAX_ROWS - sent]:
            o = snapshot.operation
            yield _line([
                o.id, o.tenant_id, o.operation_name, o.idempotency_key, o.state,
                o.needs_attention, o.attempts, o.payment_id, o.refund_id, o.last_error,
                iso(o.created_at), None if o.completed_at is None else iso(o.completed_at),
            ])  # fmt: skip
        sent += len(found.items)
        if not found.has_more or not found.items:
            return
        after = found.items[-1].operation.id
    yield _line([f"# cut at {MAX_ROWS} rows: narrow the filter"])
