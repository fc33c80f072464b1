"""The operations record's writes that age an idempotency key: drop a terminal operation's
stored response (the tombstone stays), then release its key. When each runs is the key
lifecycle's, in `app/idempotency/expiry.py`.

Each write is one statement over a batch: it picks up to `limit` due rows, oldest
completion first, through ix_operations_response_expiry, with SKIP LOCKED (it never waits
on, or holds up, a request working on the same rows), and changes them at once. Only
terminal operations qualify, and both ages count from the completion. The operation row,
its business object and its history are kept.
"""

from __future__ import annotations

import uuid

from app.db.database import Connection


def _batch(conditions: str, changes: str) -> str:
    """Update up to `limit` rows matching `conditions`, oldest completion first."""
    return f"""
        WITH due AS (
            SELECT id FROM operations WHERE {conditions}
            ORDER BY completed_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED
        )
        UPDATE operations SET {changes}, updated_at = now()
        WHERE id IN (SELECT id FROM due)
        RETURNING id
    """


_DROP_RESPONSES = _batch(
    "state IN ('COMPLETED', 'FAILED') AND response_expired_at IS NULL"
    " AND completed_at < now() - make_interval(secs => %(ttl_s)s)",
    "response_body = NULL, response_headers = NULL, response_expired_at = now()",
)
_RELEASE_KEYS = _batch(
    "response_expired_at IS NOT NULL AND idempotency_key IS NOT NULL"
    " AND completed_at < now() - make_interval(secs => %(ttl_s)s)",
    "idempotency_key = NULL, key_released_at = now()",
)


async def drop_responses(
    conn: Connection, *, completed_before_s: int, limit: int
) -> list[uuid.UUID]:
    """Drop the stored responses of up to `limit` terminal operations completed more than
    `completed_before_s` seconds ago, keeping their tombstones; of which operations."""
    cur = await conn.execute(_DROP_RESPONSES, {"ttl_s": completed_before_s, "limit": limit})
    return [row_id for (row_id,) in await cur.fetchall()]


async def release_keys(conn: Connection, *, completed_before_s: int, limit: int) -> list[uuid.UUID]:
    """Free the keys of up to `limit` tombstones completed more than `completed_before_s`
    seconds ago; of which operations."""
    cur = await conn.execute(_RELEASE_KEYS, {"ttl_s": completed_before_s, "limit": limit})
    return [row_id for (row_id,) in await cur.fetchall()]
