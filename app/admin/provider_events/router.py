"""The admin API's view of the providers' notifications under `/admin/provider-events`:
the inbox's events newest first (by state, by provider) and one event with its body.

Operators only, as every `/admin/` route (`CurrentOperator`). Reads only: what an event
does is the worker's (`app/provider_events/apply.py`); an event's operation is read and
acted on at `/admin/operations/{operation_id}`.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response

from app.admin.router import CurrentOperator, ServicesDep
from app.errors import NotFound, dump_json
from app.http.problems import NOT_FOUND, UNAUTHENTICATED, VALIDATION
from app.http.query import only_query
from app.provider_events import operator_reads
from app.provider_events.operator_reads import MAX_ID, MAX_PAGE, InboxFilter, parse_id
from app.provider_events.rows import EventState
from app.provider_events.views import inbox_detail_json, inbox_event_json

router = APIRouter(prefix="/admin/provider-events", tags=["admin"])


@router.get(
    "",
    summary="The providers' notifications as received, newest first",
    responses={**UNAUTHENTICATED, **VALIDATION},
    dependencies=[Depends(only_query("state", "provider", "after", "limit"))],
)
async def list_events(
    operator: CurrentOperator,
    services: ServicesDep,
    state: EventState | None = None,
    # No name holds a NUL, which the database's text cannot either.
    provider: Annotated[str | None, Query(max_length=100, pattern="^[^\x00]*$")] = None,
    after: Annotated[int | None, Query(ge=1, le=MAX_ID, description="the last id seen")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
) -> Any:
    """`{data: [...], has_more}` without the bodies; page on with `after=<last id>`."""
    flt = InboxFilter(state=state, provider=provider, after=after)
    async with services.db.connection() as conn:
        items, more = await operator_reads.events(conn, flt, limit=limit)
    return _json({"data": [inbox_event_json(e) for e in items], "has_more": more})


@router.get(
    "/{event_id}",
    summary="A provider's notification with the body it sent",
    responses={**UNAUTHENTICATED, **NOT_FOUND},
)
async def get_event(event_id: str, operator: CurrentOperator, services: ServicesDep) -> Any:
    parsed = parse_id(event_id)
    found = None
    if parsed is not None:
        async with services.db.connection() as conn:
            found = await operator_reads.event(conn, parsed)
    if found is None:
        raise NotFound("no such provider event")
    return _json(inbox_detail_json(*found))


def _json(body: dict[str, Any]) -> Response:
    return Response(dump_json(body), media_type="application/json")
