"""All SQL on webhook deliveries: the workers' claim, recording an attempt, redelivery,
what is pending (the backlog gauges').

A delivery is sent by whoever holds its lease. The claim takes due deliveries with
`FOR UPDATE SKIP LOCKED` and a fence bump (the rule operations share, `app/jobs/leases.py`),
so two workers never hold one delivery and no attempt is sent twice at once; a worker that
dies mid-attempt leaves its lease to run out, and the delivery is claimed again (at least
once). Recording an attempt is fenced: a worker
whose lease ran out records its attempt but cannot move the delivery a newer owner holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.db.database import Connection
from app.errors import printable
from app.events.reads import EventRow
from app.jobs.leases import new_owner

# An attempt's error as stored: text PostgreSQL takes (no NUL, no lone surrogate), this long
# at most.
MAX_ERROR_LENGTH = 1000

# The per-endpoint cap keeps one slow or dead endpoint from taking every slot: each claim
# takes at most `per_endpoint - in flight here` deliveries of an endpoint. The per-tenant
# cap does the same for a tenant's endpoints together (many slow endpoints of one tenant):
# of the deliveries the endpoint cap leaves, at most `per_tenant - in flight here` of a
# tenant's. Both count this worker's attempts under way, as its slots are its own.
#
# The endpoint cap is applied where the rows are read, from `ix_webhook_deliveries_endpoint_due`
# (pending: endpoint, next attempt, id): the endpoints with pending deliveries are found one
# index descent each (a loose scan: from one endpoint to the next), and of those with
# something due, each one's oldest due deliveries come from its own range, at most its cap.
# What the tenant ranking and the final order sort is at most `endpoints x per_endpoint`
# rows, however many are due; an endpoint with nothing pending costs nothing. Ranking every
# due delivery instead grew with every backlog: a tenant whose dead endpoints retry for
# three days keeps tens of thousands due, all read and sorted by every claim of every
# worker. What is picked is the same (`bench/webhook_claim.py` checks it on a million).
_CLAIM = f"""
    WITH RECURSIVE busy AS (
        SELECT * FROM unnest(%(busy_ids)s::uuid[], %(busy_counts)s::int[])
            AS busy (endpoint_id, in_flight)
    ), busy_tenants AS (
        SELECT * FROM unnest(%(busy_tenant_ids)s::uuid[], %(busy_tenant_counts)s::int[])
            AS busy_tenants (tenant_id, in_flight)
    ), endpoints AS (
        -- The endpoints with pending deliveries, each with its earliest next attempt: one
        -- descent of the index per endpoint, from one endpoint to the next (a deleted
        -- endpoint's too: a delivery queued as it was deleted is claimed to be cancelled).
        (SELECT endpoint_id, next_attempt_at FROM webhook_deliveries
         WHERE status = 'pending' ORDER BY endpoint_id, next_attempt_at LIMIT 1)
        UNION ALL
        SELECT later.endpoint_id, later.next_attempt_at
        FROM endpoints AS e
        CROSS JOIN LATERAL (
            SELECT d.endpoint_id, d.next_attempt_at FROM webhook_deliveries AS d
            WHERE d.status = 'pending' AND d.endpoint_id > e.endpoint_id
            ORDER BY d.endpoint_id, d.next_attempt_at
            LIMIT 1
        ) AS later
    ), candidates AS (
        -- Of each endpoint with something due, its oldest due deliveries, at most its cap.
        SELECT d.id, d.tenant_id, d.next_attempt_at
        FROM endpoints AS e
        LEFT JOIN busy USING (endpoint_id)
        CROSS JOIN LATERAL (
            SELECT d.id, d.tenant_id, d.next_attempt_at
            FROM webhook_deliveries AS d
            WHERE d.endpoint_id = e.endpoint_id AND d.status = 'pending'
              AND d.next_attempt_at <= now()
              AND (d.lease_expires_at IS NULL OR d.lease_expires_at < now())
            ORDER BY d.next_attempt_at, d.id
            LIMIT greatest(%(per_endpoint)s - coalesce(busy.in_flight, 0), 0)
        ) AS d
        WHERE e.next_attempt_at <= now()
    ), per_tenant AS (
        SELECT c.id, c.next_attempt_at,
               row_number() OVER (PARTITION BY c.tenant_id
                                  ORDER BY c.next_attempt_at, c.id) AS rank,
               coalesce(bt.in_flight, 0) AS in_flight
        FROM candidates AS c LEFT JOIN busy_tenants AS bt USING (tenant_id)
    ), picked AS (
        -- In order, each candidate locked by its key unless another transaction holds it
        -- (or it has just been claimed), until `limit` are: only those are locked. A
        -- LATERAL with a locking clause runs as a nested loop over `c`, in `c`'s order.
        SELECT locked.id
        FROM (SELECT id, next_attempt_at FROM per_tenant
              WHERE rank <= %(per_tenant)s - in_flight
              ORDER BY next_attempt_at, id) AS c
        CROSS JOIN LATERAL (
            SELECT d.id FROM webhook_deliveries AS d
            WHERE d.id = c.id AND d.status = 'pending'
              AND (d.lease_expires_at IS NULL OR d.lease_expires_at < now())
            FOR UPDATE SKIP LOCKED
        ) AS locked
        LIMIT %(limit)s
    ), claimed AS (
        -- Checked again on the locked row: another worker may have claimed it meanwhile.
        UPDATE webhook_deliveries AS d
        SET {new_owner("d")}
        FROM picked
        WHERE d.id = picked.id AND d.status = 'pending'
          AND (d.lease_expires_at IS NULL OR d.lease_expires_at < now())
        RETURNING d.id, d.fence, d.attempt_count, d.endpoint_id, d.event_id
    )
    SELECT c.id, c.fence, c.attempt_count, c.endpoint_id, e.url,
           array_remove(ARRAY[e.secret, CASE WHEN e.previous_secret_expires_at > now()
                                             THEN e.previous_secret END], NULL),
           ev.id, ev.tenant_id, ev.type, ev.data, ev.created_at,
           e.deleted_at IS NOT NULL
    FROM claimed AS c
    JOIN webhook_endpoints AS e ON e.id = c.endpoint_id
    JOIN events AS ev ON ev.id = c.event_id
"""

_RECORD = """
    WITH attempt AS (
        INSERT INTO webhook_attempts
            (tenant_id, delivery_id, worker, succeeded, status_code, error, latency_ms)
        SELECT tenant_id, id, %(worker)s, %(ok)s, %(status_code)s, %(error)s, %(latency_ms)s
        FROM webhook_deliveries WHERE id = %(id)s
    ), moved AS (
        UPDATE webhook_deliveries
        SET attempt_count = attempt_count + 1, last_status_code = %(status_code)s,
            last_error = %(error)s, last_attempt_at = now(), updated_at = now(),
            lease_owner = NULL, lease_expires_at = NULL,
            status = CASE
                WHEN %(ok)s THEN 'succeeded'
                WHEN now() + make_interval(secs => %(delay_s)s)
                     > started_at + make_interval(secs => %(max_age_s)s) THEN 'failed'
                ELSE 'pending' END,
            next_attempt_at = CASE
                WHEN %(ok)s THEN NULL
                WHEN now() + make_interval(secs => %(delay_s)s)
                     > started_at + make_interval(secs => %(max_age_s)s) THEN NULL
                ELSE now() + make_interval(secs => %(delay_s)s) END,
            completed_at = CASE
                WHEN %(ok)s OR now() + make_interval(secs => %(delay_s)s)
                     > started_at + make_interval(secs => %(max_age_s)s) THEN now() END
        WHERE id = %(id)s AND fence = %(fence)s AND status = 'pending'
        RETURNING status
    )
    SELECT status FROM moved
"""

# Redelivery: every endpoint subscribed to the event's type now gets it again, its retry
# window restarted; a delivery already pending is left as it is.
_REDELIVER = """
    WITH event AS (
        SELECT id, tenant_id, type FROM events WHERE tenant_id = %(tenant_id)s AND id = %(id)s
    ), queued AS (
        INSERT INTO webhook_deliveries (id, tenant_id, event_id, endpoint_id)
        SELECT gen_random_uuid(), event.tenant_id, event.id, endpoint.id
        FROM event
        JOIN webhook_endpoints AS endpoint ON endpoint.tenant_id = event.tenant_id
        WHERE endpoint.deleted_at IS NULL
          AND (endpoint.event_types IS NULL OR event.type = ANY (endpoint.event_types))
        ON CONFLICT (tenant_id, event_id, endpoint_id) DO UPDATE
        SET status = 'pending', next_attempt_at = now(), started_at = now(),
            completed_at = NULL, updated_at = now()
        WHERE webhook_deliveries.status <> 'pending'
        RETURNING id
    )
    SELECT (SELECT count(*) FROM event), (SELECT count(*) FROM queued)
"""


@dataclass(frozen=True)
class Claimed:
    """A delivery this worker holds: what to send, where, signed with which secrets."""

    id: uuid.UUID
    fence: int
    attempt_count: int
    endpoint_id: uuid.UUID
    url: str
    secrets: list[str]
    event: EventRow
    # Deleted after this delivery was queued (the fan-out raced the delete): not sent.
    endpoint_deleted: bool = False


async def claim(
    conn: Connection,
    *,
    owner: str,
    lease_s: float,
    limit: int,
    per_endpoint: int,
    in_flight: Mapping[uuid.UUID, int],
    per_tenant: int,
    tenants_in_flight: Mapping[uuid.UUID, int],
) -> list[Claimed]:
    """Up to `limit` due deliveries, leased to `owner`; none of an endpoint already at
    `per_endpoint` attempts in flight here (`in_flight`, by endpoint), nor of a tenant at
    `per_tenant` (`tenants_in_flight`, by tenant)."""
    params: dict[str, Any] = {
        "owner": owner,
        "lease_s": lease_s,
        "limit": limit,
        "per_endpoint": per_endpoint,
        "busy_ids": list(in_flight),
        "busy_counts": list(in_flight.values()),
        "per_tenant": per_tenant,
        "busy_tenant_ids": list(tenants_in_flight),
        "busy_tenant_counts": list(tenants_in_flight.values()),
    }
    rows = await (await conn.execute(_CLAIM, params)).fetchall()
    return [
        Claimed(
            id=row[0],
            fence=row[1],
            attempt_count=row[2],
            endpoint_id=row[3],
            url=row[4],
            secrets=list(row[5]),
            event=EventRow(*row[6:11]),
            endpoint_deleted=bool(row[11]),
        )
        for row in rows
    ]


async def record_attempt(
    conn: Connection,
    delivery: Claimed,
    *,
    worker: str,
    status_code: int | None,
    error: str | None,
    latency_ms: int,
    delay_s: float,
    max_age_s: float,
) -> str | None:
    """Record one attempt; the delivery's new status, or None if a newer owner holds it.

    Anything but 2xx is retried after `delay_s`, unless that falls past the delivery's
    retry window (`max_age_s` from its start): then it is failed, for good.
    """
    ok = status_code is not None and 200 <= status_code < 300
    error = None if error is None else stored_error(error)
    params = {
        "id": delivery.id,
        "fence": delivery.fence,
        "worker": worker,
        "ok": ok,
        "status_code": status_code,
        "error": error,
        "latency_ms": latency_ms,
        "delay_s": delay_s,
        "max_age_s": max_age_s,
    }
    row = await (await conn.execute(_RECORD, params)).fetchone()
    return None if row is None else str(row[0])


def stored_error(text: str) -> str:
    """`text` as an attempt's error can store it: NULs dropped, lone surrogates escaped,
    cut to MAX_ERROR_LENGTH characters (whatever an exception's message held)."""
    return printable(text.replace("\x00", ""))[:MAX_ERROR_LENGTH]


_CANCEL = """
    UPDATE webhook_deliveries
    SET status = 'cancelled', next_attempt_at = NULL, completed_at = now(), updated_at = now(),
        lease_owner = NULL, lease_expires_at = NULL, last_error = 'endpoint deleted'
    WHERE id = %(id)s AND fence = %(fence)s AND status = 'pending'
"""


async def cancel(conn: Connection, delivery: Claimed) -> None:
    """The endpoint is gone: the delivery is cancelled, unsent (fenced, as a record is)."""
    await conn.execute(_CANCEL, {"id": delivery.id, "fence": delivery.fence})


async def redeliver(conn: Connection, *, tenant_id: uuid.UUID, event_id: uuid.UUID) -> int | None:
    """Queue the event again for every subscribed endpoint; None if there is no such event,
    else the number of deliveries queued (pending ones are left as they are)."""
    row = await (
        await conn.execute(_REDELIVER, {"tenant_id": tenant_id, "id": event_id})
    ).fetchone()
    assert row is not None, "the aggregate always has a row"
    found, queued = row
    return None if not found else int(queued)


# Events with a delivery still pending, and how long the oldest has waited (since its
# event, or its redelivery, was queued); read through ix_webhook_deliveries_due (partial:
# pending rows only). The backlog gauges read it (`app/backlog.py`).
PENDING_SQL = """
    SELECT count(DISTINCT event_id),
           coalesce(extract(epoch FROM now() - min(started_at)), 0)
    FROM webhook_deliveries
    WHERE status = 'pending'
    """


async def pending(conn: Connection) -> tuple[int, float]:
    """Events with a delivery pending, and the oldest pending one's wait in seconds (0 when
    none is)."""
    row = await (await conn.execute(PENDING_SQL)).fetchone()
    assert row is not None, "an aggregate always has a row"
    return int(row[0]), float(row[1])
