"""The inbox's retention (`app/provider_events/retention.py`): the worker's expire pass
deletes applied, rejected and contradicted events past
PAYMENTS_PROVIDER_EVENTS_RETENTION_DAYS, batch after batch, and keeps parked ones however
old; and the migrations that index them."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
from alembic import command
from psycopg.rows import DictRow

from app.db.migrate import alembic_config
from app.provider_events.retention import prune_inbox
from tests.support.control.spawner import Spawner
from tests.support.fixtures.repository import AsyncDb

Db = psycopg.Connection[DictRow]


def _stored(db: Db, state: str, *, days_old: float) -> str:
    """An event of the inbox in `state`, received `days_old` days ago; its event id."""
    event_id = f"evt_{uuid.uuid4().hex}"
    db.execute(
        "INSERT INTO provider_events (provider, event_id, type, body, state, received_at,"
        " next_attempt_at, applied_at)"
        " VALUES ('primary', %(id)s, 'charge.succeeded', '{}', %(state)s,"
        " now() - make_interval(days => %(days)s), NULL,"
        " CASE WHEN %(state)s = 'applied' THEN now() END)",
        {"id": event_id, "state": state, "days": days_old},
    )
    return event_id


def _left(db: Db, event_ids: list[str]) -> set[str]:
    rows = db.execute(
        "SELECT event_id FROM provider_events WHERE event_id = ANY(%s)", (event_ids,)
    ).fetchall()
    return {row["event_id"] for row in rows}


def test_the_worker_deletes_events_done_with_past_retention_and_keeps_parked_ones(
    spawn: Spawner, db: Db
) -> None:
    old_applied = [_stored(db, "applied", days_old=10) for _ in range(5)]
    old_rejected = _stored(db, "rejected", days_old=10)
    old_contradicted = _stored(db, "contradicted", days_old=10)
    old_parked = _stored(db, "parked", days_old=40)
    recent_applied = _stored(db, "applied", days_old=6)
    everything = [*old_applied, old_rejected, old_contradicted, old_parked, recent_applied]

    # Batches of two: seven rows to delete take four statements, the last one short.
    worker = spawn.worker(
        once=True, PAYMENTS_PROVIDER_EVENTS_RETENTION_DAYS="7", PAYMENTS_EXPIRE_BATCH_SIZE="2"
    )
    assert worker.popen.wait(timeout=60) == 0, worker.log()

    assert _left(db, everything) == {old_parked, recent_applied}
    assert '"deleted": 7' in worker.log() or "'deleted': 7" in worker.log(), worker.log()


def test_a_retention_of_zero_keeps_every_event(async_db: AsyncDb, db: Db) -> None:
    old = _stored(db, "applied", days_old=4000)
    deleted = async_db.run(
        prune_inbox(async_db.db, retention_days=0, batch=10, stopping=asyncio.Event())
    )
    assert deleted == 0
    assert _left(db, [old]) == {old}


def test_the_migration_indexes_the_events_done_with_and_takes_it_away(
    scratch_database: str,
) -> None:
    config = alembic_config(scratch_database)
    command.upgrade(config, "0025")
    query = "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_provider_events_done'"
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        [(definition,)] = conn.execute(query).fetchall()
        assert "(received_at)" in definition
        assert "'applied'" in definition
        assert "'rejected'" in definition
    command.downgrade(config, "0024")
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        assert conn.execute(query).fetchall() == []


def test_the_migration_admits_contradicted_events_and_takes_them_away(
    scratch_database: str,
) -> None:
    config = alembic_config(scratch_database)
    command.upgrade(config, "0027")
    done = "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_provider_events_done'"
    gauge = "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_provider_events_contradicted'"
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        [(definition,)] = conn.execute(done).fetchall()
        assert "'contradicted'" in definition
        assert len(conn.execute(gauge).fetchall()) == 1
        conn.execute(
            "INSERT INTO provider_events (provider, event_id, type, body, state)"
            " VALUES ('primary', 'evt_c', 'charge.declined', '{}', 'contradicted')"
        )
    command.downgrade(config, "0026")
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        [(definition,)] = conn.execute(done).fetchall()
        assert "'contradicted'" not in definition
        assert conn.execute(gauge).fetchall() == []
        # Kept for operators, as a parked event is: never applied, never tried again.
        [(state, due)] = conn.execute(
            "SELECT state, next_attempt_at FROM provider_events WHERE event_id = 'evt_c'"
        ).fetchall()
        assert (state, due) == ("parked", None)
