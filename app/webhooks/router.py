"""Webhook endpoints (create, list, read, delete, rotate), their deliveries, redelivery."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import ValidationError

from app.db.database import Database
from app.errors import NotFound, ValidationFailed, dump_json
from app.events.views import parse_id as parse_event_id
from app.failpoints import Failpoints
from app.http.body import read_json_object
from app.http.problems import NOT_FOUND, TENANT_AUTH, VALIDATION, problem
from app.http.query import only_query
from app.http.state import get_services
from app.settings import Settings
from app.tenants.bearer import CurrentTenant
from app.webhooks import deliveries, delivery_reads, endpoints
from app.webhooks.errors import WebhookEndpointLimitReached
from app.webhooks.schemas import (
    CreateEndpointRequest,
    DeliveryList,
    EndpointList,
    EndpointOut,
    RedeliveryOut,
)
from app.webhooks.signing import new_secret
from app.webhooks.urls import UrlRefused, check_url
from app.webhooks.views import (
    DELIVERY_PREFIX,
    ENDPOINT_PREFIX,
    delivery_json,
    endpoint_json,
    parse_id,
)


class Needs(Protocol):
    """What the endpoints' routes use of the services (`app.dependencies.Services` provides it)."""

    @property
    def db(self) -> Database: ...

    @property
    def settings(self) -> Settings: ...


ServicesDep = Annotated[Needs, Depends(get_services)]

router = APIRouter(tags=["webhooks"])
Limit = Annotated[int, Query(ge=1, le=100)]
After = Annotated[str | None, Query(max_length=64, description="Continue after this id")]


@router.post(
    "/webhook-endpoints",
    status_code=201,
    response_model=EndpointOut,
    summary="Register a webhook endpoint; its signing secret is shown only here",
    responses={
        **TENANT_AUTH,
        409: problem(
            "WEBHOOK_ENDPOINT_LIMIT_REACHED: the tenant has PAYMENTS_WEBHOOK_MAX_ENDPOINTS "
            "endpoints already (16 by default); delete one first. `limit` says how many"
        ),
        413: problem("PAYLOAD_TOO_LARGE"),
        415: problem("UNSUPPORTED_MEDIA_TYPE"),
        422: problem("VALIDATION_ERROR: bad body, or a URL that may not receive webhooks"),
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": CreateEndpointRequest.model_json_schema()}},
        }
    },
)
async def create_endpoint(request: Request, tenant: CurrentTenant, services: ServicesDep) -> Any:
    data = await read_json_object(request)
    try:
        body = CreateEndpointRequest.model_validate(data)
    except ValidationError as exc:
        errors = [
            {"field": ".".join(str(p) for p in err["loc"]), "message": err["msg"]}
            for err in exc.errors()
        ]
        raise ValidationFailed("the endpoint is invalid", errors=errors) from None
    try:
        url = await check_url(body.url, allow_local=services.settings.webhooks_allow_local)
    except UrlRefused as exc:
        raise ValidationFailed(
            f"the URL may not receive webhooks: {exc}",
            errors=[{"field": "url", "message": str(exc)}],
        ) from None
    limit = services.settings.webhook_max_endpoints
    async with services.db.transaction() as conn:
        if await endpoints.lock_and_count(conn, tenant_id=tenant.id) >= limit:
            raise WebhookEndpointLimitReached(
                f"this tenant has {limit} webhook endpoints, the most it may have; "
                "delete one to make room",
                limit=limit,
            )
        await Failpoints.parse(services.settings.failpoints).reach("webhook_endpoint_insert")
        endpoint = await endpoints.create(
            conn, tenant_id=tenant.id, url=url, event_types=body.event_types, secret=new_secret()
        )
    return _json(endpoint_json(endpoint, with_secret=True), status=201)


@router.get(
    "/webhook-endpoints",
    response_model=EndpointList,
    summary="List webhook endpoints",
    responses={**TENANT_AUTH, **VALIDATION},
    dependencies=[Depends(only_query("after", "limit"))],
)
async def list_endpoints(
    tenant: CurrentTenant, services: ServicesDep, after: After = None, limit: Limit = 50
) -> Any:
    after_id = _cursor(after, ENDPOINT_PREFIX)
    async with services.db.connection() as conn:
        rows, more = await endpoints.listing(conn, tenant_id=tenant.id, after=after_id, limit=limit)
    return _json({"data": [endpoint_json(row) for row in rows], "has_more": more})


