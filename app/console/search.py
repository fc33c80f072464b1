"""The console's search box (in every page's header): any id or key, across tenants.

A single match goes straight to its page; several are listed, newest first; none says so.
The statement and what it looks in are `app/admin/search.py`'s, shared with the admin API
(each operation kind's part from `OperatorActions.search_records`).
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from app.admin.search import MAX_QUERY, Hit, search
from app.console.pages import render
from app.console.web import current_login, page, redirect
from app.dependencies import ServicesDep

router = APIRouter(include_in_schema=False)


def href(hit: Hit) -> str:
    """The console page that shows a hit: a payment's own page; an operation's for the
    rest (a refund's, an event's and a delivery's are shown on their operation's)."""
    if hit.kind == "payment":
        return f"/console/payments/{hit.id}"
    if hit.kind == "delivery":
        return f"/console/operations/{hit.operation_id}#deliveries"
    return f"/console/operations/{hit.operation_id}"


@router.get("/search")
async def search_page(request: Request, services: ServicesDep, q: str = "") -> Response:
    login = await current_login(request, services)
    if login is None:
        return redirect("/console/login")
    text = q.strip()[:MAX_QUERY]
    async with services.db.connection() as conn:
        hits = await search(conn, text, records=services.operators.search_records)
    if len(hits) == 1:
        return redirect(href(hits[0]))
    rows = [(hit, href(hit)) for hit in hits]
    status = 404 if text and not hits else 200
    return page(render("search.html", login=login, q=text, rows=rows), status)
