"""Operators' reads of the operations record across tenants: its parts of the operators'
search (`app/admin/search.py` assembles them into one statement).

A search part is one SELECT of the search's columns, in order: kind, matched (the field
that holds the text), id, tenant_id, operation_id, payment_id, state, amount_minor,
currency, created_at. An operation's payment is read from its kind's table, through the
`operation_links` view (one probe of each kind's unique `operation_id` index).
"""

from __future__ import annotations

import uuid

from app.db.fragments import Fragment

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
    """The operation with this id, through its primary key."""
    sql = _SEARCHED.format(m="id", where="id = %(operation_id)s")
    return Fragment(sql, {"operation_id": operation_id})
