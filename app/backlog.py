"""The backlog gauges' reading: the operations record's, the webhook deliveries' and the
discrepancy queue's.

`app/observability/metrics.py` holds the gauges and knows no table; this module, at the top
of the layers, knows the operations' states, the deliveries' table and the queue's.
`/metrics` (`app/health.py`) reads it at most every `PAYMENTS_METRICS_BACKLOG_REFRESH_S`, the
worker after each pass of its recovery job (`worker/main.py`).
"""

from __future__ import annotations

from app.db.database import Connection, Database
from app.observability.metrics import Backlog, Metrics
from app.operations.states import IN_FLIGHT, State
from app.settlement.queue import open_by_kind

# Each figure from an index, never a scan of the table (which holds every operation ever
# made): the oldest in flight is the first entry of each in-flight state in
# ix_operations_state_created (state, created_at, id), the unknown ones are counted in
# ix_operations_recovery_due (partial: only those rows), the flagged ones in
# ix_operations_needs_attention (partial too). So a scrape costs what the backlog holds,
# not what the table does: on 150,000 operations 2,500 of them in flight, one statement
# over the whole table took about 100 ms; these take well under a millisecond.
_OLDEST_IN_FLIGHT = " , ".join(
    f"(SELECT min(created_at) FROM operations WHERE state = '{state.value}')"
    for state in sorted(IN_FLIGHT)
)
_BACKLOG_SQL = f"""
    SELECT
      coalesce(extract(epoch FROM now() - least({_OLDEST_IN_FLIGHT})), 0) AS oldest,
      (SELECT count(*) FROM operations
        WHERE state = '{State.UNKNOWN_REQUIRES_RECOVERY.value}') AS unknown,
      (SELECT count(*) FROM operations WHERE needs_attention) AS attention
    """

# Webhooks: events with a delivery still pending, and how long the oldest has waited (since
# its event, or its redelivery, was queued); read through ix_webhook_deliveries_due (partial:
# pending rows only).
_WEBHOOK_BACKLOG_SQL = """
    SELECT count(DISTINCT event_id),
           coalesce(extract(epoch FROM now() - min(started_at)), 0)
    FROM webhook_deliveries
    WHERE status = 'pending'
    """


async def read_backlog(conn: Connection) -> Backlog:
    """The backlog as it is now: three statements, each through indexes only (the third,
    the discrepancy queue's open items by kind and the oldest one's age, reads the
    partial index ix_reconciliation_items_open: `app/settlement/queue.py`)."""
    row = await (await conn.execute(_BACKLOG_SQL)).fetchone()
    assert row is not None, "an aggregate always has a row"
    oldest, unknown, attention = row
    row = await (await conn.execute(_WEBHOOK_BACKLOG_SQL)).fetchone()
    assert row is not None, "an aggregate always has a row"
    open_items, oldest_open = await open_by_kind(conn)
    return Backlog(
        oldest_in_flight_s=float(oldest),
        unknown=int(unknown),
        needs_attention=int(attention),
        webhook_events_pending=int(row[0]),
        webhook_oldest_pending_s=float(row[1]),
        discrepancies_open=open_items,
        discrepancies_oldest_open_s=oldest_open or 0.0,
    )


async def refresh_backlog(db: Database, metrics: Metrics) -> None:
    """Read the backlog afresh and set the gauges."""
    async with db.connection() as conn:
        metrics.record_backlog(await read_backlog(conn))
