"""The publication's reads of `events` go through each tenant's feed index: what a claim
and a backlog reading cost grows with the tenants and what is unpublished, never with the
events already published."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.rows import DictRow

from app.events.publication import BACKLOG_SQL, CLAIM_SQL
from app.partitions.layout import EVENTS
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
    # `events` is partitioned by day: each partition is read through its part of the feed
    # index (docs/scaling.md, "Time partitions": the feed does not prune).
    feed = {"ix_events_feed"} | {
        str(row["relname"])
        for row in plan_db.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'ix_events_feed'::regclass"
        ).fetchall()
    }
    # A day's partition still empty (the days ahead) is searched however the planner likes:
    # it costs a page, and ANALYZE replans it once it holds rows (autovacuum, within its
    # first minute of traffic). The partitions holding events are checked.
    empty = {
        str(row["relname"])
        for row in plan_db.execute(
            "SELECT relname FROM pg_class WHERE relname LIKE 'events%%' AND relkind = 'r'"
            " AND reltuples <= 0"
        ).fetchall()
    }
    reads = [
        node
        for node in plan_nodes(plan_db, sql, params)
        if node.get("Relation Name") == "events"
        or (EVENTS.is_partition(node.get("Relation Name")) and node["Relation Name"] not in empty)
    ]
    assert reads
    for node in reads:
        assert node["Node Type"] in ("Index Scan", "Index Only Scan"), node
        assert node["Index Name"] in feed, node
        # Searched from the tenant's position, not read whole and filtered.
        assert "tenant_id = " in node["Index Cond"], node
        assert "ROW(txid, seq) > ROW(" in node["Index Cond"], node
