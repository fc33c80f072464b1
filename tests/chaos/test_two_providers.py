"""The short two-provider chaos run: a primary that refuses, hangs and declines about 30 % of
its charge calls, a secondary the payments fail over to, and the usual kills and pauses of
APIs and workers; then both ledgers checked (chaos/checks.py, chaos/providers.py).

Its own database on the session's server, two providers, two APIs, two workers; under a
minute (15 s of faults, then the settlement pass over both providers' books). The long run is
`python -m chaos --providers 2` (docs/chaos.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.config import ChaosConfig
from chaos.providers import MIN_COMPLETED_SHARE
from chaos.run import run_chaos
from tests.support.control.database import test_database as fresh_database

# A chaos run of its own (about 40 s on two cores): `python3 tasks.py test-long`.
pytestmark = pytest.mark.long


def test_two_providers_fail_over_without_charging_twice(database_url: str, tmp_path: Path) -> None:
    config = ChaosConfig.short(
        providers=2,
        duration_s=15.0,
        converge_s=30.0,
        outage_s=0.0,
        clients=3,
        max_requests_per_client=300,
        # About its own promises: the short run (test_chaos.py) has the notifications.
        notifications=False,
    )
    with fresh_database(database_url, tmp_path) as url:
        report = run_chaos(config, url, tmp_path)
    print(report.summary())
    assert report.violations == []
    assert report.harness_failures == []
    assert report.converged, "operations left unsettled after the faults stopped"
    # Every fault of the primary's mix was used up: it refused, hung and declined.
    assert [gap for gap in report.gaps if gap.startswith(("provider:", "failover"))] == []
    providers = report.providers
    assert providers["names"] == ["primary", "secondary"]
    assert providers["per_provider"]["primary"]["faulted_calls"] > 0
    assert providers["per_provider"]["secondary"]["charges"] > 0
    share = providers["failover_share"]
    assert share["eligible"] > 0, "no payment failed over"
    assert share["share"] >= MIN_COMPLETED_SHARE
    # Settled over both providers' books: every failed-over payment where it was charged.
    assert not any(report.settlement["open"].values())
    assert report.settlement["runs"], "the settlement pass ran"
