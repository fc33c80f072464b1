"""`python -m bench.search`: the operators' search on a million operations, measured.

Into a fresh database (an embedded PostgreSQL, or a new database on `DATABASE_URL`, as the
benchmark makes it; `bench/system.py`) it seeds, in SQL (`INSERT ... SELECT generate_series`,
in chunks of one transaction each):

    --operations N (1,000,000)   operations over 20 tenants, one in ten a refund's
    payments                     one per payment operation, 20,000 accounts
    refunds                      one per refund operation
    events                       one per operation
    webhook deliveries           one per ten events

then ANALYZE (and `bench/console_reads.py`'s stays in recovery and webhook attempts), and
runs each kind of search `--queries` times (500) through the console's
own statement (`app.admin.search.search`, one connection), each time with a value drawn at
random from the seeded rows (an unknown text for `miss`), after `--warmup` (50) untimed
ones. It prints each kind's median, p99 and maximum in milliseconds, measured here, and
exits 1 when a search's median or p99 is over `--budget-ms` (100). Then it times the
console's other reads on the same data (the lists' pages, the dashboard's charts), each
`--queries / 10` times (at least 20), and prints them too.

The operations', payments' and refunds' ids are version 4 ids (`bench/search_ids.py`),
which tell no time: a search by one of them reads every day's partition, as it does for a
row made before the service made UUIDv7s.

    .venv/bin/python -m bench.search                       # about 2-4 minutes on two cores
    .venv/bin/python -m bench.search --operations 100000   # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg

from app.admin.search import search
from app.composition import KINDS
from bench.console_reads import measure_reads, reads_table, seed_history
from bench.search_ids import seeded_id, seeded_id_sql
from bench.system import RESULTS_DIR, bench_database

TENANTS = 20
ACCOUNTS = 20_000
CHUNK = 200_000

# Row g of a chunk: a payment operation unless g % 10 == 0, which refunds payment g - 1.
# The ids of operations, payments and refunds are `bench/search_ids.py`'s.
_OP = seeded_id_sql("op")
_PAY = seeded_id_sql("pay")
_OPERATIONS = f"""
INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint, state,
                        fence, attempts, response_status, created_at, updated_at,
                        completed_at)
SELECT {_OP}, t.ids[1 + g %% %(tenants)s],
       CASE WHEN g %% 10 = 0 THEN 'create_refund' ELSE 'create_payment' END,
       'key-' || md5('key' || g), md5(g::text) || md5('f' || g), 'COMPLETED', 1, 0, 201,
       now() - make_interval(secs => %(total)s::bigint - g), now(), now()
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g,
     (SELECT %(tenant_ids)s::uuid[] AS ids) AS t
"""
_PAYMENTS = f"""
INSERT INTO payments (id, tenant_id, operation_id, provider_key, route, status,
                      amount_minor, currency, account_id, merchant_reference,
                      provider_charge_id, created_at, updated_at)
SELECT {_PAY}, t.ids[1 + g %% %(tenants)s], {_OP},
       'payment-' || {_PAY}::text, '{{primary}}', 'SUCCEEDED',
       100 + g %% 10000, 'EUR',
       'acc_' || (g %% %(accounts)s), 'order-' || g, 'ch_' || md5('ch' || g),
       now() - make_interval(secs => %(total)s::bigint - g), now()
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g,
     (SELECT %(tenant_ids)s::uuid[] AS ids) AS t
WHERE g %% 10 <> 0
"""
_REFUNDS = f"""
INSERT INTO refunds (id, tenant_id, payment_id, operation_id, provider_key, charge_id,
                     provider, status, amount_minor, currency, provider_refund_id, created_at,
                     updated_at)
