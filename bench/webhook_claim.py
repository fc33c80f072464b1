"""`python -m bench.webhook_claim`: one webhook claim with a million pending deliveries,
the statement before and after each endpoint's due deliveries were read from its own range.

On a new database of the server at DATABASE_URL (default: the local PostgreSQL), migrated
to head and seeded in SQL with `--pending` deliveries shaped like a dead-endpoint backlog
(`bench/webhook_backlog.py`): a few tenants whose sixteen endpoints all fail, their
deliveries retried for three days with backoff up to an hour (most not yet due, about a
tenth due at the claim), and many healthy tenants with four endpoints and a short queue.
Then, at head (the schema the seed is written for):

1. the old claim (`BASELINE_CLAIM`: every due delivery of every tenant ranked per endpoint
   and per tenant before the LIMIT), asked 32;
2. the same ranking over the busiest tenant's deliveries alone (`BASELINE_TENANT_CLAIM`),
   asked what the worker asks one tenant (its cap, 8);
3. the claim as the worker runs it (`app/webhooks/deliveries.py`), which runs tenant by
   tenant: one statement for the busiest tenant (the first of the dead ones), asked the same.

The old claim ran before the claim's per-endpoint index (migration 0019); that index,
`ix_webhook_deliveries_endpoint_due`, now leads with the tenant (0032), and the old claim's
plan does not use it: with it or without it, the old claim reads and sorts the same rows.

Each claim runs `--runs` times in a transaction rolled back (the same deliveries are due
every time), as a worker with nothing in flight asks (32 at most, 4 per endpoint, 8 per
tenant): the median and fastest time, then one EXPLAIN (ANALYZE, BUFFERS): its execution
time, the buffers it touched, the delivery rows it read and the rows its sorts took in. What
the claims pick is checked: the tenant's two claims the same due times as each other, and
each claim at most its cap of an endpoint (4) and of a tenant (8). (The old claim across
tenants picks from every tenant's deliveries, a tenant's claim only from its own.)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg

from app.db.migrate import upgrade_head
from app.jobs.leases import new_owner
from app.webhooks.deliveries import _CLAIM
from bench.webhook_backlog import seed
from tests.support.control.database import throwaway_database

DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
# The busiest tenant of the seeded backlog: the first with sixteen dead endpoints.
BUSIEST = uuid.UUID(hashlib.md5(b"tenant0").hexdigest())
PARAMS: dict[str, Any] = {
    "tenant_id": BUSIEST,
    "owner": "worker:bench",
    "lease_s": 30.0,
    "limit": 32,
    "per_endpoint": 4,
    "per_tenant": 8,
    "busy_ids": [],
    "busy_counts": [],
    "busy_tenant_ids": [],
    "busy_tenant_counts": [],
}
# A tenant's statement is asked at most the tenant's cap (`deliveries.claim`): it caps only
# its endpoints.
TENANT_PARAMS: dict[str, Any] = {**PARAMS, "limit": min(PARAMS["limit"], PARAMS["per_tenant"])}

# The claim before: every due delivery ranked per endpoint, the survivors per tenant.
# `{tenant}` narrows it to one tenant's deliveries.
_BASELINE = """
    WITH busy AS (
        SELECT * FROM unnest(%(busy_ids)s::uuid[], %(busy_counts)s::int[])
            AS busy (endpoint_id, in_flight)
    ), busy_tenants AS (
        SELECT * FROM unnest(%(busy_tenant_ids)s::uuid[], %(busy_tenant_counts)s::int[])
            AS busy_tenants (tenant_id, in_flight)
    ), candidates AS (
        SELECT d.id, d.tenant_id, d.next_attempt_at,
               row_number() OVER (PARTITION BY d.endpoint_id
                                  ORDER BY d.next_attempt_at, d.id) AS rank,
               coalesce(busy.in_flight, 0) AS in_flight
        FROM webhook_deliveries AS d LEFT JOIN busy USING (endpoint_id)
        WHERE {tenant} d.status = 'pending' AND d.next_attempt_at <= now()
          AND (d.lease_expires_at IS NULL OR d.lease_expires_at < now())
    ), per_tenant AS (
        SELECT c.id, c.next_attempt_at,
               row_number() OVER (PARTITION BY c.tenant_id
                                  ORDER BY c.next_attempt_at, c.id) AS rank,
               coalesce(bt.in_flight, 0) AS in_flight
        FROM candidates AS c LEFT JOIN busy_tenants AS bt USING (tenant_id)
        WHERE c.rank <= %(per_endpoint)s - c.in_flight
    ), picked AS (
        SELECT d.id FROM webhook_deliveries AS d JOIN per_tenant AS c USING (id)
        WHERE c.rank <= %(per_tenant)s - c.in_flight
        ORDER BY c.next_attempt_at
        LIMIT %(limit)s
        FOR UPDATE OF d SKIP LOCKED
    ), claimed AS (
        UPDATE webhook_deliveries AS d
        SET {new_owner}
        FROM picked
        WHERE d.id = picked.id AND d.status = 'pending'
          AND (d.lease_expires_at IS NULL OR d.lease_expires_at < now())
        RETURNING d.id, d.fence, d.attempt_count, d.endpoint_id, d.event_id
    )
    SELECT c.id, c.fence, c.attempt_count, c.endpoint_id, e.url,
           array_remove(ARRAY[e.secret, CASE WHEN e.previous_secret_expires_at > now()
                                             THEN e.previous_secret END], NULL),
           ev.id, ev.tenant_id, ev.type, ev.data, ev.created_at,
           e.deleted_at IS NOT NULL
    FROM claimed AS c
    JOIN webhook_endpoints AS e ON e.id = c.endpoint_id
    JOIN events AS ev ON ev.id = c.event_id
