"""How long the apply step holds an event it claimed (`app/provider_events/apply.py`): two
operation leases (PAYMENTS_LEASE_S), so that an event whose worker died is taken again as
soon as a reconciliation could have ended, not a fixed minute later. On a database of its
own: a claim takes whatever events are due."""

from __future__ import annotations

import asyncio

import psycopg

from app.db.database import open_database
from app.db.migrate import upgrade_head
from app.provider_events.apply import EventApplication
from app.settings import Settings
from app.settlement.notified import NotifiedRecords

LEASE_S = 3.0


async def _claim(database_url: str) -> list[int]:
    settings = Settings.model_validate({"DATABASE_URL": database_url, "db_pool_size": 1})
    async with open_database(settings, application_name="claim-lease-test") as db:
        application = EventApplication(
            db=db,
            reconcilers={},
            contradictions=NotifiedRecords(),
            lease_s=LEASE_S,
            key_ttl_s=86_400,
            worker="test",
        )
        return [event.id for event in await application.claim(10)]


def test_a_claimed_event_is_held_for_two_operation_leases(scratch_database: str) -> None:
    upgrade_head(scratch_database)
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO provider_events (provider, event_id, type, body)"
            " VALUES ('primary', 'evt_1', 'charge.succeeded', '{}') RETURNING id"
        ).fetchone()
        assert row is not None

        assert asyncio.run(_claim(scratch_database)) == [row[0]]

        held = conn.execute(
            "SELECT extract(epoch FROM next_attempt_at - now()), attempts, state"
            " FROM provider_events WHERE id = %s",
            (row[0],),
        ).fetchone()
    assert held is not None
    held_s, attempts, state = held
    assert 2 * LEASE_S - 2 <= float(held_s) <= 2 * LEASE_S
    assert (attempts, state) == (1, "received")
