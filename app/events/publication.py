"""All SQL on the events' publication to a broker: where each tenant's feed has got to.

The outcome's statement writes its event and nothing more for the broker; a worker with
the broker configured (`app/broker/events.py`) reads each tenant's feed from a position of
its own, as a `GET /events` reader does. So whether a process has a broker is never a
question the payment path asks (the setting is per process: an API that wrote a pending row
only when it had the setting would leave some events without one, and with it but no
worker publishing, rows would pile up unboundedly), and an event costs the outcome's
statement nothing more: no column, no index, no row.

event_publications          one row per exchange: publishing to it began when the first
                            worker publishing there wrote it, and covers every event of a
                            transaction that had not ended by then (`txid >= start_txid`),
                            of every tenant, those created later included
event_publication_cursors   one row per tenant and exchange: the last event the broker
                            confirmed, as the feed orders them (txid, seq); made before
                            each claim for every tenant that has none, at the exchange's
                            start

Order and the horizon: as the feed (`reads.py`), a tenant's events are read in (txid, seq)
order, only below the horizon, the oldest transaction still running. Every transaction below
it has ended, so no event can ever commit behind a position: a cursor that moved past an
event never misses one that commits later (one read above the horizon could: a transaction
that began first and commits last). A transaction held open anywhere holds publishing back
while it lasts, as it does the feed.

Claims: a worker takes the due cursors of tenants with events to publish, `FOR UPDATE SKIP
LOCKED` with a fence bump and a lease (`app/jobs/leases.py`), so two workers never publish a
tenant's events at once and each tenant's go out in its feed's order; different tenants'
go out side by side, from any number of workers. Recording is fenced: a worker whose lease
ran out (another has taken the tenant over) moves nothing. A worker that dies mid-batch
leaves its lease to run out and the batch is published again: at least once, and the
consumers dedupe by event id.

Cost: a claim looks at every tenant (a probe of the cursors' primary key for those without
one) and at every cursor (a probe of `ix_events_feed`, for the first event after it): it
grows with the number of tenants, not with the events.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from app.db.database import Connection
from app.errors import printable
from app.events.reads import HORIZON, EventRow
from app.jobs.leases import new_owner

# A failed attempt's error as stored: text PostgreSQL takes, this long at most.
MAX_ERROR_LENGTH = 1000
# The backlog gauge counts unpublished events up to this many per exchange, so that reading
# it costs at most that much however far publishing has fallen behind (a broker gone for
# days): the oldest one's age says how far.
BACKLOG_COUNT_CAP = 100_000

_BEGIN = f"""
    INSERT INTO event_publications (exchange, start_txid)
    VALUES (%(exchange)s, {HORIZON})
    ON CONFLICT (exchange) DO NOTHING
"""

# Tenants without a cursor yet (new ones) get one at the exchange's start, before each
# claim looks for what is due.
_ADD_CURSORS = """
    INSERT INTO event_publication_cursors (tenant_id, exchange, after_txid, after_seq)
    SELECT t.id, p.exchange, p.start_txid, 0
    FROM event_publications AS p CROSS JOIN tenants AS t
    WHERE p.exchange = %(exchange)s
      AND NOT EXISTS (SELECT FROM event_publication_cursors AS c
                      WHERE c.tenant_id = t.id AND c.exchange = p.exchange)
    ON CONFLICT DO NOTHING
"""

CLAIM_SQL = f"""
    WITH horizon AS MATERIALIZED (
        SELECT {HORIZON} AS txid
    ), picked AS (
        -- Due tenants with an event below the horizon after their position, whose lease
        -- (if any) ran out; one another worker's claim has locked is skipped, not waited
        -- for, and one it claimed meanwhile is checked again on its locked row (READ
        -- COMMITTED re-reads the new version): its lease is live, so it is not picked.
        SELECT c.tenant_id FROM event_publication_cursors AS c
        WHERE c.exchange = %(exchange)s AND c.next_attempt_at <= now()
          AND (c.lease_expires_at IS NULL OR c.lease_expires_at < now())
          AND EXISTS (SELECT FROM events AS e
                      WHERE e.tenant_id = c.tenant_id
                        AND (e.txid, e.seq) > (c.after_txid, c.after_seq)
                        AND e.txid < (SELECT txid FROM horizon))
        ORDER BY c.next_attempt_at, c.tenant_id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE event_publication_cursors AS c
        SET {new_owner("c")}
        FROM picked
        WHERE c.tenant_id = picked.tenant_id AND c.exchange = %(exchange)s
        RETURNING c.tenant_id, c.fence, c.attempts, c.after_txid, c.after_seq
    )
    SELECT c.tenant_id, c.fence, c.attempts,
           e.id, e.tenant_id, e.type, e.data, e.created_at, e.txid, e.seq
    FROM claimed AS c
    CROSS JOIN LATERAL (
        SELECT e.id, e.tenant_id, e.type, e.data, e.created_at, e.txid, e.seq
        FROM events AS e
        WHERE e.tenant_id = c.tenant_id
          AND (e.txid, e.seq) > (c.after_txid, c.after_seq)
          AND e.txid < (SELECT txid FROM horizon)
        ORDER BY e.txid, e.seq
        LIMIT %(batch)s
    ) AS e
    ORDER BY c.tenant_id, e.txid, e.seq
