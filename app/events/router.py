"""`GET /events` (the polling alternative to webhooks) and `GET /events/{id}`."""

from __future__ import annotations

from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Depends, Query, Response

from app.db.database import Database
from app.errors import NotFound, ValidationFailed, dump_json
from app.events import reads
from app.events.schemas import EventList, EventOut
from app.events.views import event_json, parse_id
from app.http.problems import NOT_FOUND, TENANT_AUTH, VALIDATION
from app.http.query import only_query
from app.http.state import get_services
from app.tenants.bearer import CurrentTenant


class Needs(Protocol):
    """What the events feed uses of the services (`app.dependencies.Services` provides it)."""

    @property
    def db(self) -> Database: ...


ServicesDep = Annotated[Needs, Depends(get_services)]

router = APIRouter(tags=["events"])


@router.get(
    "/events",
    response_model=EventList,
    summary="List the tenant's events in order",
    responses={**TENANT_AUTH, **VALIDATION},
    dependencies=[Depends(only_query("after", "limit"))],
)
async def list_events(
    tenant: CurrentTenant,
    services: ServicesDep,
    after: Annotated[
        str | None,
        Query(max_length=64, description="Continue after this event id (`evt_...`)"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
) -> Any:
    """Events in publication order; pass the last `id` seen as `after` to read on.

    An event appears here once every transaction older than its own has ended, so a
    reader's position never has an event appear behind it.
    """
    after_id = None
    if after is not None:
        after_id = parse_id(after)
        if after_id is None:
            raise _bad_after("not an event id")
    async with services.db.connection() as conn:
        try:
            events, more = await reads.feed(conn, tenant_id=tenant.id, after=after_id, limit=limit)
        except LookupError:
            raise _bad_after("no such event") from None
    body = {"data": [event_json(event) for event in events], "has_more": more}
    return Response(dump_json(body), media_type="application/json")


@router.get(
    "/events/{event_id}",
    response_model=EventOut,
    summary="Read an event",
    responses={**TENANT_AUTH, **NOT_FOUND},
)
async def get_event(event_id: str, tenant: CurrentTenant, services: ServicesDep) -> Any:
    parsed = parse_id(event_id)
    if parsed is None:
        raise NotFound("no such event")
    async with services.db.connection() as conn:
        event = await reads.get(conn, tenant_id=tenant.id, event_id=parsed)
    if event is None:
        raise NotFound("no such event")
    return Response(dump_json(event_json(event)), media_type="application/json")


def _bad_after(why: str) -> ValidationFailed:
    return ValidationFailed(f"after: {why}", errors=[{"field": "after", "message": why}])
