"""A settlement run: one creation day of our books against the provider's, every difference
queued, what settled recorded.

`settle_day(db, books, day, ...)`:

1. takes the day (`settlement_days`, a lease: one run of a day at a time, anywhere);
2. reads the provider's charges and refunds made that day, page by page, and ours;
3. pairs them on the derived provider key. A record of theirs whose row of ours was made on
   another day belongs to that day's run and is left to it; a record of theirs with no row
   at all is judged here. A row of ours the day's listing lacks is looked up by its key (made
   on another day by the provider's clock, or not at all);
4. reads the settlement report of each day the agreed records settle on (their creation day
   plus the lag; a day still to come has settled nothing);
5. judges each key (`matching.judge`), then, in one transaction per record type, queues the
   differences, auto-resolves the open items of the compared keys that no longer differ,
   stores the settled lines (fee and net of each payment and refund), and makes every unknown
   operation the provider has a record for due for the reconciler at once.

Running a day again finds the same items (unique by record type, key and kind): nothing is
added twice, a resolved or voided item stays so, an auto-resolved one whose difference came
back is opened again.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from typing import Any

from app.clock import utcnow
from app.db.database import Database
from app.settlement import days, repository
from app.settlement.books import BooksUnavailable, ProviderBooks, Report, TheirRecord
from app.settlement.matching import OurRecord, Verdict, is_our_key, judge
from app.settlement.models import RecordType
from app.settlement.repository import Finding

# Lookups by key under way at once, for the rows of ours the day's listing lacks.
LOOKUP_CONCURRENCY = 16
# How long a run holds its day; a run killed midway frees it when this runs out.
DAY_LEASE_S = 900.0


class DayTaken(Exception):
    """Another run holds the day."""


class LagDiffers(Exception):
    """The provider's reports state another settlement lag than we were told to expect."""


@dataclass
class Summary:
    """What one run read, found and changed; printed by `payments settle`, kept per day."""

    day: str
    their_charges: int = 0
    their_refunds: int = 0
    our_payments: int = 0
    our_refunds: int = 0
    looked_up: int = 0
    compared: int = 0
    agreed: int = 0
    lines_recorded: int = 0
    found: dict[str, int] = field(default_factory=dict)
    opened: int = 0
    reopened: int = 0
    kept_closed: int = 0
    auto_resolved: int = 0
    recovering: int = 0
    other_days: int = 0
    foreign: int = 0
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        """The summary as stored and printed with `--json`."""
        return asdict(self)


@dataclass
class _Side:
    """One record type's pairs, as the run builds them."""

    record_type: RecordType
    theirs: dict[str, TheirRecord]
    ours: dict[str, OurRecord]


async def _lookup_missing(
    books: ProviderBooks, side: _Side, keys: Sequence[str]
) -> dict[str, TheirRecord]:
    gate = asyncio.Semaphore(LOOKUP_CONCURRENCY)

    async def find(key: str) -> tuple[str, TheirRecord | None]:
        async with gate:
            return key, await books.find(side.record_type, key)

    found = await asyncio.gather(*(find(key) for key in keys))
    return {key: record for key, record in found if record is not None}


async def _read_side(
    db: Database, books: ProviderBooks, record_type: RecordType, day: date, summary: Summary
) -> _Side:
    theirs = {record.provider_key: record for record in await books.created_on(record_type, day)}
    async with db.connection() as conn:
        ours = {
            record.provider_key: record
            for record in await repository.ours_created_on(conn, record_type, day)
        }
        strangers = [key for key in theirs if key not in ours]
        elsewhere = await repository.ours_by_key(conn, record_type, strangers)
    for key in elsewhere:
        # Ours, made on another day: that day's run pairs it (its lookup finds this record).
        del theirs[key]
        summary.other_days += 1
    for key in [key for key in theirs if key not in ours]:
        if not is_our_key(record_type, key):
            del theirs[key]
            summary.foreign += 1
    unlisted = [key for key in ours if key not in theirs]
    summary.looked_up += len(unlisted)
    theirs.update(await _lookup_missing(books, _Side(record_type, theirs, ours), unlisted))
    return _Side(record_type, theirs, ours)


