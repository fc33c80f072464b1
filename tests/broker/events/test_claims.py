"""The publication cursor's guards: a worker whose lease ran out moves nothing, and no
event ever commits behind a cursor (the horizon)."""

from __future__ import annotations

import uuid

import psycopg
from psycopg.rows import DictRow

from app.events import publication
from app.events.publication import Claimed
from tests.broker.events.conftest import Publishers, Rabbit
from tests.broker.events.rows import cursor, feed, write_events
from tests.support.factories.tenants import TenantHandle
from tests.support.fixtures.repository import AsyncDb

Db = psycopg.Connection[DictRow]


def _claim(async_db: AsyncDb, exchange: str, owner: str, tenant_id: uuid.UUID) -> Claimed:
    async def claim() -> list[Claimed]:
        async with async_db.db.connection() as conn:
            return await publication.claim(
                conn, exchange=exchange, owner=owner, lease_s=30, limit=100, batch=100
            )

    [claimed] = [tenant for tenant in async_db.run(claim()) if tenant.tenant_id == tenant_id]
    return claimed


def _record(async_db: AsyncDb, exchange: str, claimed: Claimed) -> bool:
    async def record() -> bool:
        async with async_db.db.connection() as conn:
            return await publication.record(
                conn,
                exchange=exchange,
                claimed=claimed,
                confirmed=len(claimed.events),
                error=None,
                delay_s=0,
            )

    return async_db.run(record())


def test_a_worker_whose_lease_ran_out_moves_no_cursor(
    db: Db, tenant: TenantHandle, async_db: AsyncDb, rabbit: Rabbit, publishers: Publishers
) -> None:
    publishers().run_pass()
    write_events(db, tenant.id, 2)
    stale = _claim(async_db, rabbit.exchange, "worker:paused", tenant.id)
    # Paused past its lease: another worker takes the tenant over.
    db.execute(
        "UPDATE event_publication_cursors SET lease_expires_at = now() - interval '1 second'"
        " WHERE tenant_id = %s AND exchange = %s",
        (tenant.id, rabbit.exchange),
    )
    newer = _claim(async_db, rabbit.exchange, "worker:newer", tenant.id)
    assert newer.fence == stale.fence + 1

    assert not _record(async_db, rabbit.exchange, stale)
    position = cursor(db, tenant.id, rabbit.exchange)
    assert position is not None
    assert (position["after"], position["lease_owner"]) == (None, "worker:newer")
    assert _record(async_db, rabbit.exchange, newer)
    position = cursor(db, tenant.id, rabbit.exchange)
    assert position is not None
    assert (position["after"], position["lease_owner"]) == (feed(db, tenant.id)[-1], None)


def test_an_event_of_a_transaction_still_open_holds_back_those_after_it(
    db: Db,
    database_url: str,
    tenant: TenantHandle,
    rabbit: Rabbit,
    publishers: Publishers,
) -> None:
    everything = rabbit.queue("#")
    publishing = publishers()
    publishing.run_pass()
    write_events(db, tenant.id, 1)
    [before] = feed(db, tenant.id)
    with psycopg.connect(database_url) as held:
        # Its transaction id comes next; it commits last.
        write_events(held, tenant.id, 1)
        write_events(db, tenant.id, 1)
        [_, committed] = feed(db, tenant.id)

        publishing.run_pass()
        # Only what lies below the open transaction goes out: had the cursor moved past
        # `committed`, the event still to commit would come behind it and never go out.
        assert rabbit.ids(everything) == [before]
        position = cursor(db, tenant.id, rabbit.exchange)
        assert position is not None
        assert position["after"] == before
        held.commit()

    publishing.run_pass()
    ids = rabbit.ids(everything)
    assert ids == feed(db, tenant.id)[1:]
    assert ids[1] == committed
