"""All writes to operations and their audit trail, in named verbs (reads: `reads.py`).

Three rules hold every write here together:
- the claim is an INSERT that lets the unique key decide races (never SELECT-then-INSERT);
- every change of state goes through the state machine and is audited in the same
  transaction (`_transition`, the one write path for owners);
- every write by an owner is conditional on its fencing token, so an owner that lost its
  lease (paused, slow, presumed dead) cannot overwrite the newer owner's work: the verb then
  returns None and the caller answers with the current state.
Times come from the database clock (`now()`), the one clock every process shares.
    claim          insert-first: the operation in RECEIVED with the claimant's lease
    take_over      one operation whose lease is gone: fence N -> N+1, a new lease
    claim_due      the worker's batch of the same, FOR UPDATE SKIP LOCKED
    mark_sent      send / retry / resend -> PROVIDER_REQUEST_SENT, before the provider call
    record_final   complete / fail -> COMPLETED / FAILED, with the stored response
    defer          defer -> FAILED_RETRYABLE (certainly not processed)
    mark_unknown   lose -> UNKNOWN_REQUIRES_RECOVERY, with the next check scheduled
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from datetime import timedelta
from typing import Any

from sqlalchemy import ColumnElement, func, insert, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.operations.models import Operation, OperationTransition
from app.operations.refs import OwnedRef, Schedule, Snapshot, StoredResponse
from app.operations.states import IN_FLIGHT, MACHINE, TERMINAL, State, Trigger

CLAIM_TRIGGER = "claim"
logger = logging.getLogger("payments.operations")

_TERMINAL_VALUES = [s.value for s in TERMINAL]
# Recording any outcome ends the owner's lease: the next owner needs no takeover wait.
_RELEASE_LEASE: dict[str, Any] = {"lease_owner": None, "lease_expires_at": None}


def _lease_until(lease_s: float) -> Any:
    return func.now() + timedelta(seconds=lease_s)


def _lease_gone() -> ColumnElement[bool]:
    """Nobody holds a live lease: never leased, released, or expired on the database clock."""
    return or_(Operation.lease_expires_at.is_(None), Operation.lease_expires_at <= func.now())


def _new_owner(owner: str, lease_s: float) -> dict[str, Any]:
    """The columns a takeover writes: a fence one higher than the last owner's, a new lease."""
    return {
        "fence": Operation.fence + 1,
        "lease_owner": owner,
        "lease_expires_at": _lease_until(lease_s),
        "updated_at": func.now(),
    }


async def claim(
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
) -> OwnedRef | None:
    """Insert the operation in RECEIVED with the owner's lease; None if the key exists.

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
    if (await session.execute(stmt)).scalar_one_or_none() is None:
        return None
    ref = OwnedRef(id=operation_id, fence=1, state=State.RECEIVED, attempts=0)
    await _audit(session, ref, None, State.RECEIVED, CLAIM_TRIGGER, owner, "request received")
    return ref


async def take_over(
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
            Operation.state.not_in(_TERMINAL_VALUES),
            _lease_gone(),
        )
        .values(**_new_owner(owner, lease_s))
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
    stale = (
        select(Operation.id)
        .where(Operation.state.in_([s.value for s in IN_FLIGHT]), _lease_gone())
        .order_by(Operation.lease_expires_at)
    )
    due = (
        select(Operation.id)
        .where(
            Operation.state == State.UNKNOWN_REQUIRES_RECOVERY.value,
            Operation.next_check_at <= func.now(),
            _lease_gone(),
        )
        .order_by(Operation.next_check_at)
    )
    owned: list[OwnedRef] = []
    for candidates in (stale, due):
        if len(owned) >= limit:
            break
        locked = candidates.limit(limit - len(owned)).with_for_update(skip_locked=True)
        ids = list((await session.execute(locked)).scalars())
        if not ids:
            continue
        stmt = (
            update(Operation)
            .where(Operation.id.in_(ids))
            .values(**_new_owner(owner, lease_s))
            .returning(Operation.id, Operation.fence, Operation.state, Operation.attempts)
        )
        for row in await session.execute(stmt):
            owned.append(OwnedRef(id=row[0], fence=row[1], state=State(row[2]), attempts=row[3]))
    return owned


async def mark_sent(
    session: AsyncSession, ref: OwnedRef, trigger: Trigger, *, actor: str, lease_s: float
) -> OwnedRef | None:
    """PROVIDER_REQUEST_SENT (send, retry or resend), committed before the provider call.

    It renews the lease, fenced: an owner that spent part of its lease on a lookup starts
    the resend with a whole lease ahead of it, longer than the call.
    """
    values = {"lease_expires_at": _lease_until(lease_s)}
    return await _transition(session, ref, trigger, actor, "calling the provider", values)


async def record_final(
    session: AsyncSession,
    ref: OwnedRef,
    trigger: Trigger,
    *,
    actor: str,
    reason: str,
    stored: StoredResponse,
) -> OwnedRef | None:
    """COMPLETED or FAILED, with the response every later request with the key replays."""
    values = {
        **_RELEASE_LEASE,
        "needs_attention": False,
        "next_check_at": None,
        "last_error": None,
        "completed_at": func.now(),
        "response_status": stored.status,
        "response_headers": stored.headers,
        "response_body": stored.body.decode(),
    }
    return await _transition(session, ref, trigger, actor, reason, values)


async def defer(
    session: AsyncSession, ref: OwnedRef, *, actor: str, reason: str
) -> OwnedRef | None:
    """FAILED_RETRYABLE: certainly not processed; the client's retry drives it again."""
    values = {**_RELEASE_LEASE, "last_error": reason}
    return await _transition(session, ref, Trigger.DEFER, actor, reason, values)


