"""All SQL on operations and their audit trail.

Three rules hold every write here together:
- the claim is an INSERT that lets the unique key decide races (never SELECT-then-INSERT);
- every change of state goes through the state machine and is audited in the same
  transaction;
- every write by an owner is conditional on its fencing token, so an owner that lost its
  lease (paused, slow, presumed dead) cannot overwrite the newer owner's work.
Times come from the database clock (`now()`), the one clock every process shares.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from sqlalchemy import and_, func, insert, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.idempotency.models import Operation, OperationTransition
from app.idempotency.states import IN_FLIGHT, MACHINE, TERMINAL, State, Trigger

CLAIM_TRIGGER = "claim"
logger = logging.getLogger("payments.operations")


@dataclass(frozen=True)
class OwnedRef:
    """What an owner knows of the operation it holds: enough to make fenced writes."""

    id: uuid.UUID
    fence: int
    state: State
    attempts: int

    def moved(self, state: State) -> OwnedRef:
        return replace(self, state=state)


@dataclass(frozen=True)
class Snapshot:
    """An operation as read, with the flags computed on the database clock."""

    operation: Operation
    lease_live: bool
    key_expired: bool

    @property
    def state(self) -> State:
        return State(self.operation.state)


def _lease_until(lease_s: float) -> Any:
    return func.now() + timedelta(seconds=lease_s)


def _snapshot_query(key_ttl_s: int) -> Any:
    lease_live = and_(
        Operation.lease_expires_at.is_not(None), Operation.lease_expires_at > func.now()
    )
    # A key expires only once its operation is terminal (in-flight work never expires), and
    # its TTL counts from when the outcome became known.
    key_expired = and_(
        Operation.state.in_([s.value for s in TERMINAL]),
        or_(
            Operation.response_expired_at.is_not(None),
            Operation.completed_at < func.now() - timedelta(seconds=key_ttl_s),
        ),
    )
    return select(Operation, lease_live.label("lease_live"), key_expired.label("key_expired"))


async def insert_claim(
    session: AsyncSession,
    *,
    operation_id: uuid.UUID,
    tenant_id: uuid.UUID,
    operation_name: str,
    idempotency_key: str,
    fingerprint: str,
    payment_id: uuid.UUID,
    owner: str,
    lease_s: float,
) -> bool:
    """Insert the operation in RECEIVED with the owner's lease; False if the key exists.

    ON CONFLICT DO NOTHING on the scoped key: a concurrent duplicate waits for the winner's
    transaction and then inserts nothing. Only the winner goes on to create the payment.
    """
    stmt = (
        pg_insert(Operation)
        .values(
            id=operation_id,
            tenant_id=tenant_id,
            operation_name=operation_name,
            idempotency_key=idempotency_key,
            fingerprint=fingerprint,
            state=State.RECEIVED.value,
            payment_id=payment_id,
            lease_owner=owner,
            lease_expires_at=_lease_until(lease_s),
            fence=1,
        )
        .on_conflict_do_nothing(index_elements=["tenant_id", "operation_name", "idempotency_key"])
        .returning(Operation.id)
    )
    inserted = (await session.execute(stmt)).scalar_one_or_none()
    if inserted is None:
        return False
    await _audit(
        session,
        operation_id=operation_id,
        from_state=None,
        to_state=State.RECEIVED,
        trigger=CLAIM_TRIGGER,
        actor=owner,
        reason="request received",
        fence=1,
    )
    return True


async def find_by_key(
    session: AsyncSession,
    *,
    tenant_id: uuid.UUID,
    operation_name: str,
    idempotency_key: str,
    key_ttl_s: int,
) -> Snapshot | None:
    """The tenant's operation with this key, if any."""
    stmt = _snapshot_query(key_ttl_s).where(
        Operation.tenant_id == tenant_id,
        Operation.operation_name == operation_name,
        Operation.idempotency_key == idempotency_key,
    )
    row = (await session.execute(stmt)).one_or_none()
    return None if row is None else Snapshot(row[0], bool(row[1]), bool(row[2]))


async def get_snapshot(
    session: AsyncSession,
    operation_id: uuid.UUID,
    *,
    key_ttl_s: int,
    tenant_id: uuid.UUID | None = None,
) -> Snapshot | None:
    """The operation by id; scoped to `tenant_id` when given."""
    stmt = _snapshot_query(key_ttl_s).where(Operation.id == operation_id)
    if tenant_id is not None:
        stmt = stmt.where(Operation.tenant_id == tenant_id)
    row = (await session.execute(stmt)).one_or_none()
    return None if row is None else Snapshot(row[0], bool(row[1]), bool(row[2]))


