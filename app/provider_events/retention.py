"""The inbox's retention: events done with are deleted once they are old enough.

An `applied`, `rejected` or `contradicted` event has told us all it will: what it said is in
the operation's history (its reconciliation), in the discrepancy queue (a contradiction: the
item keeps its event id and the record it carried) or nowhere (a type no kind makes), and its
row is kept only for
operators to read and for its event id to answer a redelivery `duplicate`. After
PAYMENTS_PROVIDER_EVENTS_RETENTION_DAYS (from its arrival) the worker's expire pass deletes
it, in batches of PAYMENTS_EXPIRE_BATCH_SIZE, oldest first, through a partial index of just
those rows (`ix_provider_events_done`), each batch its own short statement with SKIP LOCKED
(it never waits on, or holds up, an apply under way). A `parked` event is kept, however old:
it still names something not matched (a key no operation has, left to settlement) or not
settled, and it is what operators look at. A `received` one is not done yet.

The retention should outlast the provider's own retry window (an hour for the fake provider,
days for real ones): a delivery of an event whose row is gone is kept again as new and
applied again, which changes nothing (applying reconciles; a final operation is not written
again), but it is counted `stored`, not `duplicate`.
"""

from __future__ import annotations

import asyncio
import logging

from app.db.database import Connection, Database
from app.provider_events.rows import DONE

logger = logging.getLogger("payments.provider_events")

# The states as literals: the partial index's own predicate (`models.py`).
_DONE = ", ".join(f"'{state.value}'" for state in DONE)
_DELETE_DONE = f"""
    DELETE FROM provider_events
    WHERE id IN (
        SELECT id FROM provider_events
        WHERE state IN ({_DONE})
          AND received_at < now() - make_interval(days => %(days)s)
        ORDER BY received_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED)
"""


async def delete_done(conn: Connection, *, retention_days: int, limit: int) -> int:
    """Delete up to `limit` events done with (applied, rejected, contradicted) received
    more than `retention_days` days ago, oldest first; how many."""
    cursor = await conn.execute(_DELETE_DONE, {"days": retention_days, "limit": limit})
    return cursor.rowcount


async def prune_inbox(
    db: Database, *, retention_days: int, batch: int, stopping: asyncio.Event
) -> int:
    """The expire pass's share: batch after batch until one comes back short (or stopping);
    how many events were deleted. `retention_days` 0 keeps every event."""
    if retention_days <= 0:
        return 0
    deleted = 0
    while not stopping.is_set():
        async with db.connection() as conn:
            count = await delete_done(conn, retention_days=retention_days, limit=batch)
        deleted += count
        if count < batch:
            break
    if deleted:
        logger.info(
            "provider events past their retention deleted",
            extra={"fields": {"deleted": deleted, "retention_days": retention_days}},
        )
    return deleted
