"""HTTP routes for refunds."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Depends, Query, Request, Response

from app.db.database import Database
from app.errors import NotFound, dump_json
from app.http.body import read_json_object
from app.http.prefer import preferred_wait_s
from app.http.problems import NOT_FOUND, TENANT_AUTH, VALIDATION, problem
from app.http.state import get_services
from app.idempotency.flow import MAX_WAIT_S, KeyedFlow
from app.idempotency.keys import parse_idempotency_key
from app.idempotency.replies import render
from app.operations.schemas import OperationOut
from app.payments import repository as payments
from app.refunds import repository as refunds
from app.refunds.requests import read_refund_request
from app.refunds.schemas import (
    CreateRefundCommand,
    CreateRefundRequest,
    RefundList,
    RefundOut,
)
from app.refunds.views import refund_json
from app.tenants.bearer import CurrentTenant


class Needs(Protocol):
    """What the refunds' routes use of the services (`app.dependencies.Services` provides it)."""

    @property
    def db(self) -> Database: ...

    @property
    def refunds(self) -> KeyedFlow[CreateRefundCommand]: ...


ServicesDep = Annotated[Needs, Depends(get_services)]

router = APIRouter(tags=["refunds"])
MAX_PAGE = 100

_CREATE_RESPONSES: dict[int | str, dict[str, Any]] = {
    201: {
        "description": "Refunded: the refund, `status: SUCCEEDED`. Stored and replayed.",
        "model": RefundOut,
        "headers": {"Location": {"description": "/refunds/{id}", "schema": {"type": "string"}}},
    },
    202: {
        "description": "Outcome unknown yet: the operation, to poll at `Location`.",
        "model": OperationOut,
    },
    400: problem("IDEMPOTENCY_KEY_MISSING or IDEMPOTENCY_KEY_INVALID; nothing stored"),
    **TENANT_AUTH,
    **NOT_FOUND,
    409: problem(
        "PAYMENT_NOT_REFUNDABLE (the payment is not SUCCEEDED, PARTIALLY_REFUNDED or "
        "CAPTURED; nothing stored) or IDEMPOTENCY_REQUEST_IN_PROGRESS",
        {"Retry-After": "seconds"},
    ),
    413: problem("PAYLOAD_TOO_LARGE: body over 64 KiB; nothing stored"),
    415: problem("UNSUPPORTED_MEDIA_TYPE: body not sent as application/json; nothing stored"),
    422: problem(
        "VALIDATION_ERROR, REFUND_EXCEEDS_PAYMENT (succeeded and in-flight refunds would pass "
        "the payment's amount; nothing stored, nothing sent), IDEMPOTENCY_KEY_REUSED or "
        "IDEMPOTENCY_KEY_EXPIRED"
    ),
    502: problem("PROVIDER_REJECTED: the provider refused the refund; nothing refunded"),
    503: problem(
        "PROVIDER_UNAVAILABLE: certainly not processed; retry with the same key",
        {"Retry-After": "seconds"},
    ),
}


def _uuid_or_404(value: str, what: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise NotFound(f"no such {what}") from None


@router.post(
    "/payments/{payment_id}/refunds",
    status_code=201,
    summary="Refund a payment, exactly once per Idempotency-Key",
    responses=_CREATE_RESPONSES,
    openapi_extra={
        "parameters": [
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": True,
                "description": "As for `POST /payments`; scoped to (tenant, create_refund).",
                "schema": {"type": "string", "minLength": 1, "maxLength": 257},
            },
        ],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": CreateRefundRequest.model_json_schema()}},
        },
    },
)
async def create_refund(
    payment_id: str, request: Request, tenant: CurrentTenant, services: ServicesDep
) -> Response:
    """Give money back on a payment once, however often this request is delivered."""
    key = parse_idempotency_key(request.headers.getlist("idempotency-key"))
    command = await read_refund_request(
        services.db,
        tenant_id=tenant.id,
        payment_id=payment_id,
        data=await read_json_object(request),
    )
    wait_s = preferred_wait_s(request.headers.getlist("prefer"), cap_s=MAX_WAIT_S)
    answer = await services.refunds.run(
        tenant_id=tenant.id, idempotency_key=key, command=command, wait_s=wait_s
    )
    reply = render(answer)
    return Response(
        content=reply.body,
        status_code=reply.status,
        headers=reply.headers,
        media_type=reply.media_type,
    )


@router.get(
    "/refunds/{refund_id}",
    response_model=RefundOut,
    summary="Read a refund",
    responses={**TENANT_AUTH, **NOT_FOUND, **VALIDATION},
)
async def get_refund(refund_id: str, tenant: CurrentTenant, services: ServicesDep) -> Any:
    """The refund's current representation."""
    parsed = _uuid_or_404(refund_id, "refund")
    async with services.db.connection() as conn:
        refund = await refunds.get(conn, tenant_id=tenant.id, refund_id=parsed)
    if refund is None:
        raise NotFound("no such refund")
    return Response(dump_json(refund_json(refund)), media_type="application/json")


@router.get(
    "/payments/{payment_id}/refunds",
    response_model=RefundList,
    summary="List a payment's refunds, oldest first",
    responses={**TENANT_AUTH, **NOT_FOUND, **VALIDATION},
)
async def list_refunds(
    payment_id: str,
    tenant: CurrentTenant,
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = MAX_PAGE,
) -> Any:
    """The payment's refunds (up to `limit`); `has_more` says whether there are more."""
    parsed = _uuid_or_404(payment_id, "payment")
    async with services.db.connection() as conn:
        payment = await payments.get(conn, tenant_id=tenant.id, payment_id=parsed)
        if payment is None:
            raise NotFound("no such payment")
        rows = await refunds.list_for_payment(
            conn, tenant_id=tenant.id, payment_id=parsed, limit=limit + 1
        )
    body = {"data": [refund_json(r) for r in rows[:limit]], "has_more": len(rows) > limit}
    return Response(dump_json(body), media_type="application/json")
