"""The one place the service's parts are built and wired, for the API and the worker alike.

    pool -> Database ─┬─> ChargeDriver (provider client, failpoints) ──> Reconciler (policy)
    provider wire client ┴─> RefundDriver (provider client, failpoints) ──> Reconciler (policy)

`reconcilers` maps each operation name to the reconciler of its driver: the worker hands
every operation it claims to the one its name picks.

`runtime(settings, ...)` builds them, hands them over, and closes the provider's connections
and the engine when the block ends. Nothing here runs at import time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from app.admin.subjects import Subject
from app.db.database import Database, open_database
from app.failpoints import Failpoints
from app.observability.metrics import Metrics
from app.operations.models import OperationName
from app.payments.charging import ChargeDriver
from app.payments.models import PaymentRow
from app.provider.breaker import CircuitBreaker
from app.provider.client import ProviderClient
from app.provider.wire import CONNECT_SHARE, DEFAULT_MAX_CONNECTIONS, WireClient
from app.recovery.policy import RecoveryPolicy
from app.recovery.reconcile import Reconciler
from app.refunds.driver import RefundDriver
from app.refunds.models import RefundRow
from app.settings import Settings
from app.subjects import operator_subjects


@dataclass(frozen=True)
class Runtime:
    """What both processes share: sessions, the driver, recovery and its policy."""

    db: Database
    driver: ChargeDriver
    reconciler: Reconciler[PaymentRow, Any]
    refund_driver: RefundDriver
    refund_reconciler: Reconciler[RefundRow, Any]
    policy: RecoveryPolicy
    # What operators may act on, by operation name (`app/admin/desk.py`).
    subjects: Mapping[str, Subject]

    @property
    def reconcilers(self) -> dict[str, Reconciler[Any, Any]]:
        """The reconciler for each operation name."""
        return {
            OperationName.CREATE_PAYMENT: self.reconciler,
            OperationName.CREATE_REFUND: self.refund_reconciler,
        }


def provider_connections(settings: Settings) -> int:
    """Connections the provider client keeps: enough for a worker's whole window.

    Each reconciliation makes one provider call at a time, so a worker whose window is
    larger than the client's default would have lookups wait for a connection (and give
    up as "not sent" after the connect share of their deadline) with the provider idle.
    """
    return max(DEFAULT_MAX_CONNECTIONS, settings.reconcile_concurrency)


@asynccontextmanager
async def runtime(
    settings: Settings, *, metrics: Metrics, application_name: str
) -> AsyncIterator[Runtime]:
    """Build the runtime for one process; close its connections when the block ends."""
    # Charges, refunds and lookups all go through it (`app/provider/wire.py`); a connect may
    # take a share of the call's deadline, so that one that hangs is "not sent".
    connections = provider_connections(settings)
    wire = WireClient(
        settings.provider_url,
        connect_timeout_s=settings.provider_timeout_s * CONNECT_SHARE,
        max_connections=connections,
        max_idle=connections,
    )
    try:
        async with open_database(settings, application_name=application_name) as db:
            breaker = CircuitBreaker(
                failures=settings.breaker_failures,
                cooldown_s=settings.breaker_cooldown_s,
                on_change=lambda state: metrics.breaker_state.set(int(state)),
            )
            provider = ProviderClient(
                wire,
                observer=metrics.observe_provider_call,
                deadline_s=settings.provider_timeout_s,
                breaker=breaker,
            )
            failpoints = Failpoints.parse(settings.failpoints)
            driver = ChargeDriver(
                db=db, provider=provider, lease_s=settings.lease_s, failpoints=failpoints
            )
            refund_driver = RefundDriver(
                db=db, provider=provider, lease_s=settings.lease_s, failpoints=failpoints
            )
            policy = RecoveryPolicy(
                max_attempts=settings.max_attempts,
                backoff_base_s=settings.backoff_base_s,
                backoff_max_s=settings.backoff_max_s,
            )
            reconciler = Reconciler(driver=driver, policy=policy)
            refund_reconciler = Reconciler(driver=refund_driver, policy=policy)
            yield Runtime(
                db=db,
                driver=driver,
                reconciler=reconciler,
                refund_driver=refund_driver,
                refund_reconciler=refund_reconciler,
                policy=policy,
                subjects=operator_subjects(
                    db=db,
                    provider=provider,
                    charges=(driver, reconciler),
                    refunds_=(refund_driver, refund_reconciler),
                ),
            )
    finally:
        await wire.aclose()
