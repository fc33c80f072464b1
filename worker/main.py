"""The worker process: APScheduler jobs, signal handling, `--once`.

SIGTERM or SIGINT sets the stop event: no new batch is claimed, reconciliations under way
finish (each is bounded by the provider timeout, which the lease outlives), operations
claimed but not started are released, and the process exits.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from datetime import UTC, datetime

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from app.db.engine import build_engine, build_sessionmaker
from app.payments.charging import ChargeDriver
from app.provider.client import ProviderClient, build_http_client
from app.recovery.reconcile import Reconciler
from app.settings import Settings
from worker.reconciler import ReconcileWorker, worker_name

logger = logging.getLogger("payments.worker")


async def _run(settings: Settings, *, once: bool) -> int:
    engine = build_engine(settings, application_name="payments-worker")
    http = build_http_client(settings.provider_url, settings.provider_timeout_s)
    try:
        sessions = build_sessionmaker(engine)
        provider = ProviderClient(http, deadline_s=settings.provider_timeout_s)
        driver = ChargeDriver(sessions=sessions, provider=provider, settings=settings)
        worker = ReconcileWorker(
            settings=settings,
            sessions=sessions,
            reconciler=Reconciler(sessions=sessions, provider=provider, driver=driver),
            name=worker_name(),
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stopping.set)
        if once:
            total = await worker.drain()
            logger.info("drained %d operations", total)
            return 0
        scheduler = AsyncIOScheduler()
        scheduler.add_job(
            worker.drain,
            "interval",
            seconds=settings.reconcile_interval_s,
            id="reconcile",
            max_instances=1,
            coalesce=True,
            next_run_time=datetime.now(UTC),
        )
        scheduler.start()
        logger.info("worker %s started", worker.name)
        await worker.stopping.wait()
        scheduler.shutdown(wait=False)
        # Let a pass under way finish its in-flight reconciliations and release the rest.
        await worker.wait_idle()
        logger.info("worker %s stopped", worker.name)
        return 0
    finally:
        await http.aclose()
        await engine.dispose()


def run_worker(settings: Settings, *, once: bool) -> int:
    """Run the worker until SIGTERM (or, with `once`, until nothing is due)."""
    if settings.database_url is None:
        raise SystemExit("payments: DATABASE_URL is not set (use `payments dev` to embed one)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    return asyncio.run(_run(settings, once=once))
