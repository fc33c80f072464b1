"""Reading the tenant's events: the feed in publication order, and one event.

Order under concurrent writers. `seq` is taken at insert time, but transactions commit in
another order: a reader that had seen events up to seq 12 could later find seq 11 commit
behind its cursor and never see it. So the feed is ordered by the writing transaction's id
(`txid`), then `seq`, and shows only events whose transaction is older than the oldest one
still running (`pg_snapshot_xmin(pg_current_snapshot())`): every such transaction has
ended, and every transaction that could still add an event has an id at or above that
horizon, so nothing can ever appear behind a position a reader has passed. An event becomes
visible in the feed once every transaction older than its own has ended, which is
milliseconds here (every outcome is one statement); a transaction held open elsewhere holds
the feed back (not webhooks) while it lasts.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.db.database import Connection
from app.db.fragments import Fragment

_COLUMNS = "id, tenant_id, type, data, created_at"
# Below it every transaction has ended: no event can appear behind a position there.
HORIZON = "pg_snapshot_xmin(pg_current_snapshot())::text::bigint"

_FEED = f"""
    SELECT {_COLUMNS} FROM events
    WHERE tenant_id = %(tenant_id)s AND txid < {HORIZON}
    ORDER BY txid, seq
    LIMIT %(limit)s
"""
_FEED_AFTER = f"""
    SELECT {_COLUMNS} FROM events
    WHERE tenant_id = %(tenant_id)s AND txid < {HORIZON}
      AND (txid, seq) > (SELECT txid, seq FROM events
                         WHERE tenant_id = %(tenant_id)s AND id = %(after)s)
    ORDER BY txid, seq
    LIMIT %(limit)s
"""
_ONE = f"SELECT {_COLUMNS} FROM events WHERE tenant_id = %(tenant_id)s AND id = %(id)s"
# The event's part of the operators' search (`app/admin/search.py`), in the search's columns:
# kind, matched, id, tenant_id, operation_id, payment_id, state, amount_minor, currency,
# created_at.
_SEARCHED = (
    "SELECT 'event', 'id', id, tenant_id, operation_id, NULL::uuid, type, NULL::bigint,"
    " NULL::text, created_at FROM events WHERE id = %(event_id)s"
)
_EXISTS = "SELECT EXISTS (SELECT FROM events WHERE tenant_id = %(tenant_id)s AND id = %(id)s)"


@dataclass(frozen=True)
class EventRow:
    id: uuid.UUID
    tenant_id: uuid.UUID
    type: str
    data: dict[str, Any]
    created_at: datetime


async def feed(
    conn: Connection, *, tenant_id: uuid.UUID, after: uuid.UUID | None, limit: int
) -> tuple[list[EventRow], bool]:
    """Up to `limit` events after the event `after` (from the start without), and whether
    there are more. Raises LookupError if `after` is not one of the tenant's events."""
    params = {"tenant_id": tenant_id, "after": after, "limit": limit + 1}
    if after is not None:
        found = await (
            await conn.execute(_EXISTS, {"tenant_id": tenant_id, "id": after})
        ).fetchone()
        if found is None or not found[0]:
            raise LookupError("no such event")
    cursor = await conn.execute(_FEED if after is None else _FEED_AFTER, params)
    rows = [EventRow(*row) for row in await cursor.fetchall()]
    return rows[:limit], len(rows) > limit


async def get(conn: Connection, *, tenant_id: uuid.UUID, event_id: uuid.UUID) -> EventRow | None:
    """The tenant's event; None for another tenant's or none."""
    row = await (await conn.execute(_ONE, {"tenant_id": tenant_id, "id": event_id})).fetchone()
    return None if row is None else EventRow(*row)


def search_by_id(event_id: uuid.UUID) -> Fragment:
    """Any tenant's event with this id (typed as a uuid or as `evt_...`), by primary key."""
    return Fragment(_SEARCHED, {"event_id": event_id})
