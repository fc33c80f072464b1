"""The admin API under `/admin/`: operations across tenants, recheck and resolve; webhook
deliveries that failed, and redelivering an event.

Only admin tokens are accepted here (`CurrentOperator`); tenants' API keys get `401`.
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import ValidationError

from app.admin import repository as admin_tokens
from app.admin import search
from app.admin.delivery_views import failed_json
from app.admin.operators import OperatorActions, Resolution
from app.admin.rows import Operator
from app.admin.schemas import ResolveIn
from app.admin.views import admin_operation_json, detail_json, overview_json
from app.db.database import Database
from app.errors import NotFound, Unauthenticated, ValidationFailed, dump_json
from app.events.views import parse_id as parse_event_id
from app.http.auth import bearer_token
from app.http.body import read_json_object
from app.http.problems import NOT_FOUND, UNAUTHENTICATED, VALIDATION, problem
from app.http.query import only_query
from app.http.state import get_services
from app.operations.operator_reads import MAX_PAGE, OperationFilter
from app.operations.states import State
from app.provider_events.inbox import counts_by_state
from app.webhooks import operator_reads
from app.webhooks.views import DELIVERY_PREFIX, parse_id


class Needs(Protocol):
    """What the admin API uses of the services (`app.dependencies.Services` provides it)."""

    @property
    def db(self) -> Database: ...

    @property
    def operators(self) -> OperatorActions: ...


ServicesDep = Annotated[Needs, Depends(get_services)]


async def get_operator(request: Request, services: ServicesDep) -> Operator:
    """The operator whose admin token is in `Authorization: Bearer <token>`; 401 otherwise.

    Only admin tokens are looked up here, so a tenant's API key is unknown (401), as an
    admin token is on the tenants' routes. No cache: admin calls are few, and a revoked
    token stops working at once.
    """
    challenge = {"www-authenticate": 'Bearer realm="admin"'}
    token = bearer_token(request.headers.get("authorization"))
    if token is None:
        raise Unauthenticated("send Authorization: Bearer <admin token>", headers=challenge)
    async with services.db.connection() as conn:
        operator = await admin_tokens.authenticate(conn, token)
    if operator is None:
        raise Unauthenticated("the admin token is not valid", headers=challenge)
    return operator


CurrentOperator = Annotated[Operator, Depends(get_operator)]

router = APIRouter(prefix="/admin", tags=["admin"])

CONFLICT: dict[int | str, dict[str, Any]] = {
    409: problem(
        "OPERATION_FINAL, OPERATION_BUSY, OPERATION_NOT_NEEDING_ATTENTION, "
        "PROVIDER_LOOKUP_FAILED, RESOLUTION_CONTRADICTS_PROVIDER or "
        "PROVIDER_CALL_MAY_BE_IN_FLIGHT: nothing was changed"
    )
}


@router.get(
    "/operations",
    summary="List operations across tenants",
    responses={**UNAUTHENTICATED, **VALIDATION},
)
async def list_operations(
    operator: CurrentOperator,
    services: ServicesDep,
    state: State | None = None,
    needs_attention: bool | None = None,
    tenant: uuid.UUID | None = None,
    older_than_s: Annotated[int | None, Query(ge=0, le=10**9)] = None,
    after: Annotated[uuid.UUID | None, Query(description="the last operation_id seen")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
) -> Any:
    """Oldest first; `{data: [...], has_more}`; page on with `after=<last operation_id>`."""
    flt = OperationFilter(
        state=state,
        needs_attention=needs_attention,
        tenant_id=tenant,
        older_than_s=older_than_s,
        after=after,
    )
    page = await services.operators.list(flt, limit=limit)
    data = [admin_operation_json(s, with_history=False) for s in page.items]
    return _json({"data": data, "has_more": page.has_more})


@router.get(
    "/search",
    summary="Find records by any id or key, across tenants",
    responses={**UNAUTHENTICATED, **VALIDATION},
    dependencies=[Depends(only_query("q"))],
)
async def search_records(
    operator: CurrentOperator,
    services: ServicesDep,
    q: Annotated[str, Query(max_length=search.MAX_QUERY)],
) -> Any:
    """Operation, payment, refund, capture, void, event or delivery ids; idempotency keys,
    provider charge, refund, capture and void ids, provider keys, merchant references,
    account ids. `{data: [...]}`, newest first; exact matches only."""
    async with services.db.connection() as conn:
        hits = await search.search(conn, q, records=services.operators.search_records)
    return _json({"data": [search.hit_json(hit) for hit in hits]})


@router.get("/overview", summary="Counts by state", responses={**UNAUTHENTICATED})
async def get_overview(operator: CurrentOperator, services: ServicesDep) -> Any:
    """Operations by state, how many need attention, and the age of the oldest in flight;
    the providers' notifications by state (`provider_events`)."""
    body = overview_json(await services.operators.overview())
    async with services.db.connection() as conn:
        counts = await counts_by_state(conn)
    body["provider_events"] = {state.value: n for state, n in counts.items()}
    return _json(body)


