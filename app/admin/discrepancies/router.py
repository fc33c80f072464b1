"""The admin API's discrepancy queue under `/admin/discrepancies`: the differences the
settlement run found between our books and the provider's, listed, counted, read with
their history, and closed by an operator (resolved or dismissed, with a reason).

Operators only, as every `/admin/` route (`CurrentOperator`); served on the operators'
listener. One implementation: `app/settlement/queue.py`, which the console uses too.
"""

from __future__ import annotations

import uuid
from datetime import date
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.admin.router import CurrentOperator, ServicesDep
from app.errors import NotFound, ValidationFailed, dump_json
from app.http.body import read_json_object
from app.http.problems import UNAUTHENTICATED, VALIDATION, problem
from app.http.query import only_query
from app.settlement.changes import MAX_REASON
from app.settlement.queue import MAX_PAGE, DiscrepancyQueue, ItemFilter, StateFilter
from app.settlement.rows import ItemKind, ItemRow, RecordType
from app.settlement.views import detail_json, item_json, summary_json

router = APIRouter(prefix="/admin/discrepancies", tags=["admin"])

NOT_OPEN: dict[int | str, dict[str, Any]] = {
    409: problem(
        "DISCREPANCY_NOT_OPEN: the item is resolved, dismissed or auto_resolved; only an"
        " open item can be closed, and nothing was changed (`state` says what it is)"
    )
}
NO_ITEM: dict[int | str, dict[str, Any]] = {404: problem("NOT_FOUND: no such discrepancy")}


class ReasonIn(BaseModel):
    """Why the item is closed: kept on the item and in its history."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(
        min_length=1,
        max_length=MAX_REASON,
        description="1-1000 characters, not blank; no control characters but tabs and line breaks",
    )


CLOSE_RESPONSES: dict[int | str, dict[str, Any]] = {
    **UNAUTHENTICATED,
    **NO_ITEM,
    **NOT_OPEN,
    422: problem("VALIDATION_ERROR: no reason, a blank one, or one over 1000 characters"),
    413: problem("PAYLOAD_TOO_LARGE: body over 64 KiB"),
    415: problem("UNSUPPORTED_MEDIA_TYPE: body not sent as application/json"),
}
# Read strictly by the handler (as the operations' resolve is), so malformed bodies get the
# same problems everywhere; described here for the OpenAPI document.
CLOSE_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": ReasonIn.model_json_schema()}},
    }
}


@router.get(
    "",
    summary="List discrepancies, oldest first (the open queue by default)",
    responses={**UNAUTHENTICATED, **VALIDATION},
    dependencies=[
        Depends(only_query("state", "kind", "record_type", "tenant_id", "day", "after", "limit"))
    ],
)
async def list_items(
    operator: CurrentOperator,
    services: ServicesDep,
    state: Annotated[
        StateFilter, Query(description="an item state, or `all`; default `open`")
    ] = StateFilter.OPEN,
    kind: ItemKind | None = None,
    record_type: RecordType | None = None,
    tenant_id: uuid.UUID | None = None,
    day: Annotated[date | None, Query(description="the creation day whose run found it")] = None,
    after: Annotated[uuid.UUID | None, Query(description="the last item id seen")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
) -> Any:
    """`{data: [...], has_more}`; page on with `after=<last id>`."""
    flt = ItemFilter(
        state=state, kind=kind, record_type=record_type, tenant_id=tenant_id, day=day, after=after
    )
    page = await DiscrepancyQueue(services.db).list(flt, limit=limit)
    return _json({"data": [item_json(item) for item in page.items], "has_more": page.has_more})


# Before `/{item_id}`, which would take the word for an id.
@router.get(
    "/summary",
    summary="Open items by kind, the oldest open item's age, and items by state",
    responses={**UNAUTHENTICATED},
)
async def get_summary(operator: CurrentOperator, services: ServicesDep) -> Any:
    """`{open_by_kind: {kind: n}, open, oldest_open_s (null: none open), by_state}`."""
    return _json(summary_json(await DiscrepancyQueue(services.db).summary()))


@router.get(
    "/{item_id}",
    summary="A discrepancy: both sides, the fields that differ, its history",
    responses={**UNAUTHENTICATED, **NO_ITEM},
)
async def get_item(item_id: str, operator: CurrentOperator, services: ServicesDep) -> Any:
    detail = await DiscrepancyQueue(services.db).read(_parse(item_id))
    return _json(detail_json(detail))


@router.post(
    "/{item_id}/resolve",
    summary="Close an open item as resolved: the difference is explained or fixed",
    responses=CLOSE_RESPONSES,
    openapi_extra=CLOSE_BODY,
)
async def resolve(
    item_id: str, request: Request, operator: CurrentOperator, services: ServicesDep
) -> Any:
    """The reason, and the operator as `resolved_by`, are kept on the item and audited."""
    parsed, reason = _parse(item_id), await _reason(request)
    item = await DiscrepancyQueue(services.db).resolve(parsed, operator.actor, reason)
    return await _closed(services, item)


@router.post(
    "/{item_id}/dismiss",
    summary="Close an open item as dismissed: it was never a real difference",
    responses=CLOSE_RESPONSES,
    openapi_extra=CLOSE_BODY,
)
async def dismiss(
    item_id: str, request: Request, operator: CurrentOperator, services: ServicesDep
) -> Any:
    """The reason, and the operator as `resolved_by`, are kept on the item and audited."""
    parsed, reason = _parse(item_id), await _reason(request)
    item = await DiscrepancyQueue(services.db).dismiss(parsed, operator.actor, reason)
    return await _closed(services, item)


async def _reason(request: Request) -> str:
    data = await read_json_object(request)
    try:
        body = ReasonIn.model_validate(data)
    except ValidationError as exc:
        errors = [
            {"field": ".".join(str(p) for p in err["loc"]), "message": err["msg"]}
            for err in exc.errors()
        ]
        raise ValidationFailed("the reason is invalid", errors=errors) from None
    return body.reason


async def _closed(services: ServicesDep, item: ItemRow) -> Response:
    """The closed item with its history (the last entry is this change)."""
    return _json(detail_json(await DiscrepancyQueue(services.db).read(item.id)))


def _parse(item_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(item_id)
    except ValueError:
        raise NotFound("no such discrepancy") from None


def _json(body: dict[str, Any]) -> Response:
    return Response(dump_json(body), media_type="application/json")
