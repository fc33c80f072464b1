"""HTTP routes for reading operations (what a client polls when the outcome is unknown)."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Depends, Request, Response
from pydantic import ValidationError

from app.db.database import Database
from app.errors import NotFound, ValidationFailed, dump_json
from app.http.problems import NOT_FOUND, TENANT_AUTH, VALIDATION
from app.http.state import get_services
from app.operations import reads
from app.operations.schemas import LOOKUP_PARAMETERS, LookupQuery, OperationOut
from app.operations.views import operation_json
from app.settings import Settings
from app.tenants.bearer import CurrentTenant


class Needs(Protocol):
    """What the read API uses of the services (`app.dependencies.Services` provides it)."""

    @property
    def db(self) -> Database: ...

    @property
    def settings(self) -> Settings: ...


ServicesDep = Annotated[Needs, Depends(get_services)]

router = APIRouter(tags=["operations"])


@router.get(
    "/operations/{operation_id}",
    response_model=OperationOut,
    summary="Read an operation",
    responses={**TENANT_AUTH, **NOT_FOUND, **VALIDATION},
)
async def get_operation(operation_id: str, tenant: CurrentTenant, services: ServicesDep) -> Any:
    """The operation's state, result once terminal, and history."""
    try:
        parsed = uuid.UUID(operation_id)
    except ValueError:
        raise NotFound("no such operation") from None
    async with services.db.connection() as conn:
        snapshot = await reads.get_snapshot(
            conn,
            parsed,
            key_ttl_s=services.settings.key_ttl_s,
            tenant_id=tenant.id,
            with_history=True,
        )
    if snapshot is None:
        raise NotFound("no such operation")
    return _json(operation_json(snapshot))


async def lookup_query(request: Request) -> LookupQuery:
    """The lookup's query, validated as FastAPI would (422 with pydantic's messages)."""
    given = {
        name: request.query_params[name]
        for name in LookupQuery.model_fields
        if name in request.query_params
    }
    try:
        return LookupQuery.model_validate(given)
    except ValidationError as exc:
        errors = [
            {"field": ".".join(str(p) for p in err["loc"]), "message": str(err["msg"])}
            for err in exc.errors()
        ]
        raise ValidationFailed("request parameters are invalid", errors=errors) from None


@router.get(
    "/operations",
    summary="Find the operation for an Idempotency-Key",
    responses={
        200: {"model": OperationOut, "description": "Successful Response"},
        **TENANT_AUTH,
        **NOT_FOUND,
        **VALIDATION,
    },
    # Read by `lookup_query`, not declared as parameters: the route is a fast route
    # (`FAST_ROUTES` in app/main.py), which parses nothing itself.
    openapi_extra={"parameters": LOOKUP_PARAMETERS},
)
async def find_operation(
    tenant: CurrentTenant,
    services: ServicesDep,
    query: Annotated[LookupQuery, Depends(lookup_query)],
) -> Response:
    """The caller's operation with this key: for a client that lost every response.

    Keys are scoped by operation, so a refund's key is found with `operation=create_refund`.
    """
    async with services.db.connection() as conn:
        snapshot = await reads.find_by_key(
            conn,
            tenant_id=tenant.id,
            operation_name=query.operation,
            idempotency_key=query.idempotency_key,
            key_ttl_s=services.settings.key_ttl_s,
            with_history=True,
        )
    if snapshot is None:
        raise NotFound("no operation with this idempotency key")
    return _json(operation_json(snapshot))


def _json(body: dict[str, Any]) -> Response:
    # Encoded here, once: the body is built to the shape of `OperationOut` (which documents
    # it), so FastAPI's validation of the return value against the model is skipped.
    return Response(dump_json(body), media_type="application/json")