"""
BASELINE_CLAIM = _BASELINE.format(tenant="", new_owner=new_owner("d"))
BASELINE_TENANT_CLAIM = _BASELINE.format(
    tenant="d.tenant_id = %(tenant_id)s AND", new_owner=new_owner("d")
)


@dataclass(frozen=True)
class Measured:
    name: str
    median_ms: float
    fastest_ms: float
    explain_ms: float
    buffers: int
    delivery_rows: int
    sorted_rows: int
    # The picked deliveries' due times in order (deliveries due at the same instant are
    # interchangeable: the old statement ordered by the due time alone), and the most
    # picked of one endpoint and of one tenant.
    picked: tuple[str, ...]
    most: tuple[int, int]
    plan: str


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def measure(
    url: str,
    name: str,
    sql: str,
    runs: int,
    *,
    params: dict[str, Any] = PARAMS,
) -> Measured:
    """`runs` timed claims and one EXPLAIN ANALYZE, each rolled back."""
    times: list[float] = []
    rows: list[tuple[Any, ...]] = []
    with psycopg.connect(url) as conn:
        for _ in range(runs):
            started = time.perf_counter()
            rows = conn.execute(sql, params).fetchall()
            times.append((time.perf_counter() - started) * 1000)
            conn.rollback()
        due = conn.execute(
            "SELECT next_attempt_at FROM webhook_deliveries WHERE id = ANY(%s) ORDER BY 1",
            ([row[0] for row in rows],),
        ).fetchall()
        picked = tuple(str(row[0]) for row in due)
        most = tuple(max(Counter(row[n] for row in rows).values(), default=0) for n in (3, 7))
        explain = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
        [[document]] = conn.execute(explain + sql, params).fetchall()
        conn.rollback()
        text_rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params).fetchall()
        conn.rollback()
    root = document[0]["Plan"]
    nodes = list(_nodes(root))
    delivery_rows = sum(
        int(node["Actual Rows"] * node["Actual Loops"])
        for node in nodes
        if node.get("Relation Name") == "webhook_deliveries"
    )
    sorted_rows = sum(
        int(child["Actual Rows"] * child["Actual Loops"])
        for node in nodes
        if node["Node Type"] in ("Sort", "Incremental Sort")
        for child in node.get("Plans", [])
    )
    return Measured(
        name=name,
        median_ms=statistics.median(times),
        fastest_ms=min(times),
        explain_ms=float(document[0]["Execution Time"]),
        buffers=int(root["Shared Hit Blocks"] + root["Shared Read Blocks"]),
        delivery_rows=delivery_rows,
        sorted_rows=sorted_rows,
        picked=picked,
        most=(most[0], most[1]),
        plan="\n".join(str(row[0]) for row in text_rows),
    )


def compare(url: str, runs: int) -> list[Measured]:
    """The three claims on `url`'s seeded backlog (migrated to head)."""
    return [
        measure(url, "before, all tenants", BASELINE_CLAIM, runs),
        measure(url, "before, one tenant", BASELINE_TENANT_CLAIM, runs, params=TENANT_PARAMS),
        measure(url, "a tenant's claim", _CLAIM, runs, params=TENANT_PARAMS),
    ]


def _due(url: str) -> tuple[int, int]:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE next_attempt_at <= now())"
            " FROM webhook_deliveries WHERE status = 'pending'"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.webhook_claim", description=__doc__)
    parser.add_argument("--pending", type=int, default=1_000_000, help="pending deliveries")
    parser.add_argument("--runs", type=int, default=7, help="timed claims of each statement")
    parser.add_argument("--plans", action="store_true", help="print each EXPLAIN ANALYZE")
    args = parser.parse_args(argv)
    server = os.environ.get("DATABASE_URL", DEFAULT_SERVER)
    with throwaway_database(server, "bench_webhook_claim") as url:
        upgrade_head(url)
        started = time.perf_counter()
        seed(url, args.pending)
        pending, due = _due(url)
        print(
            f"seeded {pending:,} pending deliveries, {due:,} due, in "
            f"{time.perf_counter() - started:.1f} s"
        )
        results = compare(url, args.runs)
    header = (
        f"{'claim':<20} {'median ms':>10} {'fastest':>8} {'explain':>8} {'buffers':>8}"
        f" {'rows read':>10} {'rows sorted':>11} {'picked':>6}"
    )
    print(header)
    for m in results:
        print(
            f"{m.name:<20} {m.median_ms:>10.1f} {m.fastest_ms:>8.1f} {m.explain_ms:>8.1f}"
            f" {m.buffers:>8,} {m.delivery_rows:>10,} {m.sorted_rows:>11,} {len(m.picked):>6}"
        )
    capped = all(m.most[0] <= PARAMS["per_endpoint"] for m in results) and all(
        m.most[1] <= PARAMS["per_tenant"] for m in results
    )
    same = results[1].picked == results[2].picked and capped
    print(
        f"the same due times picked by the tenant's old and new claim, each claim within"
        f" its caps: {'yes' if same else 'NO'}"
    )
    if args.plans:
        for m in results:
            print(f"\n--- {m.name}\n{m.plan}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
