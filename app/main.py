"""The API application: `create_app(settings)`; servers run `serving_app(settings)`.

The lifespan builds the engine, the session maker and the provider's HTTP client, wires the
services and hands them to handlers through `app.state`; nothing is built at import time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp

from app import gc_tuning, health
from app.admin import router as admin_router
from app.admin.discrepancies import router as discrepancies_router
from app.admin.operators import OperatorActions
from app.admin.provider_events import router as admin_provider_events
from app.authorizations import router as authorizations_router
from app.composition import runtime
from app.console import router as console_router
from app.console.forms import cap_console_forms
from app.console.pages import STATIC_DIR
from app.dependencies import Services
from app.errors import PROBLEMS, install_error_handlers, problem_response
from app.events import router as events_router
from app.http.fast_path import Table, Templated, fast_route, with_fast_routes
from app.http.listeners import by_listener, operators_only, public_only
from app.http.middleware import ObserveRequests
from app.http.openapi import install_openapi_documents
from app.idempotency.flow import KeyedFlow
from app.observability.metrics import Metrics
from app.operations import router as operations_router
from app.operations.values import OperationName
from app.payments import router as payments_router
from app.provider_events import router as provider_events_router
from app.provider_events.receiver import Receiver
from app.refunds import router as refunds_router
from app.settings import Settings
from app.tenants.admin import api_key_cache
from app.tenants.rate_limit import TenantRateLimiter
from app.tenants.unauthenticated import UnauthenticatedLimiter
from app.tracing.setup import configure as configure_tracing
from app.tracing.setup import traced_asgi
from app.webhooks import router as webhooks_router

DESCRIPTION = """
Charge money through a payment provider with exactly one business effect per operation,
however often requests are dropped, duplicated or retried.

Send every `POST /payments` and `POST /payments/{id}/refunds` with an `Idempotency-Key`.
Errors are `application/problem+json` with a stable `code`.
"""

# Served beside FastAPI's routing (`app/http/fast_path.py`): every payment and every replay
# of one is a `POST /payments`; every client that lost an answer looks its key up with
# `GET /operations?idempotency_key=`; every manual payment ends in a capture or a void.
FAST_ROUTES = (
    ("POST", "/payments"),
    ("GET", "/operations"),
    ("POST", "/payments/{payment_id}/captures"),
    ("POST", "/payments/{payment_id}/void"),
)


def create_app(settings: Settings) -> FastAPI:
    """The FastAPI app for `settings`."""
    metrics = Metrics(backlog_refresh_s=settings.metrics_backlog_refresh_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with runtime(settings, metrics=metrics, application_name="payments-api") as parts:

            def flow(name: str) -> KeyedFlow[Any]:
                """The keyed flow of one operation kind: its claim, call and recovery."""
                return KeyedFlow(
                    reconciler=parts.reconcilers[name],
                    db=parts.db,
                    policy=parts.policy,
                    lease_s=settings.lease_s,
                    key_ttl_s=settings.key_ttl_s,
                    metrics=metrics,
                )

            flows = {name: flow(name) for name in parts.reconcilers}
            app.state.services = Services(
                settings=settings,
                db=parts.db,
                payments=flows[OperationName.CREATE_PAYMENT],
                refunds=flows[OperationName.CREATE_REFUND],
                flows=flows,
                metrics=metrics,
                api_keys=api_key_cache(parts.db, max_entries=settings.api_key_cache_size),
                operators=OperatorActions(
                    db=parts.db,
                    reconcilers=parts.reconcilers,
                    lease_s=settings.lease_s,
                    key_ttl_s=settings.key_ttl_s,
                ),
                rate_limiter=TenantRateLimiter(
                    rate_per_s=settings.tenant_rate_limit_per_s,
                    burst=settings.tenant_rate_limit_burst,
                ),
                unauthenticated=UnauthenticatedLimiter(
                    rate_per_s=settings.unauthenticated_rate_limit_per_s,
                    burst=settings.unauthenticated_rate_limit_burst,
                ),
                provider_events=Receiver.from_settings(settings, db=parts.db, metrics=metrics),
            )
            app.state.readiness = health.Readiness(parts.db)
            gc_tuning.freeze_startup()
            yield

    app = FastAPI(
        title="payments",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        # FastAPI's own spans would see the routed requests only, not the fast routes: the
        # server spans around both listeners trace them all alike (docs/tracing.md).
        telemetry={"tracing": False},
    )
    app.state.metrics = metrics
    install_error_handlers(app)
    app.add_middleware(ObserveRequests, metrics=metrics)
    app.include_router(payments_router.router)
    app.include_router(refunds_router.router)
    app.include_router(authorizations_router.router)
    app.include_router(operations_router.router)
    app.include_router(events_router.router)
    app.include_router(webhooks_router.router)
    app.include_router(provider_events_router.router)
    app.include_router(health.router)
    app.include_router(admin_router.router)
    app.include_router(discrepancies_router.router)
    app.include_router(admin_provider_events.router)
    app.mount("/console/static", StaticFiles(directory=STATIC_DIR), name="console-static")
    app.include_router(console_router.router)
    install_openapi_documents(app)
    return app


def serving_app(settings: Settings) -> ASGIApp:
    """What the server runs: `create_app`'s app split between its two listeners.

    The tenants' port serves the API, with `FAST_ROUTES` beside FastAPI's routing; the
    operators' port (`PAYMENTS_ADMIN_PORT`) the admin API, the console and `/metrics`
    (`app/http/listeners.py`).
    """
    configure_tracing("payments-api")
    app = create_app(settings)
    public = with_fast_routes(fast_routes(app), others=public_only(app))
    operators = operators_only(cap_console_forms(app), development=settings.development)
    # Tracing (when on) wraps both listeners, so a fast route's request is traced as a
    # routed one is; only the operators' listener continues its callers' traces, a tenant's
    # request starts a new one (docs/tracing.md).
    return traced_asgi(
        by_listener(public, operators, admin_port=settings.admin_port),
        trusted_ports=(settings.admin_port,),
    )


def fast_routes(app: FastAPI) -> Table:
    """`FAST_ROUTES`, each its declared route's own handler, observed as the app's requests
    are and its errors rendered by the app's exception handlers' own function."""
    metrics: Metrics = app.state.metrics
    table: dict[tuple[str, str], ASGIApp | Templated] = {}
    for method, path in FAST_ROUTES:
        route = fast_route(app, method, path)
        served = route.asgi(app, errors=PROBLEMS, render=problem_response)
        # Anything else raised is answered 500 (and logged) by the observer, as on the route.
        observed = ObserveRequests(served, metrics=metrics, route=route.template)
        table[method, path] = Templated(route.match, observed) if route.templated else observed
    return table
