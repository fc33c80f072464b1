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
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncCursor
from psycopg.rows import TupleRow

from app.db.database import Connection
from app.errors import printable
from app.events.reads import EventRow
from app.jobs.leases import new_owner
from app.jobs.tenants import KeptTenants

# An attempt's error as stored: text PostgreSQL takes (no NUL, no lone surrogate), this long
# at most.
MAX_ERROR_LENGTH = 1000

# The claim runs tenant by tenant (`app/jobs/tenants.py`), as the recovery's does: a row lock
# and a fence bump are one tenant's, and on Citus only a statement routed to one shard group
# may take them (docs/scaling.md). The tenants with due deliveries are found by a plain read
# (`_DUE_TENANTS`, no lock), then each tenant's fair share of the claim is one statement
# (`_CLAIM`) naming the tenant, in a shuffled order; the tenants found are kept between this
# worker's claims. The tenants' statements are sent together, in a pipeline: with many
# tenants each due a little, a claim of 32 is up to 32 statements, sent in a round trip or
# two instead of one each (docs/webhooks.md has the figures).
#
# The per-endpoint cap keeps one slow or dead endpoint from taking every slot: each claim
# takes at most `per_endpoint - in flight here` deliveries of an endpoint. The per-tenant
# cap does the same for a tenant's endpoints together (many slow endpoints of one tenant):
# a tenant's claim takes at most `per_tenant - in flight here` (and none once it is at its
# cap). Both count this worker's attempts under way, as its slots are its own.
#
# Both statements read `ix_webhook_deliveries_endpoint_due` (pending: tenant, endpoint, next
# attempt, id). Which tenants have due deliveries is a loose scan of it: one descent per
# endpoint with pending deliveries, from one (tenant, endpoint) to the next, each with its
# earliest next attempt. A tenant's claim walks its own endpoints the same way, and of those
# with something due, takes each one's oldest due deliveries from its own range, at most its
# cap. What a claim sorts is at most `endpoints x per_endpoint` rows, however many are due;
# an endpoint with nothing pending costs nothing. Ranking every due delivery instead grew
# with every backlog: a tenant whose dead endpoints retry for three days keeps tens of
# thousands due, all read and sorted by every claim of every worker.
_DUE_TENANTS = """
    WITH RECURSIVE endpoints AS (
        (SELECT tenant_id, endpoint_id, next_attempt_at FROM webhook_deliveries
         WHERE status = 'pending' ORDER BY tenant_id, endpoint_id, next_attempt_at LIMIT 1)
        UNION ALL
        SELECT later.tenant_id, later.endpoint_id, later.next_attempt_at
        FROM endpoints AS e
        CROSS JOIN LATERAL (
            SELECT d.tenant_id, d.endpoint_id, d.next_attempt_at FROM webhook_deliveries AS d
            WHERE d.status = 'pending'
              AND (d.tenant_id, d.endpoint_id) > (e.tenant_id, e.endpoint_id)
            ORDER BY d.tenant_id, d.endpoint_id, d.next_attempt_at
            LIMIT 1
        ) AS later
    )
    SELECT DISTINCT tenant_id FROM endpoints WHERE next_attempt_at <= now()
"""