SELECT {seeded_id_sql("ref")}, t.ids[1 + g %% %(tenants)s], {seeded_id_sql("pay", "(g - 1)")},
       {_OP}, 'refund-' || {seeded_id_sql("ref")}::text,
       'ch_' || md5('ch' || (g - 1)), 'primary', 'SUCCEEDED', 50, 'EUR',
       're_' || md5('re' || g),
       now() - make_interval(secs => %(total)s::bigint - g), now()
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g,
     (SELECT %(tenant_ids)s::uuid[] AS ids) AS t
WHERE g %% 10 = 0
"""
_EVENTS = f"""
INSERT INTO events (id, tenant_id, type, operation_id, data, created_at, operation_created_at)
SELECT md5('evt' || g)::uuid, t.ids[1 + g %% %(tenants)s],
       CASE WHEN g %% 10 = 0 THEN 'refund.succeeded' ELSE 'payment.succeeded' END,
       o.id, '{{}}'::jsonb, now() - make_interval(secs => %(total)s::bigint - g), o.created_at
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g
     JOIN operations AS o ON o.id = {_OP},
     (SELECT %(tenant_ids)s::uuid[] AS ids) AS t
"""
_DELIVERIES = """
INSERT INTO webhook_deliveries (id, tenant_id, event_id, endpoint_id, status, completed_at)
SELECT md5('wd' || g)::uuid, t.ids[1 + g %% %(tenants)s], md5('evt' || g)::uuid,
       e.ids[1 + g %% %(tenants)s], 'succeeded', now()
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g,
     (SELECT %(tenant_ids)s::uuid[] AS ids) AS t,
     (SELECT %(endpoint_ids)s::uuid[] AS ids) AS e
WHERE g %% 10 = 5
"""

# Each operation kind's part of the search, as the service assembles it.
RECORDS = tuple(kind.search for kind in KINDS)


@dataclass(frozen=True)
class Measured:
    """One kind of search: its latencies in milliseconds, and the hits per query."""

    kind: str
    median_ms: float
    p99_ms: float
    max_ms: float
    hits_per_query: float


def seed(url: str, operations: int) -> float:
    """Insert the rows; ANALYZE; the seconds it took."""
    started = time.perf_counter()
    tenant_ids = [uuid.uuid4() for _ in range(TENANTS)]
    endpoint_ids = [uuid.uuid4() for _ in range(TENANTS)]
    with psycopg.connect(url, autocommit=True) as conn:
        for tenant, endpoint in zip(tenant_ids, endpoint_ids, strict=True):
            conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'bench')", (tenant,))
            conn.execute(
                "INSERT INTO webhook_endpoints (id, tenant_id, url, secret)"
                " VALUES (%s, %s, 'https://example.invalid/hook', 'whsec_bench')",
                (endpoint, tenant),
            )
        for first in range(1, operations + 1, CHUNK):
            params = {
                "first": first,
                "last": min(operations, first + CHUNK - 1),
                "total": operations,
                "tenants": TENANTS,
                "accounts": ACCOUNTS,
                "tenant_ids": tenant_ids,
                "endpoint_ids": endpoint_ids,
            }
            with conn.transaction():
                for statement in (_OPERATIONS, _PAYMENTS, _REFUNDS, _EVENTS, _DELIVERIES):
                    conn.execute(statement, params)
            print(f"  seeded {params['last']:,} operations", flush=True)
        conn.execute("ANALYZE")
        with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
            conn.execute("CHECKPOINT")
    return time.perf_counter() - started


def _payment(g: int) -> int:
    """A payment's row number: never a multiple of ten."""
    return g if g % 10 else g - 1


