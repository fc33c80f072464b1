"""The days settled: a run's lease on its day, its summary, and which days are due.

`settlement_days` has a row per creation day ever run. A run takes its day with one
statement (`claim_day`: free, or its lease run out), gives it back when it ends, and keeps
its summary; the worker asks `days_due` which days to run.
"""

from __future__ import annotations

import json
from datetime import date, timedelta
from typing import Any

from app.db.database import Connection

_CLAIM_DAY = """
    INSERT INTO settlement_days AS d (day, owner, lease_expires_at, runs, last_started_at)
    VALUES (%(day)s, %(owner)s, now() + make_interval(secs => %(lease_s)s), 1, now())
    ON CONFLICT (day) DO UPDATE
    SET owner = EXCLUDED.owner, lease_expires_at = EXCLUDED.lease_expires_at,
        runs = d.runs + 1, last_started_at = now()
    WHERE d.owner IS NULL OR d.lease_expires_at < now()
    RETURNING d.runs
"""
_OWNER = "SELECT owner FROM settlement_days WHERE day = %(day)s"
_FINISH_DAY = """
    UPDATE settlement_days
    SET owner = NULL, lease_expires_at = NULL, last_finished_at = now(), summary = %(summary)s
    WHERE day = %(day)s AND owner = %(owner)s
"""
_RELEASE_DAY = """
    UPDATE settlement_days SET owner = NULL, lease_expires_at = NULL
    WHERE day = %(day)s AND owner = %(owner)s
"""


async def claim_day(conn: Connection, day: date, owner: str, lease_s: float) -> str | None:
    """Take `day` for a run; None when taken, else the owner holding it."""
    params = {"day": day, "owner": owner, "lease_s": lease_s}
    if await (await conn.execute(_CLAIM_DAY, params)).fetchone() is not None:
        return None
    row = await (await conn.execute(_OWNER, {"day": day})).fetchone()
    return str(row[0]) if row and row[0] else "another run"


async def finish_day(conn: Connection, day: date, owner: str, summary: dict[str, Any]) -> None:
    """The run of `day` is done: its summary kept, the day free again."""
    await conn.execute(_FINISH_DAY, {"day": day, "owner": owner, "summary": json.dumps(summary)})


async def release_day(conn: Connection, day: date, owner: str) -> None:
    """The run of `day` stopped early: the day is free again, its last summary kept."""
    await conn.execute(_RELEASE_DAY, {"day": day, "owner": owner})


# Days with items still expected whose settlement day has come and that have not been run
# since it began (a line still absent then stays expected until an operator looks).
_EXPECTED_DAYS = """
    SELECT DISTINCT i.day FROM reconciliation_items i
    LEFT JOIN settlement_days d ON d.day = i.day
    WHERE i.kind = 'expected' AND i.state = 'open'
      AND i.day + %(lag_days)s <= %(today)s
      AND (d.last_finished_at IS NULL
           OR d.last_finished_at < (i.day + %(lag_days)s)::timestamp AT TIME ZONE 'UTC')
"""
_FINISHED = "SELECT 1 FROM settlement_days WHERE day = %(day)s AND last_finished_at IS NOT NULL"


async def days_due(conn: Connection, today: date, lag_days: int) -> list[date]:
    """Yesterday unless a run of it has finished, and every day whose expected items have
    reached their settlement day since its last run."""
    params = {"today": today, "lag_days": lag_days}
    due = {row[0] for row in await (await conn.execute(_EXPECTED_DAYS, params)).fetchall()}
    yesterday = today - timedelta(days=1)
    if await (await conn.execute(_FINISHED, {"day": yesterday})).fetchone() is None:
        due.add(yesterday)
    return sorted(due)
