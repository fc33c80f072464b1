"""The worker process: wiring, signal handling, `--once`, and the ticks.

Three jobs run through the one loop (`app/jobs/loop.py`): `reconcile` (`app/recovery/job.py`,
every PAYMENTS_RECONCILE_INTERVAL_S), `webhooks` (`app/webhooks/dispatch.py`, every
PAYMENTS_WEBHOOK_INTERVAL_S) and `expire` (`app/idempotency/expiry.py`, every
PAYMENTS_EXPIRE_INTERVAL_S; it also deletes the providers' events past their retention,
`app/provider_events/retention.py`). APScheduler ticks them: each tick starts a pass unless
the last one is still under way (one instance of a job at a time, missed ticks coalesced into
one).
SIGTERM or SIGINT sets the stop event: no new batch is claimed, the reconciliations and
webhook attempts under way finish (each bounded by its timeout), and the process exits.
With `--once` it drains what is due (reconciliations, then webhooks), runs the expire job
once, and exits.

The `partitions` job (`app/partitions/job.py`, every PAYMENTS_PARTITION_INTERVAL_S) keeps
each partitioned table's day partitions made ahead and retires those past their retention.
Its first pass starts with the worker, beside the other jobs' first; `--once` runs it first.

With PAYMENTS_BROKER_URL set, one more job through the same loop, `publish_events`
(`app/broker/events.py`, every PAYMENTS_BROKER_EVENTS_INTERVAL_S), publishes the tenants'
new events to the broker's exchange and waits for its confirms; `--once` drains it too.
Without the setting it is not made, and the worker never connects to a broker.

A fourth job through the same loop, `settle` (`app/settlement/job.py`, every
PAYMENTS_SETTLE_INTERVAL_S, hourly; 0 turns it off), claims and runs the settlement of whole
days that are due, one at a time: yesterday once, and days still expecting settlement lines,
against every configured provider's books. It is not part of `--once`. At the stop a
settlement run under way is cancelled, and gives its day back, rather than holding it until
its lease runs out.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import httpx
import uvloop
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from prometheus_client import start_http_server

from app import gc_tuning
from app.backlog import refresh_backlog
from app.composition import runtime
from app.db.database import Database
from app.errors import is_transient_database_error
from app.failpoints import Failpoints
from app.idempotency.expiry import expire_keys
from app.jobs.loop import WorkLoop
from app.observability.logging import configure_logging
from app.observability.metrics import Metrics
from app.partitions.job import PartitionJob, PartitionMetrics
from app.provider_events.apply import APPLY_PACE, EventApplication
from app.provider_events.retention import prune_inbox
from app.recovery.job import RecoveryJob, recovery_pace
from app.settings import Settings
from app.settlement.books import every_providers_books
from app.settlement.job import PACE as SETTLE_PACE
from app.settlement.job import SettleJob
from app.settlement.notified import NotifiedRecords
from app.tracing.setup import configure as configure_tracing
from app.webhooks.dispatch import DeliveryJob, delivery_pace
from app.webhooks.sender import WebhookSender, build_webhook_client

if TYPE_CHECKING:
    from app.broker.events import PublishJob

logger = logging.getLogger("payments.worker")


def worker_name() -> str:
    """This process's name in leases and history."""
    return f"worker:{socket.gethostname()}:{os.getpid()}"


def _through_outages(job: Callable[[], Awaitable[Any]], name: str) -> Callable[[], Awaitable[None]]:
    """`job`, with a database outage (no primary reachable) logged as a skipped pass.

    The next pass runs on schedule and finds the new primary through the pool: the worker
    resumes on its own, without a restart and without a traceback every interval.
    """

    async def run() -> None:
        try:
            await job()
        except Exception as exc:
            if not is_transient_database_error(exc):
                raise
            logger.warning(
                "database unavailable; pass skipped",
                extra={"fields": {"job": name, "error": type(exc).__name__}},
            )

    return run