_CLAIM = f"""
    WITH RECURSIVE busy AS (
        SELECT * FROM unnest(%(busy_ids)s::uuid[], %(busy_counts)s::int[])
            AS busy (endpoint_id, in_flight)
    ), endpoints AS (
        -- The tenant's endpoints with pending deliveries, each with its earliest next
        -- attempt: one descent of the index per endpoint, from one endpoint to the next (a
        -- deleted endpoint's too: a delivery queued as it was deleted is claimed to be
        -- cancelled).
        (SELECT endpoint_id, next_attempt_at FROM webhook_deliveries
         WHERE tenant_id = %(tenant_id)s AND status = 'pending'
         ORDER BY endpoint_id, next_attempt_at LIMIT 1)
        UNION ALL
        SELECT later.endpoint_id, later.next_attempt_at
        FROM endpoints AS e
        CROSS JOIN LATERAL (
            SELECT d.endpoint_id, d.next_attempt_at FROM webhook_deliveries AS d
            WHERE d.tenant_id = %(tenant_id)s AND d.status = 'pending'
              AND d.endpoint_id > e.endpoint_id
            ORDER BY d.endpoint_id, d.next_attempt_at
            LIMIT 1
        ) AS later
    ), candidates AS (
        -- Of each endpoint with something due, its oldest due deliveries, at most its cap.
        SELECT d.id, d.next_attempt_at
        FROM endpoints AS e
        LEFT JOIN busy USING (endpoint_id)
        CROSS JOIN LATERAL (
            SELECT d.id, d.next_attempt_at
            FROM webhook_deliveries AS d
            WHERE d.tenant_id = %(tenant_id)s AND d.endpoint_id = e.endpoint_id
              AND d.status = 'pending' AND d.next_attempt_at <= now()
              AND (d.lease_expires_at IS NULL OR d.lease_expires_at < now())
            ORDER BY d.next_attempt_at, d.id
            LIMIT greatest(%(per_endpoint)s - coalesce(busy.in_flight, 0), 0)
        ) AS d
        WHERE e.next_attempt_at <= now()
    ), picked AS (
        -- In order, each candidate locked by its key unless another transaction holds it
        -- (or it has just been claimed), until `limit` are: only those are locked. A
        -- LATERAL with a locking clause runs as a nested loop over `c`, in `c`'s order.
        -- Each is locked by its key (and tenant), and judged still due on the row as
        -- locked, outside the lock's subquery: the LIMIT keeps that judgement from being
        -- pushed into it, where the tenant and the status would have the planner walk the
        -- tenant's range of the pending index instead of reading one row by its key.
        SELECT locked.id
        FROM (SELECT id, next_attempt_at FROM candidates ORDER BY next_attempt_at, id) AS c
        CROSS JOIN LATERAL (
            SELECT d.id, d.status, d.lease_expires_at FROM webhook_deliveries AS d
            WHERE d.id = c.id AND d.tenant_id = %(tenant_id)s
            LIMIT 1
            FOR UPDATE SKIP LOCKED
        ) AS locked
        WHERE locked.status = 'pending'
          AND (locked.lease_expires_at IS NULL OR locked.lease_expires_at < now())
        LIMIT %(limit)s
    ), claimed AS (
        -- Checked again on the locked row: another worker may have claimed it meanwhile.
        UPDATE webhook_deliveries AS d
        SET {new_owner("d")}
        FROM picked
        WHERE d.tenant_id = %(tenant_id)s AND d.id = picked.id AND d.status = 'pending'
          AND (d.lease_expires_at IS NULL OR d.lease_expires_at < now())
        RETURNING d.id, d.fence, d.attempt_count, d.endpoint_id, d.event_id
    )
    SELECT c.id, c.fence, c.attempt_count, c.endpoint_id, e.url,
           array_remove(ARRAY[e.secret, CASE WHEN e.previous_secret_expires_at > now()
                                             THEN e.previous_secret END], NULL),
           ev.id, ev.tenant_id, ev.type, ev.data, ev.created_at,
           e.deleted_at IS NOT NULL
    FROM claimed AS c
    JOIN webhook_endpoints AS e ON e.tenant_id = %(tenant_id)s AND e.id = c.endpoint_id
    JOIN events AS ev ON ev.tenant_id = %(tenant_id)s AND ev.id = c.event_id
"""

