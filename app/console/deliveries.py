"""The console's webhook pages: deliveries that gave up, across tenants, and redelivering
an event (with a confirmation page first, as recheck and resolve have).

Both call the same `DeliveryActions` (`app/admin/deliveries.py`) as the admin API.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request, Response

from app.admin.delivery_views import failed_json
from app.admin.views import detail_json
from app.console.pages import render
from app.console.web import csrf_ok, current_login, detail_page, page, parse_operation_id, redirect
from app.dependencies import ServicesDep
from app.errors import NotFound, ProblemError
from app.events.views import parse_id as parse_event_id
from app.webhooks.views import DELIVERY_PREFIX, parse_id

router = APIRouter(include_in_schema=False)

PAGE = 50


@router.get("/deliveries/failed")
async def failed_deliveries(
    request: Request, services: ServicesDep, after: str | None = None
) -> Response:
    login = await current_login(request, services)
    if login is None:
        return redirect("/console/login")
    cursor = None if after is None else parse_id(after[:64], DELIVERY_PREFIX)
    try:
        items, more = await services.operators.deliveries.failed(after=cursor, limit=PAGE)
    except LookupError:
        # The cursor was redelivered meanwhile: start again from the newest.
        return redirect("/console/deliveries/failed")
    rows = [failed_json(item) for item in items]
    return page(render("failed.html", login=login, rows=rows, more=more, first=after is None))


@router.post("/events/{event_id}/redeliver")
async def redeliver(
    event_id: str,
    request: Request,
    services: ServicesDep,
    csrf: Annotated[str, Form(max_length=100)],
    operation: Annotated[str, Form(max_length=64)],
    confirmed: Annotated[str, Form(max_length=10)] = "",
) -> Response:
    login = await current_login(request, services)
    if login is None or not csrf_ok(login, csrf):
        return redirect("/console/login")
    parsed = parse_event_id(event_id)
    operation_id = parse_operation_id(operation)
    if parsed is None:
        return await detail_page(services, login, operation, error=NotFound("no such event"))
    if confirmed != "yes":
        try:
            detail = detail_json(await services.operators.detail(operation_id))
        except NotFound:
            return page(render("missing.html", login=login), 404)
        event = next((e for e in detail["events"] if e["id"] == event_id), None)
        if event is None:
            error = NotFound("no such event on this operation")
            return await detail_page(services, login, operation, error=error)
        return page(render("confirm_redeliver.html", login=login, op=detail, event=event))
    try:
        await services.operators.deliveries.redeliver(parsed, login.operator)
    except ProblemError as exc:
        return await detail_page(services, login, operation, error=exc)
    return redirect(f"/console/operations/{operation_id}?done=redelivered#deliveries")
