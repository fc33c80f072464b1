"""A settlement day's lease is fenced: a run whose lease ran out and whose day another run
took over writes nothing, neither items nor lines nor the day's summary, and frees nothing.

Two owners of one day against PostgreSQL and the fake provider, in this process: the first
takes the day with a lease that runs out at once, the second takes it over and runs it; the
first, running afterwards on what it still believes is its day, is refused by the fence.
"""

from __future__ import annotations

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from app.provider import ProviderClient, WireClient
from app.settlement import days
from app.settlement.books import ProviderBooks
from app.settlement.days import DayLease
from app.settlement.run import run_claimed
from app.settlement.summary import DayLost, Summary
from tests.support.control.processes import Process
from tests.support.control.settlement import at, by_key, changes, edit, move_payment, own_day
from tests.support.control.system import PROVIDER_KEY
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.fixtures.repository import AsyncDb
from tests.support.readers.operations import payment_for

Db = psycopg.Connection[DictRow]


def _day(db: Db, lease: DayLease) -> DictRow:
    row = db.execute(
        "SELECT lease_owner, fence, runs, summary FROM settlement_days WHERE day = %s",
        (lease.day,),
    ).fetchone()
    assert row is not None
    return row


def test_a_stale_owners_run_after_a_takeover_changes_nothing(
    client: httpx.Client, db: Db, ledger: httpx.Client, provider: Process, async_db: AsyncDb
) -> None:
    assert provider.url is not None
    url = provider.url
    day = own_day()
    created = post_payment(client, payment_body(), key=new_key())
    assert created.status_code == 201, created.text
    payment = payment_for(db, created.json()["operation_id"])
    move_payment(db, ledger, str(payment["id"]), at(day))
    charge = str(payment["provider_charge_id"])
    edit(ledger, "charges", charge, amount_minor=int(str(payment["amount_minor"])) + 1)

    async def claim(owner: str, lease_s: float) -> DayLease:
        async with async_db.db.connection() as conn:
            lease = await days.claim_day(conn, day, owner, lease_s)
        assert isinstance(lease, DayLease), lease
        return lease

    async def run(lease: DayLease) -> Summary:
        wire = WireClient(url, api_key=PROVIDER_KEY)
        try:
            books = [ProviderBooks(ProviderClient(wire, deadline_s=5.0))]
            return await run_claimed(async_db.db, books, lease, lag_days=1, actor=lease.owner)
        finally:
            await wire.aclose()

    # The first owner takes the day with a lease that runs out at once (as a run paused past
    # its lease), and a second takes it over: fence 1, then 2.
    stale = async_db.run(claim("settle:paused:1", 0.0))
    wait_until(
        lambda: bool(
            db.execute(
                "SELECT lease_expires_at < now() AS over FROM settlement_days WHERE day = %s",
                (day,),
            ).fetchone()
            == {"over": True}
        ),
        timeout=30,
        message="the first owner's lease to run out",
    )
    fresh = async_db.run(claim("settle:fresh:2", 60.0))
    assert (stale.fence, fresh.fence) == (1, 2)

    # The second owner runs the day: the difference is queued, the day finished.
    found = async_db.run(run(fresh))
    assert found.found == {"amount_mismatch": 1}
    item = by_key(db, str(payment["provider_key"]))["amount_mismatch"]
    assert item["state"] == "open"
    after_fresh = _day(db, fresh)
    assert after_fresh["lease_owner"] is None
    assert after_fresh["summary"]["found"] == {"amount_mismatch": 1}

    # The provider's books agree again: a run now would auto-resolve the item. The first
    # owner, resuming on the day it took, reads that and tries to write: refused.
    edit(ledger, "charges", charge, amount_minor=payment["amount_minor"])
    with pytest.raises(DayLost, match="lost its day to another run"):
        async_db.run(run(stale))

    assert by_key(db, str(payment["provider_key"]))["amount_mismatch"]["state"] == "open"
    assert [change["actor"] for change in changes(db, item["id"])] == ["settle:fresh:2"]
    assert _day(db, stale) == after_fresh

    # The day's current owner keeps it: the stale one's release frees nothing.
    holder = async_db.run(claim("settle:third:3", 60.0))
    async_db.run(run_stale_release(async_db, stale))
    assert _day(db, holder)["lease_owner"] == "settle:third:3"


async def run_stale_release(async_db: AsyncDb, stale: DayLease) -> None:
    async with async_db.db.connection() as conn:
        await days.release_day(conn, stale)
