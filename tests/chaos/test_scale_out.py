"""Scale-out: three APIs and three workers on one database, under the chaos run's faults.

Nothing may rely on process-local state for correctness: with more processes of each kind
than the usual two, SIGKILLs and SIGSTOPs of any of them, provider faults and clients
spreading retries over every API, each payment still happens exactly once
(chaos/checks.py). A short phase of faults keeps this under a minute; the long run is
`python -m chaos --apis 3 --workers 3` (docs/chaos.md).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from chaos.config import ChaosConfig
from chaos.run import _read_history, run_chaos
from tests.support.database import test_database as fresh_database


def test_three_apis_and_three_workers_keep_every_promise(database_url: str, tmp_path: Path) -> None:
    config = ChaosConfig.short(
        apis=3,
        workers=3,
        duration_s=20.0,
        converge_s=30.0,
        outage_s=0.0,
        clients=2,
        max_requests_per_client=300,
        # Six processes on the session's server: small pools keep them under its limit.
        db_pool_size=4,
    )
    with fresh_database(database_url, tmp_path) as url:
        report = run_chaos(config, url, tmp_path)
    print(report.summary())
    assert report.violations == []
    assert report.harness_failures == []
    assert report.converged, "operations left unsettled after the faults stopped"
    # All three APIs served, and the workers settled what the faults left unknown.
    served = Counter(r["api"] for r in _read_history(tmp_path) if r["status"] is not None)
    assert set(served) >= {0, 1, 2}, served
    assert report.recovery["went_unknown"] > 0
    assert report.recovery["settled_by_worker"] > 0
