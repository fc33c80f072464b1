"""The console's discrepancy pages: the open queue with its counts by kind, and a
discrepancy with our record and the provider's side by side, its history, and the forms
that resolve or dismiss it (a reason required, the session's CSRF token checked).

Both call the same `DiscrepancyQueue` (`app/settlement/queue.py`) as the admin API.
Closing an item changes no payment, refund or money, only the queue: there is no
confirmation page, the reason is the deliberate step.
"""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Form, Request, Response

from app.admin.rows import ConsoleLogin
from app.console.pages import render
from app.console.web import csrf_ok, current_login, page, redirect
from app.dependencies import Services, ServicesDep
from app.errors import NotFound, ProblemError
from app.settlement.queue import DiscrepancyQueue, ItemFilter
from app.settlement.rows import ItemKind, ItemState
from app.settlement.views import detail_json, item_json, side_by_side, summary_json

router = APIRouter(include_in_schema=False)

PAGE = 50
_DONE = {"resolved": "Resolved.", "dismissed": "Dismissed."}


@router.get("/discrepancies")
async def queue_page(
    request: Request,
    services: ServicesDep,
    kind: str | None = None,
    after: str | None = None,
) -> Response:
    login = await current_login(request, services)
    if login is None:
        return redirect("/console/login")
    queue = DiscrepancyQueue(services.db)
    # An unknown kind or cursor (a hand-edited address) shows the whole queue from the start.
    chosen = kind if kind in {k.value for k in ItemKind} else None
    cursor = _uuid(after)
    flt = ItemFilter(kind=None if chosen is None else ItemKind(chosen), after=cursor)
    listed = await queue.list(flt, limit=PAGE)
    html = render(
        "discrepancies.html",
        login=login,
        summary=summary_json(await queue.summary()),
        kinds=[k.value for k in ItemKind],
        kind=chosen,
        items=[item_json(item) for item in listed.items],
        more=listed.has_more,
        first=cursor is None,
    )
    return page(html)


@router.get("/discrepancies/{item_id}")
async def item_page(
    item_id: str, request: Request, services: ServicesDep, done: str | None = None
) -> Response:
    login = await current_login(request, services)
    if login is None:
        return redirect("/console/login")
    return await _item_page(services, login, item_id, notice=_DONE.get(done or ""))


@router.post("/discrepancies/{item_id}/{action}")
async def close(
    item_id: str,
    action: str,
    request: Request,
    services: ServicesDep,
    csrf: Annotated[str, Form(max_length=100)],
    reason: Annotated[str, Form()] = "",
) -> Response:
    login = await current_login(request, services)
    if login is None or not csrf_ok(login, csrf):
        return redirect("/console/login")
    parsed = _uuid(item_id)
    if parsed is None or action not in ("resolve", "dismiss"):
        return page(render("missing.html", login=login, what="discrepancy"), 404)
    queue = DiscrepancyQueue(services.db)
    close_item = queue.resolve if action == "resolve" else queue.dismiss
    try:
        await close_item(parsed, login.operator.actor, reason)
    except ProblemError as exc:
        return await _item_page(services, login, item_id, error=exc, reason=reason, action=action)
    state = ItemState.RESOLVED if action == "resolve" else ItemState.DISMISSED
    return redirect(f"/console/discrepancies/{parsed}?done={state.value}")


async def _item_page(
    services: Services,
    login: ConsoleLogin,
    item_id: str,
    *,
    notice: str | None = None,
    error: ProblemError | None = None,
    reason: str = "",
    action: str = "",
) -> Response:
    """The item page, with a notice, or the problem an action ran into and what was typed."""
    parsed = _uuid(item_id)
    try:
        if parsed is None:
            raise NotFound("no such discrepancy")
        detail = await DiscrepancyQueue(services.db).read(parsed)
    except NotFound:
        return page(render("missing.html", login=login, what="discrepancy"), 404)
    html = render(
        "discrepancy.html",
        login=login,
        item=detail_json(detail),
        fields=side_by_side(detail.item.ours, detail.item.theirs),
        notice=notice,
        error=error,
        reason=reason,
        action=action,
    )
    return page(html, error.status if error is not None else 200)


def _uuid(text: str | None) -> uuid.UUID | None:
    if text is None:
        return None
    try:
        return uuid.UUID(text[:64])
    except ValueError:
        return None
