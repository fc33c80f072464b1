"""Preloading the operations table with a million rows of another tenant, in SQL.

`INSERT ... SELECT generate_series(...)` fills operations, payments and the audit table in
chunks (one transaction each), as a long-lived service would have them: completed payments
with their stored replies. ANALYZE then gives the planner the new sizes.
"""

from __future__ import annotations

import contextlib
import time
import uuid

import psycopg

_CHUNK = 200_000

_OPERATIONS = """
INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint, state,
                        fence, attempts, response_status, response_headers, response_body,
                        created_at, updated_at, completed_at)
SELECT md5('op' || g)::uuid, %(tenant)s, 'create_payment', 'preload-' || g,
       md5(g::text) || md5('f' || g), 'COMPLETED', 1, 0, 201,
       jsonb_build_object('location', '/payments/' || md5('pay' || g)::uuid::text,
                          'content-type', 'application/json'),
       json_build_object('payment_id', md5('pay' || g)::uuid, 'operation_id',
                         md5('op' || g)::uuid, 'status', 'SUCCEEDED', 'amount', '12.34',
                         'currency', 'EUR', 'account_id', 'acc_preload',
                         'merchant_reference', 'order-' || g, 'description', NULL,
                         'metadata', '{}'::json, 'provider_charge_id', 'ch_' || md5(g::text),
                         'decline_code', NULL, 'created_at', now(), 'updated_at', now())::text,
       now(), now(), now()
FROM generate_series(%(first)s, %(last)s) AS g
"""

_PAYMENTS = """
INSERT INTO payments (id, tenant_id, operation_id, provider_key, route, status,
                      amount_minor, currency, account_id, merchant_reference,
                      provider_charge_id, created_at, updated_at)
SELECT md5('pay' || g)::uuid, %(tenant)s, md5('op' || g)::uuid,
       'payment-' || md5('pay' || g)::uuid::text, '{primary}', 'SUCCEEDED', 1234, 'EUR',
       'acc_preload',
       'order-' || g, 'ch_' || md5(g::text), now(), now()
FROM generate_series(%(first)s, %(last)s) AS g
"""

_TRANSITIONS = """
INSERT INTO operation_transitions (operation_id, tenant_id, from_state, to_state, trigger, actor,
                                   reason, fence, operation_created_at)
SELECT o.id, %(tenant)s, s.from_state, s.to_state, s.trigger, 'preload', NULL, 1, o.created_at
FROM generate_series(%(first)s, %(last)s) AS g
     JOIN operations AS o ON o.id = md5('op' || g)::uuid,
     (VALUES (NULL, 'RECEIVED', 'claim'),
             ('RECEIVED', 'PROVIDER_REQUEST_SENT', 'send'),
             ('PROVIDER_REQUEST_SENT', 'COMPLETED', 'complete')) AS s(from_state, to_state, trigger)
"""


def preload(database_url: str, *, rows: int) -> dict[str, float]:
    """Insert `rows` completed payments for a new tenant; ANALYZE; return the timings."""
    tenant = uuid.uuid4()
    started = time.perf_counter()
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'preload')", (tenant,))
        for first in range(1, rows + 1, _CHUNK):
            bounds = {"tenant": tenant, "first": first, "last": min(rows, first + _CHUNK - 1)}
            with conn.transaction():
                conn.execute(_OPERATIONS, bounds)
                conn.execute(_PAYMENTS, bounds)
                conn.execute(_TRANSITIONS, bounds)
        inserted = time.perf_counter()
        conn.execute("ANALYZE operations, payments, operation_transitions")
        # Write the preload out now rather than during the next measurement (superuser only).
        with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
            conn.execute("CHECKPOINT")
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM operations), pg_total_relation_size('operations')"
        ).fetchone()
    assert counts is not None
    return {
        "rows": rows,
        "insert_s": round(inserted - started, 2),
        "total_s": round(time.perf_counter() - started, 2),
        "operations_rows": counts[0],
        "operations_mib": round(counts[1] / 2**20, 1),
    }
