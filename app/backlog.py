"""The backlog gauges' reading: the operations record's, the webhook deliveries', the
discrepancy queue's, the providers' notifications inbox's and the events' publication's.

`app/observability/metrics.py` holds the gauges and knows no table; this module, at the top
of the layers, asks each owner for its part: the operations record
(`app/operations/backlog.py`), the deliveries (`app/webhooks/deliveries.py`'s `pending`),
the queue (`app/settlement/queue.py`'s `open_by_kind`) and the inbox
(`app/provider_events/operator_reads.py`'s `pending_by_state` and `contradicted`), and the
publication to the broker (`app/events/publication.py`'s `backlog`). `/metrics` (`app/health.py`)
reads it at most every `PAYMENTS_METRICS_BACKLOG_REFRESH_S`, the worker after each pass of
its recovery job (`worker/main.py`).
"""

from __future__ import annotations

from app.db.database import Connection, Database
from app.events.publication import backlog as publication_backlog
from app.observability.metrics import Backlog, Metrics
from app.operations.backlog import backlog as operations_backlog
from app.provider_events.operator_reads import contradicted, pending_by_state
from app.settlement.queue import open_by_kind
from app.webhooks.deliveries import pending


async def read_backlog(conn: Connection) -> Backlog:
    """The backlog as it is now: six statements, each through indexes only (the third,
    the discrepancy queue's open items by kind and the oldest one's age, reads the
    partial index ix_reconciliation_items_open: `app/settlement/queue.py`; the fourth,
    the inbox's events not yet applied, ix_provider_events_due, and the fifth, its
    contradicted ones, ix_provider_events_contradicted; the sixth, the events after each
    tenant's publication cursor, ix_events_feed, counted up to a cap)."""
    operations = await operations_backlog(conn)
    events_pending, oldest_pending = await pending(conn)
    open_items, oldest_open = await open_by_kind(conn)
    inbox_pending = await pending_by_state(conn)
    inbox_contradicted = await contradicted(conn)
    behind = await publication_backlog(conn)
    return Backlog(
        oldest_in_flight_s=operations.oldest_in_flight_s,
        unknown=operations.unknown,
        needs_attention=operations.needs_attention,
        webhook_events_pending=events_pending,
        webhook_oldest_pending_s=oldest_pending,
        discrepancies_open=open_items,
        discrepancies_oldest_open_s=oldest_open or 0.0,
        provider_events_pending=inbox_pending,
        provider_events_contradicted=inbox_contradicted,
        broker_events_unpublished={b.exchange: b.unpublished for b in behind},
        broker_oldest_unpublished_s={b.exchange: b.oldest_s for b in behind},
    )


async def refresh_backlog(db: Database, metrics: Metrics) -> None:
    """Read the backlog afresh and set the gauges."""
    async with db.connection() as conn:
        metrics.record_backlog(await read_backlog(conn))
