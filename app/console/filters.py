"""The lists' filter forms: query parameters read into the admin reads' filters.

Every list is a GET form, so a filtered list is a link an operator can share. Times are
`datetime-local` values read as UTC (the console shows UTC throughout); amounts are in the
currency's major units ("12.34") and need the currency, whose exponent turns them into
minor units. A value that does not parse is reported back beside the form (`422`), never
silently dropped: a dropped filter would show a list that looks filtered and is not.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from app.console import export
from app.operations.operator_reads import OperationFilter
from app.operations.states import State
from app.payments.money import InvalidAmount, UnknownCurrency, normalize_currency, to_minor_units
from app.payments.operator_reads import Cursor, RecordFilter
from app.payments.status import PaymentStatus
from app.refunds.rows import RefundStatus

# Which statuses each list offers.
STATUSES: dict[str, tuple[str, ...]] = {
    "operations": tuple(s.value for s in State),
    "payments": tuple(s.value for s in PaymentStatus),
    "refunds": tuple(s.value for s in RefundStatus),
}
FIELDS = (
    "tenant", "status", "from", "to", "min", "max", "currency", "account", "attention", "rows",
)  # fmt: skip


@dataclass
class Form:
    """The form as sent (to fill it in again), what it means, and what did not parse."""

    values: dict[str, str]
    errors: list[str] = field(default_factory=list)

    def query(self, **extra: str) -> str:
        """The form's query string (without empty fields), with `extra` on top."""
        pairs = {k: v for k, v in {**self.values, **extra}.items() if v}
        return urlencode(pairs)


def read_form(params: Mapping[str, str]) -> Form:
    form = Form({name: params.get(name, "").strip()[:200] for name in FIELDS})
    export_rows(form)
    return form


def export_rows(form: Form) -> int:
    """How many rows an export writes at most: the form's `rows`, 1 to `export.MAX_ROWS`
    (its default)."""
    text = form.values["rows"]
    if not text:
        return export.MAX_ROWS
    if text.isascii() and text.isdigit() and 1 <= int(text) <= export.MAX_ROWS:
        return int(text)
    problem = f"rows: a whole number from 1 to {export.MAX_ROWS}"
    if problem not in form.errors:
        form.errors.append(problem)
    return export.MAX_ROWS


def _uuid(form: Form, name: str) -> uuid.UUID | None:
    text = form.values[name]
    if not text:
        return None
    try:
        return uuid.UUID(text)
    except ValueError:
        form.errors.append(f"{name}: not an id")
        return None


def _time(form: Form, name: str) -> datetime | None:
    text = form.values[name]
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        form.errors.append(f"{name}: not a time (YYYY-MM-DDTHH:MM, UTC)")
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _status(form: Form, kind: str) -> str | None:
    text = form.values["status"]
    if text and text not in STATUSES[kind]:
        form.errors.append(f"status: not one of {', '.join(STATUSES[kind])}")
        return None
    return text or None


def _attention(form: Form) -> bool | None:
    return {"yes": True, "no": False}.get(form.values["attention"])


def _amounts(form: Form) -> tuple[str | None, int | None, int | None]:
    currency: str | None = None
    if form.values["currency"]:
        try:
            currency = normalize_currency(form.values["currency"])
        except UnknownCurrency as exc:
            form.errors.append(f"currency: {exc}")
    bounds: list[int | None] = []
    for name in ("min", "max"):
        text = form.values[name]
        if not text:
            bounds.append(None)
        elif currency is None:
            form.errors.append(f"{name}: choose a currency to filter by amount")
            bounds.append(None)
        else:
            try:
                bounds.append(to_minor_units(text, currency))
            except InvalidAmount as exc:
                form.errors.append(f"{name}: {exc}")
                bounds.append(None)
    return currency, bounds[0], bounds[1]


def record_filter(form: Form, kind: str, cursor: str | None) -> RecordFilter:
    """The payments' or refunds' filter the form asks for."""
    currency, low, high = _amounts(form)
    before = None
    if cursor:
        try:
            before = Cursor.parse(cursor[:120])
        except ValueError:
            form.errors.append("cursor: not one this console made; start again")
    return RecordFilter(
        tenant_id=_uuid(form, "tenant"),
        status=_status(form, kind),
        created_from=_time(form, "from"),
        created_to=_time(form, "to"),
        amount_min=low,
        amount_max=high,
        currency=currency,
        account_id=form.values["account"] or None,
        needs_attention=_attention(form),
        before=before,
    )


def operation_filter(form: Form, cursor: str | None) -> OperationFilter:
    """The operations' filter (their lists are oldest first, paged after an id)."""
    status = _status(form, "operations")
    after = None
    if cursor:
        try:
            after = uuid.UUID(cursor[:64])
        except ValueError:
            form.errors.append("cursor: not an operation id; start again")
    return OperationFilter(
        state=None if status is None else State(status),
        needs_attention=_attention(form),
        tenant_id=_uuid(form, "tenant"),
        created_from=_time(form, "from"),
        created_to=_time(form, "to"),
        after=after,
    )


def context(form: Form, kind: str) -> dict[str, Any]:
    """What the list templates need to draw the form."""
    return {"form": form.values, "errors": form.errors, "statuses": STATUSES[kind], "kind": kind}
