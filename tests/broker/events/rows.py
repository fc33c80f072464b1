"""The events tests' rows: events written straight to the tables, the tenant's feed, and
the publication cursors as the tests read and age them."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg.rows import DictRow

Db = psycopg.Connection[DictRow]

# Events written as the outcome statements write them: an operation each, and its event.
_WRITE = """
    WITH made AS (
        SELECT g, gen_random_uuid() AS op FROM generate_series(1, %(n)s) AS g
    ), ops AS (
        INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint,
                                state, fence)
        SELECT op, %(tenant)s, 'create_payment', %(tag)s || g, 'f', 'COMPLETED', 1
        FROM made
        RETURNING id, created_at
    )
    INSERT INTO events (id, tenant_id, type, operation_id, data, operation_created_at)
    SELECT gen_random_uuid(), %(tenant)s, %(type)s, ops.id,
           jsonb_build_object('payment_id', gen_random_uuid()::text), ops.created_at
    FROM ops
"""


def write_events(
    conn: psycopg.Connection[Any], tenant_id: uuid.UUID, n: int, type: str = "payment.succeeded"
) -> None:
    """`n` events of `type` for the tenant, in one statement on `conn` (its transaction)."""
    params = {"tenant": tenant_id, "tag": f"key-{uuid.uuid4()}-", "n": n, "type": type}
    conn.execute(_WRITE, params)


def feed(db: Db, tenant_id: uuid.UUID) -> list[str]:
    """The tenant's events' public ids, in the feed's order."""
    rows = db.execute(
        "SELECT id FROM events WHERE tenant_id = %s ORDER BY txid, seq", (tenant_id,)
    ).fetchall()
    return [f"evt_{row['id'].hex}" for row in rows]


def cursor(db: Db, tenant_id: uuid.UUID, exchange: str) -> dict[str, Any] | None:
    """The tenant's publication cursor on `exchange`, with the public id of the last event
    it passed (`after`, None at the exchange's start)."""
    return db.execute(
        "SELECT c.*, (SELECT 'evt_' || replace(e.id::text, '-', '') FROM events AS e"
        "              WHERE e.tenant_id = c.tenant_id AND e.txid = c.after_txid"
        "                AND e.seq = c.after_seq) AS after"
        " FROM event_publication_cursors AS c WHERE c.tenant_id = %s AND c.exchange = %s",
        (tenant_id, exchange),
    ).fetchone()


def backoff_passed(db: Db, exchange: str) -> None:
    """The time a failed tenant waits has passed (its next attempt is due now)."""
    db.execute(
        "UPDATE event_publication_cursors SET next_attempt_at = now() WHERE exchange = %s",
        (exchange,),
    )