def kinds(operations: int) -> dict[str, Callable[[random.Random], str]]:
    """Each kind of search, and how to draw a value of it that the seed holds."""

    def row(r: random.Random) -> int:
        return r.randint(11, operations)

    def refund(r: random.Random) -> int:
        return 10 * r.randint(1, operations // 10)

    def delivered(r: random.Random) -> int:
        return 10 * r.randint(0, (operations - 5) // 10) + 5

    def md5_hex(prefix: str, g: int) -> str:
        return hashlib.md5(f"{prefix}{g}".encode()).hexdigest()

    return {
        "operation id": lambda r: str(seeded_id("op", row(r))),
        "payment id": lambda r: str(seeded_id("pay", _payment(row(r)))),
        "refund id": lambda r: str(seeded_id("ref", refund(r))),
        "event id": lambda r: "evt_" + md5_hex("evt", row(r)),
        "delivery id": lambda r: "wd_" + md5_hex("wd", delivered(r)),
        "idempotency key": lambda r: "key-" + md5_hex("key", row(r)),
        "provider charge id": lambda r: "ch_" + md5_hex("ch", _payment(row(r))),
        "provider refund id": lambda r: "re_" + md5_hex("re", refund(r)),
        "merchant reference": lambda r: f"order-{_payment(row(r))}",
        "account id": lambda r: f"acc_{_payment(row(r)) % ACCOUNTS}",
        "provider key": lambda r: f"payment-{seeded_id('pay', _payment(row(r)))}",
        "miss": lambda r: f"no-such-{r.getrandbits(64):x}",
    }


async def measure(url: str, operations: int, *, queries: int, warmup: int) -> list[Measured]:
    """Each kind's latencies (median, p99, max) and hits per query, measured."""
    rng = random.Random(1042)
    rows: list[Measured] = []
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for name, draw in kinds(operations).items():
            for _ in range(warmup):
                await search(conn, draw(rng), records=RECORDS)
            timings: list[float] = []
            found = 0
            for _ in range(queries):
                text = draw(rng)
                started = time.perf_counter()
                hits = await search(conn, text, records=RECORDS)
                timings.append((time.perf_counter() - started) * 1000)
                found += len(hits)
            timings.sort()
            p99 = timings[min(len(timings) - 1, int(len(timings) * 0.99))]
            median = statistics.median(timings)
            rows.append(Measured(name, median, p99, timings[-1], found / queries))
    return rows


def table(rows: list[Measured]) -> str:
    lines = [
        "| search by | median ms | p99 ms | max ms | hits per query |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row.kind} | {row.median_ms:.2f} | {row.p99_ms:.2f} | {row.max_ms:.2f} |"
            f" {row.hits_per_query:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.search", description=__doc__)
    parser.add_argument("--operations", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--budget-ms", type=float, default=100.0)
    args = parser.parse_args(argv)
    if args.operations < 100:
        parser.error("--operations: at least 100")
    with bench_database(durable=False) as database:
        print(f"seeding {args.operations:,} operations", flush=True)
        seed_s = seed(database.url, args.operations)
        seed_history(database.url, args.operations)
        with psycopg.connect(database.url) as conn:
            counts = conn.execute(
                "SELECT (SELECT count(*) FROM operations), (SELECT count(*) FROM payments),"
                " (SELECT count(*) FROM refunds), (SELECT count(*) FROM events),"
                " (SELECT count(*) FROM webhook_deliveries), current_setting('server_version')"
            ).fetchone()
        assert counts is not None
        rows = asyncio.run(
            measure(database.url, args.operations, queries=args.queries, warmup=args.warmup)
        )
        others = asyncio.run(measure_reads(database.url, repeats=max(20, args.queries // 10)))
    header = (
        f"{counts[0]:,} operations, {counts[1]:,} payments, {counts[2]:,} refunds,"
        f" {counts[3]:,} events, {counts[4]:,} deliveries; seeded in {seed_s:.0f} s;"
        f" PostgreSQL {counts[5]}; {args.queries} queries per kind after {args.warmup}"
    )
    report = f"{header}\n\n{table(rows)}\n\n{reads_table(others)}\n"
    print(report)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / f"{stamp}-search.md").write_text(f"# Operators' search\n\n{report}")
    over = [r for r in rows if max(r.median_ms, r.p99_ms) > args.budget_ms]
    for row in over:
        print(f"over the {args.budget_ms:g} ms budget: {row.kind}", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
