"""The worker's daily settlement run: yesterday, once, and every day still expecting lines.

Every `PAYMENTS_SETTLE_INTERVAL_S` (an hour; 0 turns it off) the worker asks which days are
due (`days.days_due`): yesterday (UTC) until a run of it has finished, and each day
whose expected items have reached their settlement day since its last run. Each is run as
`payments settle` would run it, against every configured provider's books. Several workers
may tick at once: a day is run by whichever takes its lease (`DayTaken` for the others, who
skip it). A provider that cannot answer, or reports another lag than configured, is logged;
the next tick tries again.

A worker told to stop (`SettleJob.interrupt`, while its database is still open) cancels the
tick under way: the day being run is given back (`settle_day` frees it on the way out) and
no other day is started. The next run, of this worker or another, takes the day at once
rather than a lease (15 minutes) later. What the run wrote stays; running the day again
redoes it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import date

from app.clock import utcnow
from app.db.database import Database
from app.failpoints import Failpoints
from app.settlement import days
from app.settlement.books import BooksUnavailable, ProviderBooks
from app.settlement.run import settle_day
from app.settlement.summary import DayTaken, LagDiffers, Summary

logger = logging.getLogger("payments.worker")


async def settle_due_days(
    db: Database,
    books: Sequence[ProviderBooks],
    *,
    lag_days: int,
    actor: str,
    today: date | None = None,
    failpoints: Failpoints | None = None,
) -> list[Summary]:
    """Run every day that is due; the summaries of the runs that finished."""
    today = today or utcnow().date()
    async with db.connection() as conn:
        due = await days.days_due(conn, today, lag_days)
    done: list[Summary] = []
    for day in due:
        try:
            summary = await settle_day(
                db, books, day, lag_days=lag_days, actor=actor, today=today, failpoints=failpoints
            )
        except DayTaken:
            continue
        except (BooksUnavailable, LagDiffers) as exc:
            logger.warning(
                "settlement run stopped",
                extra={"fields": {"day": day.isoformat(), "error": str(exc)}},
            )
            continue
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
        done.append(summary)
    return done


class SettleJob:
    """The worker's settle tick (`run`, every interval), and its end at the stop."""

    def __init__(
        self,
        db: Database,
        books: Sequence[ProviderBooks],
        *,
        lag_days: int,
        actor: str,
        failpoints: Failpoints | None = None,
    ):
        self._db = db
        self._books = books
        self._lag_days = lag_days
        self._actor = actor
        self._failpoints = failpoints
        self._running: asyncio.Task[object] | None = None
        self._interrupted = False

    async def run(self) -> None:
        """One tick: every day that is due, as `settle_due_days` runs them."""
        self._running = asyncio.current_task()
        try:
            await settle_due_days(
                self._db,
                self._books,
                lag_days=self._lag_days,
                actor=self._actor,
                failpoints=self._failpoints,
            )
        except asyncio.CancelledError:
            if not self._interrupted:
                raise  # not ours to swallow
            # Cancelled by `interrupt`: the day under way was given back on the way out.
            logger.info("settlement run interrupted by the stop; its day is free again")
        finally:
            self._running = None

    async def interrupt(self) -> None:
        """At the stop, before the database closes: cancel the run under way, if any, and
        wait until it has given its day back."""
        running = self._running
        if running is None or running.done():
            return
        self._interrupted = True
        running.cancel()
        await asyncio.wait({running})
