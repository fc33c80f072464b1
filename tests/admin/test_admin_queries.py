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
