"""A dead-endpoint backlog of webhook deliveries, seeded in SQL (`bench/webhook_claim.py`).

TENANTS tenants: the first DEAD_TENANTS with DEAD_ENDPOINTS_EACH endpoints that all fail,
the others with ENDPOINTS_EACH. Of the pending deliveries, DEAD_SHARE are the dead
endpoints' backlog: one event of a tenant fanned out to its sixteen endpoints, each
delivery started within the three days of the retry window, its next attempt spread over
the backoff's hour (most not yet due; those whose hour came during the seeding are due
too). The rest are the healthy tenants' short queue, about one in four due. Every value
derives from the row's number.
"""

from __future__ import annotations

import psycopg

TENANTS = 1_000
DEAD_TENANTS = 50
DEAD_ENDPOINTS_EACH = 16
ENDPOINTS_EACH = 4
# Of the pending deliveries, the share that is the dead endpoints' backlog.
DEAD_SHARE = 0.96
RETRY_WINDOW_S = 3 * 86_400
BACKOFF_MAX_S = 3_600
# How long before now the due part of the dead backlog became due (of BACKOFF_MAX_S).
DEAD_DUE_S = 180
# Endpoint n of tenant t: the dead tenants' sixteen each first, then four each.
_SHAPE = """
CREATE TEMPORARY TABLE seed_endpoints ON COMMIT DROP AS
SELECT n, CASE WHEN n < %(dead_endpoints)s THEN n / %(dead_each)s
               ELSE %(dead_tenants)s + (n - %(dead_endpoints)s) / %(each)s END AS t
FROM generate_series(0, %(endpoints)s - 1) AS n;
"""
_TENANTS = """
INSERT INTO tenants (id, name, created_at)
SELECT md5('tenant' || t)::uuid, 'tenant ' || t, now() - interval '1 year'
FROM generate_series(0, %(tenants)s - 1) AS t
"""
_ENDPOINTS = """
INSERT INTO webhook_endpoints (id, tenant_id, url, secret, created_at)
SELECT md5('endpoint' || n)::uuid, md5('tenant' || t)::uuid,
       'https://hooks.example.invalid/' || n, 'whsec_bench', now() - interval '1 year'
FROM seed_endpoints
"""
# Delivery g: the dead backlog first (its endpoints in turn, one event of a tenant fanned
# out to its sixteen), then the healthy queue. `h` spreads the next attempts.
_DELIVERY_SHAPE = """
CREATE TEMPORARY TABLE seed_deliveries ON COMMIT DROP AS
SELECT g, dead, s.n, e.t, s.k, (g * 7919) %% %(backoff_max)s AS h
FROM generate_series(1::bigint, %(pending)s) AS g,
     LATERAL (SELECT g <= %(dead_pending)s AS dead) AS kind,
     LATERAL (SELECT CASE WHEN dead THEN g %% %(dead_endpoints)s
                          ELSE %(dead_endpoints)s
                               + (g - %(dead_pending)s) %% %(healthy_endpoints)s END AS n,
                     CASE WHEN dead THEN g / %(dead_endpoints)s
                          ELSE (g - %(dead_pending)s) / %(healthy_endpoints)s END AS k) AS s
JOIN seed_endpoints AS e USING (n)
"""
_EVENTS = """
CREATE TEMPORARY TABLE seed_events ON COMMIT DROP AS
SELECT DISTINCT t, k, md5('evt' || t || ':' || k)::uuid AS id FROM seed_deliveries;
INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint, state,
                        fence)
SELECT id, md5('tenant' || t)::uuid, 'create_payment', 'key-' || id, 'f', 'COMPLETED', 1
FROM seed_events;
INSERT INTO events (id, tenant_id, type, operation_id, data, operation_created_at)
SELECT e.id, md5('tenant' || e.t)::uuid, 'payment.succeeded', e.id,
       jsonb_build_object('payment_id', gen_random_uuid()::text), o.created_at
FROM seed_events AS e JOIN operations AS o ON o.id = e.id;
"""
_DELIVERIES = """
INSERT INTO webhook_deliveries (id, tenant_id, event_id, endpoint_id, status, attempt_count,
                                started_at, next_attempt_at, last_status_code, last_error,
                                last_attempt_at, created_at, updated_at)
SELECT md5('wd' || g)::uuid, md5('tenant' || t)::uuid, md5('evt' || t || ':' || k)::uuid,
       md5('endpoint' || n)::uuid, 'pending',
       CASE WHEN dead THEN 5 + g %% 20 ELSE g %% 2 END,
       now() - make_interval(secs => CASE WHEN dead THEN (g * 104729) %% %(window)s
                                          ELSE h %% 40 END),
       now() + make_interval(secs => CASE WHEN dead THEN h - %(dead_due)s
                                          ELSE h %% 40 - 10 END),
       CASE WHEN dead THEN 503 END,
       CASE WHEN dead THEN 'ConnectError: connection refused' END,
       CASE WHEN dead THEN now() - interval '1 min' END,
       now() - interval '1 hour', now() - interval '1 min'
FROM seed_deliveries ORDER BY g
"""


def seed(url: str, pending: int) -> None:
    """The tenants, endpoints, events and `pending` deliveries; vacuumed and analysed."""
    dead_endpoints = DEAD_TENANTS * DEAD_ENDPOINTS_EACH
    healthy_endpoints = (TENANTS - DEAD_TENANTS) * ENDPOINTS_EACH
    params = {
        "tenants": TENANTS,
        "dead_tenants": DEAD_TENANTS,
        "dead_each": DEAD_ENDPOINTS_EACH,
        "each": ENDPOINTS_EACH,
        "dead_endpoints": dead_endpoints,
        "healthy_endpoints": healthy_endpoints,
        "endpoints": dead_endpoints + healthy_endpoints,
        "pending": pending,
        "dead_pending": round(pending * DEAD_SHARE),
        "backoff_max": BACKOFF_MAX_S,
        "window": RETRY_WINDOW_S,
        "dead_due": DEAD_DUE_S,
    }
    with psycopg.connect(url, autocommit=True) as conn:
        with conn.transaction():
            for statement in (_SHAPE, _TENANTS, _ENDPOINTS, _DELIVERY_SHAPE, _EVENTS):
                conn.execute(statement, params)
            conn.execute(_DELIVERIES, params)
        conn.execute("VACUUM ANALYZE")