async def mark_unknown(
    session: AsyncSession, ref: OwnedRef, *, actor: str, reason: str, schedule: Schedule
) -> OwnedRef | None:
    """UNKNOWN_REQUIRES_RECOVERY, with the next check and attempts the policy decided."""
    values: dict[str, Any] = {
        **_RELEASE_LEASE,
        "last_error": reason,
        "attempts": schedule.attempts,
        "next_check_at": func.now() + timedelta(seconds=schedule.delay_s),
    }
    if schedule.needs_attention:
        values["needs_attention"] = True
    return await _transition(session, ref, Trigger.LOSE, actor, reason, values)


async def _transition(
    session: AsyncSession,
    ref: OwnedRef,
    trigger: Trigger,
    actor: str,
    reason: str,
    values: dict[str, Any],
) -> OwnedRef | None:
    """Fire `trigger` through the state machine and write it, fenced; None if fenced out.

    The UPDATE matches only while the fence and the state are what the owner last saw: if a
    newer owner took over, nothing is written.
    """
    new_state = MACHINE.next_state(ref.state, trigger)
    stmt = (
        update(Operation)
        .where(
            Operation.id == ref.id,
            Operation.fence == ref.fence,
            Operation.state == ref.state.value,
        )
        .values(state=new_state.value, updated_at=func.now(), **values)
        .returning(Operation.attempts)
    )
    attempts = (await session.execute(stmt)).scalar_one_or_none()
    if attempts is None:
        logger.info(
            "fenced out: a newer owner holds the operation",
            extra={"fields": {"operation_id": str(ref.id), "fence": ref.fence}},
        )
        return None
    await _audit(session, ref, ref.state, new_state, trigger.value, actor, reason)
    fields = {"operation_id": str(ref.id), "from_state": ref.state.value, "fence": ref.fence}
    fields |= {"to_state": new_state.value, "trigger": trigger.value, "actor": actor}
    logger.info("operation transition", extra={"fields": fields})
    return replace(ref, state=new_state, attempts=attempts)


async def _audit(
    session: AsyncSession,
    ref: OwnedRef,
    from_state: State | None,
    to_state: State,
    trigger: str,
    actor: str,
    reason: str | None,
) -> None:
    # A plain INSERT, not the ORM unit of work: this runs on every transition.
    await session.execute(
        insert(OperationTransition).values(
            operation_id=ref.id,
            from_state=None if from_state is None else from_state.value,
            to_state=to_state.value,
            trigger=trigger,
            actor=actor,
            reason=reason,
            fence=ref.fence,
        )
    )
