"""The worker's webhook dispatcher: claim due deliveries, send them, record each attempt.

Each pass claims as many due deliveries as this worker has free slots
(PAYMENTS_WEBHOOK_CONCURRENCY), at most PAYMENTS_WEBHOOK_ENDPOINT_CONCURRENCY in flight per
endpoint and PAYMENTS_WEBHOOK_TENANT_CONCURRENCY per tenant, and sends each as its own
task: a pass does not wait for its attempts, so a slow or dead endpoint (each attempt up to
PAYMENTS_WEBHOOK_TIMEOUT_S), or a tenant with many, holds a few slots, never the
deliveries to other endpoints and tenants. On SIGTERM nothing new is claimed and the
attempts under way finish and are recorded; a SIGKILLed worker's deliveries are claimed
again when their leases run out (the receiver may then see an event twice: it dedupes by
event id).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter

from app.db.database import Database
from app.errors import is_transient_database_error
from app.failpoints import Failpoints
from app.observability.metrics import Metrics
from app.recovery.backoff import next_delay_s
from app.settings import Settings
from app.webhooks import deliveries
from app.webhooks.deliveries import Claimed
from app.webhooks.sender import AttemptResult, WebhookSender, describe

logger = logging.getLogger("payments.webhooks")


class WebhookDispatcher:
    """Delivers due webhooks as one worker, until told to stop."""

    def __init__(
        self,
        *,
        settings: Settings,
        db: Database,
        sender: WebhookSender,
        name: str,
        metrics: Metrics,
        stopping: asyncio.Event,
    ):
        self._settings = settings
        self._db = db
        self._sender = sender
        self._name = name
        self._metrics = metrics
        self._stopping = stopping
        self._failpoints = Failpoints.parse(settings.failpoints)
        self._in_flight: Counter[uuid.UUID] = Counter()
        self._tenants_in_flight: Counter[uuid.UUID] = Counter()
        self._tasks: set[asyncio.Task[None]] = set()

    async def run_pass(self) -> int:
        """Claim what is due (as many as there are free slots) and start sending it."""
        free = self._settings.webhook_concurrency - len(self._tasks)
        if self._stopping.is_set() or free <= 0:
            return 0
        async with self._db.connection() as conn:
            claimed = await deliveries.claim(
                conn,
                owner=self._name,
                lease_s=self._settings.webhook_lease_s,
                limit=free,
                per_endpoint=self._settings.webhook_endpoint_concurrency,
                in_flight=dict(self._in_flight),
                per_tenant=self._settings.webhook_tenant_concurrency,
                tenants_in_flight=dict(self._tenants_in_flight),
            )
        for delivery in claimed:
            self._in_flight[delivery.endpoint_id] += 1
            self._tenants_in_flight[delivery.event.tenant_id] += 1
            task = asyncio.create_task(self._deliver(delivery))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return len(claimed)

    async def pump(self) -> None:
        """The scheduled job: claim while there is work and room, topping up as attempts
        finish. Waits for a finished attempt at most one interval, so a new delivery is not
        kept waiting behind attempts to an endpoint that does not answer."""
        while await self.run_pass() > 0:
            if not self._tasks:
                continue
            await asyncio.wait(
                set(self._tasks),
                timeout=self._settings.webhook_interval_s,
                return_when=asyncio.FIRST_COMPLETED,
            )

    async def drain(self) -> int:
        """Deliver until nothing is due (`--once`); the number of attempts made."""
        total = 0
        while not self._stopping.is_set():
            claimed = await self.run_pass()
            total += claimed
            if claimed == 0 and not self._tasks:
                break
            await self.wait_idle()
        await self.wait_idle()
        return total

    async def wait_idle(self) -> None:
        """Return once the attempts under way are finished and recorded."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

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
                worker=self._name,
                status_code=result.status_code,
                error=result.error,
                latency_ms=result.latency_ms,
                delay_s=delay,
                max_age_s=self._settings.webhook_max_age_s,
            )
