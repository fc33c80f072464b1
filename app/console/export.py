"""The lists' CSV exports: every row a filter matches, streamed a page at a time.

Each page is its own short read (no transaction held while the operator's download
trickles out), walking the same index as the list by keyset; rows added meanwhile above the
cursor are not in the file. At most `MAX_ROWS` rows, or fewer when the form's `rows` asks
for fewer (`filters.export_rows`): past that, narrow the filter (the last line says the
export was cut, and where).

Every field is quoted, and text a spreadsheet could run as a formula is defused (OWASP's
advice on CSV injection): a `'` is written before a formula start (`=`, `+`, `-`, `@`, a
tab, a carriage return, or the full-width forms U+FF1D, U+FF0B, U+FF0D, U+FF20) that
begins the cell, or that follows a separator some spreadsheet may split on (`,` `;` `|`, a
tab, a line break), spaces between them or not. A merchant reference `acc;=SUM(1)` is
written `"acc;'=SUM(1)"`: a spreadsheet that splits the line on `;` shows the text
`'=SUM(1)`, never a formula. The `'` is the only change: the text stays readable.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import replace
from typing import Any

from app.clock import iso
from app.dependencies import Services
from app.operations.operator_reads import OperationFilter
from app.payments import operator_reads as records
from app.payments.money import format_minor_units
from app.payments.operator_reads import RecordFilter
from app.refunds import operator_reads as refund_reads

MAX_ROWS = 100_000
PAGE = 1_000
# What may start a formula, and where: the cell's start, or after a separator a
# spreadsheet may split the line on, with any spaces between.
FORMULA_STARTS = "=+-@\t\r\uff1d\uff0b\uff0d\uff20"
SEPARATORS = ",;|\t\n\r"
_FORMULA = re.compile(f"(^|[{re.escape(SEPARATORS)}])( *)(?=[{re.escape(FORMULA_STARTS)}])")

PAYMENT_COLUMNS = (
    "payment_id", "tenant_id", "operation_id", "status", "amount", "currency",
    "amount_refunded", "account_id", "merchant_reference", "provider_charge_id",
    "decline_code", "created_at", "updated_at",
    # A two-step payment's (a one-step payment's: automatic, all of a success captured).
    "capture", "amount_captured", "amount_capturable", "capture_before",
)  # fmt: skip
REFUND_COLUMNS = (
    "refund_id", "tenant_id", "payment_id", "operation_id", "status", "amount", "currency",
    "reason", "provider_refund_id", "created_at", "updated_at",
)  # fmt: skip
OPERATION_COLUMNS = (
    "operation_id", "tenant_id", "operation", "idempotency_key", "state", "needs_attention",
    "attempts", "payment_id", "refund_id", "last_error", "created_at", "completed_at",
    "capture_id", "void_id",
)  # fmt: skip


def cell(value: Any) -> str:
    """A value as a CSV cell a spreadsheet shows and never evaluates."""
    text = "" if value is None else str(value)
    return _FORMULA.sub(r"\1\2'", text)


def _lines(rows: Iterable[Iterable[Any]]) -> str:
    """`rows` as CSV lines: a page is sent as one piece, not a line at a time."""
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\r\n")
    writer.writerows([cell(v) for v in values] for values in rows)
    return out.getvalue()


def _cut(max_rows: int) -> str:
    return _lines([[f"# cut at {max_rows} rows: narrow the filter"]])


def _payment(p: Any) -> list[Any]:
    return [
        p.id, p.tenant_id, p.operation_id, p.status,
        format_minor_units(p.amount_minor, p.currency), p.currency,
        format_minor_units(p.amount_refunded_minor, p.currency), p.account_id,
        p.merchant_reference, p.provider_charge_id, p.decline_code, iso(p.created_at),
        iso(p.updated_at), p.capture_mode, format_minor_units(p.taken_minor, p.currency),
        format_minor_units(p.amount_capturable_minor, p.currency),
        None if p.capture_before is None else iso(p.capture_before),
    ]  # fmt: skip


def _refund(r: Any) -> list[Any]:
    return [
        r.id, r.tenant_id, r.payment_id, r.operation_id, r.status,
        format_minor_units(r.amount_minor, r.currency), r.currency, r.reason,
        r.provider_refund_id, iso(r.created_at), iso(r.updated_at),
    ]  # fmt: skip


def _operation(o: Any) -> list[Any]:
    links = o.links or {}
    return [
        o.id, o.tenant_id, o.operation_name, o.idempotency_key, o.state, o.needs_attention,
        o.attempts, links.get("payment_id"), links.get("refund_id"), o.last_error,
        iso(o.created_at),
        None if o.completed_at is None else iso(o.completed_at),
        links.get("capture_id"), links.get("void_id"),
    ]  # fmt: skip


async def records_rows(
    services: Services, kind: str, flt: RecordFilter, *, max_rows: int = MAX_ROWS
) -> AsyncIterator[str]:
    """The payments' or refunds' CSV, header first, at most `max_rows` rows."""
    payments = kind == "payments"
    yield _lines([PAYMENT_COLUMNS if payments else REFUND_COLUMNS])
    sent = 0
    cursor = flt.before
    while sent < max_rows:
        # The last page asks for no more than is left: whether more follow is then whether
        # the export was cut.
        step, limit = replace(flt, before=cursor), min(PAGE, max_rows - sent)
        async with services.db.connection() as conn:
            if payments:
                found_p = await records.list_payments(conn, step, limit=limit)
                rows, cursor = [_payment(p) for p in found_p.items], found_p.next
            else:
                found_r = await refund_reads.list_refunds(conn, step, limit=limit)
                rows, cursor = [_refund(r) for r in found_r.items], found_r.next
        yield _lines(rows)
        sent += len(rows)
        if cursor is None:
            return
    yield _cut(max_rows)


async def operations_rows(
    services: Services, flt: OperationFilter, *, max_rows: int = MAX_ROWS
) -> AsyncIterator[str]:
    """The operations' CSV, header first, oldest first, at most `max_rows` rows."""
    yield _lines([OPERATION_COLUMNS])
    sent = 0
    after = flt.after
    while sent < max_rows:
        step = replace(flt, after=after)
        found = await services.operators.list(step, limit=min(PAGE, max_rows - sent))
        yield _lines(_operation(s.operation) for s in found.items)
        sent += len(found.items)
        if not found.has_more or not found.items:
            return
        after = found.items[-1].operation.id
    yield _cut(max_rows)
