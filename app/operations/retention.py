"""The operations record's writes that age an idempotency key: drop a terminal operation's
stored response (the tombstone stays), then release its key. When each runs is the key
lifecycle's, in `app/idempotency/expiry.py`.

A batch is a plain read, then one statement per tenant. The read picks up to `limit` due
rows, oldest completion first, through ix_operations_response_expiry (or
ix_operations_tombstone_release), across tenants and without a lock. Each tenant's
statement then locks its rows of those, by primary key and `tenant_id`, with SKIP LOCKED (it
never waits on, or holds up, a request working on the same rows), checks again that each is
still due, and changes them at once. Only terminal operations qualify, and both ages count
from the completion. The operation row, its business object and its history are kept; a
released key's row in `idempotency_keys` is deleted by the same statement, so the key may
name a new operation.

Why two steps: a row lock is one tenant's, and on Citus only a statement routed to one
shard group may take it (an UPDATE across shards with a LIMIT subquery is not routable;
docs/scaling.md). The read hands each tenant's statement the ids it found, so that
statement reads only its own rows, by primary key: a claim by tenant over these indexes
(which do not lead with tenant_id) would walk the older rows of every other tenant first.
It hands over each row's day too (`created_at`): on `operations` partitioned by day, the
tenant's statement then reads the partitions of those days alone, not every day kept.
Unlike the worker's recovery there is nothing to be fair about: every due row is done,
oldest first.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from app.db.database import Connection


def _due(conditions: str) -> str:
    """Up to `limit` rows matching `conditions`, oldest completion first: a plain read."""
    return f"""
        SELECT tenant_id, id, created_at FROM operations WHERE {conditions}
        ORDER BY completed_at LIMIT %(limit)s
    """


def _batch(conditions: str, changes: str, also: str = "") -> str:
    """One tenant's rows of `ids` that still match `conditions`, changed at once (and
    `also`, more CTEs reading `due`, in the same statement). `days` are the rows'
    `created_at`: an id is unique, so naming every row's day with every id matches the same
    rows, on their days' partitions only."""
    return f"""
        WITH due AS (
            SELECT id, operation_name, idempotency_key FROM operations
            WHERE tenant_id = %(tenant_id)s AND id = ANY(%(ids)s)
              AND created_at = ANY(%(days)s) AND {conditions}
            FOR UPDATE SKIP LOCKED
        ){also}
        UPDATE operations SET {changes}, updated_at = now()
        WHERE tenant_id = %(tenant_id)s AND created_at = ANY(%(days)s)
          AND id IN (SELECT id FROM due)
        RETURNING id
    """


# A released key's row goes with it, in the same statement: the key may then name a new
# operation. Only the row naming this operation (the one the key's claim inserted).
_KEY_ROWS = """, released AS (
            DELETE FROM idempotency_keys AS k USING due
            WHERE k.tenant_id = %(tenant_id)s AND k.operation_name = due.operation_name
              AND k.idempotency_key = due.idempotency_key AND k.operation_id = due.id
        )"""


@dataclass(frozen=True)
class _Step:
    """A retention write: which rows are due, and what it changes on them."""

    due: str
    batch: str

    @classmethod
    def of(cls, conditions: str, changes: str, also: str = "") -> _Step:
        return cls(_due(conditions), _batch(conditions, changes, also))

    async def run(self, conn: Connection, ttl_s: int, limit: int) -> list[uuid.UUID]:
        rows = await (await conn.execute(self.due, {"ttl_s": ttl_s, "limit": limit})).fetchall()
        by_tenant: dict[uuid.UUID, dict[uuid.UUID, datetime]] = {}
        for tenant_id, row_id, created_at in rows:
            by_tenant.setdefault(tenant_id, {})[row_id] = created_at
        changed: list[uuid.UUID] = []
        for tenant_id, found in by_tenant.items():
            days = sorted(set(found.values()))
            params = {"tenant_id": tenant_id, "ids": list(found), "days": days, "ttl_s": ttl_s}
            cur = await conn.execute(self.batch, params)
            changed.extend(row_id for (row_id,) in await cur.fetchall())
        return changed


_DROP_RESPONSES = _Step.of(
    "state IN ('COMPLETED', 'FAILED') AND response_expired_at IS NULL"
    " AND completed_at < now() - make_interval(secs => %(ttl_s)s)",
    "response_body = NULL, response_headers = NULL, response_expired_at = now()",
)
_RELEASE_KEYS = _Step.of(
    "response_expired_at IS NOT NULL AND idempotency_key IS NOT NULL"
    " AND completed_at < now() - make_interval(secs => %(ttl_s)s)",
    "idempotency_key = NULL, key_released_at = now()",
    _KEY_ROWS,
)


async def drop_responses(
    conn: Connection, *, completed_before_s: int, limit: int
) -> list[uuid.UUID]:
    """Drop the stored responses of up to `limit` terminal operations completed more than
    `completed_before_s` seconds ago, keeping their tombstones; of which operations."""
    return await _DROP_RESPONSES.run(conn, completed_before_s, limit)


async def release_keys(conn: Connection, *, completed_before_s: int, limit: int) -> list[uuid.UUID]:
    """Free the keys of up to `limit` tombstones completed more than `completed_before_s`
    seconds ago; of which operations."""
    return await _RELEASE_KEYS.run(conn, completed_before_s, limit)
