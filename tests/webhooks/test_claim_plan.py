"""The workers' claim reads each endpoint's due deliveries from its own index range, at most
its cap of them: what it sorts is bounded by the endpoints, never by every due delivery.

Ranking every due delivery of every tenant before the LIMIT grew with each backlog (a
tenant's dead endpoints keep tens of thousands due for three days). On the plan tests'
seeded database (tests/support/fixtures/plans.py) a tenant's claim's plan shows the bound
(the claim runs tenant by tenant): the tenant's endpoints with pending deliveries found one
index row each (a recursive loose scan of
`ix_webhook_deliveries_endpoint_due`), then for each, a Limit over its range of that index
by the due time; no other read of the deliveries but by their key (sorting switched off:
a queue of a few rows the planner would rather sort).
`bench/webhook_claim.py` measures it on a million.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg.rows import DictRow

from app.webhooks.deliveries import _CLAIM
from tests.support.fixtures.plans import SCANS_OFF, plan_nodes

Db = psycopg.Connection[DictRow]

INDEX = "ix_webhook_deliveries_endpoint_due"
# The seeded queue is a few rows: the planner would rather sort them than walk an index in
# order. With sorting switched off too, the plan shows what the statement lets it do.
SORTS_OFF = (*SCANS_OFF, "enable_sort", "enable_incremental_sort")
PARAMS: dict[str, Any] = {
    # The seeded database's first tenant (`md5('tenant' || 0)`).
    "tenant_id": uuid.UUID(hashlib.md5(b"tenant0").hexdigest()),
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


def _with_parents(
    node: dict[str, Any], parents: tuple[dict[str, Any], ...] = ()
) -> Iterator[tuple[dict[str, Any], tuple[dict[str, Any], ...]]]:
    yield node, parents
    for child in node.get("Plans", []):
        yield from _with_parents(child, (*parents, node))


def test_the_claim_takes_at_most_its_cap_from_each_endpoints_index_range(plan_db: Db) -> None:
    root = plan_nodes(plan_db, _CLAIM, PARAMS, off=SORTS_OFF)[0]
    subplans = {n.get("Subplan Name"): n for n in root["Plans"]}
    assert "CTE endpoints" in subplans, "no walk over the endpoints with pending deliveries"
    endpoints, picked = subplans["CTE endpoints"], subplans["CTE picked"]

    # The endpoints with pending deliveries: from one to the next, one index row each.
    assert any(n["Node Type"] == "Recursive Union" for n, _ in _with_parents(endpoints))
    for part in (endpoints, picked):
        for scan, parents in _with_parents(part):
            if scan.get("Relation Name") != "webhook_deliveries":
                continue
            if scan.get("Index Name") == "pk_webhook_deliveries":
                # Locking a picked candidate by its key.
                assert "(id = " in scan.get("Index Cond", ""), scan
                continue
            # Every other read of the deliveries: a range of the index, capped.
            assert scan.get("Index Name") == INDEX, scan
            assert parents[-1]["Node Type"] == "Limit", parents[-1]

    # Each endpoint's due deliveries, in order, at most its cap: a Limit over its range in a
    # nested loop over the endpoints found.
    [(scan, parents)] = [(n, p) for n, p in _with_parents(picked) if n.get("Index Name") == INDEX]
    assert "endpoint_id = " in scan["Index Cond"], scan
    assert "next_attempt_at <= now()" in scan["Index Cond"], scan
    loop = parents[-2]
    assert loop["Node Type"] == "Nested Loop", loop
    outer = [n for n, _ in _with_parents(loop["Plans"][0])]
    assert any(n.get("CTE Name") == "endpoints" for n in outer), loop["Plans"][0]
    assert not any(n.get("Relation Name") == "webhook_deliveries" for n in outer), outer
