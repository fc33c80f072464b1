"""What request handlers receive: the services built in the lifespan, and the tenant.

Typed `Annotated` aliases keep handler signatures short and checked.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPBearer

from app.admin import repository as admin_tokens
from app.admin.models import Operator
from app.admin.operators import OperatorDesk
from app.db.database import Database
from app.errors import RateLimited, Unauthenticated
from app.http.auth import bearer_token
from app.observability.metrics import Metrics
from app.payments.service import PaymentService
from app.refunds.service import RefundService
from app.settings import Settings
from app.tenants.cache import ApiKeyCache
from app.tenants.rate_limit import TenantRateLimiter


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
    operators: OperatorDesk
    rate_limiter: TenantRateLimiter


async def get_services(request: Request) -> Services:
    # async: FastAPI runs a plain `def` dependency on a worker thread, per request.
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


@dataclass(frozen=True)
class Caller:
    """The tenant a request speaks for, and the API key it used."""

    id: uuid.UUID
    key_id: uuid.UUID


class TenantBearer(HTTPBearer):
    """The tenant whose API key is in `Authorization: Bearer <key>`; 401 otherwise, and 429
    when the tenant is over its request rate (`app.tenants.rate_limit`).

    A bearer security scheme, so the OpenAPI document describes it, that does the whole
    authentication itself: one dependency with no dependencies of its own. FastAPI resolves
    a route's dependency tree on every request, and this one is on every tenant route.
    """

    async def __call__(self, request: Request) -> Caller:  # type: ignore[override]
        # (HTTPBearer's own answer is the raw credentials; this one is the tenant.)
        challenge = {"www-authenticate": "Bearer"}
        api_key = bearer_token(request.headers.get("authorization"))
        if api_key is None:
            raise Unauthenticated("send Authorization: Bearer <api key>", headers=challenge)
        services: Services = request.app.state.services
        owner = await services.api_keys.authenticate(api_key)
        if owner is None:
            raise Unauthenticated("the API key is not valid", headers=challenge)
        wait_s = services.rate_limiter.acquire(owner.tenant_id)
        if wait_s is not None:
            raise RateLimited(
                f"too many requests for this tenant; retry after {wait_s} s",
                headers={"retry-after": str(wait_s)},
            )
        return Caller(id=owner.tenant_id, key_id=owner.key_id)


get_tenant = TenantBearer(
    auto_error=False, scheme_name="HTTPBearer", description="The tenant's API key"
)
CurrentTenant = Annotated[Caller, Depends(get_tenant)]


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
