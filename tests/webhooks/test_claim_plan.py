"""The workers' claim reads each endpoint's due deliveries from its own index range, at most
its cap of them: what it sorts is bounded by the endpoints, never by every due delivery.

Ranking every due delivery of every tenant before the LIMIT grew with each backlog (a
tenant's dead endpoints keep tens of thousands due for three days). On the plan tests'
seeded database (tests/support/fixtures/plans.py) the claim's plan shows the bound: for
each endpoint (a nested loop over webhook_endpoints), a Limit over an index scan of
`ix_webhook_deliveries_endpoint_due` by that endpoint and the due time; no other read of
the deliveries but by their key. The seeded queue is a few rows, so with sorts allowed the
planner would sort them rather than walk an index in order; sorting switched off, it shows
what the statement lets it do. `bench/webhook_claim.py` measures it on a million.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg.rows import DictRow

from app.webhooks.deliveries import _CLAIM
from tests.support.fixtures.plans import SCANS_OFF, plan_nodes

Db = psycopg.Connection[DictRow]

INDEX = "ix_webhook_deliveries_endpoint_due"
PARAMS: dict[str, Any] = {
    "owner": "worker:plan",
    "lease_s": 30.0,
    "limit": 32,
    "per_endpoint": 4,
    "per_tenant": 8,
    "busy_ids": [],
    "busy_counts": [],
    "busy_tenant_ids": [],
    "busy_tenant_counts": [],
}
SORTS_OFF = (*SCANS_OFF, "enable_sort", "enable_incremental_sort")


def _with_parents(
    node: dict[str, Any], parents: tuple[dict[str, Any], ...] = ()
) -> Iterator[tuple[dict[str, Any], tuple[dict[str, Any], ...]]]:
    yield node, parents
    for child in node.get("Plans", []):
        yield from _with_parents(child, (*parents, node))


def _scans(node: dict[str, Any], relation: str) -> list[dict[str, Any]]:
    return [n for n, _ in _with_parents(node) if n.get("Relation Name") == relation]


def test_the_claim_takes_at_most_its_cap_from_each_endpoints_index_range(plan_db: Db) -> None:
    root = plan_nodes(plan_db, _CLAIM, PARAMS, off=SORTS_OFF)[0]
    [picked] = [n for n in root["Plans"] if n.get("Subplan Name") == "CTE picked"]

    for scan, parents in _with_parents(picked):
        if scan.get("Relation Name") != "webhook_deliveries":
            continue
        if scan.get("Index Name") == "pk_webhook_deliveries":
            # Locking a picked candidate by its key.
            assert "(id = " in scan.get("Index Cond", ""), scan
            continue
        # Every other read of the deliveries: one endpoint's due range, in order, capped.
        assert scan.get("Index Name") == INDEX, scan
        condition = scan["Index Cond"]
        assert "endpoint_id = " in condition, scan
        assert "next_attempt_at <= now()" in condition, scan
        limit, loop = parents[-1], parents[-2]
        assert limit["Node Type"] == "Limit", parents[-1]
        assert loop["Node Type"] == "Nested Loop", loop
        outer = loop["Plans"][0]
        assert _scans(outer, "webhook_endpoints"), outer
        assert not _scans(outer, "webhook_deliveries"), outer

    ranges = [n for n, _ in _with_parents(picked) if n.get("Index Name") == INDEX]
    assert len(ranges) == 1, ranges
