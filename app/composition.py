"""Builds and wires the service's shared parts, for the API and the worker alike.

    pool -> Database ──────────┬─> one kind object per operation kind (providers, routing)
    one client per provider ───┘      └─> its Driver (failpoints) └─> its Reconciler (policy)
    (wire, breaker, deadline)

`KINDS` registers every operation kind (`app/operations/kinds.py`): one line per kind. The
loop in `runtime` builds each one (`build`), its driver and its reconciler, by operation
name: the worker hands every operation it claims to the reconciler its name picks, the
keyed flow and the operators to the same one (the reconciler's `driver`, the driver's
`kind`).

`runtime(settings, ...)` builds them, hands them over, and closes the provider's connections
and the engine when the block ends. Nothing here runs at import time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from app.authorizations.kinds import CaptureKind, VoidKind
from app.db.database import Database, open_database
from app.events.outbox import followed_by
from app.failpoints import Failpoints
from app.observability.metrics import Metrics
from app.operations.driver import Driver
from app.operations.kinds import KindParts, OperationKind, Upkeep
from app.payments.kind import PaymentKind
from app.provider.breaker import CircuitBreaker
from app.provider.client import ProviderClient
from app.provider.registry import Providers, ProviderSpec
from app.provider.routing import RoutingTable
from app.provider.wire import CONNECT_SHARE, DEFAULT_MAX_CONNECTIONS, WireClient
from app.provider_events.apply import APPLY_PACE
from app.recovery.policy import RecoveryPolicy
from app.recovery.reconcile import Reconciler
from app.refunds.kind import RefundKind
from app.settings import Settings
from app.webhooks.fanout import DELIVERIES

# Every operation kind the service runs; a new kind adds its line here.
KINDS: tuple[type[OperationKind[Any, Any, Any]], ...] = (
    PaymentKind,
    RefundKind,
    CaptureKind,
    VoidKind,
)


@dataclass(frozen=True)
class Runtime:
    """What both processes share: sessions, each kind's recovery (its driver, its kind)."""

    db: Database
    policy: RecoveryPolicy
    providers: Providers
    routing: RoutingTable
    # By operation name: each kind's reconciler, its `driver`, the driver's `kind`.
    reconcilers: Mapping[str, Reconciler[Any, Any]]
    # The kinds' own batch jobs (`OperationKind.upkeep`), run by the worker's expiry pass.
    upkeeps: tuple[Upkeep, ...] = ()


def provider_connections(settings: Settings) -> int:
    """Connections the provider client keeps: enough for a worker's whole window.

    Each reconciliation makes one provider call at a time, so a worker whose window is
    larger than the client's default would have lookups wait for a connection (and give
    up as "not sent" after the connect share of their deadline) with the provider idle. A
    worker that applies provider events runs their reconciliations beside recovery's, in a
    window of their own (`APPLY_PACE`), so it needs a connection for each of those too.
    """
    window = settings.reconcile_concurrency
    if settings.provider_event_secrets:
        window += APPLY_PACE.window
    return max(DEFAULT_MAX_CONNECTIONS, window)


def provider_client(
    spec: ProviderSpec, settings: Settings, metrics: Metrics
) -> tuple[ProviderClient, WireClient]:
    """One provider's client: its own connections, deadline and circuit breaker."""
    # Filled in from the service-wide settings by `Settings.provider_specs`.
    assert spec.timeout_s is not None
    assert spec.breaker_failures is not None
    assert spec.breaker_cooldown_s is not None
    # Charges, refunds and lookups all go through it (`app/provider/wire.py`); a connect may
    # take a share of the call's deadline, so that one that hangs is "not sent".
    connections = provider_connections(settings)
    wire = WireClient(
        spec.url,
        api_key=spec.secret_key(),
        connect_timeout_s=spec.timeout_s * CONNECT_SHARE,
        max_connections=connections,
        max_idle=connections,
    )
    gauge = metrics.breaker_state.labels(spec.name)
    gauge.set(0)
    breaker = CircuitBreaker(
        failures=spec.breaker_failures,
        cooldown_s=spec.breaker_cooldown_s,
        on_change=lambda state: gauge.set(int(state)),
        name=spec.name,
    )
    client = ProviderClient(
        wire,
        observer=metrics.provider_observer(spec.name),
        deadline_s=spec.timeout_s,
        breaker=breaker,
        name=spec.name,
    )
    return client, wire


@asynccontextmanager
async def runtime(
    settings: Settings, *, metrics: Metrics, application_name: str
) -> AsyncIterator[Runtime]:
    """Build the runtime for one process; close its connections when the block ends."""
    routing = settings.routing_table()
    built = {
        spec.name: provider_client(spec, settings, metrics) for spec in settings.provider_specs()
    }
    providers = Providers({name: client for name, (client, _) in built.items()})
    try:
        async with open_database(settings, application_name=application_name) as db:
            parts = KindParts(
                providers=providers, routing=routing, metrics=metrics, settings=settings
            )
            failpoints = Failpoints.parse(settings.failpoints)
            policy = RecoveryPolicy.from_settings(settings)
            # Every event a driver writes fans out to the tenant's endpoints in its statement.
            deliver = followed_by(DELIVERIES)
            reconcilers: dict[str, Reconciler[Any, Any]] = {}
            upkeeps: list[Upkeep] = []
            for kind in KINDS:
                built_kind = kind.build(parts)
                if (upkeep := built_kind.upkeep(db, deliver)) is not None:
                    upkeeps.append(upkeep)
                driver = Driver(
                    built_kind,
                    db=db,
                    lease_s=settings.lease_s,
                    failpoints=failpoints,
                    on_failover=metrics.failed_over,
                    deliver=deliver,
                )
                reconcilers[kind.name] = Reconciler(driver=driver, policy=policy)
            yield Runtime(
                db=db,
                policy=policy,
                providers=providers,
                routing=routing,
                reconcilers=reconcilers,
                upkeeps=tuple(upkeeps),
            )
    finally:
        for _, wire in built.values():
            await wire.aclose()
