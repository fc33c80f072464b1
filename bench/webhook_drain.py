"""`python -m bench.webhook_drain --baseline DIR`: one worker draining a webhook backlog
spread over many tenants, claim after claim, with this checkout's claim and another's.

The claim runs tenant by tenant (`app/jobs/tenants.py`): with many tenants each due a
little, a claim of 32 asks up to 32 tenants. This measures what that costs a worker: on a
new database of the server at DATABASE_URL (default: the local PostgreSQL), migrated to
head and seeded in SQL with `--pending` deliveries (`bench/webhook_backlog.py`: 1,000
tenants, a few with sixteen dead endpoints holding most of the backlog, the others a short
queue), one connection claims as a worker does (`deliveries.claim`: 32 at most, 4 per
endpoint, 8 per tenant, the tenants kept between claims) and marks each claimed delivery
done, until a claim comes back empty. Each drain starts from a copy of the seeded database.

The code that claims is a checkout's: this one's, and with `--baseline DIR` the one in DIR
(say, `git archive main | tar -x -C DIR`), each drain a process of its own importing `app`
from there, alternating, `--runs` times each. Per drain: the deliveries claimed, the claims,
deliveries a second (of the time spent claiming) and the median claim.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import psycopg

from app.jobs.tenants import KEEP_TENANTS_S, KeptTenants
from app.webhooks import deliveries

LIMIT = 32
PER_ENDPOINT = 4
PER_TENANT = 8
_DONE = """
    UPDATE webhook_deliveries
    SET status = 'succeeded', next_attempt_at = NULL, completed_at = now(),
        lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
    WHERE id = ANY(%s)
"""


async def drain(url: str) -> dict[str, float]:
    """Claim until a claim comes back empty, each claimed delivery marked done, with the
    `app` this process imported (`_drain_in` decides which)."""
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True, prepare_threshold=0)
    async with conn:
        tenants = KeptTenants(refresh_s=KEEP_TENANTS_S)
        claims: list[float] = []
        claimed = 0
        while True:
            started = time.perf_counter()
            taken = await deliveries.claim(
                conn,
                owner="worker:bench",
                lease_s=30.0,
                limit=LIMIT,
                per_endpoint=PER_ENDPOINT,
                in_flight={},
                per_tenant=PER_TENANT,
                tenants_in_flight={},
                tenants=tenants,
            )
            claims.append(time.perf_counter() - started)
            if not taken:
                break
            claimed += len(taken)
            await conn.execute(_DONE, ([d.id for d in taken],))
    return {
        "claimed": claimed,
        "claims": len(claims),
        "claim_s": sum(claims),
        "median_claim_ms": statistics.median(claims) * 1000,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.webhook_drain", description=__doc__)
    parser.add_argument("--pending", type=int, default=100_000, help="pending deliveries")
    parser.add_argument("--runs", type=int, default=2, help="drains of each checkout")
    parser.add_argument("--baseline", type=Path, help="a checkout to compare with")
    parser.add_argument("--drain", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.drain:
        print(json.dumps(asyncio.run(drain(args.drain))))
        return 0

    # Here only: a drain in a baseline's process imports this module alone of `bench`.
    from bench.drain_runs import side_by_side
    from bench.webhook_backlog import seed

    def seeded(url: str) -> str:
        n = args.pending
        seed(url, n)
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE next_attempt_at <= now()),"
                " count(DISTINCT tenant_id) FILTER (WHERE next_attempt_at <= now())"
                " FROM webhook_deliveries WHERE status = 'pending'"
            ).fetchone()
        assert row is not None
        return f"seeded {n:,} pending deliveries, {row[0]:,} due over {row[1]:,} tenants"

    side_by_side(
        Path(__file__).resolve(),
        prefix="bench_webhook_drain",
        seed=seeded,
        baseline=args.baseline,
        runs=args.runs,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
