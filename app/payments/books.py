"""Our books of payments, as settlement compares them with the provider's (`app/settlement/`).

One SELECT of each payment with its operation's state and the provider holding it: its
route at its attempt (1-based arrays), and its whole route only when it names several
providers (a payment with one provider costs no array). Settlement adds its WHERE on the
alias `p` (a day's payments by `created_at`, or payments by stored `provider_key`) and reads
the columns in this order: provider_key, tenant_id, operation_id, state, payment_id,
refund_id (NULL), status, amount_minor, currency, amount_refunded_minor, provider's id,
created_at, provider, attempt, route.
"""

from __future__ import annotations

OURS_SQL = """
    SELECT p.provider_key, p.tenant_id, p.operation_id, o.state, p.id, NULL::uuid,
           p.status, p.amount_minor, p.currency, p.amount_refunded_minor,
           p.provider_charge_id, p.created_at, p.route[p.attempt + 1], p.attempt,
           CASE WHEN cardinality(p.route) > 1 THEN p.route END
    FROM payments p JOIN operations o ON o.id = p.operation_id
"""
# The alias settlement's conditions name.
ALIAS = "p"
