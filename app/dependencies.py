"""What the lifespan builds for request handlers: `Services`, at the top of the layers.

`app/main.py` builds one `Services` and sets it on `app.state.services`. Routers below the
edge do not import this module: each reads the services through `app.http.state.get_services`,
typed as a `Protocol` of what it uses (its `Needs`), and `_provides` below has mypy check
that `Services` gives every router what it declares. The edge modules (`app/health.py`,
the console) take the whole of it as `ServicesDep`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends

from app.admin import router as admin_router
from app.admin.operators import OperatorActions
from app.authorizations import router as authorizations_router
from app.db.database import Database
from app.events import router as events_router
from app.http.state import get_services
from app.idempotency.flow import KeyedFlow
from app.observability.metrics import Metrics
from app.operations import router as operations_router
from app.payments import router as payments_router
from app.payments.schemas import CreatePaymentCommand
from app.provider_events import router as provider_events_router
from app.provider_events.receiver import Receiver
from app.refunds import router as refunds_router
from app.refunds.schemas import CreateRefundCommand
from app.settings import Settings
from app.tenants.bearer import TenantGate
from app.tenants.cache import ApiKeyCache
from app.tenants.rate_limit import TenantRateLimiter
from app.tenants.unauthenticated import UnauthenticatedLimiter
from app.webhooks import router as webhooks_router


@dataclass(frozen=True)
class Services:
    """Everything the lifespan builds, handed to handlers through `app.state.services`."""

    settings: Settings
    db: Database
    payments: KeyedFlow[CreatePaymentCommand]
    refunds: KeyedFlow[CreateRefundCommand]
    # Every kind's keyed flow, by operation name (the two above among them).
    flows: Mapping[str, KeyedFlow[Any]]
    metrics: Metrics
    api_keys: ApiKeyCache
    operators: OperatorActions
    rate_limiter: TenantRateLimiter
    unauthenticated: UnauthenticatedLimiter
    provider_events: Receiver


ServicesDep = Annotated[Services, Depends(get_services)]


def _provides(services: Services) -> None:
    """Never called: mypy checks here that `Services` is every router's `Needs`."""
    needs: tuple[
        TenantGate,
        payments_router.Needs,
        refunds_router.Needs,
        authorizations_router.Needs,
        operations_router.Needs,
        events_router.Needs,
        webhooks_router.Needs,
        admin_router.Needs,
        provider_events_router.Needs,
    ] = (services,) * 9
    del needs
