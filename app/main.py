"""The API application: `create_app(settings)`.

The lifespan builds the engine, the session maker and the provider's HTTP client, wires the
services and hands them to handlers through `app.state`; nothing is built at import time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app import health
from app.db.engine import build_engine, build_sessionmaker
from app.db.migrate import head_revision
from app.dependencies import Services
from app.errors import install_error_handlers
from app.http.middleware import ObserveRequests
from app.observability.metrics import Metrics
from app.operations import router as operations_router
from app.payments import router as payments_router
from app.payments.charging import ChargeDriver
from app.payments.service import PaymentService
from app.provider.client import ProviderClient
from app.provider.transport import build_http_client
from app.recovery.reconcile import Reconciler
from app.settings import Settings
from app.tenants.admin import api_key_cache

DESCRIPTION = """
Charge money through a payment provider with exactly one business effect per operation,
however often requests are dropped, duplicated or retried.

Send every `POST /payments` with an `Idempotency-Key`. Errors are `application/problem+json`
with a stable `code`.
"""


def create_app(settings: Settings) -> FastAPI:
    """The FastAPI app for `settings`."""
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = build_engine(settings, application_name="payments-api")
        http = build_http_client(settings.provider_url, settings.provider_timeout_s)
        sessions = build_sessionmaker(engine)
        provider = ProviderClient(
            http, observer=metrics.observe_provider_call, deadline_s=settings.provider_timeout_s
        )
        driver = ChargeDriver(sessions=sessions, provider=provider, settings=settings)
        reconciler = Reconciler(sessions=sessions, provider=provider, driver=driver)
        app.state.services = Services(
            settings=settings,
            sessions=sessions,
            payments=PaymentService(
                sessions=sessions,
                driver=driver,
                reconciler=reconciler,
                settings=settings,
                metrics=metrics,
            ),
            schema_head=head_revision(),
            metrics=metrics,
            api_keys=api_key_cache(sessions),
        )
        try:
            yield
        finally:
            await http.aclose()
            await engine.dispose()

    app = FastAPI(title="payments", version="0.1.0", description=DESCRIPTION, lifespan=lifespan)
    install_error_handlers(app)
    app.add_middleware(ObserveRequests, metrics=metrics)
    app.include_router(payments_router.router)
    app.include_router(operations_router.router)
    app.include_router(health.router)
    return app
