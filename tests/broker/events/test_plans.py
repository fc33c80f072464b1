"""The publication's reads of `events` go through each tenant's feed index: what a claim
and a backlog reading cost grows with the tenants and what is unpublished, never with the
events already published."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.rows import DictRow

from app.events.publication import BACKLOG_SQL, CLAIM_SQL
from tests.support.fixtures.plans import plan_nodes

CLAIM_PARAMS = {
    "exchange": "payments.events",
    "owner": "worker:plan",
    "lease_s": 30,
    "limit": 8,
    "batch": 100,
}


@pytest.mark.parametrize(
    ("sql", "params"), [(CLAIM_SQL, CLAIM_PARAMS), (BACKLOG_SQL, None)], ids=["claim", "backlog"]
)
def test_events_are_read_from_the_feed_index_from_each_position(
    plan_db: psycopg.Connection[DictRow], sql: str, params: dict[str, object] | None
) -> None:
    reads = [
        node for node in plan_nodes(plan_db, sql, params) if node.get("Relation Name") == "events"
    ]
    assert reads
    for node in reads:
        assert node["Node Type"] in ("Index Scan", "Index Only Scan"), node
        assert node["Index Name"] == "ix_events_feed", node
        # Searched from the tenant's position, not read whole and filtered.
        assert "tenant_id = " in node["Index Cond"], node
        assert "ROW(txid, seq) > ROW(" in node["Index Cond"], node