@router.get(
    "/operations/{operation_id}",
    summary="An operation with its history, payment and a live provider lookup",
    responses={**UNAUTHENTICATED, **NOT_FOUND},
)
async def get_operation(operation_id: str, operator: CurrentOperator, services: ServicesDep) -> Any:
    """The provider being unreachable is shown as `provider.reachable: false`."""
    detail = await services.operators.detail(_parse(operation_id))
    return _json(detail_json(detail))


@router.post(
    "/operations/{operation_id}/recheck",
    summary="Reconcile an operation now",
    responses={**UNAUTHENTICATED, **NOT_FOUND, **CONFLICT},
)
async def recheck(operation_id: str, operator: CurrentOperator, services: ServicesDep) -> Any:
    """Take ownership as the worker does, look the charge up, record or resend."""
    outcome, snapshot = await services.operators.recheck(_parse(operation_id), operator)
    body = admin_operation_json(snapshot, with_history=True)
    body["recheck"] = re.sub(r"(?<!^)(?=[A-Z])", "_", type(outcome).__name__).lower()
    return _json(body)


@router.post(
    "/operations/{operation_id}/resolve",
    summary="Resolve an operation that needs attention",
    responses={
        **UNAUTHENTICATED,
        **NOT_FOUND,
        **CONFLICT,
        **VALIDATION,
        413: problem("PAYLOAD_TOO_LARGE: body over 64 KiB"),
        415: problem("UNSUPPORTED_MEDIA_TYPE: body not sent as application/json"),
    },
    # Read strictly by the handler (as POST /payments is), so malformed bodies get the same
    # problems everywhere; described here for the OpenAPI document.
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ResolveIn.model_json_schema()}},
        }
    },
)
async def resolve(
    operation_id: str, request: Request, operator: CurrentOperator, services: ServicesDep
) -> Any:
    """Recorded only when a provider lookup confirms it; the reason goes in the history."""
    data = await read_json_object(request)
    try:
        body = ResolveIn.model_validate(data)
    except ValidationError as exc:
        errors = [
            {"field": ".".join(str(p) for p in err["loc"]), "message": err["msg"]}
            for err in exc.errors()
        ]
        raise ValidationFailed("the resolution is invalid", errors=errors) from None
    snapshot = await services.operators.resolve(
        _parse(operation_id), Resolution(body.outcome), body.reason, operator
    )
    return _json(admin_operation_json(snapshot, with_history=True))


@router.get(
    "/webhook-deliveries/failed",
    summary="Webhook deliveries that gave up, across tenants, newest first",
    responses={**UNAUTHENTICATED, **VALIDATION},
    dependencies=[Depends(only_query("after", "limit"))],
)
async def list_failed_deliveries(
    operator: CurrentOperator,
    services: ServicesDep,
    after: Annotated[str | None, Query(max_length=64, description="the last id seen")] = None,
    limit: Annotated[int, Query(ge=1, le=operator_reads.MAX_PAGE)] = 50,
) -> Any:
    """Deliveries past their retry window; `{data: [...], has_more}`, page on with `after`."""
    after_id = None
    if after is not None:
        after_id = parse_id(after, DELIVERY_PREFIX)
        if after_id is None:
            raise ValidationFailed(
                "after: not a delivery id", errors=[{"field": "after", "message": "unknown id"}]
            )
    try:
        items, more = await services.operators.deliveries.failed(after=after_id, limit=limit)
    except LookupError:
        raise ValidationFailed(
            "after: not a failed delivery (a redelivery takes it off the list); start again",
            errors=[{"field": "after", "message": "not a failed delivery"}],
        ) from None
    return _json({"data": [failed_json(f) for f in items], "has_more": more})


@router.post(
    "/events/{event_id}/redeliver",
    status_code=202,
    summary="Send an event again to every endpoint of its tenant subscribed to its type",
    responses={**UNAUTHENTICATED, **NOT_FOUND},
)
async def redeliver(event_id: str, operator: CurrentOperator, services: ServicesDep) -> Any:
    """What the tenant's own `POST /events/{id}/redeliver` does, for any tenant's event."""
    parsed = parse_event_id(event_id)
    if parsed is None:
        raise NotFound("no such event")
    queued = await services.operators.deliveries.redeliver(parsed, operator)
    return _json({"event_id": event_id, "deliveries_queued": queued}, status=202)


def _parse(operation_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(operation_id)
    except ValueError:
        raise NotFound("no such operation") from None


def _json(body: dict[str, Any], *, status: int = 200) -> Response:
    return Response(dump_json(body), status_code=status, media_type="application/json")