class _Reports:
    """The settlement reports a run reads, each once; none for a day still to come."""

    def __init__(self, books: ProviderBooks, lag_days: int, today: date) -> None:
        self._books = books
        self._lag = timedelta(days=lag_days)
        self._lag_days = lag_days
        self._today = today
        self._read: dict[date, Report] = {}

    def settles_on(self, record: TheirRecord) -> date:
        return record.created_at.date() + self._lag

    async def load(self, records: Sequence[TheirRecord]) -> None:
        wanted = {self.settles_on(record) for record in records} - set(self._read)
        for day in sorted(wanted):
            if day > self._today:
                continue
            report = await self._books.report(day)
            if report.lag_days != self._lag_days:
                raise LagDiffers(
                    f"the provider settles at T+{report.lag_days}; "
                    f"PAYMENTS_SETTLEMENT_LAG_DAYS is {self._lag_days}"
                )
            self._read[day] = report

    def line(self, record: TheirRecord) -> Any:
        report = self._read.get(self.settles_on(record))
        return None if report is None else report.lines.get(record.provider_id)


async def _settle_side(
    db: Database, side: _Side, reports: _Reports, day: date, actor: str, summary: Summary
) -> None:
    await reports.load(list(side.theirs.values()))
    findings: list[Finding] = []
    lines = []
    recover = []
    found: Counter[str] = Counter(summary.found)
    keys = sorted(set(side.ours) | set(side.theirs))
    for key in keys:
        ours, theirs = side.ours.get(key), side.theirs.get(key)
        line = reports.line(theirs) if theirs is not None else None
        verdict: Verdict = judge(side.record_type, ours, theirs, settled=line is not None)
        if line is not None:
            lines.append((line, ours))
        if verdict.recover and ours is not None:
            recover.append(ours.operation_id)
        summary.agreed += verdict.agreed
        for difference in verdict.differences:
            found[difference.kind.value] += 1
            findings.append(
                Finding(
                    day=day,
                    record_type=side.record_type,
                    provider_key=key,
                    kind=difference.kind,
                    detail=difference.detail,
                    ours=ours,
                    theirs=theirs.snapshot() if theirs is not None else None,
                )
            )
    # A key the reconciler is about to settle is not compared: its open items stay open
    # until a run finds our record final.
    recovering = {side.ours[key].operation_id for key in keys if key in side.ours} & set(recover)
    compared = [
        key for key in keys if key not in side.ours or side.ours[key].operation_id not in recovering
    ]
    async with db.transaction() as conn:
        written = await repository.write_items(
            conn, side.record_type, compared, findings, actor=actor
        )
        summary.lines_recorded += await repository.record_lines(conn, lines)
        await repository.recover_now(conn, recover)
    summary.compared += len(compared)
    summary.recovering += len(recover)
    summary.found = dict(sorted(found.items()))
    summary.opened += written.opened
    summary.reopened += written.reopened
    summary.kept_closed += written.kept_closed
    summary.auto_resolved += written.auto_resolved


async def settle_day(
    db: Database,
    books: ProviderBooks,
    day: date,
    *,
    lag_days: int,
    actor: str,
    today: date | None = None,
) -> Summary:
    """Reconcile the records made on `day` (UTC); raises `DayTaken` when another run holds
    it, `BooksUnavailable` or `LagDiffers` when the provider's books cannot be trusted to
    answer (nothing is concluded then: what was written stays, the day is freed)."""
    started = time.perf_counter()
    summary = Summary(day=day.isoformat())
    async with db.connection() as conn:
        holder = await days.claim_day(conn, day, actor, DAY_LEASE_S)
    if holder is not None:
        raise DayTaken(f"a run of {day} is under way ({holder})")
    finished = False
    try:
        reports = _Reports(books, lag_days, today or utcnow().date())
        for record_type in (RecordType.CHARGE, RecordType.REFUND):
            side = await _read_side(db, books, record_type, day, summary)
            if record_type is RecordType.CHARGE:
                summary.their_charges, summary.our_payments = len(side.theirs), len(side.ours)
            else:
                summary.their_refunds, summary.our_refunds = len(side.theirs), len(side.ours)
            await _settle_side(db, side, reports, day, actor, summary)
        summary.seconds = round(time.perf_counter() - started, 3)
        async with db.connection() as conn:
            await days.finish_day(conn, day, actor, summary.as_json())
        finished = True
        return summary
    finally:
        if not finished:
            async with db.connection() as conn:
                await days.release_day(conn, day, actor)


__all__ = ["BooksUnavailable", "DayTaken", "LagDiffers", "Summary", "settle_day"]
