"""The console's page of the providers' notifications: the inbox newest first, filtered by
state (parked, rejected and contradicted shown first: they are the ones a person may have to
act on; a contradicted event's discrepancy is resolved in the discrepancy queue),
each event linking the operation it was applied to; and one event with its body.

Reads only, through the same reads as the admin API (`app/provider_events/operator_reads.py`).
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from app.console.pages import render
from app.console.web import current_login, page, redirect
from app.dependencies import ServicesDep
from app.provider_events import operator_reads
from app.provider_events.inbox import counts_by_state
from app.provider_events.operator_reads import InboxFilter, parse_id
from app.provider_events.rows import EventState
from app.provider_events.views import inbox_detail_json, inbox_event_json

router = APIRouter(include_in_schema=False)

PAGE = 50
# The filter's order: what may need a person first, then what is still moving, then done.
STATES = (
    EventState.PARKED,
    EventState.REJECTED,
    EventState.CONTRADICTED,
    EventState.RECEIVED,
    EventState.APPLIED,
)
NEEDS_A_LOOK = frozenset({EventState.PARKED, EventState.REJECTED, EventState.CONTRADICTED})


@router.get("/provider-events")
async def inbox(
    request: Request, services: ServicesDep, state: str = "", after: str | None = None
) -> Response:
    login = await current_login(request, services)
    if login is None:
        return redirect("/console/login")
    chosen = EventState(state) if state in {s.value for s in EventState} else None
    cursor = None if after is None else parse_id(after[:20])
    async with services.db.connection() as conn:
        counts = await counts_by_state(conn)
        items, more = await operator_reads.events(
            conn, InboxFilter(state=chosen, after=cursor), limit=PAGE
        )
    html = render(
        "provider_events.html",
        login=login,
        states=[(s.value, counts[s], s in NEEDS_A_LOOK) for s in STATES],
        total=sum(counts.values()),
        state=None if chosen is None else chosen.value,
        rows=[inbox_event_json(item) for item in items],
        more=more,
        first=cursor is None,
    )
    return page(html)


@router.get("/provider-events/{event_id}")
async def inbox_event(event_id: str, request: Request, services: ServicesDep) -> Response:
    login = await current_login(request, services)
    if login is None:
        return redirect("/console/login")
    parsed = parse_id(event_id[:20])
    found = None
    if parsed is not None:
        async with services.db.connection() as conn:
            found = await operator_reads.event(conn, parsed)
    if found is None:
        return page(render("missing.html", login=login, what="provider event"), 404)
    return page(render("provider_event.html", login=login, e=inbox_detail_json(*found)))
