"""The key lifecycle: replayable, then a tombstone, then free.

    created ── key TTL ──> response dropped, tombstone kept ── tombstone TTL ──> key released
    (replays the stored      (422 IDEMPOTENCY_KEY_EXPIRED,         (the key may name a new
     answer)                  never a second payment)               operation)

Both steps run in small batches, each its own short transaction, with SKIP LOCKED so they
never wait on (or hold up) a request working on the same rows. Only terminal operations
expire: an operation whose outcome is not known yet keeps its key however old it is.
Both ages count from the operation's completion (when its outcome became known), so a key
whose outcome took long to settle still replays it for a full TTL. The operation row, its
payment and its history are kept when the key is released.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.operations.models import Operation
from app.operations.states import TERMINAL

_TERMINAL = [s.value for s in TERMINAL]


async def _update_batch(
    session: AsyncSession, conditions: list[Any], values: dict[str, Any], limit: int
) -> int:
    """Update up to `limit` rows matching `conditions`, oldest completion first; how many."""
    due = (
        select(Operation.id)
        .where(*conditions)
        .order_by(Operation.completed_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    stmt = (
        update(Operation)
        .where(Operation.id.in_(due.scalar_subquery()))
        .values(**values, updated_at=func.now())
        .returning(Operation.id)
    )
    return len((await session.execute(stmt)).all())


async def expire_responses(session: AsyncSession, *, key_ttl_s: int, limit: int) -> int:
    """Drop stored responses of terminal operations past the key TTL; how many."""
    return await _update_batch(
        session,
        [
            Operation.state.in_(_TERMINAL),
            Operation.response_expired_at.is_(None),
            Operation.completed_at < func.now() - timedelta(seconds=key_ttl_s),
        ],
        {"response_body": None, "response_headers": None, "response_expired_at": func.now()},
        limit,
    )


async def release_tombstones(session: AsyncSession, *, tombstone_ttl_s: int, limit: int) -> int:
    """Free the keys of tombstones past the tombstone TTL; how many."""
    return await _update_batch(
        session,
        [
            Operation.response_expired_at.is_not(None),
            Operation.idempotency_key.is_not(None),
            Operation.completed_at < func.now() - timedelta(seconds=tombstone_ttl_s),
        ],
        {"idempotency_key": None, "key_released_at": func.now()},
        limit,
    )
