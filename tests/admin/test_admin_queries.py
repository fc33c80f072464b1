"""The operators' filtered lists walk an index in page order: no sort of the whole table.

Checked with EXPLAIN on the statement the list runs, sequential and bitmap scans switched
off so the answer does not depend on how few rows the test database holds: a missing or
unusable index shows up as a Sort below the Limit.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg.rows import DictRow

from app.admin.queries import OperationFilter, list_sql
from app.operations.states import State
from app.webhooks import operator_reads

FILTERS = {
    "ix_operations_state_created": OperationFilter(state=State.UNKNOWN_REQUIRES_RECOVERY),
    "ix_operations_needs_attention": OperationFilter(needs_attention=True, older_than_s=60),
    "ix_operations_tenant_created": OperationFilter(tenant_id=uuid.uuid4(), after=uuid.uuid4()),
}


@pytest.mark.parametrize("index", sorted(FILTERS))
def test_a_filtered_list_walks_its_index(index: str, db: psycopg.Connection[DictRow]) -> None:
    sql, params = list_sql(FILTERS[index], limit=50, key_ttl_s=86400)
    with db.transaction():
        db.execute("SET LOCAL enable_seqscan = off")
        db.execute("SET LOCAL enable_bitmapscan = off")
        rows = db.execute(f"EXPLAIN {sql}", params).fetchall()
    plan = "\n".join(str(row["QUERY PLAN"]) for row in rows)
    assert index in plan, plan
    assert "Sort" not in plan.split(index)[0], plan


# The operators' webhook reads: by operation through the operation's tenant (an index
# leading with tenant_id, whichever the planner picks on a near-empty table), and the failed
# list through its partial index, newest first, with no sort.
BY_TENANT: dict[str, tuple[str, dict[str, object]]] = {
    "events": (
        operator_reads.EVENTS_SQL,
        {"tenant_id": uuid.uuid4(), "operation_id": uuid.uuid4()},
    ),
    "webhook_deliveries": (
        operator_reads.DELIVERIES_SQL,
        {"tenant_id": uuid.uuid4(), "event_ids": [uuid.uuid4()]},
    ),
}


def _plan(db: psycopg.Connection[DictRow], sql: str, params: dict[str, object]) -> str:
    with db.transaction():
        db.execute("SET LOCAL enable_seqscan = off")
        db.execute("SET LOCAL enable_bitmapscan = off")
        rows = db.execute(f"EXPLAIN {sql}", params).fetchall()
    return "\n".join(str(row["QUERY PLAN"]) for row in rows)


@pytest.mark.parametrize("table", sorted(BY_TENANT))
def test_an_operations_deliveries_are_read_by_its_tenant(
    table: str, db: psycopg.Connection[DictRow]
) -> None:
    sql, params = BY_TENANT[table]
    plan = _plan(db, sql, params)
    assert f"Seq Scan on {table}" not in plan, plan
    scan = next(line for line in plan.splitlines() if f" on {table} " in line)
    condition = plan.split(scan, 1)[1].splitlines()[1]
    assert "Index Cond: (tenant_id = " in condition, plan


def test_the_failed_deliveries_list_walks_its_partial_index(
    db: psycopg.Connection[DictRow],
) -> None:
    plan = _plan(db, operator_reads.FAILED_SQL, {"after": None, "limit": 51})
    assert "ix_webhook_deliveries_failed" in plan, plan
    assert "Sort" not in plan.split("ix_webhook_deliveries_failed")[0], plan
