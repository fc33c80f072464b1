"""The inbox's SQL against the database: an event kept once, whether a redelivery's body
is the kept one, the operators' counts by state; and its migration, up and down."""

from __future__ import annotations

import json

import psycopg
import pytest
from alembic import command
from psycopg.rows import DictRow

from app.db.migrate import alembic_config
from app.provider_events import inbox
from app.provider_events.event import read_event
from app.provider_events.rows import EventState
from tests.support.factories.provider_events import event, raw
from tests.support.fixtures.repository import AsyncDb


async def _counts(async_db: AsyncDb) -> dict[EventState, int]:
    async with async_db.db.connection() as conn:
        return await inbox.counts_by_state(conn)


def test_an_event_is_kept_once_and_a_redelivery_compared(async_db: AsyncDb) -> None:
    sent = event()
    # The same JSON, its members in another order and spaced otherwise: the same body.
    reordered = json.dumps(dict(reversed(list(sent.items()))), indent=2).encode()
    other = raw({**sent, "type": "charge.declined"})

    async def keep(body: bytes) -> inbox.Kept:
        async with async_db.db.connection() as conn:
            return await inbox.keep(conn, provider="primary", event=read_event(body))

    first = async_db.run(keep(raw(sent)))
    same = async_db.run(keep(reordered))
    changed = async_db.run(keep(other))

    assert first.id is not None
    assert not first.duplicate
    assert (same.duplicate, same.same_body) == (True, True)
    assert (changed.duplicate, changed.same_body) == (True, False)


def test_the_operators_count_the_inbox_by_state(
    async_db: AsyncDb, db: psycopg.Connection[DictRow]
) -> None:
    before = async_db.run(_counts(async_db))
    assert set(before) == set(EventState)
    ids = []
    for _ in range(3):
        sent = event()
        ids.append(sent["id"])

        async def keep(body: bytes = raw(sent)) -> None:
            async with async_db.db.connection() as conn:
                await inbox.keep(conn, provider="primary", event=read_event(body))

        async_db.run(keep())
    db.execute(
        "UPDATE provider_events SET state = 'parked' WHERE provider = 'primary' AND event_id = %s",
        (ids[0],),
    )

    after = async_db.run(_counts(async_db))

    grew = {state: after[state] - before[state] for state in EventState}
    assert grew == {
        EventState.RECEIVED: 2,
        EventState.PARKED: 1,
        EventState.APPLIED: 0,
        EventState.REJECTED: 0,
        EventState.CONTRADICTED: 0,
    }


def test_the_migration_makes_the_inbox_and_takes_it_away(scratch_database: str) -> None:
    config = alembic_config(scratch_database)
    command.upgrade(config, "0023")
    insert = (
        "INSERT INTO provider_events (provider, event_id, type, body)"
        " VALUES ('primary', 'evt_1', 'charge.succeeded', '{}') RETURNING state, attempts"
    )
    with (
        psycopg.connect(scratch_database, autocommit=True) as conn,
        pytest.raises(psycopg.errors.UndefinedTable),
    ):
        conn.execute(insert)

    command.upgrade(config, "0024")
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        assert conn.execute(insert).fetchone() == ("received", 0)
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(insert)
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("UPDATE provider_events SET state = 'done'")

    command.downgrade(config, "0023")
    with (
        psycopg.connect(scratch_database, autocommit=True) as conn,
        pytest.raises(psycopg.errors.UndefinedTable),
    ):
        conn.execute(insert)
