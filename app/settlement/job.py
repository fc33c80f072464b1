"""The worker's daily settlement run: yesterday, once, and every day still expecting lines.

Every `PAYMENTS_SETTLE_INTERVAL_S` (an hour; 0 turns it off) the worker asks which days are
due (`days.days_due`): yesterday (UTC) until a run of it has finished, and each day
whose expected items have reached their settlement day since its last run. Each is run as
`payments settle` would run it, against every configured provider's books. Several workers
may tick at once: a day is run by whichever takes its lease (`DayTaken` for the others, who
skip it). A provider that cannot answer, or reports another lag than configured, is logged;
the next tick tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import date

from app.clock import utcnow
from app.db.database import Database
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
) -> list[Summary]:
    """Run every day that is due; the summaries of the runs that finished."""
    today = today or utcnow().date()
    async with db.connection() as conn:
        due = await days.days_due(conn, today, lag_days)
    done: list[Summary] = []
    for day in due:
        try:
            summary = await settle_day(db, books, day, lag_days=lag_days, actor=actor, today=today)
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
