"""The worker's publishing job: each tenant's new events to the events exchange, confirmed.

Only a worker with PAYMENTS_BROKER_URL runs it (`publishing`); without it nothing here
starts and nothing is written. The outbox is the events table itself: the job reads each
tenant's feed from where the broker last confirmed (`app/events/publication.py`, one cursor
per tenant and exchange), so the payment path writes nothing for the broker and nothing
piles up when no broker is configured.

A pass, through the worker's one loop (`app/jobs/loop.py`), every
PAYMENTS_BROKER_EVENTS_INTERVAL_S:

1. claim: up to TENANTS_AT_ONCE tenants with events to publish, each under a lease and a
   fence (`FOR UPDATE SKIP LOCKED`), with its next PAYMENTS_BROKER_EVENTS_BATCH_SIZE events
   in its feed's order;
2. publish each tenant's batch in order and wait for the broker's confirms
   (`publisher.py`), tenants side by side on the worker's one channel;
3. record: the cursor moves past the events confirmed, counted from the batch's first, and
   no further. A nack or a lost connection leaves the rest unpublished, tried again after
   a capped exponential backoff (PAYMENTS_BROKER_EVENTS_BACKOFF_BASE_S / _MAX_S, jittered),
   that tenant alone: the others go on.

Guarantees: at least once (a batch whose confirms were lost, or whose worker died before
recording them, is published again; consumers dedupe by `message_id`, the event id). In
order per tenant, hence per operation and per payment: a tenant's events are published by
one worker at a time, in the feed's order, each batch only once the one before is
confirmed. After a failure the tenant's events are published again from the first one not
confirmed, so a queue may get a run of them twice, the second time in order again.
Publishing begins, for an exchange, when the first worker publishing to it starts: events
written before are in the feed (`GET /events`) and the webhooks, not on the exchange.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from app.broker.exchange import event_message, routing_key
from app.broker.publisher import ConfirmedPublisher, Outgoing
from app.db.database import Database
from app.events import publication
from app.events.publication import Claimed
from app.jobs.backoff import next_delay_s
from app.jobs.loop import Pace
from app.observability.metrics import Metrics
from app.settings import Settings

logger = logging.getLogger("payments.broker")

# Tenants one worker publishes at once: their batches share the worker's one channel.
TENANTS_AT_ONCE = 8
PACE = Pace.windowed(TENANTS_AT_ONCE, TENANTS_AT_ONCE)


class PublishJob:
    """Publishes the tenants' new events to the exchange, as one worker."""

    name = "publish_events"
    # How the worker's loop runs it: a few tenants at a time.
    pace = PACE

    def __init__(
        self,
        *,
        settings: Settings,
        db: Database,
        publisher: ConfirmedPublisher,
        worker: str,
        metrics: Metrics,
    ):
        self._settings = settings
        self._db = db
        self._publisher = publisher
        self._worker = worker
        self._metrics = metrics
        self._begun = False

    @property
    def exchange(self) -> str:
        return self._publisher.exchange

    async def claim(self, limit: int) -> list[Claimed]:
        """Up to `limit` tenants' next events, leased to this worker."""
        async with self._db.connection() as conn:
            if not self._begun:
                # Publishing to the exchange begins (once, for every worker): from here on
                # every tenant's events are published.
                await publication.begin(conn, exchange=self.exchange)
                self._begun = True
            return await publication.claim(
                conn,
                exchange=self.exchange,
                owner=self._worker,
                lease_s=self._settings.broker_events_lease_s,
                limit=limit,
                batch=self._settings.broker_events_batch_size,
            )

    async def handle(self, claimed: Claimed) -> None:
        """Publish one tenant's batch, and record how far the broker confirmed it."""
        outgoing = [
            Outgoing(routing_key(positioned.event), event_message(positioned.event))
            for positioned in claimed.events
        ]
        confirmed = await self._publisher.publish(outgoing)
        delay_s = next_delay_s(
            claimed.attempts,
            base_s=self._settings.broker_events_backoff_base_s,
            max_s=self._settings.broker_events_backoff_max_s,
        )
        async with self._db.connection() as conn:
            recorded = await publication.record(
                conn,
                exchange=self.exchange,
                claimed=claimed,
                confirmed=confirmed.count,
                error=confirmed.error,
                delay_s=delay_s,
            )
        self._metrics.broker_events_published.inc(confirmed.count)
        if confirmed.failure is not None:
            self._metrics.broker_publish_failures.labels(confirmed.failure.value).inc()
        fields = {
            "tenant_id": str(claimed.tenant_id),
            "exchange": self.exchange,
            "events": len(claimed.events),
            "confirmed": confirmed.count,
            "failure": confirmed.failure and confirmed.failure.value,
            "error": confirmed.error,
            "recorded": recorded,
        }
        log = logger.info if confirmed.failure is None else logger.warning
        log("events published", extra={"fields": fields})


@asynccontextmanager
async def publishing(
    settings: Settings, *, db: Database, worker: str, metrics: Metrics
) -> AsyncIterator[PublishJob | None]:
    """The publishing job of a worker with PAYMENTS_BROKER_URL (None without it: nothing
    starts, nothing connects); its connection closed when the block ends."""
    if settings.broker_url is None:
        yield None
        return
    publisher = ConfirmedPublisher(
        settings.broker_url.get_secret_value(),
        settings.broker_events_exchange,
        timeout_s=settings.broker_events_timeout_s,
    )
    try:
        yield PublishJob(
            settings=settings, db=db, publisher=publisher, worker=worker, metrics=metrics
        )
    finally:
        await publisher.aclose()