_RECORD = """
    WITH attempt AS (
        INSERT INTO webhook_attempts
            (tenant_id, delivery_id, worker, succeeded, status_code, error, latency_ms)
        SELECT tenant_id, id, %(worker)s, %(ok)s, %(status_code)s, %(error)s, %(latency_ms)s
        FROM webhook_deliveries WHERE tenant_id = %(tenant_id)s AND id = %(id)s
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
        WHERE tenant_id = %(tenant_id)s AND id = %(id)s AND fence = %(fence)s
          AND status = 'pending'
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


async def due_tenants(conn: Connection) -> list[uuid.UUID]:
    """Every tenant with a pending delivery due now (perhaps leased); nothing is locked."""
    rows = await (await conn.execute(_DUE_TENANTS)).fetchall()
    return [tenant_id for (tenant_id,) in rows]


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
    tenants: KeptTenants | None = None,
) -> list[Claimed]:
    """Up to `limit` due deliveries, leased to `owner`; none of an endpoint already at
    `per_endpoint` attempts in flight here (`in_flight`, by endpoint), nor of a tenant at
    `per_tenant` (`tenants_in_flight`, by tenant).

    The tenants with due deliveries (`due_tenants`), then one statement per tenant, in a
    shuffled order with fair shares (`app/jobs/tenants.py`). The tenants' statements are
    sent together, a pipeline each round trip (`KeptTenants.claim_together`): those of one
    round trip are one transaction (the connection's autocommit commits at the pipeline's
    end, and an error rolls the whole round trip back), and `now()` is its start in each.
    `tenants` keeps the tenants found between a worker's claims (None: read every time).
    """
    # What is in flight here, with what this claim has taken so far: a tenant asked again
    # for the room left (`app/jobs/tenants.py`) counts what it took the first time.
    endpoints_busy = Counter(in_flight)
    tenants_busy = Counter(tenants_in_flight)

    async def claim_tenants(asks: Sequence[tuple[uuid.UUID, int]]) -> list[list[Claimed]]:
        # Each tenant once per round trip: what another tenant takes in it cannot count
        # against this one's caps (an endpoint is one tenant's).
        cursors: list[tuple[int, AsyncCursor[TupleRow]]] = []
        rooms = [min(share, per_tenant - tenants_busy[tenant]) for tenant, share in asks]
        if any(room > 0 for room in rooms):
            async with conn.pipeline():
                for i, ((tenant_id, _), room) in enumerate(zip(asks, rooms, strict=True)):
                    if room <= 0:
                        continue
                    params: dict[str, Any] = {
                        "tenant_id": tenant_id,
                        "owner": owner,
                        "lease_s": lease_s,
                        "limit": room,
                        "per_endpoint": per_endpoint,
                        "busy_ids": list(endpoints_busy),
                        "busy_counts": list(endpoints_busy.values()),
                    }
                    cursors.append((i, await conn.execute(_CLAIM, params)))
        taken: list[list[Claimed]] = [[] for _ in asks]
        for i, cursor in cursors:
            taken[i] = [_claimed(row) for row in await cursor.fetchall()]
            for delivery in taken[i]:
                endpoints_busy[delivery.endpoint_id] += 1
                tenants_busy[delivery.event.tenant_id] += 1
        return taken

    kept = KeptTenants(refresh_s=0) if tenants is None else tenants
    return await kept.claim_together(limit, lambda: due_tenants(conn), claim_tenants)


def _claimed(row: tuple[Any, ...]) -> Claimed:
    return Claimed(
        id=row[0],
        fence=row[1],
        attempt_count=row[2],
        endpoint_id=row[3],
        url=row[4],
        secrets=list(row[5]),
        event=EventRow(*row[6:11]),
        endpoint_deleted=bool(row[11]),
    )


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
        "tenant_id": delivery.event.tenant_id,
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
    WHERE tenant_id = %(tenant_id)s AND id = %(id)s AND fence = %(fence)s AND status = 'pending'
"""


async def cancel(conn: Connection, delivery: Claimed) -> None:
    """The endpoint is gone: the delivery is cancelled, unsent (fenced, as a record is)."""
    params = {"tenant_id": delivery.event.tenant_id, "id": delivery.id, "fence": delivery.fence}
    await conn.execute(_CANCEL, params)


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
