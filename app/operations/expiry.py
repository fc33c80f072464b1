"""The key lifecycle: replayable, then a tombstone, then free.

    created ── key TTL ──> response dropped, tombstone kept ── tombstone TTL ──> key released
    (replays the stored      (422 IDEMPOTENCY_KEY_EXPIRED,         (the key may name a new
     answer)                  never a second payment)               operation)

Both steps run in small batches, each one statement (its own short transaction), with SKIP
LOCKED so they never wait on (or hold up) a request working on the same rows. Only terminal
operations expire: an operation whose outcome is not known yet keeps its key however old it
is. Both ages count from the operation's completion (when its outcome became known), so a
key whose outcome took long to settle still replays it for a full TTL. The operation row, its
payment and its history are kept when the key is released.
"""

from __future__ import annotations

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
    """


_EXPIRE_RESPONSES = _batch(
    "state IN ('COMPLETED', 'FAILED') AND response_expired_at IS NULL"
    " AND completed_at < now() - make_interval(secs => %(ttl_s)s)",
    "response_body = NULL, response_headers = NULL, response_expired_at = now()",
)
_RELEASE_TOMBSTONES = _batch(
    "response_expired_at IS NOT NULL AND idempotency_key IS NOT NULL"
    " AND completed_at < now() - make_interval(secs => %(ttl_s)s)",
    "idempotency_key = NULL, key_released_at = now()",
)


async def expire_responses(conn: Connection, *, key_ttl_s: int, limit: int) -> int:
    """Drop stored responses of terminal operations past the key TTL; how many."""
    cur = await conn.execute(_EXPIRE_RESPONSES, {"ttl_s": key_ttl_s, "limit": limit})
    return cur.rowcount


async def release_tombstones(conn: Connection, *, tombstone_ttl_s: int, limit: int) -> int:
    """Free the keys of tombstones past the tombstone TTL; how many."""
    cur = await conn.execute(_RELEASE_TOMBSTONES, {"ttl_s": tombstone_ttl_s, "limit": limit})
    return cur.rowcount
