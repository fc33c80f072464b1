"""A taken key's operation, read in the statement that reads its key's row, is planned in
its day's partition: of `operations`, and of the audit trail.

The statement hands the key row's id and day to `operation_on_day` and
`transitions_on_day` (migration 0034), PL/pgSQL functions whose reads EXPLAIN does not
show. Their plans are read with auto_explain, its nested statements on and logged to the
client as notices, on the plan tests' seeded database (`plan_db`): each inner read names
one partition, planned for the day (no partitions removed when it runs), even on a session
that asks for generic plans, and after more than the five custom plans the plan cache
makes before it weighs a generic one. The claim's statement itself plans no partition of
`operations`: the day is never a value the outer statement's planner waits for.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow

from app.operations import reads, statements
from tests.partitions.test_pruning import NEWEST, OLDEST, _md5, _today, planned
from tests.support.fixtures.plans import TENANTS

Db = psycopg.Connection[DictRow]

# More calls than the plan cache's five custom plans before it weighs a generic one.
CALLS = 7


def _key(g: int) -> dict[str, Any]:
    return {
        "tenant_id": uuid.UUID(_md5(f"tenant{g % TENANTS}")),
        "operation_name": "create_payment",
        "idempotency_key": f"key-{_md5(f'key{g}')}",
        "key_ttl_s": 86400,
    }


def nested_plans(conn: Db, sql: str, params: dict[str, Any], calls: int) -> list[str]:
    """The plans of the statements `sql` runs inside functions, each run of each, as
    auto_explain logs them; on a session that forces generic plans where nothing says
    otherwise."""
    plans: list[str] = []
    conn.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    for setting, value in (
        ("auto_explain.log_min_duration", "0"),
        ("auto_explain.log_nested_statements", "on"),
        ("auto_explain.log_level", "notice"),
        ("plan_cache_mode", "force_generic_plan"),
    ):
        conn.execute("SELECT set_config(%s, %s, false)", (setting, value))
    for _ in range(calls):
        conn.execute(sql, params).fetchall()
    outer = sql.strip()[:40]
    return [p for p in plans if "plan:" in p and outer not in p]


def _partitions(plan: str, table: str) -> set[str]:
    return set(re.findall(rf" on ({table}_(?:legacy|p\d{{8}}))\b", plan))


@pytest.mark.parametrize(("g", "where"), [(NEWEST, "today"), (OLDEST, "legacy")])
def test_a_taken_keys_operation_read_through_its_row_is_planned_on_its_day(
    plan_db: Db, g: int, where: str
) -> None:
    # `GET /operations?idempotency_key=` and the claim of a taken key: one statement.
    sql = reads.keyed_snapshot_sql(with_history=True)
    partition = (
        "operations_legacy" if where == "legacy" else f"operations_p{_today(plan_db):%Y%m%d}"
    )
    trail = partition.replace("operations", "operation_transitions")
    # The outer statement plans no partition of either: the reads are the functions'.
    assert planned(plan_db, sql, _key(g), "operations") == set()
    assert planned(plan_db, sql, _key(g), "operation_transitions") == set()

    plans = nested_plans(plan_db, sql, _key(g), CALLS)
    reads_of = {
        table: [p for p in plans if f"FROM {table}\n" in p or f"FROM {table} " in p]
        for table in ("operations", "operation_transitions")
    }
    assert len(reads_of["operations"]) == CALLS, plans
    assert len(reads_of["operation_transitions"]) == CALLS, plans
    for table, day in (("operations", partition), ("operation_transitions", trail)):
        for plan in reads_of[table]:
            # Planned for the day: one partition, none pruned when it ran.
            assert _partitions(plan, table) == {day}, plan
            assert "Subplans Removed" not in plan, plan


def test_the_claims_statement_plans_no_day_of_operations(plan_db: Db) -> None:
    params = _key(NEWEST) | {
        "id": uuid.uuid4(),
        "fingerprint": "0" * 64,
        "lease_s": 30,
        "actor": "api:plan",
        "traceparent": None,
        "received": "RECEIVED",
        "sent": "PROVIDER_REQUEST_SENT",
        "claim": "claim",
        "send": "send",
        "send_reason": "sent",
    }
    sql = statements.claim_sql(())
    assert planned(plan_db, sql, params, "operations") == set()
    # Its key row's read through a join instead plans every day kept.
    joined = statements.claim_sql((), on_day=False).replace(
        "existing.*",
        "existing.*, (SELECT count(*) FROM operations o"
        " WHERE o.id = existing.operation_id"
        " AND o.created_at = existing.operation_created_at)",
    )
    assert len(planned(plan_db, joined, params, "operations")) > 1