"""

# The position moves to the last event confirmed (none: it stays); the next attempt comes
# at once after a success, after `delay_s` after a failure.
_RECORD = """
    UPDATE event_publication_cursors
    SET after_txid = coalesce(%(txid)s::bigint, after_txid),
        after_seq = coalesce(%(seq)s::bigint, after_seq),
        attempts = CASE WHEN %(error)s::text IS NULL THEN 0 ELSE attempts + 1 END,
        last_error = %(error)s::text,
        next_attempt_at = now() + make_interval(secs => %(delay_s)s),
        lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
    WHERE tenant_id = %(tenant_id)s AND exchange = %(exchange)s AND fence = %(fence)s
    RETURNING fence
"""

# Per exchange: the events after each tenant's position (a tenant without a cursor yet from
# the exchange's start), counted up to the cap, and the age of the oldest of them.
BACKLOG_SQL = f"""
    WITH positions AS (
        SELECT p.exchange, t.id AS tenant_id,
               coalesce(c.after_txid, p.start_txid) AS after_txid,
               coalesce(c.after_seq, 0) AS after_seq
        FROM event_publications AS p
        CROSS JOIN tenants AS t
        LEFT JOIN event_publication_cursors AS c
          ON c.tenant_id = t.id AND c.exchange = p.exchange
    )
    SELECT p.exchange,
           (SELECT count(*) FROM (
                SELECT FROM positions AS c
                CROSS JOIN LATERAL (
                    SELECT FROM events AS e
                    WHERE e.tenant_id = c.tenant_id
                      AND (e.txid, e.seq) > (c.after_txid, c.after_seq)
                    LIMIT {BACKLOG_COUNT_CAP}
                ) AS e
                WHERE c.exchange = p.exchange
                LIMIT {BACKLOG_COUNT_CAP}) AS behind),
           coalesce((SELECT extract(epoch FROM now() - min(first.created_at))
                     FROM positions AS c
                     CROSS JOIN LATERAL (
                         SELECT e.created_at FROM events AS e
                         WHERE e.tenant_id = c.tenant_id
                           AND (e.txid, e.seq) > (c.after_txid, c.after_seq)
                         ORDER BY e.txid, e.seq
                         LIMIT 1
                     ) AS first
                     WHERE c.exchange = p.exchange), 0)
    FROM event_publications AS p
    ORDER BY p.exchange
"""


@dataclass(frozen=True)
class Positioned:
    """An event, and its place in its tenant's feed."""

    event: EventRow
    txid: int
    seq: int


@dataclass(frozen=True)
class Claimed:
    """A tenant's next events to publish to the exchange, leased to this worker."""

    tenant_id: uuid.UUID
    fence: int
    # Failed attempts since the last success: the backoff's exponent if this one fails.
    attempts: int
    events: list[Positioned]


@dataclass(frozen=True)
class Behind:
    """An exchange's backlog: events not yet confirmed (up to the cap), the oldest's age."""

    exchange: str
    unpublished: int
    oldest_s: float


async def begin(conn: Connection, *, exchange: str) -> None:
    """Publishing to `exchange` begins now, unless it began before (then it goes on from
    where each tenant's cursor is)."""
    await conn.execute(_BEGIN, {"exchange": exchange})


async def claim(
    conn: Connection, *, exchange: str, owner: str, lease_s: float, limit: int, batch: int
) -> list[Claimed]:
    """Up to `limit` tenants with events to publish, leased to `owner`, each with its next
    `batch` events below the horizon in its feed's order (tenants new since the last claim
    get their cursor first)."""
    params = {
        "exchange": exchange,
        "owner": owner,
        "lease_s": lease_s,
        "limit": limit,
        "batch": batch,
    }
    await conn.execute(_ADD_CURSORS, {"exchange": exchange})
    rows = await (await conn.execute(CLAIM_SQL, params)).fetchall()
    claimed: dict[uuid.UUID, Claimed] = {}
    for row in rows:
        tenant_id, fence, attempts = row[0], row[1], row[2]
        if tenant_id not in claimed:
            claimed[tenant_id] = Claimed(tenant_id, fence, attempts, [])
        claimed[tenant_id].events.append(Positioned(EventRow(*row[3:8]), row[8], row[9]))
    return list(claimed.values())


async def record(
    conn: Connection,
    *,
    exchange: str,
    claimed: Claimed,
    confirmed: int,
    error: str | None,
    delay_s: float,
) -> bool:
    """Record an attempt at `claimed`: its first `confirmed` events were confirmed by the
    broker (the position moves past them), and, if `error`, the rest were not (tried again
    after `delay_s`). False when a newer owner holds the tenant: nothing moved."""
    last = claimed.events[confirmed - 1] if confirmed else None
    params = {
        "exchange": exchange,
        "tenant_id": claimed.tenant_id,
        "fence": claimed.fence,
        "txid": None if last is None else last.txid,
        "seq": None if last is None else last.seq,
        "error": None if error is None else stored_error(error),
        "delay_s": delay_s if error is not None else 0.0,
    }
    row = await (await conn.execute(_RECORD, params)).fetchone()
    return row is not None


async def backlog(conn: Connection) -> list[Behind]:
    """Every exchange published to: its events not yet confirmed (counted up to
    BACKLOG_COUNT_CAP) and how long the oldest has waited (0 when none has)."""
    rows = await (await conn.execute(BACKLOG_SQL)).fetchall()
    return [Behind(str(row[0]), int(row[1]), float(row[2])) for row in rows]


def stored_error(text: str) -> str:
    """`text` as a cursor's `last_error` can store it: NULs dropped, lone surrogates
    escaped, cut to MAX_ERROR_LENGTH characters."""
    return printable(text.replace("\x00", ""))[:MAX_ERROR_LENGTH]
