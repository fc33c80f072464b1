"""`python -m bench.webhook_claim`: on a backlog seeded at head, the old ranking of every
due delivery across tenants, the same ranking over one tenant's deliveries and the
tenant's claim as the worker runs it: the tenant's two claims pick the same due times, and
no claim takes more than its caps (the tenant's claim asked what the worker asks it)."""

from __future__ import annotations

import pytest

from app.db.migrate import upgrade_head
from bench.webhook_backlog import seed
from bench.webhook_claim import PARAMS, compare, main

INDEX = "ix_webhook_deliveries_endpoint_due"


@pytest.fixture
def backlog_url(scratch_database: str) -> str:
    """A migrated database of its own on the test server, seeded with a small backlog."""
    upgrade_head(scratch_database)
    seed(scratch_database, 20_000)
    return scratch_database


def test_a_tenants_claims_pick_the_same_within_their_caps(backlog_url: str) -> None:
    across, ranked, tenant = compare(backlog_url, runs=1)

    assert [m.name for m in (across, ranked, tenant)] == [
        "before, all tenants",
        "before, one tenant",
        "a tenant's claim",
    ]
    assert len(across.picked) == PARAMS["limit"]
    assert len(tenant.picked) == PARAMS["per_tenant"]
    assert ranked.picked == tenant.picked
    # The old claim ranks every due delivery; the tenant's claim reads each endpoint's range.
    assert across.delivery_rows > 10 * tenant.delivery_rows
    assert INDEX in tenant.plan
    for m in (across, ranked, tenant):
        assert m.most[0] <= PARAMS["per_endpoint"], m.name
        assert m.most[1] <= PARAMS["per_tenant"], m.name
        assert 0 < m.fastest_ms <= m.median_ms, m.name


def test_the_command_seeds_and_checks_at_head(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABASE_URL", database_url)

    assert main(["--pending", "20000", "--runs", "1"]) == 0

    out = capsys.readouterr().out
    assert "seeded 20,000 pending deliveries" in out
    assert "each claim within its caps: yes" in out
