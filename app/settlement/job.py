"""The worker's daily settlement run: yesterday, once, and every day still expecting lines.

A job of the worker's one loop (`app/jobs/loop.py`), as recovery and webhook deliveries
are: every `PAYMENTS_SETTLE_INTERVAL_S` (an hour; 0 turns it off) a pass claims what is due
and runs it. What is due (`days.days_due`): yesterday (UTC) until a run of it has finished,
and each day whose expected items have reached their settlement day since its last run. A
claim takes one such day with its lease and fence (`days.claim_day`, the rule every claim
shares), and the day is run as `payments settle` would run it, against every configured
provider's books. Several workers may tick at once: each day is run by whichever claims it.
Days run one at a time (`PACE`): a run already makes its lookups 16 at a time. A provider
that cannot answer, or reports another lag than configured, is logged, and the day is not
claimed again in the same pass: the next tick tries again. A run whose day was taken over
meanwhile (its lease ran out) is refused by the fence and logged.

A worker told to stop (`stopping` set, while its database is still open) claims no other
day and cancels the run under way: the day is given back (`run_claimed` frees it on the way
out). The next run, of this worker or another, takes the day at once rather than a lease
(15 minutes) later. What the run wrote stays; running the day again redoes it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import date

from app.clock import utcnow
from app.db.database import Database
from app.failpoints import Failpoints
from app.jobs.loop import Pace
from app.settlement import days
from app.settlement.books import BooksUnavailable, ProviderBooks
from app.settlement.days import DayLease
from app.settlement.run import DAY_LEASE_S, run_claimed
from app.settlement.summary import DayLost, LagDiffers, Summary

logger = logging.getLogger("payments.worker")

# One day at a time, claimed when the last one has ended.
PACE = Pace(window=1, batch=1, refill_at=1)


class SettleJob:
    """The worker's settle job (`app/jobs/loop.py`'s `Job`): claims due days, runs each."""

    name = "settle"

    def __init__(
        self,
        db: Database,
        books: Sequence[ProviderBooks],
        *,
        lag_days: int,
        actor: str,
        stopping: asyncio.Event,
        failpoints: Failpoints | None = None,
        lease_s: float = DAY_LEASE_S,
    ):
        self._db = db
        self._books = books
        self._lag_days = lag_days
        self._actor = actor
        self._stopping = stopping
        self._failpoints = failpoints
        self._lease_s = lease_s
        # The days this pass has claimed or tried to: a run that stopped (a provider down)
        # leaves its day due, and the pass must not take it again at once. Cleared by the
        # claim that finds nothing more, which ends the pass; nothing else depends on it.
        self._tried: set[date] = set()

    async def claim(self, limit: int) -> list[DayLease]:
        """Up to `limit` due days not tried in this pass, each leased to this worker."""
        claimed: list[DayLease] = []
        async with self._db.connection() as conn:
            due = await days.days_due(conn, utcnow().date(), self._lag_days, skip=self._tried)
            for day in due:
                if len(claimed) >= limit:
                    break
                self._tried.add(day)
                lease = await days.claim_day(conn, day, self._actor, self._lease_s)
                if isinstance(lease, DayLease):
                    claimed.append(lease)
        if not claimed:
            self._tried.clear()  # the pass ends: the next one may try every due day again
        return claimed

    async def handle(self, lease: DayLease) -> None:
        """Run the day `lease` holds, until it ends or the worker is told to stop."""
        run = asyncio.ensure_future(
            run_claimed(
                self._db,
                self._books,
                lease,
                lag_days=self._lag_days,
                actor=self._actor,
                failpoints=self._failpoints,
            )
        )
        stop = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({run, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not run.done():
                # The stop (or this task's own cancellation): the run gives its day back
                # on the way out, while the database is still open.
                run.cancel()
                await asyncio.wait({run})
        if run.cancelled():
            logger.info(
                "settlement run interrupted by the stop; its day is free again",
                extra={"fields": {"day": lease.day.isoformat()}},
            )
            return
        try:
            summary = run.result()
        except (BooksUnavailable, LagDiffers, DayLost) as exc:
            logger.warning(
                "settlement run stopped",
                extra={"fields": {"day": lease.day.isoformat(), "error": str(exc)}},
            )
            return
        _finished(summary)


def _finished(summary: Summary) -> None:
    logger.info(
        "settlement run finished",
        extra={
            "fields": {
                "day": summary.day,
                "compared": summary.compared,
                "found": summary.found,
                "auto_resolved": summary.auto_resolved,
                # Held by a provider no longer configured: not compared (docs/settlement.md).
                "unconfigured": summary.unconfigured,
            }
        },
    )
