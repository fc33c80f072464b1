"""The operators' filtered lists walk an index in page order: no sort of the whole table.

Checked with EXPLAIN on the statement the list runs, on the plan tests' seeded database
(`plan_db`: its contents and statistics fixed, whatever tests ran before), with sequential
and bitmap scans switched off: a missing or unusable index shows up as a Sort below the
Limit.
"""

from __future__ import annotations

import re
import uuid

import psycopg
import pytest
from psycopg.rows import DictRow

from app.ids import created_window
from app.operations.operator_reads import OperationFilter, list_sql
from app.operations.states import State
from app.webhooks import operator_reads
from tests.support.fixtures.plans import plan

FILTERS = {
    "ix_operations_state_created": OperationFilter(state=State.FAILED),
    "ix_operations_needs_attention": OperationFilter(needs_attention=True, older_than_s=60),
    "ix_operations_tenant_created": OperationFilter(tenant_id=uuid.uuid4(), after=uuid.uuid4()),
}


@pytest.mark.parametrize("index", sorted(FILTERS))
def test_a_filtered_list_walks_its_index(index: str, plan_db: psycopg.Connection[DictRow]) -> None:
    sql, params = list_sql(FILTERS[index], limit=50, key_ttl_s=86400)
    explained = plan(plan_db, sql, params)
    assert index in explained, explained
    assert "Sort" not in explained.split(index)[0], explained


def test_the_unknown_operations_are_walked_in_page_order_too(
    plan_db: psycopg.Connection[DictRow],
) -> None:
    # The recovery backlog, as any state: its partial index leads with tenant_id (the
    # worker's claim runs tenant by tenant: docs/scaling.md), so it holds no order across
    # tenants, and the list walks the state's range of ix_operations_state_created.
    sql, params = list_sql(
        OperationFilter(state=State.UNKNOWN_REQUIRES_RECOVERY), limit=50, key_ttl_s=86400
    )
    explained = plan(plan_db, sql, params)
    assert "ix_operations_state_created" in explained, explained
    assert "Sort" not in explained.split("ix_operations_state_created")[0], explained
    assert "Seq Scan" not in explained, explained


# The operators' webhook reads: by operation through the operation's tenant (an index
# leading with tenant_id, whichever of them the planner picks), and the failed list through
# its partial index, newest first, with no sort.
BY_TENANT: dict[str, tuple[str, dict[str, object]]] = {
    "events": (
        operator_reads.EVENTS_SQL,
        {
            "tenant_id": uuid.uuid4(),
            "operation_id": uuid.uuid4(),
            **created_window(uuid.uuid4()).params("op"),
        },
    ),
    "webhook_deliveries": (
        operator_reads.DELIVERIES_SQL,
        {"tenant_id": uuid.uuid4(), "event_ids": [uuid.uuid4()]},
    ),
}


@pytest.mark.parametrize("table", sorted(BY_TENANT))
def test_an_operations_deliveries_are_read_by_its_tenant(
    table: str, plan_db: psycopg.Connection[DictRow]
) -> None:
    sql, params = BY_TENANT[table]
    explained = plan(plan_db, sql, params)
    assert f"Seq Scan on {table}" not in explained, explained
    # Each scan of the table, or of each of its partitions (`events` is partitioned by day).
    lines = explained.splitlines()
    scans = [n for n, line in enumerate(lines) if re.search(rf" on {table}(_\w+)? ", line)]
    assert scans, explained
    # The condition leads with the tenant, alone or before other columns (`((tenant_id = ...)
    # AND ...)`: which index the planner takes for a day depends on how many rows it holds,
    # so on the hour the plan database was seeded at).
    for n in scans:
        assert re.search(r"Index Cond: \(+tenant_id = ", lines[n + 1]), explained


def test_the_failed_deliveries_list_walks_its_partial_index(
    plan_db: psycopg.Connection[DictRow],
) -> None:
    explained = plan(plan_db, operator_reads.FAILED_SQL, {"after": None, "limit": 51})
    assert "ix_webhook_deliveries_failed" in explained, explained
    assert "Sort" not in explained.split("ix_webhook_deliveries_failed")[0], explained
