"""Our books of two-step payments, as settlement compares them with the provider's
(`app/settlement/`): each capture, and what each authorization captured.

`OURS_SQL`: one SELECT of each capture (a row of `payment_modifications` of type `capture`)
with its operation's state and the provider holding its authorization, in the columns and
order of the payments' (`app/payments/books.py`), then the capture's own id. Settlement adds
its WHERE on the alias `m` (a day's captures by `created_at`, or captures by `provider_key`);
the type is a condition of the join, so that WHERE is the statement's only one. A void is
not read: it releases a hold, and settles nothing.

`HOLDS_CREATED_SQL` and `HOLDS_BY_KEY_SQL`: the manual payments among a day's payments (or
among payments by stored `provider_key`), each with what our books say it captured and
whether a capture or void of it is in flight (its captured amount may be about to change on
one side before the other). The same conditions as settlement's reads of the payments
(`%(start)s`/`%(end)s`, or `%(keys)s`), so a payment's record and its hold are read alike.
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

_HOLDS = """
    SELECT p.id, p.amount_captured_minor,
           EXISTS (SELECT FROM payment_modifications m
                   WHERE m.tenant_id = p.tenant_id AND m.payment_id = p.id
                     AND m.status = 'PENDING') AS in_flight
    FROM payments p
    WHERE p.capture_mode = 'manual'
"""
HOLDS_CREATED_SQL = f"{_HOLDS} AND p.created_at >= %(start)s AND p.created_at < %(end)s"
HOLDS_BY_KEY_SQL = f"{_HOLDS} AND p.provider_key = ANY(%(keys)s)"
