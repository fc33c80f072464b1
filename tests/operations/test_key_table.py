"""The key table decides the claim: one key's row, one operation, whoever races for the key.

`idempotency_keys` (migration 0029) holds a claimed key's row from the claim until the key
is released; the claim inserts it first and the operation only from the row it inserted,
and reads a taken key through it, to the operation by id and `created_at`.

Two schemas:
- `keyed_db`, a database of the module's own at the head: `operations` partitioned by day
  (migration 0033), with no unique constraint on the key and no trigger of migration 0029.
  The key table alone decides there, and the service's own statements alone keep it:
  concurrent claims of one key make one key's row and one operation, a released key's row
  is deleted by the release and the key names a new operation, and a key claimed one day
  and retried the next finds its operation in the earlier day's partition.
- `mixed_db`, a database of the module's own at migration 0032, before `operations` is
  partitioned: a process of the previous release, which claims by inserting into
  `operations` alone and releases a key by its UPDATE, is kept in step by the triggers, so
  a new claim never makes a second operation for a key it holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from alembic import command
from psycopg.rows import DictRow, dict_row

from app.db.database import Database, open_database
from app.db.migrate import alembic_config, upgrade_head
from app.operations import retention
from app.operations.values import Claimed, Snapshot
from app.settings import Settings
from tests.support.control.database import throwaway_database
from tests.support.factories.claims import claim_payment
from tests.support.factories.payments import new_key

Db = psycopg.Connection[DictRow]
Answer = Claimed | Snapshot | None
NAME = "create_payment"
# Duplicates that wait on the first claim's uncommitted key row.
WAITERS = 8

# The last revision before `operations` is partitioned: the release mix's triggers and the
# unique key in `operations` are still there.
MIXED = "0032"
_WAITING = """
    SELECT count(*) AS n FROM pg_stat_activity
    WHERE datname = current_database() AND wait_event_type = 'Lock'
      AND query LIKE '%%INSERT INTO idempotency_keys%%'
"""
# A claim of the previous release: `operations` alone, its unique key deciding.
_PREVIOUS_RELEASE_CLAIM = """
    INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint,
                            state, lease_owner, lease_expires_at, fence)
    VALUES (%s, %s, 'create_payment', %s, 'f', 'PROVIDER_REQUEST_SENT', 'api:previous',
            now() + interval '30 seconds', 1)
    ON CONFLICT (tenant_id, operation_name, idempotency_key) DO NOTHING