async def apply(
    session: AsyncSession,
    ref: OwnedRef,
    trigger: Trigger,
    *,
    actor: str,
    reason: str | None,
    changes: dict[str, Any] | None = None,
) -> OwnedRef | None:
    """Fire `trigger` through the state machine and write it, fenced; None if fenced out.

    The UPDATE matches only while the fence and the state are what the owner last saw: if a
    newer owner took over, nothing is written and the caller answers with the current state.
    """
    new_state = MACHINE.next_state(ref.state, trigger)
    values: dict[str, Any] = {"state": new_state.value, "updated_at": func.now()}
    values.update(changes or {})
    stmt = (
        update(Operation)
        .where(
            Operation.id == ref.id,
            Operation.fence == ref.fence,
            Operation.state == ref.state.value,
        )
        .values(**values)
        .returning(Operation.attempts)
    )
    attempts = (await session.execute(stmt)).scalar_one_or_none()
    if attempts is None:
        return None
    await _audit(
        session,
        operation_id=ref.id,
        from_state=ref.state,
        to_state=new_state,
        trigger=trigger.value,
        actor=actor,
        reason=reason,
        fence=ref.fence,
    )
    logger.info(
        "operation transition",
        extra={
            "fields": {
                "operation_id": str(ref.id),
                "from_state": ref.state.value,
                "to_state": new_state.value,
                "trigger": trigger.value,
                "actor": actor,
                "fence": ref.fence,
            }
        },
    )
    return replace(ref, state=new_state, attempts=attempts)


async def take_ownership(
    session: AsyncSession, snapshot: Snapshot, *, owner: str, lease_s: float
) -> OwnedRef | None:
    """Become the operation's owner if nobody holds a live lease on it; None otherwise.

    A conditional UPDATE on the fence the caller saw: of two contenders only one can move
    the fence from N to N+1, the other matches no row. A row another transaction holds is
    skipped rather than waited for (SKIP LOCKED): its holder is working on it.
    """
    op = snapshot.operation
    unlocked = (
        select(Operation.id)
        .where(Operation.id == op.id)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    stmt = (
        update(Operation)
        .where(
            Operation.id == unlocked,
            Operation.fence == op.fence,
            Operation.state.not_in([s.value for s in TERMINAL]),
            or_(Operation.lease_expires_at.is_(None), Operation.lease_expires_at <= func.now()),
        )
        .values(
            fence=Operation.fence + 1,
            lease_owner=owner,
            lease_expires_at=_lease_until(lease_s),
            updated_at=func.now(),
        )
        .returning(Operation.fence, Operation.state, Operation.attempts)
    )
    row = (await session.execute(stmt)).one_or_none()
    if row is None:
        return None
    return OwnedRef(id=op.id, fence=row[0], state=State(row[1]), attempts=row[2])


async def claim_due(
    session: AsyncSession, *, owner: str, lease_s: float, limit: int
) -> list[OwnedRef]:
    """Take recovery ownership of up to `limit` operations that need it.

    Two kinds are due: in-flight operations whose owner's lease expired (the owner crashed
    or hung), and unknown operations whose next check has come. FOR UPDATE SKIP LOCKED lets
    any number of workers claim at once without waiting on, or sharing, a row.
    """
    expired_lease = or_(
        Operation.lease_expires_at.is_(None), Operation.lease_expires_at <= func.now()
    )
    stale = (
        select(Operation.id)
        .where(Operation.state.in_([s.value for s in IN_FLIGHT]), expired_lease)
        .order_by(Operation.lease_expires_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    due = (
        select(Operation.id)
        .where(
            Operation.state == State.UNKNOWN_REQUIRES_RECOVERY.value,
            Operation.next_check_at <= func.now(),
            expired_lease,
        )
        .order_by(Operation.next_check_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    owned: list[OwnedRef] = []
    for candidates in (stale, due):
        if len(owned) >= limit:
            break
        ids = list((await session.execute(candidates.limit(limit - len(owned)))).scalars())
        if not ids:
            continue
        stmt = (
            update(Operation)
            .where(Operation.id.in_(ids))
            .values(
                fence=Operation.fence + 1,
                lease_owner=owner,
                lease_expires_at=_lease_until(lease_s),
                updated_at=func.now(),
            )
            .returning(Operation.id, Operation.fence, Operation.state, Operation.attempts)
        )
        for row in await session.execute(stmt):
            owned.append(OwnedRef(id=row[0], fence=row[1], state=State(row[2]), attempts=row[3]))
    return owned


async def release(session: AsyncSession, ref: OwnedRef) -> bool:
    """Give up a lease without changing state (a worker shutting down); fenced."""
    stmt = (
        update(Operation)
        .where(Operation.id == ref.id, Operation.fence == ref.fence)
        .values(lease_owner=None, lease_expires_at=func.now(), updated_at=func.now())
        .returning(Operation.id)
    )
    return (await session.execute(stmt)).scalar_one_or_none() is not None


async def history(session: AsyncSession, operation_id: uuid.UUID) -> list[OperationTransition]:
    """The operation's audited transitions, oldest first."""
    stmt = (
        select(OperationTransition)
        .where(OperationTransition.operation_id == operation_id)
        .order_by(OperationTransition.id)
    )
    return list((await session.execute(stmt)).scalars())


async def _audit(
    session: AsyncSession,
    *,
    operation_id: uuid.UUID,
    from_state: State | None,
    to_state: State,
    trigger: str,
    actor: str,
    reason: str | None,
    fence: int,
) -> None:
    # A plain INSERT, not the ORM unit of work: this runs on every transition.
    await session.execute(
        insert(OperationTransition).values(
            operation_id=operation_id,
            from_state=None if from_state is None else from_state.value,
            to_state=to_state.value,
            trigger=trigger,
            actor=actor,
            reason=reason,
            fence=fence,
        )
    )
