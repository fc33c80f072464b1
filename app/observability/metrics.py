"""Prometheus metrics: one `Metrics` object per process, built by its entry point.

Counters and histograms are updated where things happen; the gauges that describe the
backlog (oldest in-flight operation, unknown and needs-attention counts, pending webhooks,
the open reconciliation items by kind and the oldest of them, the providers' notifications
not yet applied, the events not yet confirmed by the broker) are read from the database
when `/metrics` is scraped, so every process reports the same truth: through indexes only
(a scrape costs what the backlog holds, not what the tables do), and at most once every
`PAYMENTS_METRICS_BACKLOG_REFRESH_S` (5 s) per process.

Several API processes (`payments serve --workers N`) answer one `/metrics` endpoint between
them, so a scrape must not see only the process that happened to answer it. With
`PROMETHEUS_MULTIPROC_DIR` set (`serve` sets it for its worker processes), prometheus_client
keeps every process's values in files in that folder, and `render()` adds them up:
counters and histograms are summed, the backlog gauges (read from the database) report the
most recent reading, and the breaker gauge keeps one series per process (`pid` label), as
each process has its own breaker.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MULTIPROC_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


@dataclass(frozen=True)
class Backlog:
    """What the backlog gauges show, as read from the database (`app/backlog.py`)."""

    oldest_in_flight_s: float
    unknown: int
    needs_attention: int
    webhook_events_pending: int
    webhook_oldest_pending_s: float
    # The discrepancy queue: open items by kind (every kind, zeros included), and how
    # long the oldest open one has been open (0 when none is).
    discrepancies_open: Mapping[str, int]
    discrepancies_oldest_open_s: float
    # The providers' notifications waiting to be applied, by state (received, parked).
    provider_events_pending: Mapping[str, int] = field(default_factory=dict)
    # The notifications kept as contradicting a final outcome (each queued a discrepancy).
    provider_events_contradicted: int = 0
    # Events not yet confirmed by the broker, by exchange (up to a cap), and how long the
    # oldest of them has waited; no exchange when no worker has ever published.
    broker_events_unpublished: Mapping[str, int] = field(default_factory=dict)
    broker_oldest_unpublished_s: Mapping[str, float] = field(default_factory=dict)


class Metrics:
    """Every metric the service exports, on its own registry."""

    def __init__(self, *, backlog_refresh_s: float = 0.0) -> None:
        # How long `refresh_backlog_if_stale` reuses what it last read (0: read every time).
        self.backlog_refresh_s = backlog_refresh_s
        self._backlog_read_at: float | None = None
        self._backlog_lock = asyncio.Lock()
        self.registry = CollectorRegistry()
        r = self.registry
        self.replays = Counter(
            "payments_idempotent_replays",
            "Stored answers replayed to a retried request",
            registry=r,
        )
        self.conflicts = Counter(
            "payments_idempotency_conflicts",
            "Requests refused because of their key: different_request, in_progress",
            ["reason"],
            registry=r,
        )
        self.wait_polls = Counter(
            "payments_wait_polls",
            "Reads of an in-flight operation by requests waiting for it (Prefer: wait)",
            registry=r,
        )
        self.expired_key_retries = Counter(
            "payments_expired_key_retries", "Requests with a key past its TTL", registry=r
        )
        self.reconciliations = Counter(
            "payments_reconciliations",
            "Reconciliations by outcome (completed, failed, unknown, fenced_out) and source "
            "(worker, inline)",
            ["outcome", "source"],
            registry=r,
        )
        self.provider_calls = Counter(
            "payments_provider_calls",
            "Provider calls by operation (charge, lookup, refund, refund_lookup), outcome "
            "and provider",
            ["operation", "outcome", "provider"],
            registry=r,
        )
        self.provider_latency = Histogram(
            "payments_provider_call_duration_seconds",
            "Provider call latency, by operation and provider",
            ["operation", "provider"],
            registry=r,
        )
        self.payment_attempts = Counter(
            "payments_payment_attempts",
            "Payment attempts begun, by the provider they go to (a payment's first attempt, "
            "and one more per failover)",
            ["provider"],
            registry=r,
        )
        self.failovers = Counter(
            "payments_provider_failovers",
            "Payments moved to their next provider, by the provider they left, the one they "
            "went to, and why (declined: a decline retryable elsewhere; not_processed: the "
            "attempt's only send was refused or never left; circuit_open: its breaker held "
            "it back)",
            ["from_provider", "to_provider", "cause"],
            registry=r,
        )
        self.provider_events = Counter(
            "payments_provider_events_received",
            "Providers' notifications by provider and outcome: stored, duplicate (kept "
            "already), or why one was refused (signature_invalid, stale, invalid, too_large)",
            ["provider", "outcome"],
            registry=r,
        )
        self.request_latency = Histogram(
            "payments_http_request_duration_seconds",
            "API request latency by route and status",
            ["method", "route", "status"],
            registry=r,
        )
        self.keys_expired = Counter(
            "payments_keys_expired", "Stored responses dropped past the key TTL", registry=r
        )
        self.keys_released = Counter(
            "payments_keys_released", "Tombstones dropped: keys free again", registry=r
        )
        self.oldest_in_flight = Gauge(
            "payments_oldest_in_flight_operation_age_seconds",
            "Age of the oldest RECEIVED or PROVIDER_REQUEST_SENT operation",
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.unknown = Gauge(
            "payments_operations_unknown",
            "Operations in UNKNOWN_REQUIRES_RECOVERY",
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.breaker_state = Gauge(
            "payments_provider_breaker_state",
            "This process's circuit breaker of each provider: 0 closed, 1 half-open, 2 open",
            ["provider"],
            registry=r,
            multiprocess_mode="all",
        )
        self.needs_attention = Gauge(
            "payments_operations_needs_attention",
            "Operations past the attempts limit, waiting for a person",
            registry=r,
            multiprocess_mode="mostrecent",
        )

        self.webhook_deliveries = Counter(
            "payments_webhook_deliveries",
            "Webhook attempts by what came of the delivery: succeeded, retry, failed (gave "
            "up), fenced_out (a newer owner held it)",
            ["outcome"],
            registry=r,
        )
        self.webhook_events_pending = Gauge(
            "payments_webhook_events_pending",
            "Events with a webhook delivery not yet succeeded, failed or cancelled",
            registry=r,
        )
        self.webhook_oldest_pending = Gauge(
            "payments_webhook_oldest_undelivered_age_seconds",
            "How long the oldest pending webhook delivery has waited",
            registry=r,
        )
        self.discrepancies_open = Gauge(
            "payments_discrepancies_open",
            "Differences between our books and the provider's, open in the discrepancy "
            "queue, by kind",
            ["kind"],
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.provider_events_pending = Gauge(
            "payments_provider_events_pending",
            "Providers' notifications in the inbox not yet applied, by state: received "
            "(not yet looked at) and parked (to be tried again)",
            ["state"],
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.provider_events_contradicted = Gauge(
            "payments_provider_events_contradicted",
            "Providers' notifications kept in the inbox that contradicted the final outcome "
            "of their operation (each queued a discrepancy; counted until the inbox's "
            "retention deletes them)",
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.broker_events_published = Counter(
            "payments_broker_events_published",
            "Events the broker confirmed on the events exchange (published again after a "
            "failure: counted again)",
            registry=r,
        )
        self.broker_publish_failures = Counter(
            "payments_broker_event_publish_failures",
            "Attempts at a tenant's batch of events that left some unpublished, by why: "
            "connect (no connection, channel or exchange), nack (the broker refused one), "
            "unconfirmed (the connection was lost or no confirm came in time)",
            ["failure"],
            registry=r,
        )
        self.broker_events_unpublished = Gauge(
            "payments_broker_events_unpublished",
            "Events not yet confirmed by the broker, by exchange (counted up to 100,000)",
            ["exchange"],
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.broker_oldest_unpublished = Gauge(
            "payments_broker_oldest_unpublished_age_seconds",
            "How long the oldest event not yet confirmed by the broker has waited, by exchange",
            ["exchange"],
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.discrepancies_oldest_open = Gauge(
            "payments_discrepancies_oldest_open_seconds",
            "How long the oldest open discrepancy has been open (0: none is)",
            registry=r,
            multiprocess_mode="mostrecent",
        )

        # The time partitions' calendar and retention (`app/partitions/job.py`), set by the
        # worker's `partitions` job.
        self.partition_days_ahead = Gauge(
            "payments_partition_days_ahead",
            "Days from today (UTC) on, today included, whose rows have a partition, by "
            "table: 0 means today's rows are refused",
            ["table"],
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.partitions_dropped = Counter(
            "payments_partitions_dropped",
            "Partitions past their table's retention detached and dropped, by table",
            ["table"],
            registry=r,
        )
        self.partitions_held = Gauge(
            "payments_partitions_held",
            "Partitions past their table's retention kept by the last pass (an operation "
            "not final, settlement not closed, a key held, an event still to deliver or "
            "publish, restored), by table",
            ["table"],
            registry=r,
            multiprocess_mode="mostrecent",
        )

    def provider_observer(self, provider: str) -> Callable[[str, str, float], None]:
        """The observer hook of one provider's client: (operation, outcome, seconds)."""

        def observe(operation: str, outcome: str, seconds: float) -> None:
            self.provider_calls.labels(operation, outcome, provider).inc()
            self.provider_latency.labels(operation, provider).observe(seconds)

        return observe

    def attempt_begun(self, provider: str) -> None:
        """A payment's attempt is about to be sent to `provider` for the first time."""
        self.payment_attempts.labels(provider).inc()

    def failed_over(self, from_provider: str, to_provider: str, cause: str) -> None:
        """A payment moved from one provider to the next, and why (the failover's cause)."""
        self.failovers.labels(from_provider, to_provider, cause).inc()
        self.attempt_begun(to_provider)

    def provider_event(self, provider: str, outcome: str) -> None:
        """Count a notification from a configured `provider` by what came of it."""
        self.provider_events.labels(provider, outcome).inc()

    def reconciled(self, became: str, *, source: str) -> None:
        """Count a reconciliation by what the operation became (`reconciled_as`)."""
        self.reconciliations.labels(became, source).inc()

    def record_backlog(self, backlog: Backlog) -> None:
        """Set the backlog gauges to what was read from the database."""
        self.oldest_in_flight.set(backlog.oldest_in_flight_s)
        self.unknown.set(backlog.unknown)
        self.needs_attention.set(backlog.needs_attention)
        self.webhook_events_pending.set(backlog.webhook_events_pending)
        self.webhook_oldest_pending.set(backlog.webhook_oldest_pending_s)
        for kind, count in backlog.discrepancies_open.items():
            self.discrepancies_open.labels(kind).set(count)
        self.discrepancies_oldest_open.set(backlog.discrepancies_oldest_open_s)
        for state, count in backlog.provider_events_pending.items():
            self.provider_events_pending.labels(state).set(count)
        self.provider_events_contradicted.set(backlog.provider_events_contradicted)
        for exchange, count in backlog.broker_events_unpublished.items():
            self.broker_events_unpublished.labels(exchange).set(count)
        for exchange, age in backlog.broker_oldest_unpublished_s.items():
            self.broker_oldest_unpublished.labels(exchange).set(age)

    async def refresh_backlog_if_stale(self, read: Callable[[], Awaitable[Backlog]]) -> bool:
        """Read the backlog gauges again if the last reading is `backlog_refresh_s` old.

        What `/metrics` calls: scrapes (several Prometheus servers, a person's curl) reuse
        one reading for that long, and scrapes arriving together wait for one reading
        instead of each making its own. A reading that fails is tried again by the next
        scrape. Whether the database was read.
        """
        if self._backlog_fresh():
            return False
        async with self._backlog_lock:
            if self._backlog_fresh():
                return False
            self.record_backlog(await read())
            self._backlog_read_at = time.monotonic()
        return True

    def _backlog_fresh(self) -> bool:
        read_at = self._backlog_read_at
        return read_at is not None and time.monotonic() - read_at < self.backlog_refresh_s

    def render(self) -> bytes:
        """The text exposition format: every process's values when they share a folder."""
        folder = os.environ.get(MULTIPROC_DIR_VARIABLE)
        if not folder:
            return generate_latest(self.registry)
        combined = CollectorRegistry()
        MultiProcessCollector(combined, path=folder)  # type: ignore[no-untyped-call]
        return generate_latest(combined)
