"""Operators' reads of the operations record across tenants: filtered lists, counts by
state, the oldest in flight, an operation's last send, and its parts of the operators'
search (`app/admin/search.py` assembles them into one statement).

Lists are paged by keyset on (created_at, id), oldest first (the oldest problem is the most
urgent), over the indexes `ix_operations_state_created`, `ix_operations_needs_attention`
and `ix_operations_tenant_created`.

A search part is one SELECT of the search's columns, in order: kind, matched (the field
that holds the text), id, tenant_id, operation_id, payment_id, state, amount_minor,
currency, created_at. An operation's payment is read from its kind's table, through the
`operation_links` view (one probe of each kind's unique `operation_id` index).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.db.database import Connection
from app.db.fragments import Fragment
from app.ids import created_window, within
from app.operations.reads import SNAPSHOT_COLUMNS, links_column, reads_links_on_day, snapshot_of
from app.operations.states import State
from app.operations.values import OwnedRef, Snapshot

MAX_PAGE = 100


@dataclass(frozen=True)
class OperationFilter:
    """What an operator asks for; every field optional."""

    state: State | None = None
    needs_attention: bool | None = None
    tenant_id: uuid.UUID | None = None
    older_than_s: int | None = None
    # Created in [created_from, created_to).
    created_from: datetime | None = None
    created_to: datetime | None = None
    after: uuid.UUID | None = None


@dataclass(frozen=True)
class Page:
    """One page of operations, and whether more follow."""

    items: list[Snapshot]
    has_more: bool


@dataclass(frozen=True)
class Overview:
    """The dashboard's numbers."""

    counts: dict[str, int]
    needs_attention: int
    oldest_in_flight_s: float | None


async def list_operations(
    conn: Connection, flt: OperationFilter, *, limit: int, key_ttl_s: int
) -> Page:
    """Up to `limit` operations matching `flt`, oldest first, after the cursor if any."""
    links_on_day = await reads_links_on_day(conn)
    sql, params = list_sql(flt, limit=limit, key_ttl_s=key_ttl_s, links_on_day=links_on_day)
    rows = await (await conn.execute(sql, params)).fetchall()
    items = [snapshot_of(row, with_links=True) for row in rows[:limit]]
    return Page(items=items, has_more=len(rows) > limit)


def list_sql(
    flt: OperationFilter, *, limit: int, key_ttl_s: int, links_on_day: bool = True
) -> tuple[str, dict[str, Any]]:
    """The list's statement (one row more than `limit`, to tell whether more follow); each
    operation's links read on its day (`links_on_day`, before migration 0035 on every day).

    A filter on state, needs_attention or tenant walks its index in (created_at, id) order;
    a list with none of them sorts the whole table (operators should filter).
    """
    where: list[str] = []
    params: dict[str, Any] = {"key_ttl_s": key_ttl_s, "limit": limit + 1}
    if flt.state is not None:
        where.append("state = %(state)s")
        params["state"] = flt.state.value
    if flt.needs_attention is not None:
        # Written as the partial index's own predicate, so the planner can use it.
        where.append("needs_attention" if flt.needs_attention else "NOT needs_attention")
    if flt.tenant_id is not None:
        where.append("tenant_id = %(tenant_id)s")
        params["tenant_id"] = flt.tenant_id
    if flt.older_than_s is not None:
        where.append("created_at <= now() - make_interval(secs => %(older_than_s)s)")
        params["older_than_s"] = flt.older_than_s
    if flt.created_from is not None:
        where.append("created_at >= %(created_from)s")
        params["created_from"] = flt.created_from
    if flt.created_to is not None:
        where.append("created_at < %(created_to)s")
        params["created_to"] = flt.created_to
    if flt.after is not None:
        # The cursor's operation, read by its id within the window that id tells.
        window = within("created_at", "after")
        after = f"SELECT created_at, id FROM operations WHERE id = %(after)s AND {window}"
        where.append(f"(created_at, id) > ({after})")
        params["after"] = flt.after
        params |= created_window(flt.after).params("after")
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    sql = (
        f"SELECT {SNAPSHOT_COLUMNS}, {links_column(on_day=links_on_day)} FROM operations"
        f" {clause}"
        " ORDER BY created_at, id LIMIT %(limit)s"
    )
    return sql, params


async def overview(conn: Connection) -> Overview:
    """Counts by state (every state, zeros included), flagged operations, oldest in flight."""
    rows = await (
        await conn.execute("SELECT state, count(*) FROM operations GROUP BY state")
    ).fetchall()
    counts = {state.value: 0 for state in State}
    counts.update({str(state): int(n) for state, n in rows})
    row = await (
        await conn.execute(
            "SELECT (SELECT count(*) FROM operations WHERE needs_attention),"
            " (SELECT extract(epoch FROM now() - min(created_at)) FROM operations"
            "  WHERE state IN ('RECEIVED', 'PROVIDER_REQUEST_SENT', 'UNKNOWN_REQUIRES_RECOVERY'))"
        )
    ).fetchone()
    assert row is not None
    oldest = None if row[1] is None else float(row[1])
    return Overview(counts=counts, needs_attention=int(row[0]), oldest_in_flight_s=oldest)


# The audit trail of the operation an owner's reference names, on its day's partition.
LAST_SEND_SQL = (
    "SELECT extract(epoch FROM now() - max(created_at)) FROM operation_transitions"
    " WHERE operation_id = %(id)s AND tenant_id = %(tenant_id)s"
    " AND operation_created_at = %(created_at)s AND to_state = 'PROVIDER_REQUEST_SENT'"
)


async def seconds_since_last_send(conn: Connection, ref: OwnedRef) -> float | None:
    """Seconds (database clock) since the operation `ref` names last moved to
    PROVIDER_REQUEST_SENT."""
    params = {"id": ref.id, "tenant_id": ref.tenant_id, "created_at": ref.created_at}
    row = await (await conn.execute(LAST_SEND_SQL, params)).fetchone()
    return None if row is None or row[0] is None else float(row[0])


_SEARCHED = (
    "SELECT 'operation', '{m}', id, tenant_id, id,"
    " (SELECT (l.links ->> 'payment_id')::uuid FROM operation_links l"
    "  WHERE l.operation_id = operations.id),"
    " state, NULL::bigint, NULL::text, created_at FROM operations WHERE {where}"
)


def search_by_key(text: str, *, limit: int) -> Fragment:
    """The operations whose idempotency key is `text` (any tenant, any operation name; at
    most `limit`), through ix_operations_idempotency_key."""
    sql = _SEARCHED.format(m="idempotency_key", where="idempotency_key = %(operation_key)s")
    return Fragment(f"{sql} LIMIT %(limit)s", {"operation_key": text, "limit": limit})


def search_by_id(operation_id: uuid.UUID) -> Fragment:
    """The operation with this id, through its primary key, within the window its id tells."""
    where = f"id = %(operation_id)s AND {within('created_at', 'operation_id')}"
    params = {"operation_id": operation_id} | created_window(operation_id).params("operation_id")
    return Fragment(_SEARCHED.format(m="id", where=where), params)
