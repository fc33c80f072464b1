"""Scale-out: three APIs and three workers on one database, under the chaos run's faults.

Nothing may rely on process-local state for correctness: with more processes of each kind
than the usual two, SIGKILLs and SIGSTOPs of any of them, provider faults, clients
spreading retries over every API, and the database failing over to its synchronous standby
in the middle of it all, each payment still happens exactly once (chaos/checks.py). A short
phase of faults keeps this under a minute; the long run is
`python -m chaos --apis 3 --workers 3 --failover` (docs/chaos.md).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from app.db.migrate import upgrade_head
from chaos.config import ChaosConfig
from chaos.run import _read_history, run_chaos
from tests.support.control.replication import replicated_postgres

# About a minute and a half of six service processes: `python3 tasks.py test-long`.
pytestmark = pytest.mark.long


def test_three_apis_and_three_workers_keep_every_promise_through_a_failover(
    tmp_path: Path,
) -> None:
    config = ChaosConfig.short(
        apis=3,
        workers=3,
        duration_s=20.0,
        converge_s=30.0,
        outage_s=0.0,
        clients=2,
        max_requests_per_client=300,
        db_pool_size=4,
        failover=True,
        failover_at_s=7.0,
        # About its own promises: the short run (test_chaos.py) has the notifications.
        notifications=False,
    )
    with replicated_postgres("payments_scale_out") as pair:
        upgrade_head(pair.url)
        report = run_chaos(config, pair.url, tmp_path, replicated=pair)
    print(report.summary())
    assert report.violations == []
    assert report.harness_failures == []
    assert report.converged, "operations left unsettled after the faults stopped"
    assert report.failover["promoted_at"] is not None
    # All three APIs served, and the workers settled what the faults left unknown.
    served = Counter(r["api"] for r in _read_history(tmp_path) if r["status"] is not None)
    assert set(served) >= {0, 1, 2}, served
    assert report.recovery["went_unknown"] > 0
    assert report.recovery["settled_by_worker"] > 0
