"""Reads of operations and their audit trail (all writes are in `repository.py`)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.operations.models import Operation, OperationTransition
from app.operations.refs import OwnedRef, Snapshot
from app.operations.states import TERMINAL, State


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


async def history(session: AsyncSession, operation_id: uuid.UUID) -> list[OperationTransition]:
    """The operation's audited transitions, oldest first."""
    stmt = (
        select(OperationTransition)
        .where(OperationTransition.operation_id == operation_id)
        .order_by(OperationTransition.id)
    )
    return list((await session.execute(stmt)).scalars())


async def owned(session: AsyncSession, ref: OwnedRef) -> OwnedRef | None:
    """The operation's current state and attempts, if `ref`'s fence still holds it."""
    stmt = select(Operation.state, Operation.attempts).where(
        Operation.id == ref.id, Operation.fence == ref.fence
    )
    row = (await session.execute(stmt)).one_or_none()
    if row is None:
        return None
    return OwnedRef(id=ref.id, fence=ref.fence, state=State(row[0]), attempts=row[1])
