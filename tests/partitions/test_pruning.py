"""An operation's history and its events are read from one partition: its day's.

Checked with EXPLAIN ANALYZE on the statements the service runs, on the plan tests' seeded
database (`plan_db`: a month of operations, its audit trail and events, migrated from
empty, so the older days are in the legacy partition and today's in today's). The
partitions are pruned when the statement runs (the day is the operation's `created_at`,
read by the same statement): a pruned partition shows as never executed.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow

from app.ids import created_window
from app.operations import reads
from app.webhooks import operator_reads
from tests.support.fixtures.plans import OPERATIONS, TENANTS

Db = psycopg.Connection[DictRow]

# The newest operation (today's partition) and one of the oldest (the legacy partition).
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
