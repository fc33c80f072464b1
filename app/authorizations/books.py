"""Our books of captures, as settlement compares them with the provider's (`app/settlement/`).

One SELECT of each capture (a row of `payment_modifications` of type `capture`) with its
operation's state and the provider holding its authorization, in the columns and order of
the payments' (`app/payments/books.py`), then the capture's own id. Settlement adds its
WHERE on the alias `m` (a day's captures by `created_at`, or captures by `provider_key`);
the type is a condition of the join, so that WHERE is the statement's only one. A void is
not read: it releases a hold, and settles nothing.
"""

from __future__ import annotations

OURS_SQL = """
    SELECT m.provider_key, m.tenant_id, m.operation_id, o.state, m.payment_id, NULL::uuid,
           m.status, m.amount_minor, m.currency, NULL::bigint,
           m.provider_reference, m.created_at, m.provider, 0, NULL::text[], m.id
    FROM payment_modifications m
    JOIN operations o ON o.id = m.operation_id AND m.type = 'capture'
"""
# The alias settlement's conditions name.
ALIAS = "m"
