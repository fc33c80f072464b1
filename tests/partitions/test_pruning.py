"""An operation's history, its events, and a taken key's operation are read from one
partition: its day's.

Checked with EXPLAIN ANALYZE on the statements the service runs, on the plan tests' seeded
database (`plan_db`: a month of operations, its audit trail and events, migrated from
empty, so the older days are in the legacy partition and the seeding's day's in its own:
"today" is the seeding's day, read from the seeded rows, not the clock's). The
partitions are pruned when the statement runs (the day is the operation's `created_at`,
read by the same statement): a pruned partition shows as never executed.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import UTC, datetime, time, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow

from app.ids import created_window
from app.operations import leases, reads
from app.payments.operator_reads import Cursor, RecordFilter
from app.payments.operator_reads import list_sql as payments_list_sql
from app.webhooks import operator_reads
from tests.support.fixtures.plans import OPERATIONS, TENANTS, seeded_at, seeded_day

Db = psycopg.Connection[DictRow]

# The newest operation (the seeding's day's partition) and one of the oldest (the legacy
# partition).
NEWEST, OLDEST = OPERATIONS - 1, 21

HISTORY_SQL = reads.history_by_id_sql()


def _ids(g: int) -> dict[str, Any]:
    operation_id = uuid.UUID(_md5(f"op{g}"))
    return {
        "id": operation_id,
        "operation_id": operation_id,
        "tenant_id": uuid.UUID(_md5(f"tenant{g % TENANTS}")),
        "key_ttl_s": 86400,
        # The seed's ids are not UUIDv7: the read by id names no window (`app/ids.py`).
        **created_window(operation_id).params("id"),
        **created_window(operation_id).params("op"),
    }


def _md5(text: str) -> str:
    # As the seed makes its ids (`md5('op' || g)::uuid`).
    return hashlib.md5(text.encode()).hexdigest()


def scanned(conn: Db, sql: str, params: dict[str, Any], table: str) -> dict[str, bool]:
    """Each partition of `table` in the plan, and whether the run read it."""
    rows = conn.execute(
        f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {sql}", params
    ).fetchall()
    found: dict[str, bool] = {}
    for row in rows:
        line = str(row["QUERY PLAN"])
        match = re.search(rf" on ({table}_(?:legacy|p\d{{8}}))\b", line)
        if match:
            found[match.group(1)] = "(never executed)" not in line
    return found


@pytest.mark.parametrize(("g", "where"), [(NEWEST, "today"), (OLDEST, "legacy")])
def test_an_operations_history_is_read_from_its_days_partition(
    plan_db: Db, g: int, where: str
) -> None:
    found = scanned(plan_db, HISTORY_SQL, _ids(g), "operation_transitions")
    read = [name for name, ran in found.items() if ran]
    assert len(read) == 1, found
    assert read[0].endswith("_legacy") == (where == "legacy"), found
    # Pruned, not absent: the statement could reach every partition.
    assert len(found) > 1, found


@pytest.mark.parametrize(("g", "where"), [(NEWEST, "today"), (OLDEST, "legacy")])
def test_an_operations_events_are_read_from_its_days_partition(
    plan_db: Db, g: int, where: str
) -> None:
    found = scanned(plan_db, operator_reads.EVENTS_SQL, _ids(g), "events")
    read = [name for name, ran in found.items() if ran]
    assert len(read) == 1, found
    assert read[0].endswith("_legacy") == (where == "legacy"), found


def planned(conn: Db, sql: str, params: dict[str, Any], table: str) -> set[str]:
    """The partitions of `table` in the plan of `sql` (EXPLAIN without running it)."""
    rows = conn.execute(f"EXPLAIN (COSTS OFF) {sql}", params).fetchall()
    return {
        match.group(1)
        for row in rows
        if (match := re.search(rf" on ({table}_(?:legacy|p\d{{8}}))\b", str(row["QUERY PLAN"])))
    }


def _today(conn: Db) -> datetime:
    """The start of the seeding's day: the plan database's today, whatever the clock's."""
    return datetime.combine(seeded_day(conn), time(), UTC)


