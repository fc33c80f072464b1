"""`create_app(db_path)`: the fake provider's FastAPI app."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError

from fake_provider import admin as admin_api
from fake_provider import (
    captures,
    charges,
    ledger_admin,
    notify_admin,
    refunds,
    settlements,
    voids,
)
from fake_provider.errors import validation_error_handler
from fake_provider.faults import FaultBook
from fake_provider.ledger_edits import EditableLedger
from fake_provider.notifications import Notifications
from fake_provider.notify_outbox import DEFAULT_MAX_AGE_S, Destination
from fake_provider.notify_sender import Sender


def create_app(
    db_path: Path,
    *,
    admin: bool = False,
    settlement_lag_days: int = 1,
    merchants: frozenset[str] | None = None,
    endpoints: Mapping[str, Destination] | None = None,
    notify_max_age_s: float = DEFAULT_MAX_AGE_S,
) -> FastAPI:
    """Build the app; the ledger at `db_path` is opened at startup and closed at shutdown,
    and the sender of its notifications outbox runs in between.

    `admin` adds the admin API: fault rules (`/_faults`), edits of the ledger (`/_ledger`),
    notification endpoints (`/_notifications`) and the whole ledger (`GET /charges`,
    `/refunds`, `/captures` and `/voids` without a parameter), which tests and `payments dev`
    use. `settlement_lag_days`: a record made on day D settles on D + this (`settlements`).
    `merchants`: those a notification endpoint may be set for (None: any); `endpoints`: the
    endpoints set at start, by merchant; `notify_max_age_s`: how long an event is retried.
    """
    faults = FaultBook()
    notifications = Notifications(
        faults, merchants=merchants, endpoints=endpoints, max_age_s=notify_max_age_s
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ledger = app.state.ledger = EditableLedger.open(db_path)
        sender = Sender(ledger.outbox, max_age_s=notify_max_age_s)
        notifications.outbox, notifications.sender = ledger.outbox, sender
        sending = asyncio.create_task(sender.run(), name="notifications")
        try:
            yield
        finally:
            notifications.sender = None
            sending.cancel()
            await asyncio.gather(sending, return_exceptions=True)
            await sender.stop()
            notifications.outbox = None
            ledger.close()

    # Traced (when on) by the server spans around the fast paths too (app/tracing/server.py),
    # not by FastAPI's own spans, which would see the routed requests only.
    app = FastAPI(title="Fake payment provider", lifespan=lifespan, telemetry={"tracing": False})
    # Fault rules are process memory on purpose: a restarted provider starts healthy. So
    # are notification endpoints; the events made are in the ledger.
    app.state.faults = faults
    app.state.notifications = notifications
    app.state.admin = admin
    app.state.settlement_lag_days = settlement_lag_days
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.include_router(charges.router)
    app.include_router(refunds.router)
    app.include_router(captures.router)
    app.include_router(voids.router)
    app.include_router(settlements.router)
    if admin:
        app.include_router(admin_api.router)
        app.include_router(ledger_admin.router)
        app.include_router(notify_admin.router)

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        """The process is up and serving."""
        return {"status": "ok"}

    return app
