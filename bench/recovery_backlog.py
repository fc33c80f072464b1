"""A recovery backlog spread over many tenants, seeded in SQL (`bench/recovery_drain.py`).

TENANTS tenants, each with a few operations the worker's recovery claim takes
(`app/operations/leases.py`): unknown ones whose next check has come and in-flight ones
whose owner's lease ran out, one in DUE_IN_FLIGHT of them the latter; and as many that
are not due yet (a check to come, a live lease), which the tenants' probes pass over.
Every value derives from the row's number.
"""

from __future__ import annotations

import psycopg

TENANTS = 1_000
# One due operation in this many is in flight with its lease run out; the others unknown.
DUE_IN_FLIGHT = 4
_TENANTS = """
INSERT INTO tenants (id, name, created_at)
SELECT md5('tenant' || t)::uuid, 'tenant ' || t, now() - interval '1 year'
FROM generate_series(0, %(tenants)s - 1) AS t
"""
# Operation g of tenant g % TENANTS: the first `due` due, the next `due` not yet.
_OPERATIONS = """
INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint, state,
                        lease_owner, lease_expires_at, next_check_at, attempts, fence)
SELECT md5('op' || g)::uuid, md5('tenant' || g %% %(tenants)s)::uuid, 'create_payment',
       'key-' || g, 'f',
       CASE WHEN in_flight THEN 'PROVIDER_REQUEST_SENT' ELSE 'UNKNOWN_REQUIRES_RECOVERY' END,
       CASE WHEN in_flight THEN 'api:gone' END,
       CASE WHEN in_flight AND due THEN now() - make_interval(secs => g %% 600)
            WHEN in_flight THEN now() + interval '1 hour' END,
       CASE WHEN in_flight THEN NULL
            WHEN due THEN now() - make_interval(secs => g %% 600)
            ELSE now() + make_interval(secs => 60 + g %% 3600) END,
       1 + g %% 5, 1
FROM generate_series(0::bigint, 2 * %(due)s - 1) AS g,
     LATERAL (SELECT g < %(due)s AS due,
                     (g / %(tenants)s) %% %(in_flight_every)s = 0 AS in_flight) AS kind
ORDER BY g
"""


def seed(url: str, due: int) -> None:
    """The tenants and `due` due operations (as many not due); vacuumed and analysed."""
    params = {"tenants": TENANTS, "due": due, "in_flight_every": DUE_IN_FLIGHT}
    with psycopg.connect(url, autocommit=True) as conn:
        with conn.transaction():
            conn.execute(_TENANTS, params)
            conn.execute(_OPERATIONS, params)
        conn.execute("VACUUM ANALYZE")
