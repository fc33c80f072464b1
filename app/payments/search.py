"""The payment's part of the operators' search (`app/admin/search.py` assembles the parts
into one statement): which payments hold a text as one of their keys, each branch an index
probe.

    any text                    provider_charge_id            ix_payments_provider_charge_id
                                merchant_reference            ix_payments_merchant_reference
                                account_id, newest first      ix_payments_account_created
                                provider_key                  uq_payments_provider_key_created_at
    a uuid                      id, within its id's window    pk_payments
    payment-<uuid>:<n>          provider_key: the payment     uq_payments_provider_key_created_at
                                whose attempt n it names

Each branch is one SELECT of the search's columns, in order: kind, matched (the field that
holds the text), id, tenant_id, operation_id, payment_id, state, amount_minor, currency,
created_at. The admin router and the console hand this module to the search: the
operators' actions know no payment code (tests/test_architecture.py).
"""

from __future__ import annotations

import uuid

from app.db.fragments import Fragment
from app.ids import created_window, within
from app.provider.keys import split_attempt_key

_SEARCHED = (
    "SELECT 'payment', '{m}', id, tenant_id, operation_id, id, status, amount_minor,"
    " currency::text, created_at FROM payments WHERE {where}"
)
# The fields any text is looked for in, each with its order: an account (or a reused
# reference) may hold many payments, and an account's newest come first.
_BY_TEXT = (
    ("provider_charge_id", ""),
    ("merchant_reference", ""),
    ("account_id", " ORDER BY created_at DESC, id DESC"),
    ("provider_key", ""),
)


def by_text(text: str, *, limit: int) -> list[Fragment]:
    """The payments holding `text` in one of their keys: a branch per key, each at most
    `limit` rows."""
    params = {"payment_text": text, "limit": limit}
    return [
        Fragment(
            _SEARCHED.format(m=field, where=f"{field} = %(payment_text)s")
            + f"{order} LIMIT %(limit)s",
            params,
        )
        for field, order in _BY_TEXT
    ]


def by_id(record_id: uuid.UUID) -> Fragment:
    """The payment with this id, within the window its id tells."""
    where = f"id = %(payment_id)s AND {within('created_at', 'payment_id')}"
    params = {"payment_id": record_id} | created_window(record_id).params("payment_id")
    return Fragment(_SEARCHED.format(m="id", where=where), params)


def by_attempt_key(text: str) -> Fragment | None:
    """The payment a later attempt's provider key names (another provider's key after a
    failover, `payment-<uuid>:<n>`); None when `text` is not such a key."""
    attempt = split_attempt_key(text)
    if attempt is None:
        return None
    where = "provider_key = %(payment_attempt_of)s"
    return Fragment(
        _SEARCHED.format(m="provider_key", where=where), {"payment_attempt_of": attempt[0]}
    )