"""


@pytest.fixture(scope="module")
def keyed_url(database_url: str) -> Iterator[str]:
    with throwaway_database(database_url, "payments_keys") as url:
        upgrade_head(url)
        yield url


@pytest.fixture(scope="module")
def mixed_url(database_url: str) -> Iterator[str]:
    with throwaway_database(database_url, "payments_keys_mixed") as url:
        command.upgrade(alembic_config(url), MIXED)
        yield url


def _own_db(url: str) -> Iterator[Db]:
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        yield conn
        conn.execute("DELETE FROM idempotency_keys")
        conn.execute("DELETE FROM operations")
        conn.execute("DELETE FROM tenants")


@pytest.fixture
def keyed_db(keyed_url: str) -> Iterator[Db]:
    yield from _own_db(keyed_url)


@pytest.fixture
def mixed_db(mixed_url: str) -> Iterator[Db]:
    yield from _own_db(mixed_url)


def _run_claims(url: str, tenant: uuid.UUID, claims: list[tuple[str, uuid.UUID]]) -> list[Answer]:
    """Each claim (key, operation id) in a transaction of its own, one after another."""
    settings = Settings.model_validate({"DATABASE_URL": url})

    async def go() -> list[Answer]:
        async with open_database(settings, application_name="key-claims") as pool:
            return [await _claim_alone(pool, tenant, key, op) for key, op in claims]

    return asyncio.run(go())


def _tenant(db: Db) -> uuid.UUID:
    tenant = uuid.uuid4()
    db.execute("INSERT INTO tenants (id, name) VALUES (%s, 'keys')", (tenant,))
    return tenant


async def _claim(conn: Any, tenant: uuid.UUID, key: str, operation_id: uuid.UUID) -> Answer:
    return await claim_payment(
        conn,
        tenant_id=tenant,
        operation_id=operation_id,
        key=key,
        owner="api:test",
    )


async def _claim_alone(
    db: Database, tenant: uuid.UUID, key: str, operation_id: uuid.UUID
) -> Answer:
    async with db.transaction() as conn:
        return await _claim(conn, tenant, key, operation_id)


def _key_rows(db: Db, tenant: uuid.UUID, key: str) -> list[dict[str, Any]]:
    return db.execute(
        "SELECT k.operation_id, k.operation_created_at = o.created_at AS same_time"
        " FROM idempotency_keys k LEFT JOIN operations o ON o.id = k.operation_id"
        " WHERE k.tenant_id = %s AND k.operation_name = %s AND k.idempotency_key = %s",
        (tenant, NAME, key),
    ).fetchall()


def _holding(db: Db, tenant: uuid.UUID, key: str) -> list[uuid.UUID]:
    rows = db.execute(
        "SELECT id FROM operations"
        " WHERE tenant_id = %s AND operation_name = %s AND idempotency_key = %s",
        (tenant, NAME, key),
    ).fetchall()
    return [r["id"] for r in rows]


class _GiveBack(Exception):
    """The first claim rolls back: the key is free again."""


async def _race(url: str, db: Db, tenant: uuid.UUID, key: str, *, commit: bool) -> list[Answer]:
    """A claim holds the key uncommitted while `WAITERS` duplicates wait on its key row; it
    then commits (or rolls back). Every claim's answer, the first one's first."""
    settings = Settings.model_validate({"DATABASE_URL": url, "PAYMENTS_DB_POOL_SIZE": WAITERS + 2})
    async with open_database(settings, application_name="key-race") as pool:
        first: Answer = None
        release = asyncio.Event()
        waiting: list[asyncio.Task[Answer]] = []

        async def hold() -> None:
            nonlocal first
            async with pool.transaction() as conn:
                first = await _claim(conn, tenant, key, uuid.uuid4())
                waiting.extend(
                    asyncio.create_task(_claim_alone(pool, tenant, key, uuid.uuid4()))
                    for _ in range(WAITERS)
                )
                await release.wait()
                if not commit:
                    raise _GiveBack

        holder = asyncio.create_task(hold())
        while len(waiting) < WAITERS or db.execute(_WAITING).fetchone() != {"n": WAITERS}:
            assert not holder.done(), holder
            await asyncio.sleep(0.01)
        release.set()
        with contextlib.suppress(_GiveBack):
            await holder
        return [first, *await asyncio.gather(*waiting)]


@pytest.mark.parametrize("commit", [True, False], ids=["winner commits", "winner rolls back"])
def test_concurrent_claims_of_one_key_make_one_key_row_and_one_operation(
    keyed_url: str, keyed_db: Db, commit: bool
) -> None:
    tenant, key = _tenant(keyed_db), new_key()
    answers = asyncio.run(_race(keyed_url, keyed_db, tenant, key, commit=commit))

    held = _holding(keyed_db, tenant, key)
    assert len(held) == 1, answers
    (operation_id,) = held
    assert _key_rows(keyed_db, tenant, key) == [{"operation_id": operation_id, "same_time": True}]
    won = [a for a in answers if isinstance(a, Claimed)]
    # The first claim's, or (rolled back) one waiter's: each waiter waited for the first.
    assert len(won) == (1 if commit else 2), answers
    assert won[-1].ref.id == operation_id
    # A waiter whose statement began before the winner committed reads nothing (None: read
    # again); one that read the key's row reads the winner's operation through it.
    for answer in answers:
        assert (
            answer is None or isinstance(answer, Claimed) or answer.operation.id == (operation_id)
        ), answer
    if commit:
        assert all(a is None or isinstance(a, Snapshot) for a in answers[1:]), answers


def test_a_released_key_loses_its_row_and_may_name_a_new_operation(
    keyed_url: str, keyed_db: Db
) -> None:
    tenant, key = _tenant(keyed_db), new_key()
    settings = Settings.model_validate({"DATABASE_URL": keyed_url})

    async def scenario() -> tuple[Answer, Answer, list[uuid.UUID], Answer]:
        async with open_database(settings, application_name="key-release") as pool:
            first = await _claim_alone(pool, tenant, key, uuid.uuid4())
            assert isinstance(first, Claimed)
            # A tombstone past both TTLs.
            keyed_db.execute(
                "UPDATE operations SET state = 'COMPLETED', completed_at = now() - interval"
                " '2 days', response_expired_at = now() WHERE id = %s",
                (first.ref.id,),
            )
            before = await _claim_alone(pool, tenant, key, uuid.uuid4())
            async with pool.connection() as conn:
                released = await retention.release_keys(conn, completed_before_s=86400, limit=10)
            after = await _claim_alone(pool, tenant, key, uuid.uuid4())
            return first, before, released, after

    first, before, released, after = asyncio.run(scenario())
    assert isinstance(first, Claimed)
    assert isinstance(before, Snapshot)
    assert before.operation.id == first.ref.id
    assert released == [first.ref.id]
    assert isinstance(after, Claimed), after
    assert after.ref.id != first.ref.id
    assert _holding(keyed_db, tenant, key) == [after.ref.id]
    assert _key_rows(keyed_db, tenant, key) == [{"operation_id": after.ref.id, "same_time": True}]
    kept = keyed_db.execute(
        "SELECT idempotency_key, key_released_at IS NOT NULL AS released FROM operations"
        " WHERE id = %s",
        (first.ref.id,),
    ).fetchone()
    assert kept == {"idempotency_key": None, "released": True}


def test_a_key_claimed_one_day_and_retried_the_next_finds_its_operation(
    keyed_url: str, keyed_db: Db
) -> None:
    # No unique key per day decides: the key's row names the operation in its own day's
    # partition (here the legacy one, as if claimed before midnight of the conversion).
    tenant, key, first = _tenant(keyed_db), new_key(), uuid.uuid4()
    (claimed,) = _run_claims(keyed_url, tenant, [(key, first)])
    assert isinstance(claimed, Claimed)
    keyed_db.execute(
        "WITH moved AS (UPDATE operations SET created_at = created_at - interval '1 day'"
        " WHERE id = %s RETURNING id, created_at)"
        " UPDATE idempotency_keys k SET operation_created_at = moved.created_at FROM moved"
        " WHERE k.operation_id = moved.id",
        (first,),
    )
    (retried,) = _run_claims(keyed_url, tenant, [(key, uuid.uuid4())])
    assert isinstance(retried, Snapshot), retried
    assert retried.operation.id == first
    assert _holding(keyed_db, tenant, key) == [first]
    assert _key_rows(keyed_db, tenant, key) == [{"operation_id": first, "same_time": True}]


def test_a_claim_of_the_previous_release_is_seen_by_a_new_claim(
    mixed_url: str, mixed_db: Db
) -> None:
    tenant = _tenant(mixed_db)
    key, previous = new_key(), uuid.uuid4()
    mixed_db.execute(_PREVIOUS_RELEASE_CLAIM, (previous, tenant, key))
    assert _key_rows(mixed_db, tenant, key) == [{"operation_id": previous, "same_time": True}]

    (answer,) = _run_claims(mixed_url, tenant, [(key, uuid.uuid4())])
    assert isinstance(answer, Snapshot), answer
    assert answer.operation.id == previous
    assert _holding(mixed_db, tenant, key) == [previous]

    # And the other way round: the previous release's claim of a key this one holds inserts
    # nothing, in either table.
    key, current = new_key(), uuid.uuid4()
    (claimed,) = _run_claims(mixed_url, tenant, [(key, current)])
    assert isinstance(claimed, Claimed)
    mixed_db.execute(_PREVIOUS_RELEASE_CLAIM, (uuid.uuid4(), tenant, key))
    assert _holding(mixed_db, tenant, key) == [current]
    assert _key_rows(mixed_db, tenant, key) == [{"operation_id": current, "same_time": True}]


def test_a_release_by_the_previous_release_frees_the_key_for_a_new_claim(
    mixed_url: str, mixed_db: Db
) -> None:
    tenant = _tenant(mixed_db)
    key, first = new_key(), uuid.uuid4()
    (claimed,) = _run_claims(mixed_url, tenant, [(key, first)])
    assert isinstance(claimed, Claimed)
    # The previous release's release: the operation's UPDATE alone.
    mixed_db.execute(
        "UPDATE operations SET state = 'COMPLETED', completed_at = now(),"
        " response_expired_at = now(), idempotency_key = NULL, key_released_at = now()"
        " WHERE id = %s",
        (first,),
    )
    assert _key_rows(mixed_db, tenant, key) == []

    (answer,) = _run_claims(mixed_url, tenant, [(key, uuid.uuid4())])
    assert isinstance(answer, Claimed), answer
    assert _holding(mixed_db, tenant, key) == [answer.ref.id]
