"""The worker's delivery job: what is due, and sending one claimed delivery.

Due: pending deliveries whose next attempt has come and whose lease (if any) ran out, at most
PAYMENTS_WEBHOOK_ENDPOINT_CONCURRENCY in flight per endpoint and
PAYMENTS_WEBHOOK_TENANT_CONCURRENCY per tenant, claimed tenant by tenant with fair shares
(`deliveries.claim`, FOR UPDATE SKIP LOCKED plus a fence bump). The loop (`app/jobs/loop.py`)
claims into any free slot of PAYMENTS_WEBHOOK_CONCURRENCY and sends each delivery as its own
task; after a claim that came back short it looks again at least every
PAYMENTS_WEBHOOK_INTERVAL_S, so a slow or dead endpoint (each attempt up to
PAYMENTS_WEBHOOK_TIMEOUT_S), or a tenant with many, holds a few slots, never the deliveries
to other endpoints and tenants. A SIGKILLed worker's deliveries are claimed again when their
leases run out (the receiver may then see an event twice: it dedupes by event id).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter

from app.db.database import Database
from app.errors import is_transient_database_error
from app.failpoints import Failpoints
from app.jobs.backoff import next_delay_s
from app.jobs.loop import Pace
from app.jobs.tenants import KEEP_TENANTS_S, KeptTenants
from app.observability.metrics import Metrics
from app.settings import Settings
from app.tracing.spans import span
from app.tracing.state import STATE
from app.webhooks import deliveries
from app.webhooks.deliveries import Claimed
from app.webhooks.sender import AttemptResult, WebhookSender, describe
from app.webhooks.traced import delivery_trace

logger = logging.getLogger("payments.webhooks")


def delivery_pace(settings: Settings) -> Pace:
    """Any free slot of PAYMENTS_WEBHOOK_CONCURRENCY is claimed into (the per-endpoint and
    per-tenant caps make small claims the rule); patient for PAYMENTS_WEBHOOK_INTERVAL_S."""
    window = settings.webhook_concurrency
    return Pace(window=window, batch=window, refill_at=1, patience_s=settings.webhook_interval_s)


class DeliveryJob:
    """Delivers due webhooks as one worker."""

    name = "webhooks"

    def __init__(
        self,
        *,
        settings: Settings,
        db: Database,
        sender: WebhookSender,
        worker: str,
        metrics: Metrics,
    ):
        self._settings = settings
        self._db = db
        self._sender = sender
        self._worker = worker
        self._metrics = metrics
        self._failpoints = Failpoints.parse(settings.failpoints)
        # This worker's attempts under way, by endpoint and by tenant: its slots are its own.
        self._in_flight: Counter[uuid.UUID] = Counter()
        self._tenants_in_flight: Counter[uuid.UUID] = Counter()
        # The tenants with due deliveries, kept between this worker's claims.
        self._tenants = KeptTenants(refresh_s=KEEP_TENANTS_S)

    async def claim(self, limit: int) -> list[Claimed]:
        """Up to `limit` due deliveries, none of an endpoint or tenant at its cap here."""
        async with self._db.connection() as conn:
            claimed = await deliveries.claim(
                conn,
                owner=self._worker,
                lease_s=self._settings.webhook_lease_s,
                limit=limit,
                per_endpoint=self._settings.webhook_endpoint_concurrency,
                in_flight=dict(self._in_flight),
                per_tenant=self._settings.webhook_tenant_concurrency,
                tenants_in_flight=dict(self._tenants_in_flight),
                tenants=self._tenants,
            )
        for delivery in claimed:
            self._in_flight[delivery.endpoint_id] += 1
            self._tenants_in_flight[delivery.event.tenant_id] += 1
        return claimed

    async def handle(self, delivery: Claimed) -> None:
        """Send one delivery and record it; traced (when on) as a trace of its own, linked
        to the request that claimed the event's operation (`traced.py`)."""
        if not STATE.enabled:
            await self._deliver(delivery)
            return
        attributes, links = await delivery_trace(self._db, delivery)
        with span("webhook deliver", root=True, links=links, attributes=attributes):
            await self._deliver(delivery)

    async def _deliver(self, delivery: Claimed) -> None:
        """Send one delivery and record the attempt. Whatever goes wrong before the record
        is a failed attempt too (retried with backoff, failed for good after
        PAYMENTS_WEBHOOK_MAX_AGE_S): a delivery that always raises must not stay due, to be
        claimed again at every lease ahead of everyone else's."""
        try:
            if delivery.endpoint_deleted:
                async with self._db.connection() as conn:
                    await deliveries.cancel(conn, delivery)
                return
            started = time.monotonic()
            try:
                result = await self._sender.send(delivery)
                await self._failpoints.reach("webhook_before_record")
            except Exception as exc:
                logger.exception("webhook delivery %s raised", delivery.id)
                latency_ms = round((time.monotonic() - started) * 1000)
                result = AttemptResult(None, f"internal error: {describe(exc)}", latency_ms)
            try:
                status = await self._record(delivery, result)
            except Exception as exc:
                if is_transient_database_error(exc):
                    raise
                # The record itself was refused (not the database gone): record that much.
                logger.exception("webhook delivery %s: recording its attempt failed", delivery.id)
                error = f"internal error: recording the attempt failed: {describe(exc)}"
                result = AttemptResult(None, error, result.latency_ms)
                status = await self._record(delivery, result)
            outcome = {"pending": "retry", None: "fenced_out"}.get(status, status or "")
            self._metrics.webhook_deliveries.labels(outcome).inc()
            log = logger.info if result.ok else logger.warning
            log(
                "webhook attempt",
                extra={
                    "fields": {
                        "delivery_id": str(delivery.id),
                        "event_id": str(delivery.event.id),
                        "status_code": result.status_code,
                        "error": result.error,
                        "latency_ms": result.latency_ms,
                        "outcome": outcome,
                    }
                },
            )
        except Exception:
            # The database is out of reach: the lease runs out and the delivery is claimed
            # again, as after a crash.
            logger.exception("webhook delivery %s failed to record", delivery.id)
        finally:
            for counter, key in (
                (self._in_flight, delivery.endpoint_id),
                (self._tenants_in_flight, delivery.event.tenant_id),
            ):
                counter[key] -= 1
                if counter[key] <= 0:
                    del counter[key]

    async def _record(self, delivery: Claimed, result: AttemptResult) -> str | None:
        delay = next_delay_s(
            delivery.attempt_count,
            base_s=self._settings.webhook_backoff_base_s,
            max_s=self._settings.webhook_backoff_max_s,
        )
        async with self._db.connection() as conn:
            return await deliveries.record_attempt(
                conn,
                delivery,
                worker=self._worker,
                status_code=result.status_code,
                error=result.error,
                latency_ms=result.latency_ms,
                delay_s=delay,
                max_age_s=self._settings.webhook_max_age_s,
            )
