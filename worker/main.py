"""The worker process: APScheduler jobs, signal handling, `--once`.

Three jobs run on an interval: `reconcile` (every PAYMENTS_RECONCILE_INTERVAL_S), `webhooks`
(every PAYMENTS_WEBHOOK_INTERVAL_S) and `expire` (every PAYMENTS_EXPIRE_INTERVAL_S). SIGTERM
or SIGINT sets the stop event: no new batch is claimed, the reconciliations and webhook
attempts under way finish (each bounded by its timeout), and the process exits.
With `--once` it drains what is due (reconciliations, then webhooks), runs the expire job
once, and exits.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import uvloop
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from prometheus_client import start_http_server

from app import heap
from app.composition import runtime
from app.errors import is_transient_database_error
from app.failpoints import Failpoints
from app.observability.logging import configure_logging
from app.observability.metrics import Metrics
from app.settings import Settings
from app.webhooks.sender import WebhookSender, build_webhook_client
from worker.expiry import ExpireJob
from worker.reconciler import ReconcileWorker, worker_name
from worker.webhooks import WebhookDispatcher

logger = logging.getLogger("payments.worker")


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


async def _serve(
    settings: Settings, metrics: Metrics, webhook_http: httpx.AsyncClient, *, once: bool
) -> int:
    async with runtime(settings, metrics=metrics, application_name="payments-worker") as parts:
        worker = ReconcileWorker(
            settings=settings,
            db=parts.db,
            reconcilers=parts.reconcilers,
            name=worker_name(),
            metrics=metrics,
        )
        expire = ExpireJob(
            settings=settings, db=parts.db, metrics=metrics, stopping=worker.stopping
        )
        webhooks = WebhookDispatcher(
            settings=settings,
            db=parts.db,
            sender=WebhookSender(
                webhook_http,
                timeout_s=settings.webhook_timeout_s,
                allow_local=settings.webhooks_allow_local,
                failpoints=Failpoints.parse(settings.failpoints),
            ),
            name=worker.name,
            metrics=metrics,
            stopping=worker.stopping,
        )
        heap.settle()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stopping.set)
        if once:
            total = await worker.drain()
            attempts = await webhooks.drain()
            await expire.run()
            logger.info(
                "drained", extra={"fields": {"operations": total, "webhook_attempts": attempts}}
            )
            return 0
        now = datetime.now(UTC)
        scheduler = AsyncIOScheduler()
        for job, interval, name in (
            (worker.drain, settings.reconcile_interval_s, "reconcile"),
            (webhooks.pump, settings.webhook_interval_s, "webhooks"),
            (expire.run, settings.expire_interval_s, "expire"),
        ):
            scheduler.add_job(
                _through_outages(job, name),
                "interval",
                seconds=interval,
                id=name,
                max_instances=1,
                coalesce=True,
                next_run_time=now,
            )
        scheduler.start()
        logger.info("worker started", extra={"fields": {"worker": worker.name}})
        await worker.stopping.wait()
        # Order matters: shutting the scheduler down cancels running jobs, so first stop new
        # runs, then let the pass under way finish its reconciliations (it claims nothing
        # new once `stopping` is set), and only then shut down.
        scheduler.pause()
        await worker.wait_idle()
        await webhooks.wait_idle()
        scheduler.shutdown(wait=False)
        logger.info("worker stopped", extra={"fields": {"worker": worker.name}})
        return 0


def run_worker(settings: Settings, *, once: bool) -> int:
    """Run the worker until SIGTERM (or, with `once`, until nothing is due)."""
    if settings.database_url is None:
        raise SystemExit("payments: DATABASE_URL is not set (use `payments dev` to embed one)")
    configure_logging()
    # uvloop, as the API: the worker's CPU goes to the same kind of I/O work.
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_run(settings, once=once))
