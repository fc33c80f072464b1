"""Our books of refunds, as settlement compares them with the provider's (`app/settlement/`).

One SELECT of each refund with its operation's state and the provider holding it, in the
columns and order of the payments' (`app/payments/books.py`): settlement adds its WHERE on
the alias `r`.
"""

from __future__ import annotations

OURS_SQL = """
    SELECT r.provider_key, r.tenant_id, r.operation_id, o.state, r.payment_id, r.id,
           r.status, r.amount_minor, r.currency, NULL::bigint,
           r.provider_refund_id, r.created_at, r.provider, 0, NULL::text[]
    FROM refunds r JOIN operations o ON o.id = r.operation_id
"""
# The alias settlement's conditions name.
ALIAS = "r"