@router.get(
    "/webhook-endpoints/{endpoint_id}",
    response_model=EndpointOut,
    summary="Read a webhook endpoint (without its secret)",
    responses={**TENANT_AUTH, **NOT_FOUND},
)
async def get_endpoint(endpoint_id: str, tenant: CurrentTenant, services: ServicesDep) -> Any:
    parsed = _endpoint_id(endpoint_id)
    async with services.db.connection() as conn:
        endpoint = await endpoints.get(conn, tenant_id=tenant.id, endpoint_id=parsed)
    if endpoint is None:
        raise NotFound("no such webhook endpoint")
    return _json(endpoint_json(endpoint))


@router.delete(
    "/webhook-endpoints/{endpoint_id}",
    status_code=204,
    response_class=Response,
    summary="Delete a webhook endpoint; what is still pending for it is cancelled",
    responses={**TENANT_AUTH, **NOT_FOUND},
)
async def delete_endpoint(
    endpoint_id: str, tenant: CurrentTenant, services: ServicesDep
) -> Response:
    parsed = _endpoint_id(endpoint_id)
    async with services.db.connection() as conn:
        if not await endpoints.delete(conn, tenant_id=tenant.id, endpoint_id=parsed):
            raise NotFound("no such webhook endpoint")
    return Response(status_code=204)


@router.post(
    "/webhook-endpoints/{endpoint_id}/rotate-secret",
    response_model=EndpointOut,
    summary="A new signing secret; the old one keeps signing for 24 hours",
    responses={**TENANT_AUTH, **NOT_FOUND},
)
async def rotate_secret(endpoint_id: str, tenant: CurrentTenant, services: ServicesDep) -> Any:
    parsed = _endpoint_id(endpoint_id)
    async with services.db.connection() as conn:
        endpoint = await endpoints.rotate(
            conn, tenant_id=tenant.id, endpoint_id=parsed, secret=new_secret()
        )
    if endpoint is None:
        raise NotFound("no such webhook endpoint")
    return _json(endpoint_json(endpoint, with_secret=True))


@router.get(
    "/webhook-endpoints/{endpoint_id}/deliveries",
    response_model=DeliveryList,
    summary="An endpoint's deliveries, newest first, with every attempt",
    responses={**TENANT_AUTH, **NOT_FOUND, **VALIDATION},
    dependencies=[Depends(only_query("after", "limit"))],
)
async def list_deliveries(
    endpoint_id: str,
    tenant: CurrentTenant,
    services: ServicesDep,
    after: After = None,
    limit: Limit = 50,
) -> Any:
    parsed = _endpoint_id(endpoint_id)
    after_id = _cursor(after, DELIVERY_PREFIX)
    async with services.db.connection() as conn:
        if await endpoints.get(conn, tenant_id=tenant.id, endpoint_id=parsed) is None:
            raise NotFound("no such webhook endpoint")
        rows, more = await delivery_reads.for_endpoint(
            conn, tenant_id=tenant.id, endpoint_id=parsed, after=after_id, limit=limit
        )
    return _json({"data": [delivery_json(d, a) for d, a in rows], "has_more": more})


@router.post(
    "/events/{event_id}/redeliver",
    status_code=202,
    response_model=RedeliveryOut,
    summary="Send an event again to every endpoint subscribed to its type",
    responses={**TENANT_AUTH, **NOT_FOUND},
)
async def redeliver(event_id: str, tenant: CurrentTenant, services: ServicesDep) -> Any:
    parsed = parse_event_id(event_id)
    if parsed is None:
        raise NotFound("no such event")
    async with services.db.connection() as conn:
        queued = await deliveries.redeliver(conn, tenant_id=tenant.id, event_id=parsed)
    if queued is None:
        raise NotFound("no such event")
    return _json({"event_id": event_id, "deliveries_queued": queued}, status=202)


def _endpoint_id(text: str) -> uuid.UUID:
    parsed = parse_id(text, ENDPOINT_PREFIX)
    if parsed is None:
        raise NotFound("no such webhook endpoint")
    return parsed


def _cursor(after: str | None, prefix: str) -> uuid.UUID | None:
    if after is None:
        return None
    parsed = parse_id(after, prefix)
    if parsed is None:
        raise ValidationFailed(
            "after: not an id of this list", errors=[{"field": "after", "message": "unknown id"}]
        )
    return parsed


def _json(body: dict[str, Any], *, status: int = 200) -> Response:
    return Response(dump_json(body), status_code=status, media_type="application/json")
