"""The one place the service's parts are built and wired, for the API and the worker alike.

    pool -> Database ─┬─> ChargeDriver (provider client, failpoints) ──> Reconciler (policy)
    provider HTTP client ┘

`runtime(settings, ...)` builds them, hands them over, and closes the HTTP client and the
engine when the block ends. Nothing here runs at import time.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

from app.admin.subjects import Described, Subject
from app.db.database import Database, open_database
from app.failpoints import Failpoints
from app.observability.metrics import Metrics
from app.operations.models import OperationName
from app.payments import repository as payments
from app.payments.charging import ChargeDriver
from app.payments.models import PaymentRow
from app.payments.schemas import payment_json
from app.provider.breaker import CircuitBreaker
from app.provider.client import ProviderClient
from app.provider.transport import build_http_client
from app.recovery.policy import RecoveryPolicy
from app.recovery.reconcile import Reconciler
from app.settings import Settings


@dataclass(frozen=True)
class Runtime:
    """What both processes share: sessions, the driver, recovery and its policy."""

    db: Database
    driver: ChargeDriver
    reconciler: Reconciler[PaymentRow]
    policy: RecoveryPolicy
    # What operators may act on, by operation name (`app/admin/desk.py`).
    subjects: Mapping[str, Subject]


@asynccontextmanager
async def runtime(
    settings: Settings, *, metrics: Metrics, application_name: str
) -> AsyncIterator[Runtime]:
    """Build the runtime for one process; close its connections when the block ends."""
    http = build_http_client(settings.provider_url, settings.provider_timeout_s)
    try:
        async with open_database(settings, application_name=application_name) as db:
            breaker = CircuitBreaker(
                failures=settings.breaker_failures,
                cooldown_s=settings.breaker_cooldown_s,
                on_change=lambda state: metrics.breaker_state.set(int(state)),
            )
            provider = ProviderClient(
                http,
                observer=metrics.observe_provider_call,
                deadline_s=settings.provider_timeout_s,
                breaker=breaker,
            )
            driver = ChargeDriver(
                db=db,
                provider=provider,
                lease_s=settings.lease_s,
                failpoints=Failpoints.parse(settings.failpoints),
            )
            policy = RecoveryPolicy(
                max_attempts=settings.max_attempts,
                backoff_base_s=settings.backoff_base_s,
                backoff_max_s=settings.backoff_max_s,
            )
            reconciler = Reconciler(driver=driver, policy=policy)

            async def describe_payment(operation_id: uuid.UUID) -> Described | None:
                async with db.connection() as conn:
                    try:
                        payment = await payments.get_for_operation(conn, operation_id)
                    except LookupError:
                        return None
                return Described("payment", payment_json(payment), payment.provider_key)

            subjects = {
                OperationName.CREATE_PAYMENT.value: Subject(
                    describe=describe_payment,
                    find_at_provider=provider.find_charge,
                    driver=driver,
                    reconciler=reconciler,
                )
            }
            yield Runtime(
                db=db, driver=driver, reconciler=reconciler, policy=policy, subjects=subjects
            )
    finally:
        await http.aclose()
