"""The key table decides the claim: one key's row, one operation, whoever races for the key.

`idempotency_keys` (migration 0029) holds a claimed key's row from the claim until the key
is released; the claim inserts it first and the operation only from the row it inserted,
and reads a taken key through it, to the operation by id and `created_at`.

Two schemas:
- `keyed_db`, a database of the module's own with the schema as it will be once no process
  of the previous release runs and `operations` is partitioned by time: the two triggers of
  migration 0029 dropped, and no unique constraint on the key in `operations`. The key
  table alone decides there, and the service's own statements alone keep it: concurrent
  claims of one key make one key's row and one operation, a released key's row is deleted
  by the release and the key names a new operation.
- the session's database as migrated: a process of the previous release, which claims by
  inserting into `operations` alone and releases a key by its UPDATE, is kept in step by the
  triggers, so a new claim never makes a second operation for a key it holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow, dict_row

from app.db.database import Database, open_database
from app.db.migrate import upgrade_head
from app.operations import repository as operations
from app.operations import retention
from app.operations.values import Claimed, Snapshot
from app.settings import Settings
from tests.support.control.database import throwaway_database
from tests.support.factories.payments import new_key
from tests.support.factories.tenants import TenantHandle
from tests.support.fixtures.repository import AsyncDb

Db = psycopg.Connection[DictRow]
Answer = Claimed | Snapshot | None
NAME = "create_payment"
# Duplicates that wait on the first claim's uncommitted key row.
WAITERS = 8

# As the migration that ends the release mix, and the partitioning of `operations`, leave
# the schema: no trigger, no unique key in `operations`.
_WITHOUT_THE_MIX = (
    "DROP TRIGGER idempotency_keys_claim ON operations",
    "DROP TRIGGER idempotency_keys_release ON operations",
    "ALTER TABLE operations DROP CONSTRAINT uq_operations_tenant_id_operation_name_idempotency_key",
)
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
        with psycopg.connect(url, autocommit=True) as conn:
            for statement in _WITHOUT_THE_MIX:
                conn.execute(statement)
        yield url


@pytest.fixture
def keyed_db(keyed_url: str) -> Iterator[Db]:
    with psycopg.connect(keyed_url, autocommit=True, row_factory=dict_row) as conn:
        yield conn
        conn.execute("DELETE FROM idempotency_keys")
        conn.execute("DELETE FROM operations")
        conn.execute("DELETE FROM tenants")


def _tenant(db: Db) -> uuid.UUID:
    tenant = uuid.uuid4()
    db.execute("INSERT INTO tenants (id, name) VALUES (%s, 'keys')", (tenant,))
    return tenant


async def _claim(conn: Any, tenant: uuid.UUID, key: str, operation_id: uuid.UUID) -> Answer:
    return await operations.claim(
        conn,
        operation_id=operation_id,
        tenant_id=tenant,
        operation_name=NAME,
        idempotency_key=key,
        fingerprint="0" * 64,
        owner="api:test",
        lease_s=30,
        key_ttl_s=86400,
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


def test_a_claim_of_the_previous_release_is_seen_by_a_new_claim(
    async_db: AsyncDb, db: Db, tenant: TenantHandle
) -> None:
    key, previous = new_key(), uuid.uuid4()
    db.execute(_PREVIOUS_RELEASE_CLAIM, (previous, tenant.id, key))
    assert _key_rows(db, tenant.id, key) == [{"operation_id": previous, "same_time": True}]

    answer = async_db.run(_claim_alone(async_db.db, tenant.id, key, uuid.uuid4()))
    assert isinstance(answer, Snapshot), answer
    assert answer.operation.id == previous
    assert _holding(db, tenant.id, key) == [previous]

    # And the other way round: the previous release's claim of a key this one holds inserts
    # nothing, in either table.
    key, current = new_key(), uuid.uuid4()
    assert isinstance(async_db.run(_claim_alone(async_db.db, tenant.id, key, current)), Claimed)
    db.execute(_PREVIOUS_RELEASE_CLAIM, (uuid.uuid4(), tenant.id, key))
    assert _holding(db, tenant.id, key) == [current]
    assert _key_rows(db, tenant.id, key) == [{"operation_id": current, "same_time": True}]


def test_a_release_by_the_previous_release_frees_the_key_for_a_new_claim(
    async_db: AsyncDb, db: Db, tenant: TenantHandle
) -> None:
    key, first = new_key(), uuid.uuid4()
    assert isinstance(async_db.run(_claim_alone(async_db.db, tenant.id, key, first)), Claimed)
    # The previous release's release: the operation's UPDATE alone.
    db.execute(
        "UPDATE operations SET state = 'COMPLETED', completed_at = now(),"
        " response_expired_at = now(), idempotency_key = NULL, key_released_at = now()"
        " WHERE id = %s",
        (first,),
    )
    assert _key_rows(db, tenant.id, key) == []

    answer = async_db.run(_claim_alone(async_db.db, tenant.id, key, uuid.uuid4()))
    assert isinstance(answer, Claimed), answer
    assert _holding(db, tenant.id, key) == [answer.ref.id]