async def _run(settings: Settings, *, once: bool) -> int:
    metrics = Metrics()
    if settings.worker_metrics_port:
        start_http_server(settings.worker_metrics_port, addr="127.0.0.1", registry=metrics.registry)
    webhook_http = build_webhook_client(
        timeout_s=settings.webhook_timeout_s,
        concurrency=settings.webhook_concurrency,
        ca_file=settings.webhook_ca_file,
    )
    try:
        return await _serve(settings, metrics, webhook_http, once=once)
    finally:
        await webhook_http.aclose()


def _publishing(
    settings: Settings, *, db: Database, worker: str, metrics: Metrics
) -> AbstractAsyncContextManager[PublishJob | None]:
    """The broker's publishing job, imported only with PAYMENTS_BROKER_URL set: without it
    the worker never loads the broker's client (`tests/broker/test_startup.py`)."""
    if settings.broker_url is None:
        return nullcontext(None)
    from app.broker.events import publishing

    return publishing(settings, db=db, worker=worker, metrics=metrics)


async def _serve(
    settings: Settings,
    metrics: Metrics,
    webhook_http: httpx.AsyncClient,
    *,
    once: bool,
) -> int:
    name = worker_name()
    stopping = asyncio.Event()
    async with (
        runtime(settings, metrics=metrics, application_name="payments-worker") as parts,
        _publishing(settings, db=parts.db, worker=name, metrics=metrics) as publisher,
    ):
        recovery = RecoveryJob(
            settings=settings,
            db=parts.db,
            reconcilers=parts.reconcilers,
            worker=name,
            metrics=metrics,
        )
        reconcile = WorkLoop(
            recovery,
            recovery_pace(settings),
            stopping=stopping,
            after_pass=functools.partial(refresh_backlog, parts.db, metrics),
        )
        failpoints = Failpoints.parse(settings.failpoints)
        sender = WebhookSender(
            webhook_http,
            timeout_s=settings.webhook_timeout_s,
            allow_local=settings.webhooks_allow_local,
            failpoints=failpoints,
        )
        # Provider events kept by the API's inbox, each applied by reconciling its operation
        # now (`app/provider_events/apply.py`).
        provider_events = WorkLoop(
            EventApplication(
                db=parts.db,
                reconcilers=parts.reconcilers,
                # A contradiction of a final outcome is settlement's discrepancy.
                contradictions=NotifiedRecords(),
                lease_s=settings.lease_s,
                key_ttl_s=settings.key_ttl_s,
                worker=name,
            ),
            APPLY_PACE,
            stopping=stopping,
        )
        webhooks = WorkLoop(
            DeliveryJob(
                settings=settings, db=parts.db, sender=sender, worker=name, metrics=metrics
            ),
            delivery_pace(settings),
            stopping=stopping,
        )

        # The events to the broker's exchange too, only with PAYMENTS_BROKER_URL
        # (`app/broker/events.py`): without it nothing of it starts.
        publish = (
            WorkLoop(publisher, publisher.pace, stopping=stopping)
            if publisher is not None
            else None
        )

        async def expire() -> tuple[int, int]:
            # The kinds' own batch jobs first (lapsed holds expire), each batch after batch
            # until one comes back short.
            for upkeep in parts.upkeeps:
                while not stopping.is_set():
                    if await upkeep.run(settings.expire_batch_size) < settings.expire_batch_size:
                        break
            keys = await expire_keys(
                parts.db,
                key_ttl_s=settings.key_ttl_s,
                tombstone_ttl_s=settings.tombstone_ttl_s,
                batch=settings.expire_batch_size,
                expired=metrics.keys_expired,
                released=metrics.keys_released,
                stopping=stopping,
            )
            # The providers' events done with, past their retention (parked ones stay).
            await prune_inbox(
                parts.db,
                retention_days=settings.provider_events_retention_days,
                batch=settings.expire_batch_size,
                stopping=stopping,
            )
            return keys

        # Settlement reads every provider's books through the same clients as every other
        # call to it (`app/provider/client.py`): one pool, key and deadline per provider.
        books = every_providers_books(parts.providers, page_size=settings.settlement_page_size)
        settle = WorkLoop(
            SettleJob(
                parts.db,
                books,
                lag_days=settings.settlement_lag_days,
                actor=name,
                stopping=stopping,
                failpoints=failpoints,
            ),
            SETTLE_PACE,
            stopping=stopping,
        )

        # The time partitions' calendar and retention (`app/partitions/job.py`): at the
        # start, beside the other jobs (a worker started after days down makes today's
        # partition at once, without holding the others back), then every
        # PAYMENTS_PARTITION_INTERVAL_S; with `--once`, first.
        partitions = PartitionJob.from_settings(
            parts.db,
            settings,
            PartitionMetrics(
                days_ahead=metrics.partition_days_ahead,
                dropped=metrics.partitions_dropped,
                held=metrics.partitions_held,
            ),
        )

        async def partitions_pass() -> None:
            logger.info("partitions pass started")
            try:
                await failpoints.reach("partitions_pass")
                await partitions.run()
            except asyncio.CancelledError:
                # Stopped mid-pass (the scheduler's shutdown cancels it): every step is its
                # own short transaction, and the next pass finishes a detach or archive left
                # half done, so the stop is logged, not raised as a failed job.
                logger.info("partitions pass interrupted by the stop")
            except Exception as exc:
                if is_transient_database_error(exc):
                    raise
                # The next pass tries again; the days-ahead gauge shows a calendar behind.
                logger.exception("partitions pass failed")

        gc_tuning.freeze_startup()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        if once:
            await _through_outages(partitions_pass, "partitions")()
            await provider_events.run()
            total = await reconcile.run()
            attempts = await webhooks.run()
            if publish is not None:
                await publish.run()
            await expire()
            logger.info(
                "drained", extra={"fields": {"operations": total, "webhook_attempts": attempts}}
            )
            return 0
        now = datetime.now(UTC)
        scheduler = AsyncIOScheduler()
        jobs: tuple[tuple[Callable[[], Awaitable[Any]], float, str], ...] = (
            (reconcile.run, settings.reconcile_interval_s, "reconcile"),
            (provider_events.run, settings.provider_events_interval_s, "provider_events"),
            (webhooks.run, settings.webhook_interval_s, "webhooks"),
            (expire, settings.expire_interval_s, "expire"),
            (partitions_pass, settings.partition_interval_s, "partitions"),
        )
        if settings.settle_interval_s > 0:
            jobs += ((settle.run, settings.settle_interval_s, "settle"),)
        if publish is not None:
            jobs += ((publish.run, settings.broker_events_interval_s, "publish_events"),)
        for job, interval, job_name in jobs:
            scheduler.add_job(
                _through_outages(job, job_name),
                "interval",
                seconds=interval,
                id=job_name,
                max_instances=1,
                coalesce=True,
                next_run_time=now,
            )
        scheduler.start()
        logger.info("worker started", extra={"fields": {"worker": name}})
        await stopping.wait()
        # Order matters: shutting the scheduler down cancels running jobs, so first stop new
        # ticks, then let the passes under way finish their items (they claim nothing new
        # once `stopping` is set; the settlement run under way is cancelled by it and gives
        # its day back while the database is open), and only then shut down.
        scheduler.pause()
        await settle.wait_idle()
        await reconcile.wait_idle()
        await provider_events.wait_idle()
        await webhooks.wait_idle()
        if publish is not None:
            await publish.wait_idle()
        scheduler.shutdown(wait=False)
        logger.info("worker stopped", extra={"fields": {"worker": name}})
        return 0


def run_worker(settings: Settings, *, once: bool) -> int:
    """Run the worker until SIGTERM (or, with `once`, until nothing is due)."""
    if settings.database_url is None:
        raise SystemExit("payments: DATABASE_URL is not set (use `payments dev` to embed one)")
    configure_logging()
    configure_tracing("payments-worker")
    # uvloop, as the API: the worker's CPU goes to the same kind of I/O work.
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_run(settings, once=once))
