"""The days settled: a run's lease and fence on its day, its summary, and which days are due.

`settlement_days` has a row per creation day ever run. A run takes its day as every claim
takes its row (`app/jobs/leases.py`): in one statement, only where nobody holds a live
lease, the run's name, a lease of `lease_s` seconds and a fence one higher than the last
owner's. Every write the run makes afterwards is fenced (`hold`, in the write's own
transaction): a run paused past its lease whose day another run has taken since writes
nothing, and is told so (`DayLost`). It gives its day back when it ends (`finish_day`,
`release_day`, fenced too) and keeps its summary; the worker asks `days_due` which days to
run.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from app.db.database import Connection
from app.jobs.leases import new_owner
from app.settlement.summary import DayLost

# A row for a day never run, then the claim: the same rule as every other row's.
_NEW_DAY = "INSERT INTO settlement_days (day) VALUES (%(day)s) ON CONFLICT (day) DO NOTHING"
_CLAIM_DAY = f"""
    UPDATE settlement_days
    SET {new_owner()}, runs = runs + 1, last_started_at = now()
    WHERE day = (SELECT day FROM settlement_days WHERE day = %(day)s FOR UPDATE SKIP LOCKED)
      AND (lease_expires_at IS NULL OR lease_expires_at < now())
    RETURNING fence
"""
_OWNER = "SELECT lease_owner FROM settlement_days WHERE day = %(day)s"
# The fence check of every write of a run, in that write's transaction: the day's row is
# locked until it commits, so a takeover (which must update the row) waits for the write
# and the write never lands after a takeover. It renews the lease: a run that keeps
# writing keeps its day.
_HOLD = """
    UPDATE settlement_days
    SET lease_expires_at = now() + make_interval(secs => %(lease_s)s), updated_at = now()
    WHERE day = %(day)s AND fence = %(fence)s
    RETURNING day
"""
_FINISH_DAY = """
    UPDATE settlement_days
    SET lease_owner = NULL, lease_expires_at = NULL, last_finished_at = now(),
        summary = %(summary)s, updated_at = now()
    WHERE day = %(day)s AND fence = %(fence)s
    RETURNING day
"""
_RELEASE_DAY = """
    UPDATE settlement_days SET lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
    WHERE day = %(day)s AND fence = %(fence)s
"""


@dataclass(frozen=True)
class DayLease:
    """A run's hold on its day: who took it, with which fence, for how long each time."""

    day: date
    owner: str
    fence: int
    lease_s: float


async def claim_day(conn: Connection, day: date, owner: str, lease_s: float) -> DayLease | str:
    """Take `day` for a run: its lease, or the owner holding it when it is taken."""
    params = {"day": day, "owner": owner, "lease_s": lease_s}
    await conn.execute(_NEW_DAY, params)
    row = await (await conn.execute(_CLAIM_DAY, params)).fetchone()
    if row is not None:
        return DayLease(day=day, owner=owner, fence=int(row[0]), lease_s=lease_s)
    held = await (await conn.execute(_OWNER, {"day": day})).fetchone()
    return str(held[0]) if held and held[0] else "another run"


def _fenced(lease: DayLease) -> dict[str, Any]:
    return {"day": lease.day, "fence": lease.fence, "lease_s": lease.lease_s}


async def hold(conn: Connection, lease: DayLease) -> None:
    """Check, in the transaction of a write the run is about to make, that the day is still
    the run's (its fence unchanged), and renew its lease; `DayLost` when another run took
    it over: the caller's transaction must then write nothing."""
    if await (await conn.execute(_HOLD, _fenced(lease))).fetchone() is None:
        raise DayLost(f"the run of {lease.day} lost its day to another run; nothing written")


async def finish_day(conn: Connection, lease: DayLease, summary: dict[str, Any]) -> None:
    """The run of the day is done: its summary kept, the day free again (`DayLost` when
    another run holds it now: its summary is not overwritten)."""
    params = {**_fenced(lease), "summary": json.dumps(summary)}
    if await (await conn.execute(_FINISH_DAY, params)).fetchone() is None:
        raise DayLost(f"the run of {lease.day} lost its day to another run; nothing written")


async def release_day(conn: Connection, lease: DayLease) -> None:
    """The run stopped early: the day is free again, its last summary kept (a day another run
    has taken since is left to it)."""
    await conn.execute(_RELEASE_DAY, _fenced(lease))


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


async def days_due(
    conn: Connection, today: date, lag_days: int, *, skip: Collection[date] = ()
) -> list[date]:
    """Yesterday unless a run of it has finished, and every day whose expected items have
    reached their settlement day since its last run; none of `skip`."""
    params = {"today": today, "lag_days": lag_days}
    due = {row[0] for row in await (await conn.execute(_EXPECTED_DAYS, params)).fetchall()}
    yesterday = today - timedelta(days=1)
    if await (await conn.execute(_FINISHED, {"day": yesterday})).fetchone() is None:
        due.add(yesterday)
    return sorted(due - set(skip))
