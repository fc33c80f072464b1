"""A settlement run: one creation day of our books against every configured provider's,
every difference queued, what settled recorded.

`settle_day(db, books, day, ...)`, `books` one `ProviderBooks` per configured provider:

1. takes the day (`settlement_days`, a lease and a fence: one run of a day at a time,
   anywhere; `days.py`), or is handed a day already taken (`run_claimed`, the worker's);
2. reads each provider's charges, refunds and captures made that day, page by page, and ours
   once;
3. pairs them, provider by provider: a record of ours is expected at the provider holding it
   (a payment: its route's provider at its attempt, under that attempt's key; a refund or a
   capture: its provider), under that key. A record of theirs under another key of ours
   (`parse_key`: an attempt a payment failed over from, or a key at a provider it was never
   sent to) is a stray, judged on its own (`strays.judge_stray`) on the day the provider
   made it. A record of theirs that is the expected one of a row of ours made on another day
   belongs to that day's run and is left to it; a record of theirs with no row at all is
   judged here. A row of ours its provider's listing lacks is looked up by its key there
   (made on another day by the provider's clock, or not at all). A row of ours held by a
   provider no longer configured cannot be compared: it is counted (`unconfigured`), never
   judged;
4. reads the settlement report of each day the agreed records settle on, at each provider
   (their creation day plus the lag; a day still to come has settled nothing);
5. judges each key (`matching.judge`), then, in one transaction per record type and
   provider, queues the differences, auto-resolves the open items of the compared keys that
   no longer differ, stores the settled lines (fee and net of each payment, capture and
   refund; an authorization settles nothing itself), and makes every unknown operation the
   provider has a record for due for the reconciler at once.
   Each such transaction first checks the day's fence (`days.hold`): a run whose day another
   run took over (its lease ran out while it was paused) writes nothing and stops (`DayLost`).

Running a day again finds the same items (unique by record type, provider, key and kind):
nothing is added twice, a resolved or dismissed item stays so, an auto-resolved one whose
difference came back is opened again. With one provider (`PAYMENTS_PROVIDERS` unset) every
record is `primary`'s under its stored key, and a run reads, looks up and writes what it
did before providers had names.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from datetime import date, timedelta
from typing import Any

from app.clock import utcnow
from app.db.database import Database
from app.failpoints import Failpoints
from app.settlement import days, repository
from app.settlement.books import BooksUnavailable, ProviderBooks, Report, TheirRecord
from app.settlement.days import DayLease
from app.settlement.matching import OurRecord, Verdict, judge
from app.settlement.repository import Finding
from app.settlement.rows import RecordType
from app.settlement.sides import Side, read_sides
from app.settlement.strays import judge_stray
from app.settlement.summary import DayLost, DayTaken, LagDiffers, Summary

# How long a run holds its day; a run killed midway frees it when this runs out.
DAY_LEASE_S = 900.0


class _Reports:
    """One provider's settlement reports a run reads, each once; none for a day still to
    come. `named`: errors name the provider (there are several)."""

    def __init__(self, books: ProviderBooks, lag_days: int, today: date, *, named: bool) -> None:
        self._books = books
        self._lag = timedelta(days=lag_days)
        self._lag_days = lag_days
        self._today = today
        self._named = named
        self._read: dict[date, Report] = {}

    def settles_on(self, record: TheirRecord) -> date:
        return record.created_at.date() + self._lag

    async def load(self, records: Sequence[TheirRecord]) -> None:
        wanted = {self.settles_on(record) for record in records} - set(self._read)
        for day in sorted(wanted):
            if day > self._today:
                continue
            try:
                report = await self._books.report(day)
            except BooksUnavailable as exc:
                if not self._named:
                    raise
                raise BooksUnavailable(f"provider {self._books.name}: {exc}") from exc
            if report.lag_days != self._lag_days:
                who = f"the provider {self._books.name}" if self._named else "the provider"
                raise LagDiffers(
                    f"{who} settles at T+{report.lag_days}; "
                    f"PAYMENTS_SETTLEMENT_LAG_DAYS is {self._lag_days}"
                )
            self._read[day] = report

    def line(self, record: TheirRecord) -> Any:
        report = self._read.get(self.settles_on(record))
        return None if report is None else report.lines.get(record.provider_id)


async def _settle_side(
    db: Database, side: Side, reports: _Reports, lease: DayLease, actor: str, summary: Summary
) -> None:
    day = lease.day
    await reports.load(list(side.theirs.values()))
    findings: list[Finding] = []
    lines = []
    recover = []
    found: Counter[str] = Counter(summary.found)
    keys = sorted(set(side.ours) | set(side.theirs))
    for key in keys:
        theirs = side.theirs.get(key)
        line = reports.line(theirs) if theirs is not None else None
        stray = side.strays.get(key)
        verdict: Verdict
        if stray is not None:
            assert theirs is not None, key
            ours: OurRecord | None = stray[0]
            verdict = judge_stray(side.record_type, stray[0], stray[1], theirs, side.provider)
        else:
            ours = side.ours.get(key)
            verdict = judge(side.record_type, ours, theirs, settled=line is not None)
        if line is not None:
            lines.append((line, ours))
        if verdict.recover and ours is not None:
            recover.append((ours.tenant_id, ours.operation_id))
        summary.agreed += verdict.agreed
        summary.failover_declines += verdict.failover_decline
        for difference in verdict.differences:
            found[difference.kind.value] += 1
            findings.append(
                Finding(
                    day=day,
                    record_type=side.record_type,
                    provider=side.provider,
                    provider_key=key,
                    kind=difference.kind,
                    detail=difference.detail,
                    ours=ours,
                    theirs=theirs.snapshot() if theirs is not None else None,
                )
            )
    # A key the reconciler is about to settle is not compared: its open items stay open
    # until a run finds our record final.
    owners = {key: side.owner(key) for key in keys}
    recovering = {owner.operation_id for owner in owners.values() if owner} & {
        operation_id for _tenant_id, operation_id in recover
    }
    compared = [
        key
        for key, owner in owners.items()
        if owner is None or owner.operation_id not in recovering
    ]
    async with db.transaction() as conn:
        # Fenced: nothing below lands once another run has taken the day over.
        await days.hold(conn, lease)
        written = await repository.write_items(
            conn, side.record_type, side.provider, compared, findings, actor=actor
        )
        summary.lines_recorded += await repository.record_lines(conn, side.provider, lines)
        await repository.recover_now(conn, recover)
    summary.compared += len(compared)
    summary.recovering += len(recover)
    summary.found = dict(sorted(found.items()))
    summary.opened += written.opened
    summary.reopened += written.reopened
    summary.kept_closed += written.kept_closed
    summary.auto_resolved += written.auto_resolved


# The names a record type's counts have in the summary: the providers', ours. Settled in
# this order, each record type on its own.
_COUNTED = {
    RecordType.CHARGE: ("their_charges", "our_payments"),
    RecordType.REFUND: ("their_refunds", "our_refunds"),
    RecordType.CAPTURE: ("their_captures", "our_captures"),
}


async def settle_day(
    db: Database,
    books: Sequence[ProviderBooks],
    day: date,
    *,
    lag_days: int,
    actor: str,
    today: date | None = None,
    failpoints: Failpoints | None = None,
) -> Summary:
    """Settle the records made on `day` (UTC) against every provider's `books` (one per
    configured provider, each named); raises `DayTaken` when another run holds it, and what
    `run_claimed` raises."""
    async with db.connection() as conn:
        claimed = await days.claim_day(conn, day, actor, DAY_LEASE_S)
    if isinstance(claimed, str):
        raise DayTaken(f"a run of {day} is under way ({claimed})")
    return await run_claimed(
        db, books, claimed, lag_days=lag_days, actor=actor, today=today, failpoints=failpoints
    )


async def run_claimed(
    db: Database,
    books: Sequence[ProviderBooks],
    lease: DayLease,
    *,
    lag_days: int,
    actor: str,
    today: date | None = None,
    failpoints: Failpoints | None = None,
) -> Summary:
    """Run the day `lease` holds; raises `BooksUnavailable` or `LagDiffers` when a
    provider's books cannot be trusted to answer (nothing is concluded then: what was
    written stays, the day is freed), `DayLost` when another run took the day over (its
    writes refused by the fence)."""
    assert books, "at least one provider's books"
    started = time.perf_counter()
    day = lease.day
    summary = Summary(day=day.isoformat())
    finished = False
    try:
        if failpoints is not None:
            await failpoints.reach("settle_claimed")
        on = today or utcnow().date()
        named = len(books) > 1
        reports = {one.name: _Reports(one, lag_days, on, named=named) for one in books}
        summary.by_provider = {one.name: {} for one in books}
        for record_type, (theirs_name, ours_name) in _COUNTED.items():
            sides, made = await read_sides(db, books, record_type, day, summary)
            for side in sides:
                counts = summary.by_provider[side.provider]
                counts[theirs_name], counts[ours_name] = len(side.theirs), len(side.ours)
                await _settle_side(db, side, reports[side.provider], lease, actor, summary)
            setattr(summary, theirs_name, sum(len(side.theirs) for side in sides))
            setattr(summary, ours_name, made)
        summary.seconds = round(time.perf_counter() - started, 3)
        async with db.connection() as conn:
            await days.finish_day(conn, lease, summary.as_json())
        finished = True
        return summary
    finally:
        if not finished:
            async with db.connection() as conn:
                await days.release_day(conn, lease)


__all__ = [
    "BooksUnavailable",
    "DayLost",
    "DayTaken",
    "LagDiffers",
    "Summary",
    "run_claimed",
    "settle_day",
]
