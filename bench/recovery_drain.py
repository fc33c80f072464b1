"""`python -m bench.recovery_drain --baseline DIR`: one worker draining a recovery backlog
spread over many tenants, claim after claim, with this checkout's claim and another's.

The recovery claim runs tenant by tenant (`app/jobs/tenants.py`): with many tenants each due
a little, a claim of 16 asks up to 16 tenants. This measures what that costs a worker: on a
new database of the server at DATABASE_URL (default: the local PostgreSQL), migrated to
head and seeded in SQL with `--due` due operations (`bench/recovery_backlog.py`: 1,000
tenants, a few due each, as many not due yet), one connection claims as the worker's
recovery job does (`leases.claim_due`: PAYMENTS_RECONCILE_BATCH_SIZE's default, 16, at
most, the tenants and the horizon kept between claims) and marks each claimed operation
final, until a claim comes back empty. Each drain starts from a copy of the seeded
database.

The code that claims is a checkout's: this one's, and with `--baseline DIR` the one in DIR
(say, `git archive main | tar -x -C DIR`), each drain a process of its own importing `app`
from there, alternating, `--runs` times each. Per drain: the operations claimed, the
claims, operations a second (of the time spent claiming) and the median claim. The drain
imports nothing of `bench` but this module, so a baseline needs only `app` and `tests`.
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
from app.operations import leases
from app.operations.horizon import Horizon

# PAYMENTS_RECONCILE_BATCH_SIZE's default.
LIMIT = 16
_DONE = """
    UPDATE operations
    SET state = 'COMPLETED', lease_owner = NULL, lease_expires_at = NULL,
        next_check_at = NULL, updated_at = now()
    WHERE id = ANY(%s)
"""


async def drain(url: str) -> dict[str, float]:
    """Claim until a claim comes back empty, each claimed operation marked final, with the
    `app` this process imported (`_drain_in` decides which)."""
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True, prepare_threshold=0)
    async with conn:
        tenants = KeptTenants(refresh_s=KEEP_TENANTS_S)
        horizon = Horizon()
        claims: list[float] = []
        claimed = 0
        while True:
            started = time.perf_counter()
            taken = await leases.claim_due(
                conn,
                owner="worker:bench",
                lease_s=30.0,
                limit=LIMIT,
                tenants=tenants,
                horizon=horizon,
            )
            claims.append(time.perf_counter() - started)
            if not taken:
                break
            claimed += len(taken)
            await conn.execute(_DONE, ([due.ref.id for due in taken],))
    return {
        "claimed": claimed,
        "claims": len(claims),
        "claim_s": sum(claims),
        "median_claim_ms": statistics.median(claims) * 1000,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.recovery_drain", description=__doc__)
    parser.add_argument("--due", type=int, default=4_000, help="due operations")
    parser.add_argument("--runs", type=int, default=2, help="drains of each checkout")
    parser.add_argument("--baseline", type=Path, help="a checkout to compare with")
    parser.add_argument("--drain", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.drain:
        print(json.dumps(asyncio.run(drain(args.drain))))
        return 0

    # Here only: a drain in a baseline's process imports this module alone of `bench`.
    from bench.drain_runs import side_by_side
    from bench.recovery_backlog import seed

    def seeded(url: str) -> str:
        n = args.due
        seed(url, n)
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT count(*), count(DISTINCT tenant_id) FROM operations"
                " WHERE (state = 'UNKNOWN_REQUIRES_RECOVERY' AND next_check_at <= now())"
                "    OR (state IN ('RECEIVED', 'PROVIDER_REQUEST_SENT')"
                "        AND lease_expires_at <= now())"
            ).fetchone()
        assert row is not None
        return f"seeded {row[0]:,} due operations over {row[1]:,} tenants"

    side_by_side(
        Path(__file__).resolve(),
        prefix="bench_recovery_drain",
        seed=seeded,
        baseline=args.baseline,
        runs=args.runs,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
