"""The refund's part of the operators' search (`app/admin/search.py` assembles the parts
into one statement), each branch an index probe:

    any text      provider_refund_id     ix_refunds_provider_refund_id
                  provider_key           uq_refunds_provider_key
    a uuid        id                     pk_refunds

Each branch is one SELECT of the search's columns, in order: kind, matched (the field that
holds the text), id, tenant_id, operation_id, payment_id, state, amount_minor, currency,
created_at. Like the payment's part (`app/payments/search.py`), the callers hand it to the
search.
"""

from __future__ import annotations

import uuid

from app.db.fragments import Fragment

_SEARCHED = (
    "SELECT 'refund', '{m}', id, tenant_id, operation_id, payment_id, status, amount_minor,"
    " currency::text, created_at FROM refunds WHERE {where}"
)
_BY_TEXT = ("provider_refund_id", "provider_key")


def by_text(text: str, *, limit: int) -> list[Fragment]:
    """The refunds holding `text` in one of their keys: a branch per key, each at most
    `limit` rows."""
    params = {"refund_text": text, "limit": limit}
    return [
        Fragment(
            _SEARCHED.format(m=field, where=f"{field} = %(refund_text)s") + " LIMIT %(limit)s",
            params,
        )
        for field in _BY_TEXT
    ]


def by_id(record_id: uuid.UUID) -> Fragment:
    """The refund with this id."""
    return Fragment(_SEARCHED.format(m="id", where="id = %(refund_id)s"), {"refund_id": record_id})


def by_attempt_key(text: str) -> Fragment | None:
    """None: a refund has one provider key, and no later attempts under another."""
    return None
