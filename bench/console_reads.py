"""The console's other reads on the same million operations (`python -m bench.search`):
the lists' first and deeper pages, and the dashboard's charts of the last hour and day.

`seed_history` adds what the charts read beyond `bench/search.py`'s seed: one stay in
recovery for one operation in 200 (into UNKNOWN_REQUIRES_RECOVERY, out 10 minutes later,
the last ones still in it) and one webhook attempt per delivery, one in eight failed.
"""

from __future__ import annotations

import random
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta

import psycopg

from app.admin import activity
from app.db.database import Connection
from app.operations.operator_reads import OperationFilter, list_operations
from app.payments import activity as payment_reads
from app.payments import attempts
from app.payments.operator_reads import Cursor, RecordFilter, list_payments
from app.refunds.operator_reads import list_refunds
from bench.search_ids import seeded_id_sql

_STAYS = f"""
INSERT INTO operation_transitions (operation_id, tenant_id, from_state, to_state, trigger, actor,
                                   fence, created_at, operation_created_at)
SELECT o.id, o.tenant_id, s.from_state, s.to_state, s.trigger, 'bench', 1,
       now() - make_interval(secs => %(total)s::bigint - g) + s.after, o.created_at
FROM generate_series(1::bigint, %(total)s::bigint) AS g
     JOIN operations AS o ON o.id = {seeded_id_sql("op")},
     (VALUES ('PROVIDER_REQUEST_SENT', 'UNKNOWN_REQUIRES_RECOVERY', 'lose', interval '0'),
             ('UNKNOWN_REQUIRES_RECOVERY', 'COMPLETED', 'complete', interval '10 min'))
       AS s(from_state, to_state, trigger, after)
WHERE g %% 200 = 0 AND (s.to_state <> 'COMPLETED' OR g < %(total)s::bigint - 3000)
"""
_ATTEMPTS = """
INSERT INTO webhook_attempts (tenant_id, delivery_id, worker, succeeded, status_code,
                              latency_ms, attempted_at)
SELECT d.tenant_id, d.id, 'bench', g %% 8 <> 0, CASE WHEN g %% 8 = 0 THEN 500 ELSE 200 END,
       20, now() - make_interval(secs => %(total)s::bigint - g)
FROM generate_series(5::bigint, %(total)s::bigint, 10) AS g
JOIN webhook_deliveries d ON d.id = md5('wd' || g)::uuid
"""


def seed_history(url: str, operations: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_STAYS, {"total": operations})
        conn.execute(_ATTEMPTS, {"total": operations})
        conn.execute("ANALYZE operation_transitions, webhook_attempts")


Read = Callable[[Connection, random.Random], Awaitable[object]]


async def _tenant(conn: Connection) -> uuid.UUID:
    row = await (await conn.execute("SELECT id FROM tenants LIMIT 1")).fetchone()
    assert row is not None
    tenant: uuid.UUID = row[0]
    return tenant


async def reads(conn: Connection) -> dict[str, Read]:
    """Each read the console makes, as the pages call it."""
    tenant = await _tenant(conn)
    row = await (await conn.execute("SELECT max(created_at) FROM payments")).fetchone()
    assert row is not None
    newest = row[0]

    def deep(r: random.Random) -> RecordFilter:
        # A cursor somewhere in the last ten days: a page far down the list.
        at = newest - timedelta(seconds=r.randint(3600, 10 * 86400))
        return RecordFilter(before=Cursor(at, uuid.UUID(int=0)))

    return {
        "payments, newest 50": lambda c, r: list_payments(c, RecordFilter(), limit=50),
        "payments, a page deep": lambda c, r: list_payments(c, deep(r), limit=50),
        "payments, one tenant": lambda c, r: list_payments(
            c, RecordFilter(tenant_id=tenant), limit=50
        ),
        "payments, one account": lambda c, r: list_payments(
            c, RecordFilter(account_id=f"acc_{r.randrange(20_000)}"), limit=50
        ),
        "payments, EUR 50.00-60.00": lambda c, r: list_payments(
            c, RecordFilter(currency="EUR", amount_min=5000, amount_max=6000), limit=50
        ),
        # The worst case: a filter no index serves that no row matches walks every row.
        "payments, a status none has": lambda c, r: list_payments(
            c, RecordFilter(status="DECLINED"), limit=50
        ),
        "refunds, newest 50": lambda c, r: list_refunds(c, RecordFilter(), limit=50),
        "operations, one tenant": lambda c, r: list_operations(
            c, OperationFilter(tenant_id=tenant), limit=50, key_ttl_s=86400
        ),
        "chart: payments, hour": lambda c, r: activity.payment_activity(
            c, activity.WINDOWS["hour"], payment_reads.created
        ),
        "chart: payments, day": lambda c, r: activity.payment_activity(
            c, activity.WINDOWS["day"], payment_reads.created
        ),
        "chart: backlog, day": lambda c, r: activity.recovery_backlog(c, activity.WINDOWS["day"]),
        "chart: webhooks, day": lambda c, r: activity.webhook_attempts(c, activity.WINDOWS["day"]),
        "chart: failovers, day": lambda c, r: attempts.counts(c, 86400),
    }


async def measure_reads(url: str, *, repeats: int) -> list[tuple[str, float, float, float]]:
    """(read, median ms, p99 ms, max ms) of each read, measured `repeats` times after 5."""
    rng = random.Random(1042)
    out = []
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for name, read in (await reads(conn)).items():
            for _ in range(5):
                await read(conn, rng)
            timings = []
            for _ in range(repeats):
                started = time.perf_counter()
                await read(conn, rng)
                timings.append((time.perf_counter() - started) * 1000)
            timings.sort()
            p99 = timings[min(len(timings) - 1, int(len(timings) * 0.99))]
            out.append((name, statistics.median(timings), p99, timings[-1]))
    return out


def reads_table(rows: list[tuple[str, float, float, float]]) -> str:
    lines = ["| console read | median ms | p99 ms | max ms |", "| --- | ---: | ---: | ---: |"]
    lines += [f"| {n} | {m:.2f} | {p:.2f} | {x:.2f} |" for n, m, p, x in rows]
    return "\n".join(lines)
