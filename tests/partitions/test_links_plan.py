"""An operation's links (what it acts on) are read on its day, planned in one partition of
`payments`.

Every read of an operation with its history carries its links: the worker's read of an
operation it has just moved, `GET /operations/{id}`, a replay's `find_by_key`, the
operators' lists. Read through `operation_links` by `operation_id` alone, the view's
payments' branch planned and probed every day of `payments` (the table is partitioned by
`created_at`, not by `operation_id`). `links_on_day` (migration 0035) is handed the
operation's id and day as values: its reads, seen through auto_explain on the plan tests'
seeded database, plan the day's partition of `payments` alone, or, for a refund's
operation, no partition of it at all; the outer statements plan none.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow

from app.operations import reads
from tests.partitions.test_keyed_read_plan import CALLS, nested_plans
from tests.partitions.test_pruning import NEWEST, OLDEST, _ids, _md5, _today, planned
from tests.support.fixtures.plans import TENANTS

Db = psycopg.Connection[DictRow]

# The plan database's newest refund: every tenth operation refunds the one before it.
NEWEST_REFUND = NEWEST - NEWEST % 10


def _operation(conn: Db, g: int) -> dict[str, Any]:
    """Operation `g`'s parameters for each read: its key, id, tenant and day."""
    key = {
        "tenant_id": uuid.UUID(_md5(f"tenant{g % TENANTS}")),
        "operation_name": "create_refund" if g % 10 == 0 else "create_payment",
        "idempotency_key": f"key-{_md5(f'key{g}')}",
        "key_ttl_s": 86400,
    }
    row = conn.execute(
        "SELECT id, created_at FROM operations WHERE id = %s", (_ids(g)["id"],)
    ).fetchone()
    assert row is not None
    return key | _ids(g) | {"created_at": row["created_at"]}


def _reads() -> dict[str, str]:
    return {
        "owner's": reads.snapshot_on_day_sql(with_history=True),
        "by id": reads.history_by_id_sql(),
        "by key": reads.keyed_snapshot_sql(with_history=True),
    }


def _payments(plan: str) -> set[str]:
    return set(re.findall(r" on (payments_(?:legacy|p\d{8}))\b", plan))


@pytest.mark.parametrize("read", list(_reads()))
@pytest.mark.parametrize(("g", "where"), [(NEWEST, "today"), (OLDEST, "legacy")])
def test_a_payments_links_are_planned_on_its_day(
    plan_db: Db, read: str, g: int, where: str
) -> None:
    sql, params = _reads()[read], _operation(plan_db, g)
    day = "payments_legacy" if where == "legacy" else f"payments_p{_today(plan_db):%Y%m%d}"
    assert planned(plan_db, sql, params, "payments") == set()

    plans = nested_plans(plan_db, sql, params, CALLS)
    links = [plan for plan in plans if "operation_links" in plan]
    assert len(links) == CALLS, plans  # found on its day: the second read never runs
    for plan in links:
        assert _payments(plan) == {day}, plan
        assert "Subplans Removed" not in plan, plan

    # Through the view by `operation_id` alone, every day of `payments` is planned.
    every_day = sql.replace(reads.LINKS_COLUMN, reads.LINKS_OF_EVERY_DAY)
    assert len(planned(plan_db, every_day, params, "payments")) > 2


def test_a_refunds_links_are_read_without_a_day_of_payments(plan_db: Db) -> None:
    params = _operation(plan_db, NEWEST_REFUND)
    row = plan_db.execute(reads.snapshot_on_day_sql(with_history=True), params).fetchone()
    assert row is not None
    assert row["links"] == {
        "payment_id": str(uuid.UUID(_md5(f"pay{NEWEST_REFUND - 1}"))),
        "refund_id": str(uuid.UUID(_md5(f"ref{NEWEST_REFUND}"))),
    }
    plans = nested_plans(plan_db, reads.snapshot_on_day_sql(with_history=True), params, CALLS)
    links = [plan for plan in plans if "operation_links" in plan]
    # The day's branches first (its payments' day, where no payment is this operation's),
    # then the branches without a day, which plan no partition of `payments`.
    on_day = [plan for plan in links if "operation_created_at = " in plan]
    without = [plan for plan in links if "operation_created_at IS NULL" in plan]
    assert len(on_day) == len(without) == CALLS, links
    for plan in on_day:
        assert len(_payments(plan)) == 1, plan
    for plan in without:
        assert _payments(plan) == set(), plan
        assert "refunds" in plan, plan
