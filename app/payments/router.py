"""HTTP routes for payments."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Depends, Request, Response

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
from app.payments.schemas import (
    CreatePaymentCommand,
    CreatePaymentRequest,
    PaymentOut,
    read_payment_request,
)
from app.payments.views import payment_json
from app.tenants.bearer import CurrentTenant


class Needs(Protocol):
    """What the payments' routes use of the services (`app.dependencies.Services` provides it)."""

    @property
    def db(self) -> Database: ...

    @property
    def payments(self) -> KeyedFlow[CreatePaymentCommand]: ...


ServicesDep = Annotated[Needs, Depends(get_services)]

router = APIRouter(tags=["payments"])

_CREATE_RESPONSES: dict[int | str, dict[str, Any]] = {
    201: {
        "description": "Charged: the payment, `status: SUCCEEDED`. Stored and replayed.",
        "model": PaymentOut,
        "headers": {
            "Location": {"description": "/payments/{id}", "schema": {"type": "string"}},
            "Idempotent-Replayed": {
                "description": "`true` on a replay of the stored answer",
                "schema": {"type": "string"},
            },
        },
    },
    202: {
        "description": "Outcome unknown yet: the operation, to poll at `Location`.",
        "model": OperationOut,
        "headers": {
            "Location": {"description": "/operations/{id}", "schema": {"type": "string"}},
            "Retry-After": {"description": "seconds", "schema": {"type": "string"}},
        },
    },
    400: problem("IDEMPOTENCY_KEY_MISSING or IDEMPOTENCY_KEY_INVALID; nothing stored"),
    **TENANT_AUTH,
    402: problem(
        "Declined by the provider; `code` is the provider's decline code "
        "(`card_declined`, `insufficient_funds`, ...). Stored and replayed."
    ),
    409: problem(
        "IDEMPOTENCY_REQUEST_IN_PROGRESS: a request with this key is being processed",
        {"Retry-After": "seconds", "Link": '</operations/{id}>; rel="monitor"'},
    ),
    413: problem("PAYLOAD_TOO_LARGE: body over 64 KiB; nothing stored"),
    415: problem("UNSUPPORTED_MEDIA_TYPE: body not sent as application/json; nothing stored"),
    422: problem(
        "VALIDATION_ERROR (nothing stored), IDEMPOTENCY_KEY_REUSED (key used for another "
        "request) or IDEMPOTENCY_KEY_EXPIRED (key past its TTL)"
    ),
    502: problem("PROVIDER_REJECTED: the provider refused the request; nothing charged"),
    503: problem(
        "PROVIDER_UNAVAILABLE: certainly not processed; retry with the same key",
        {"Retry-After": "seconds"},
    ),
}


@router.post(
    "/payments",
    status_code=201,
    summary="Create a payment, exactly once per Idempotency-Key",
    responses=_CREATE_RESPONSES,
    # The headers are parsed by the handler itself (a missing key is a 400 with its own
    # code, not a generic validation error), so they are described here rather than
    # declared as parameters.
    openapi_extra={
        "parameters": [
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": True,
                "description": '`"abc"` (structured-field string) or `abc`; after unquoting '
                "1-255 visible ASCII characters (0x21-0x7E). Scoped to the tenant.",
                "schema": {"type": "string", "minLength": 1, "maxLength": 257},
            },
            {
                "name": "Prefer",
                "in": "header",
                "required": False,
                "description": "`wait=N` (N <= 10): while a request with this key is in "
                "flight, wait up to N seconds for its outcome before answering 409",
                "schema": {"type": "string"},
            },
        ],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": CreatePaymentRequest.model_json_schema()}},
        },
    },
)
async def create_payment(
    request: Request, tenant: CurrentTenant, services: ServicesDep
) -> Response:
    """Charge the payer once, however often this request is delivered."""
    key = parse_idempotency_key(request.headers.getlist("idempotency-key"))
    command = read_payment_request(await read_json_object(request))
    wait_s = preferred_wait_s(request.headers.getlist("prefer"), cap_s=MAX_WAIT_S)
    answer = await services.payments.run(
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
    "/payments/{payment_id}",
    response_model=PaymentOut,
    summary="Read a payment",
    responses={**TENANT_AUTH, **NOT_FOUND, **VALIDATION},
)
async def get_payment(payment_id: str, tenant: CurrentTenant, services: ServicesDep) -> Any:
    """The payment's current representation."""
    try:
        parsed = uuid.UUID(payment_id)
    except ValueError:
        raise NotFound("no such payment") from None
    async with services.db.connection() as conn:
        payment = await payments.get(conn, tenant_id=tenant.id, payment_id=parsed)
    if payment is None:
        raise NotFound("no such payment")
    # Encoded here: the body has the shape of `PaymentOut` (which documents it), so FastAPI's
    # validation of the return value against the model is skipped.
    return Response(dump_json(payment_json(payment)), media_type="application/json")
