"""What request handlers receive: the services built in the lifespan, and the tenant.

Typed `Annotated` aliases keep handler signatures short and checked.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.db.database import Database
from app.errors import Unauthenticated
from app.http.auth import bearer_token
from app.observability.metrics import Metrics
from app.payments.service import PaymentService
from app.refunds.service import RefundService
from app.settings import Settings
from app.tenants.cache import ApiKeyCache


@dataclass(frozen=True)
class Services:
    """Everything the lifespan builds, handed to handlers through `app.state.services`."""

    settings: Settings
    db: Database
    payments: PaymentService
    refunds: RefundService
    schema_head: str | None
    metrics: Metrics
    api_keys: ApiKeyCache


async def get_services(request: Request) -> Services:
    # async: FastAPI runs a plain `def` dependency on a worker thread, per request.
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


# Declared for the OpenAPI document (a bearer security scheme) only: the header itself is
# read by `bearer_token`, and errors are our own 401s.
_bearer = HTTPBearer(auto_error=False, description="The tenant's API key")


@dataclass(frozen=True)
class Caller:
    """The tenant a request speaks for, and the API key it used."""

    id: uuid.UUID
    key_id: uuid.UUID


async def get_tenant(
    request: Request,
    services: ServicesDep,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Caller:
    """The tenant whose API key is in `Authorization: Bearer <key>`; 401 otherwise."""
    challenge = {"www-authenticate": "Bearer"}
    api_key = bearer_token(request.headers.get("authorization"))
    if api_key is None:
        raise Unauthenticated("send Authorization: Bearer <api key>", headers=challenge)
    owner = await services.api_keys.authenticate(api_key)
    if owner is None:
        raise Unauthenticated("the API key is not valid", headers=challenge)
    return Caller(id=owner.tenant_id, key_id=owner.key_id)


CurrentTenant = Annotated[Caller, Depends(get_tenant)]
