"""A taken key's operation, read with migration 0034's functions and without them.

With `operation_on_day` (0034), the claim's statement reads a taken key's operation
itself, and `find_by_key` is one statement; on a schema before 0034 (a large database
waiting for its online conversion runs this release at 0032), the key's row comes back
and the operation is read by a second statement. Each connection asks once which it has
(`reads.reads_on_day`). The migration's downgrade drops the functions, and a new
connection reads by the second statement again.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from alembic import command

from app.db.database import open_database
from app.db.migrate import alembic_config, upgrade_head
from app.operations import reads
from app.operations.values import Claimed, Snapshot
from app.settings import Settings
from tests.support.control.database import throwaway_database
from tests.support.factories.claims import claim_payment
from tests.support.factories.payments import new_key

NAME = "create_payment"
_FUNCTIONS = """
    SELECT to_regprocedure('operation_on_day(uuid, uuid, timestamptz)') IS NOT NULL,
           to_regprocedure('transitions_on_day(uuid, timestamptz)') IS NOT NULL
"""


@pytest.fixture
def url(database_url: str) -> Iterator[str]:
    with throwaway_database(database_url, "payments_keyed_read") as url:
        upgrade_head(url)
        yield url


def _functions(url: str) -> tuple[bool, bool]:
    with psycopg.connect(url) as conn:
        row = conn.execute(_FUNCTIONS).fetchone()
    assert row is not None
    return bool(row[0]), bool(row[1])


def _claims(
    url: str, tenant: uuid.UUID, key: str, ids: list[uuid.UUID]
) -> tuple[bool, list[Claimed | Snapshot | None], Snapshot | None]:
    """Whether the pool's connection reads on the day, each claim's answer, and the key's
    operation with its history as `find_by_key` reads it."""
    settings = Settings.model_validate({"DATABASE_URL": url})

    async def go() -> tuple[bool, list[Claimed | Snapshot | None], Snapshot | None]:
        answers: list[Claimed | Snapshot | None] = []
        async with open_database(settings, application_name="keyed-read") as db:
            for operation_id in ids:
                async with db.transaction() as conn:
                    answers.append(
                        await claim_payment(
                            conn,
                            tenant_id=tenant,
                            operation_id=operation_id,
                            key=key,
                            owner="api:test",
                        )
                    )
            async with db.connection() as conn:
                on_day = await reads.reads_on_day(conn)
                found = await reads.find_by_key(
                    conn,
                    tenant_id=tenant,
                    operation_name=NAME,
                    idempotency_key=key,
                    key_ttl_s=86400,
                    with_history=True,
                )
        return on_day, answers, found

    return asyncio.run(go())


def _replayed(url: str, tenant: uuid.UUID, *, on_day: bool) -> None:
    key, first = new_key(), uuid.uuid4()
    seen, (claimed, replay), found = _claims(url, tenant, key, [first, uuid.uuid4()])
    assert seen is on_day
    assert isinstance(claimed, Claimed), claimed
    assert isinstance(replay, Snapshot), replay
    assert replay.operation.id == first
    assert replay.operation.created_at == claimed.ref.created_at
    assert not replay.history  # the claim's read carries no history
    assert found is not None
    assert found.operation.id == first
    assert [t.to_state for t in found.history] == ["RECEIVED", "PROVIDER_REQUEST_SENT"]


def test_a_replay_reads_its_operation_with_the_functions_and_without(url: str) -> None:
    tenant = uuid.uuid4()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'keyed')", (tenant,))
    assert _functions(url) == (True, True)
    _replayed(url, tenant, on_day=True)

    command.downgrade(alembic_config(url), "0033")
    assert _functions(url) == (False, False)
    _replayed(url, tenant, on_day=False)

    upgrade_head(url)
    assert _functions(url) == (True, True)
    _replayed(url, tenant, on_day=True)


def _reads_with_history(url: str, tenant: uuid.UUID) -> tuple[bool, list[Snapshot | None]]:
    """Whether a new connection reads links on the day, and an operation claimed now read
    with its history by each read: by key, by id, on its day."""
    settings = Settings.model_validate({"DATABASE_URL": url})

    async def go() -> tuple[bool, list[Snapshot | None]]:
        key = new_key()
        async with open_database(settings, application_name="links-read") as db:
            async with db.transaction() as conn:
                claimed = await claim_payment(
                    conn,
                    tenant_id=tenant,
                    operation_id=uuid.uuid4(),
                    key=key,
                    owner="api:test",
                )
            assert isinstance(claimed, Claimed), claimed
            ref, ttl = claimed.ref, 86400
            async with db.connection() as conn:
                on_day = await reads.reads_links_on_day(conn)
                by_key = await reads.find_by_key(
                    conn,
                    tenant_id=tenant,
                    operation_name=NAME,
                    idempotency_key=key,
                    key_ttl_s=ttl,
                    with_history=True,
                )
                by_id = await reads.get_snapshot(conn, ref.id, key_ttl_s=ttl, with_history=True)
                owned = await reads.owned_snapshot(conn, ref, key_ttl_s=ttl, with_history=True)
        return on_day, [by_key, by_id, owned]

    return asyncio.run(go())


def test_reads_with_history_take_the_links_with_the_function_and_without(url: str) -> None:
    # Migration 0035's `links_on_day`: a connection to a schema without it (0034) reads the
    # links through the view, and every read with its history still answers.
    tenant = uuid.uuid4()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'links')", (tenant,))
    for revision, on_day in (("head", True), ("0034", False), ("head", True)):
        if revision == "head":
            upgrade_head(url)
        else:
            command.downgrade(alembic_config(url), revision)
        seen, found = _reads_with_history(url, tenant)
        assert seen is on_day, revision
        for snapshot in found:
            assert snapshot is not None, revision
            assert [t.to_state for t in snapshot.history] == [
                "RECEIVED",
                "PROVIDER_REQUEST_SENT",
            ], revision
