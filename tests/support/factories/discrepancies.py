"""Discrepancies written straight to the tables, with their audit rows, as the
settlement run would leave them (the run itself is tested on its own).

Each item gets a provider key of its own, so tests never collide on the table's unique
(record_type, provider, provider_key, kind). Lists are isolated by a tenant id of the test's own;
the queue's global figures (the summary, the metrics) are exact only from an empty queue:
`empty_queue` gives one (a session's tests run one at a time, on a database of its own).
"""

from __future__ import annotations

import uuid
from datetime import date
from typing import Any

import psycopg
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

Db = psycopg.Connection[DictRow]

# The run's actor when it opens an item, as `payments settle` names itself.
RUN_ACTOR = "settle:test-host:1"
# Both sides of a charge as the run records them (`OurRecord.snapshot`, `TheirRecord.snapshot`),
# differing in the amount only.
OURS: dict[str, Any] = {
    "id": "5b0c1e55-0000-4000-8000-000000000001",
    "status": "SUCCEEDED",
    "amount_minor": 1000,
    "currency": "EUR",
    "created_at": "2026-11-24T10:00:00.000001+00:00",
    "operation_state": "COMPLETED",
    "provider_id": "ch_0001",
    "amount_refunded_minor": 0,
}
THEIRS: dict[str, Any] = {
    "id": "ch_0001",
    "status": "succeeded",
    "amount_minor": 1200,
    "currency": "EUR",
    "created_at": "2026-11-24T10:00:00.031000+00:00",
    "amount_refunded_minor": 0,
}


def make_item(
    db: Db,
    *,
    kind: str = "amount_mismatch",
    state: str = "open",
    record_type: str = "charge",
    tenant_id: uuid.UUID | None = None,
    day: date | None = None,
    ours: dict[str, Any] | None = OURS,
    theirs: dict[str, Any] | None = THEIRS,
    detail: str = "we recorded 10.00 EUR, the provider 12.00 EUR",
    seen_ago_s: float = 60.0,
    operation_id: uuid.UUID | None = None,
    provider: str = "primary",
) -> uuid.UUID:
    """An item first seen `seen_ago_s` ago (database clock), opened by the run, and closed
    (`resolved`, `dismissed`, `auto_resolved`) a second later if `state` says so; its id."""
    item_id = uuid.uuid4()
    closed_by = "operator:someone" if state in ("resolved", "dismissed") else None
    db.execute(
        "INSERT INTO reconciliation_items (id, day, record_type, provider, provider_key, kind,"
        " state, tenant_id, operation_id, ours, theirs, detail, first_seen_at, last_seen_at,"
        " resolved_at, resolved_by, resolution_reason)"
        " VALUES (%(id)s, coalesce(%(day)s, current_date), %(record_type)s, %(provider)s,"
        " %(key)s, %(kind)s, %(state)s, %(tenant_id)s, %(operation_id)s, %(ours)s, %(theirs)s,"
        " %(detail)s,"
        " now() - make_interval(secs => %(ago)s), now() - make_interval(secs => %(ago)s),"
        " CASE WHEN %(closed)s THEN now() - make_interval(secs => %(ago)s - 1) END,"
        " %(closed_by)s, CASE WHEN %(closed)s THEN 'closed earlier' END)",
        {
            "id": item_id,
            "day": day,
            "record_type": record_type,
            "provider": provider,
            "key": f"{'ch' if record_type == 'charge' else 're'}-key-{uuid.uuid4().hex}",
            "kind": kind,
            "state": state,
            "tenant_id": tenant_id,
            "operation_id": operation_id,
            "ours": None if ours is None else Jsonb(ours),
            "theirs": None if theirs is None else Jsonb(theirs),
            "detail": detail,
            "ago": seen_ago_s,
            "closed_by": closed_by,
            "closed": state != "open",
        },
    )
    db.execute(
        "INSERT INTO reconciliation_item_changes (item_id, from_state, to_state, actor, reason,"
        " at) VALUES (%s, NULL, 'open', %s, %s, now() - make_interval(secs => %s))",
        (item_id, RUN_ACTOR, detail, seen_ago_s),
    )
    if state != "open":
        db.execute(
            "INSERT INTO reconciliation_item_changes (item_id, from_state, to_state, actor,"
            " reason, at) VALUES (%s, 'open', %s, %s, 'closed earlier',"
            " now() - make_interval(secs => %s - 1))",
            (item_id, state, closed_by or RUN_ACTOR, seen_ago_s),
        )
    return item_id


def item_row(db: Db, item_id: uuid.UUID | str) -> dict[str, Any]:
    row = db.execute("SELECT * FROM reconciliation_items WHERE id = %s", (item_id,)).fetchone()
    assert row is not None, item_id
    return row


def changes(db: Db, item_id: uuid.UUID | str) -> list[dict[str, Any]]:
    """The item's audit rows, oldest first."""
    return db.execute(
        "SELECT from_state, to_state, actor, reason, at FROM reconciliation_item_changes"
        " WHERE item_id = %s ORDER BY at, id",
        (item_id,),
    ).fetchall()


def empty_queue(db: Db) -> None:
    """Every discrepancy gone (their changes go with them)."""
    db.execute("DELETE FROM reconciliation_items")
