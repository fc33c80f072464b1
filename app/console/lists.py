"""The console's lists: operations, payments and refunds across tenants, filtered, paged by
keyset, each with a CSV export of the same filter; and a payment's own page.

The reads are shared: `app/operations/operator_reads.py` for operations (oldest first, as
in the admin API), `app/payments/operator_reads.py` and `app/refunds/operator_reads.py` for
payments and refunds (newest first). The filter forms are read by `filters.py`, the exports
written by `export.py`, a payment's page assembled by `dossier.py`.
"""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from app.admin.views import admin_operation_json
from app.console import export, filters
from app.console.dossier import payment_dossier
from app.console.pages import render
from app.console.web import HEADERS, current_login, page, redirect
from app.dependencies import Services, ServicesDep
from app.errors import NotFound
from app.payments import operator_reads as records
from app.refunds import operator_reads as refund_reads

router = APIRouter(include_in_schema=False)

PAGE = 50


def _status(form: filters.Form) -> int:
    return 422 if form.errors else 200


@router.get("/operations")
async def operations_list(request: Request, services: ServicesDep, after: str = "") -> Response:
    login = await current_login(request, services)
    if login is None:
        return redirect("/console/login")
    form = filters.read_form(request.query_params)
    flt = filters.operation_filter(form, after)
    rows: list[dict[str, object]] = []
    more = False
    if not form.errors:
        found = await services.operators.list(flt, limit=PAGE)
        rows = [admin_operation_json(s, with_history=False) for s in found.items]
        more = found.has_more
    nxt = form.query(after=str(rows[-1]["operation_id"])) if more and rows else None
    html = render(
        "list_operations.html",
        login=login,
        rows=rows,
        next=nxt,
        first=not after,
        csv=form.query(),
        **filters.context(form, "operations"),
    )
    return page(html, _status(form))


async def _records(
    services: Services, kind: str, form: filters.Form, cursor: str
) -> tuple[list[object], str | None]:
    flt = filters.record_filter(form, kind, cursor)
    if form.errors:
        return [], None
    items: list[object]
    async with services.db.connection() as conn:
        if kind == "payments":
            payments = await records.list_payments(conn, flt, limit=PAGE)
            items, cursor_next = list(payments.items), payments.next
        else:
            refunds = await refund_reads.list_refunds(conn, flt, limit=PAGE)
            items, cursor_next = list(refunds.items), refunds.next
    return items, None if cursor_next is None else form.query(before=str(cursor_next))


@router.get("/payments")
async def payments_list(request: Request, services: ServicesDep, before: str = "") -> Response:
    return await _list_page(request, services, "payments", before)


@router.get("/refunds")
async def refunds_list(request: Request, services: ServicesDep, before: str = "") -> Response:
    return await _list_page(request, services, "refunds", before)


async def _list_page(request: Request, services: Services, kind: str, before: str) -> Response:
    login = await current_login(request, services)
    if login is None:
        return redirect("/console/login")
    form = filters.read_form(request.query_params)
    rows, nxt = await _records(services, kind, form, before)
    html = render(
        f"list_{kind}.html",
        login=login,
        rows=rows,
        next=nxt,
        first=not before,
        csv=form.query(),
        **filters.context(form, kind),
    )
    return page(html, _status(form))


@router.get("/{kind}.csv")
async def export_csv(kind: str, request: Request, services: ServicesDep) -> Response:
    """Every row the filter matches (up to the form's `rows`, at most `export.MAX_ROWS`),
    streamed page by page."""
    login = await current_login(request, services)
    if login is None:
        return redirect("/console/login")
    if kind not in filters.STATUSES:
        return page(render("missing.html", login=login), 404)
    form = filters.read_form(request.query_params)
    most = filters.export_rows(form)
    if kind == "operations":
        flt = filters.operation_filter(form, None)
        rows = export.operations_rows(services, flt, max_rows=most)
    else:
        found = filters.record_filter(form, kind, None)
        rows = export.records_rows(services, kind, found, max_rows=most)
    if form.errors:
        return redirect(f"/console/{kind}?{form.query()}")
    headers = {**HEADERS, "content-disposition": f'attachment; filename="{kind}.csv"'}
    return StreamingResponse(rows, media_type="text/csv; charset=utf-8", headers=headers)


@router.get("/payments/{payment_id}")
async def payment_page(payment_id: str, request: Request, services: ServicesDep) -> Response:
    login = await current_login(request, services)
    if login is None:
        return redirect("/console/login")
    try:
        parsed = uuid.UUID(payment_id)
        dossier = await payment_dossier(services.operators, services.db, parsed)
    except (ValueError, NotFound):
        return page(render("missing.html", login=login), 404)
    operation = admin_operation_json(dossier.operation, with_history=False)
    return page(render("payment.html", login=login, d=dossier, op=operation))