@pytest.mark.parametrize("statement", ["_DUE_TENANTS", "_CLAIM_DUE"])
def test_the_recovery_claim_reads_the_days_from_the_horizon_on(plan_db: Db, statement: str) -> None:
    sql = getattr(leases, statement)
    params = {"tenant_id": _ids(NEWEST)["tenant_id"], "owner": "worker:plan", "lease_s": 30}
    params["limit"] = 16
    # The seeded month is in the legacy partition: a horizon a month back reads it ...
    month = planned(
        plan_db, sql, params | {"since": _today(plan_db) - timedelta(days=40)}, "operations"
    )
    assert "operations_legacy" in month, month
    # ... today's (the seeding's) reads today's partition and those after it, nothing before.
    today = planned(plan_db, sql, params | {"since": _today(plan_db)}, "operations")
    assert today, today
    assert "operations_legacy" not in today, today
    assert all(name >= f"operations_p{_today(plan_db):%Y%m%d}" for name in today), today


# Twenty payments of today (the seeding's moment), in the test's transaction only (rolled
# back: the plan database stays as seeded): the first page's rows are all in today's
# partition, whatever the time of day.
_TODAYS_PAYMENTS = """
    INSERT INTO payments (id, tenant_id, operation_id, provider_key, route, attempt, status,
                          amount_minor, currency, account_id, created_at)
    SELECT gen_random_uuid(), %(tenant_id)s, gen_random_uuid(), 'today-' || g, '{primary}', 0,
           'SUCCEEDED', 100, 'EUR', 'acc_today', %(at)s
    FROM generate_series(1, 20) AS g
"""


def test_the_payments_list_reads_the_newest_day_first_and_stops_there(plan_db: Db) -> None:
    sql, params = payments_list_sql(RecordFilter(), table="payments", limit=10)
    with plan_db.transaction():
        plan_db.execute("SET TRANSACTION READ WRITE")
        todays = {"tenant_id": _ids(NEWEST)["tenant_id"], "at": seeded_at(plan_db)}
        plan_db.execute(_TODAYS_PAYMENTS, todays)
        found = scanned(plan_db, sql, params, "payments")
        raise psycopg.Rollback
    read = {name for name, ran in found.items() if ran}
    # The days made ahead (empty, one index descent each), then today's, which filled it.
    today = f"payments_p{_today(plan_db):%Y%m%d}"
    assert today in read, found
    assert all(name >= today for name in read), found
    # The month before is there to read, and was not: newest first, the page was full.
    assert found.get("payments_legacy") is False, found


def test_a_payments_list_page_skips_the_days_after_its_cursor(plan_db: Db) -> None:
    last = plan_db.execute(
        "SELECT created_at, id FROM payments_legacy ORDER BY created_at DESC, id DESC LIMIT 1"
    ).fetchone()
    assert last is not None
    cursor = Cursor(created_at=last["created_at"], id=last["id"])
    sql, params = payments_list_sql(RecordFilter(before=cursor), table="payments", limit=10)
    assert planned(plan_db, sql, params, "payments") == {"payments_legacy"}


@pytest.mark.parametrize(("g", "where"), [(NEWEST, "today"), (OLDEST, "legacy")])
def test_a_taken_keys_operation_is_read_from_its_days_partition(
    plan_db: Db, g: int, where: str
) -> None:
    # The read of a taken key's operation by a second statement, on a schema before migration
    # 0034 (and an owner's read of its operation): the key's row names the operation's id and
    # day, and the operation is read on that day, a parameter: the planner keeps that one
    # partition of `operations`, and of the audit trail. With 0034 the claim reads it in its
    # own statement (test_keyed_read_plan.py).
    key = {
        "tenant_id": uuid.UUID(_md5(f"tenant{g % TENANTS}")),
        "operation_name": "create_payment",
        "idempotency_key": f"key-{_md5(f'key{g}')}",
    }
    row = plan_db.execute(reads.KEY_ROW, key).fetchone()
    assert row is not None
    params = {"id": row["operation_id"], "tenant_id": key["tenant_id"]}
    params |= {"created_at": row["operation_created_at"], "key_ttl_s": 86400}
    sql = reads.snapshot_on_day_sql(with_history=True)
    partition = (
        "operations_legacy" if where == "legacy" else f"operations_p{_today(plan_db):%Y%m%d}"
    )
    assert planned(plan_db, sql, params, "operations") == {partition}
    trail = planned(plan_db, sql, params, "operation_transitions")
    assert trail == {partition.replace("operations", "operation_transitions")}, trail
