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
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from app.db.migrate import upgrade_head
from app.jobs.tenants import KEEP_TENANTS_S, KeptTenants
from app.operations import leases
from app.operations.horizon import Horizon
from tests.support.control.database import throwaway_database

HERE = Path(__file__).resolve().parent.parent
DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
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


@contextmanager
def _copy_of(server: str, template: str) -> Iterator[str]:
    """A new database on `server`, a copy of `template`; dropped afterwards."""
    name = f"bench_recovery_drain_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    try:
        yield make_conninfo(server, dbname=name)
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _drain_in(code: Path, url: str) -> dict[str, float]:
    """One drain, in a process that imports `app` from `code`."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--drain", url],
        env=env,
        cwd=code,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


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
    from bench.recovery_backlog import seed

    server = os.environ.get("DATABASE_URL", DEFAULT_SERVER)
    checkouts = [("this", HERE)] + (
        [("baseline", args.baseline.resolve())] if args.baseline else []
    )
    with throwaway_database(server, "bench_recovery_drain") as seeded:
        upgrade_head(seeded)
        seed(seeded, args.due)
        with psycopg.connect(seeded) as conn:
            row = conn.execute(
                "SELECT count(*), count(DISTINCT tenant_id) FROM operations"
                " WHERE (state = 'UNKNOWN_REQUIRES_RECOVERY' AND next_check_at <= now())"
                "    OR (state IN ('RECEIVED', 'PROVIDER_REQUEST_SENT')"
                "        AND lease_expires_at <= now())"
            ).fetchone()
        assert row is not None
        print(f"seeded {row[0]:,} due operations over {row[1]:,} tenants")
        template = str(conninfo_to_dict(seeded)["dbname"])
        print(f"{'code':<9} {'claimed':>8} {'claims':>7} {'per s':>7} {'median ms':>10}")
        for _ in range(args.runs):
            for label, code in checkouts[::-1]:
                with _copy_of(server, template) as url:
                    r = _drain_in(code, url)
                print(
                    f"{label:<9} {int(r['claimed']):>8,} {int(r['claims']):>7,}"
                    f" {r['claimed'] / r['claim_s']:>7.0f} {r['median_claim_ms']:>10.1f}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
