"""The owner's guards on the test PostgreSQL: giving a lease back, and what a fenced verb says.

`test_fencing.py` shows a stale owner's writes refused; these pin what the verbs answer, which
their callers act on: `leases.release` says whether the lease was the caller's to give back
(an operator's refused resolution frees the operation for the worker at once), and a verb
fenced out answers None while the one that lands answers the new state and attempts.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg.rows import DictRow

from app.operations import leases, reads
from app.operations import repository as operations
from app.operations.states import State
from app.operations.values import OwnedRef, Schedule
from tests.support.factories.tenants import TenantHandle
from tests.support.fixtures.repository import AsyncDb, StaleClaim
from tests.support.readers.operations import operation


def _take_over(async_db: AsyncDb, operation_id: uuid.UUID, owner: str) -> OwnedRef:
    async def take() -> OwnedRef | None:
        async with async_db.db.transaction() as conn:
            snapshot = await reads.get_snapshot(conn, operation_id, key_ttl_s=86400)
            assert snapshot is not None
            return await leases.take_over(conn, snapshot, owner=owner, lease_s=30)

    owned = async_db.run(take())
    assert owned is not None
    return owned


def _release(async_db: AsyncDb, ref: OwnedRef, owner: str) -> bool:
    async def release() -> bool:
        async with async_db.db.transaction() as conn:
            return await leases.release(conn, ref, owner=owner)

    return async_db.run(release())


def test_the_owner_gives_its_lease_back_and_the_operation_is_free_at_once(
    async_db: AsyncDb, stale_claim: StaleClaim, db: psycopg.Connection[DictRow]
) -> None:
    operation_id = stale_claim()
    owned = _take_over(async_db, operation_id, "operator:ana")
    assert (owned.fence, owned.state, owned.attempts) == (2, State.PROVIDER_REQUEST_SENT, 0)

    assert _release(async_db, owned, "operator:ana") is True
    row = operation(db, operation_id)
    assert (row["lease_owner"], row["fence"], row["state"]) == (None, 2, "PROVIDER_REQUEST_SENT")
    # Free now, not once 30 s have passed: the next owner takes it straight away.
    assert _take_over(async_db, operation_id, "worker:w").fence == 3


def test_a_lease_that_is_not_the_callers_is_not_given_back(
    async_db: AsyncDb, stale_claim: StaleClaim, db: psycopg.Connection[DictRow]
) -> None:
    operation_id = stale_claim()
    stale = _take_over(async_db, operation_id, "operator:ana")
    newer = _take_over_after_release(async_db, stale, "worker:w")

    assert _release(async_db, stale, "operator:ana") is False  # an older fence
    assert _release(async_db, newer, "operator:ana") is False  # another owner
    row = operation(db, operation_id)
    assert (row["lease_owner"], row["fence"], row["lease_expired"]) == ("worker:w", 3, False)


def _take_over_after_release(async_db: AsyncDb, ref: OwnedRef, owner: str) -> OwnedRef:
    assert _release(async_db, ref, "operator:ana")
    return _take_over(async_db, ref.id, owner)


def test_a_verb_that_lands_answers_the_new_state_and_one_fenced_out_answers_none(
    async_db: AsyncDb,
    stale_claim: StaleClaim,
    tenant: TenantHandle,
    db: psycopg.Connection[DictRow],
) -> None:
    operation_id = stale_claim()
    owned = _take_over(async_db, operation_id, "worker:w")
    stale = OwnedRef(
        id=operation_id,
        tenant_id=tenant.id,
        created_at=operation(db, operation_id)["created_at"],
        fence=1,
        state=State.PROVIDER_REQUEST_SENT,
        attempts=0,
    )
    schedule = Schedule(attempts=4, delay_s=30, needs_attention=True)

    async def lose(ref: OwnedRef) -> OwnedRef | None:
        async with async_db.db.transaction() as conn:
            return await operations.mark_unknown(
                conn, ref, actor="worker:w", reason="lookup failed", schedule=schedule
            )

    assert async_db.run(lose(stale)) is None
    written = async_db.run(lose(owned))
    assert written == OwnedRef(
        id=operation_id,
        tenant_id=tenant.id,
        created_at=owned.created_at,
        fence=2,
        state=State.UNKNOWN_REQUIRES_RECOVERY,
        attempts=4,
    )
    row = operation(db, operation_id)
    assert (row["state"], row["attempts"], row["lease_owner"]) == (
        "UNKNOWN_REQUIRES_RECOVERY",
        4,
        None,
    )


def test_the_owner_and_its_lease_are_named_at_every_call() -> None:
    # Passed by position, an owner's name and a lease in seconds would be taken in any
    # order; the signature refuses the call before anything is read or written.
    with pytest.raises(TypeError, match="positional"):
        leases.take_over(None, None, "worker:w", 30.0)  # type: ignore[arg-type, call-arg, unused-coroutine]
