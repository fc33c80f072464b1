"""The tenant a request speaks for: the bearer scheme on every tenant route.

Routes take `CurrentTenant`; the API key cache and the rate limiters come from what the
lifespan built (`app.state.services`), read through the `TenantGate` protocol. The fast
routes (`app/http/fast_path.py`) call this same dependency.

Until a key is found valid, a request is its client address's (`unauthenticated.py`): a
missing, malformed (`keys.could_be_api_key`) or unknown key is counted against the address,
and refused `429` rather than `401` once the address is over its rate. Such a refusal is
left out of the traces (`app.tracing.spans.refused_unauthenticated`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Annotated, Protocol

from fastapi import Depends, Request
from fastapi.security import HTTPBearer

from app.errors import Unauthenticated
from app.http.auth import bearer_token
from app.tenants.cache import ApiKeyCache
from app.tenants.errors import RateLimited
from app.tenants.keys import could_be_api_key
from app.tenants.rate_limit import TenantRateLimiter
from app.tenants.unauthenticated import NO_ADDRESS, UnauthenticatedLimiter
from app.tracing.spans import refused_unauthenticated


class TenantGate(Protocol):
    """What authenticating a tenant takes from the services."""

    @property
    def api_keys(self) -> ApiKeyCache: ...

    @property
    def rate_limiter(self) -> TenantRateLimiter: ...

    @property
    def unauthenticated(self) -> UnauthenticatedLimiter: ...


@dataclass(frozen=True)
class Caller:
    """The tenant a request speaks for, and the API key it used."""

    id: uuid.UUID
    key_id: uuid.UUID


_CHALLENGE = {"www-authenticate": "Bearer"}


class TenantBearer(HTTPBearer):
    """The tenant whose API key is in `Authorization: Bearer <key>`; 401 otherwise, and 429
    when the tenant is over its request rate (`app.tenants.rate_limit`).

    A bearer security scheme, so the OpenAPI document describes it, that does the whole
    authentication itself: one dependency with no dependencies of its own. FastAPI resolves
    a route's dependency tree on every request, and this one is on every tenant route.
    """

    async def __call__(self, request: Request) -> Caller:  # type: ignore[override]
        # (HTTPBearer's own answer is the raw credentials; this one is the tenant.)
        services: TenantGate = request.app.state.services
        api_key = bearer_token(request.headers.get("authorization"))
        client = request.scope.get("client")
        address = client[0] if client else NO_ADDRESS
        try:
            if api_key is None:
                services.unauthenticated.take(address)
                raise Unauthenticated("send Authorization: Bearer <api key>", headers=_CHALLENGE)
            if not could_be_api_key(api_key):
                services.unauthenticated.take(address)
                raise Unauthenticated("the API key is not valid", headers=_CHALLENGE)
            owner = await services.api_keys.authenticate(
                api_key, caller=address, gate=services.unauthenticated
            )
            if owner is None:
                raise Unauthenticated("the API key is not valid", headers=_CHALLENGE)
        except (Unauthenticated, RateLimited):
            refused_unauthenticated(request.scope)
            raise
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
