"""HTTP routes for captures and voids of manual payments."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel

from app.authorizations import repository as modifications
from app.authorizations.requests import read_capture_request, read_void_request
from app.authorizations.rows import ModificationType
from app.authorizations.schemas import (
    CaptureList,
    CaptureOut,
    CaptureRequest,
    VoidList,
    VoidOut,
    VoidRequest,
)
from app.authorizations.views import modification_json
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
from app.operations.values import OperationName
from app.payments import repository as payments
from app.payments.rows import PaymentRow
from app.tenants.bearer import CurrentTenant


class Needs(Protocol):
    """What these routes use of the services (`app.dependencies.Services` provides it)."""

    @property
    def db(self) -> Database: ...

    @property
    def flows(self) -> Mapping[str, KeyedFlow[Any]]: ...


ServicesDep = Annotated[Needs, Depends(get_services)]

router = APIRouter(tags=["captures and voids"])
MAX_PAGE = 100


def _responses(noun: str, out: type[BaseModel], refusals: str) -> dict[int | str, Any]:
    return {
        201: {
            "description": f"Made: the {noun}, `status: SUCCEEDED`. Stored and replayed.",
            "model": out,
            "headers": {
                "Location": {"description": f"/{noun}s/{{id}}", "schema": {"type": "string"}}
            },
        },
        202: {
            "description": "Outcome unknown yet: the operation, to poll at `Location`.",
            "model": OperationOut,
        },
        400: problem("IDEMPOTENCY_KEY_MISSING or IDEMPOTENCY_KEY_INVALID; nothing stored"),
        **TENANT_AUTH,
        **NOT_FOUND,
        409: problem(
            f"{refusals}, PAYMENT_MODIFICATION_IN_PROGRESS (another capture or void of the "
            "payment is in flight; nothing stored, nothing sent) or "
            "IDEMPOTENCY_REQUEST_IN_PROGRESS",
            {"Retry-After": "seconds"},
        ),
        413: problem("PAYLOAD_TOO_LARGE: body over 64 KiB; nothing stored"),
        415: problem("UNSUPPORTED_MEDIA_TYPE: body not sent as application/json; nothing stored"),
        422: problem(
            "VALIDATION_ERROR, CAPTURE_EXCEEDS_CAPTURABLE (captures only: more than the "
            "authorization has left; nothing stored, nothing sent), IDEMPOTENCY_KEY_REUSED or "
            "IDEMPOTENCY_KEY_EXPIRED"
        ),
        502: problem(f"PROVIDER_REJECTED: the provider refused the {noun}; nothing changed"),
        503: problem(
            "PROVIDER_UNAVAILABLE: certainly not processed; retry with the same key",
            {"Retry-After": "seconds"},
        ),
    }


def _key_parameter(scope: str) -> dict[str, Any]:
    return {
        "parameters": [
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": True,
                "description": f"As for `POST /payments`; scoped to (tenant, {scope}).",
                "schema": {"type": "string", "minLength": 1, "maxLength": 257},
            },
        ]
    }


def _uuid_or_404(value: str, what: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise NotFound(f"no such {what}") from None


async def _payment(services: Needs, tenant_id: uuid.UUID, payment_id: str) -> PaymentRow:
    parsed = _uuid_or_404(payment_id, "payment")
    async with services.db.connection() as conn:
        payment = await payments.get(conn, tenant_id=tenant_id, payment_id=parsed)
    if payment is None:
        raise NotFound("no such payment")
    return payment


async def _run(
    services: Needs, name: str, request: Request, tenant_id: uuid.UUID, command: Any, key: str
) -> Response:
    wait_s = preferred_wait_s(request.headers.getlist("prefer"), cap_s=MAX_WAIT_S)
    answer = await services.flows[name].run(
        tenant_id=tenant_id, idempotency_key=key, command=command, wait_s=wait_s
    )
    reply = render(answer)
    return Response(
        content=reply.body,
        status_code=reply.status,
        headers=reply.headers,
        media_type=reply.media_type,
    )


@router.post(
    "/payments/{payment_id}/captures",
    status_code=201,
    summary="Capture (part of) an authorized payment, exactly once per Idempotency-Key",
    responses=_responses(
        "capture",
        CaptureOut,
        "PAYMENT_NOT_CAPTURABLE (not AUTHORIZED or PARTIALLY_CAPTURED, or past "
        "`capture_before`; nothing stored, nothing sent)",
    ),
    openapi_extra=_key_parameter("capture_payment")
    | {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": CaptureRequest.model_json_schema()}},
        },
    },
)
async def create_capture(
    payment_id: str, request: Request, tenant: CurrentTenant, services: ServicesDep
) -> Response:
    """Take (part of) the money an authorization holds once, however often this is sent."""
    key = parse_idempotency_key(request.headers.getlist("idempotency-key"))
    data = await read_json_object(request)
    command = read_capture_request(payment_id=payment_id, data=data)
    return await _run(services, OperationName.CAPTURE_PAYMENT, request, tenant.id, command, key)


@router.post(
    "/payments/{payment_id}/void",
    status_code=201,
    summary="Void an authorized payment's hold, exactly once per Idempotency-Key",
    responses=_responses(
        "void",
        VoidOut,
        "PAYMENT_NOT_VOIDABLE (not AUTHORIZED or PARTIALLY_CAPTURED: captured in full, "
        "voided, expired or one-step; nothing stored, nothing sent)",
    ),
    openapi_extra=_key_parameter("void_payment")
    | {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": VoidRequest.model_json_schema()}},
        },
    },
)
async def create_void(
    payment_id: str, request: Request, tenant: CurrentTenant, services: ServicesDep
) -> Response:
    """Release what an authorization still holds once, however often this is sent."""
    key = parse_idempotency_key(request.headers.getlist("idempotency-key"))
    data = await read_json_object(request)
    command = read_void_request(payment_id=payment_id, data=data)
    return await _run(services, OperationName.VOID_PAYMENT, request, tenant.id, command, key)


async def _list(
    services: Needs, tenant_id: uuid.UUID, payment_id: str, type: ModificationType, limit: int
) -> Response:
    payment = await _payment(services, tenant_id, payment_id)
    async with services.db.connection() as conn:
        rows = await modifications.list_for_payment(
            conn, tenant_id=tenant_id, payment_id=payment.id, type=type, limit=limit + 1
        )
    body = {"data": [modification_json(r) for r in rows[:limit]], "has_more": len(rows) > limit}
    return Response(dump_json(body), media_type="application/json")


async def _one(
    services: Needs, tenant_id: uuid.UUID, record_id: str, type: ModificationType
) -> Response:
    parsed = _uuid_or_404(record_id, type.value)
    async with services.db.connection() as conn:
        row = await modifications.get(conn, tenant_id=tenant_id, record_id=parsed, type=type)
    if row is None:
        raise NotFound(f"no such {type.value}")
    return Response(dump_json(modification_json(row)), media_type="application/json")


_READS = {**TENANT_AUTH, **NOT_FOUND, **VALIDATION}
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE)]


@router.get(
    "/payments/{payment_id}/captures",
    response_model=CaptureList,
    summary="List a payment's captures, oldest first",
    responses=_READS,
)
async def list_captures(
    payment_id: str, tenant: CurrentTenant, services: ServicesDep, limit: Limit = MAX_PAGE
) -> Any:
    """The payment's captures (up to `limit`); `has_more` says whether there are more."""
    return await _list(services, tenant.id, payment_id, ModificationType.CAPTURE, limit)


@router.get(
    "/payments/{payment_id}/voids",
    response_model=VoidList,
    summary="List a payment's voids, oldest first",
    responses=_READS,
)
async def list_voids(
    payment_id: str, tenant: CurrentTenant, services: ServicesDep, limit: Limit = MAX_PAGE
) -> Any:
    """The payment's voids (up to `limit`); `has_more` says whether there are more."""
    return await _list(services, tenant.id, payment_id, ModificationType.VOID, limit)


@router.get(
    "/captures/{capture_id}", response_model=CaptureOut, summary="Read a capture", responses=_READS
)
async def get_capture(capture_id: str, tenant: CurrentTenant, services: ServicesDep) -> Any:
    """The capture's current representation."""
    return await _one(services, tenant.id, capture_id, ModificationType.CAPTURE)


@router.get("/voids/{void_id}", response_model=VoidOut, summary="Read a void", responses=_READS)
async def get_void(void_id: str, tenant: CurrentTenant, services: ServicesDep) -> Any:
    """The void's current representation."""
    return await _one(services, tenant.id, void_id, ModificationType.VOID)
