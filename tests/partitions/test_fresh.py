"""A new database is partitioned by `migrate`, and every row goes to its operation's day.

The session's database was migrated from empty (0031 and 0033 converted the tables on the
spot): the history is partitioned by `operation_created_at`, the operations and payments by
their `created_at`, with day partitions from today on, and the statements of the service
write each operation, payment, audit row and event to the partition of its operation's day,
whenever they run: a recovery that settles an operation days after it was
created writes to that day's partition, not to today's.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
from psycopg.rows import DictRow

from app.partitions.convert import DAYS_AHEAD
from app.partitions.layout import PARTITIONED, PartitionedTable
from tests.support.control.faults import FaultInjector
from tests.support.control.system import FAST_WORKER, start_worker
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.readers.operations import wait_for_state

Db = psycopg.Connection[DictRow]

_PARTITIONS = """
    SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = to_regclass(%s)
"""


def partitions(db: Db, table: str) -> dict[str, str]:
    """Each partition of `table`, with its bound as PostgreSQL prints it."""
    return {row["name"]: row["bound"] for row in db.execute(_PARTITIONS, (table,)).fetchall()}


def partition_of(db: Db, layout: PartitionedTable, moment: datetime) -> str:
    """The partition a row of `layout` for an operation created at `moment` belongs in: its
    day's, or the legacy one for a day before the first day's partition."""
    day = layout.day_partition(moment.astimezone(UTC).date())
    return day if day in partitions(db, layout.table) else layout.legacy


def test_both_tables_are_partitioned_by_the_operations_day_with_days_ahead(db: Db) -> None:
    today = datetime.now(UTC).date()
    for layout in PARTITIONED:
        kind = db.execute(
            "SELECT c.relkind::text AS kind, pg_get_partkeydef(c.oid) AS key FROM pg_class c"
            " WHERE c.oid = to_regclass(%s)",
            (layout.table,),
        ).fetchone()
        assert kind == {"kind": "p", "key": f"RANGE ({layout.column})"}
        found = partitions(db, layout.table)
        assert layout.legacy in found, found
        days = {layout.day_of(name) for name in found} - {None}
        # From the first day on, one partition per day, at least DAYS_AHEAD - 1 past today.
        first = min(d for d in days if d is not None)
        assert first <= today
        expected = {first + timedelta(days=n) for n in range((today - first).days + DAYS_AHEAD)}
        assert expected <= days, sorted(expected - days)
        assert found[layout.legacy].startswith("FOR VALUES FROM (MINVALUE) TO ")


def _rows(db: Db, operation_id: str) -> list[DictRow]:
    return db.execute(
        "SELECT 'operations' AS tbl, o.tableoid::regclass::text AS part, o.state AS what,"
        " o.created_at AS operation_created_at, o.created_at FROM operations o"
        " WHERE o.id = %(id)s"
        " UNION ALL SELECT 'payments', p.tableoid::regclass::text, 'payment', p.created_at,"
        " o.created_at FROM payments p JOIN operations o ON o.id = p.operation_id"
        " WHERE p.operation_id = %(id)s"
        " UNION ALL SELECT 'operation_transitions', t.tableoid::regclass::text, t.to_state,"
        " t.operation_created_at, o.created_at FROM operation_transitions t"
        " JOIN operations o ON o.id = t.operation_id WHERE t.operation_id = %(id)s"
        " UNION ALL SELECT 'events', e.tableoid::regclass::text, e.type, e.operation_created_at,"
        " o.created_at FROM events e JOIN operations o ON o.id = e.operation_id"
        " WHERE e.operation_id = %(id)s",
        {"id": operation_id},
    ).fetchall()


def test_a_payments_trail_and_event_go_to_its_days_partition(client: httpx.Client, db: Db) -> None:
    paid = post_payment(client, key=new_key())
    assert paid.status_code == 201, paid.text
    rows = _rows(db, paid.json()["operation_id"])
    assert sorted(r["what"] for r in rows) == [
        "COMPLETED",
        "COMPLETED",
        "PROVIDER_REQUEST_SENT",
        "RECEIVED",
        "payment",
        "payment.succeeded",
    ]
    layouts = {layout.table: layout for layout in PARTITIONED}
    for row in rows:
        assert row["operation_created_at"] == row["created_at"]
        assert row["part"] == partition_of(db, layouts[row["tbl"]], row["created_at"]), row
        # A payment made now: today's partition, which a new database has.
        assert row["part"] == layouts[row["tbl"]].day_partition(
            row["created_at"].astimezone(UTC).date()
        )


def test_a_recovery_days_later_writes_to_the_operations_day(
    client: httpx.Client,
    db: Db,
    faults: FaultInjector,
    base_env: dict[str, str],
    work_dir: Path,
) -> None:
    body = payment_body()
    faults.add("error_after_commit", account_id=body["account_id"])
    key = new_key()
    lost = post_payment(client, body, key=key)
    assert lost.status_code == 202, lost.text
    operation_id = lost.json()["operation_id"]
    # As if it had been created three days ago: its payment, its trail so far and its key's
    # row move with it. Its id still tells today (`app/ids.py`), so it is read by its key.
    db.execute(
        "WITH aged AS (UPDATE operations SET created_at = created_at - interval '3 days',"
        " next_check_at = now() WHERE id = %s RETURNING id, created_at),"
        " paid AS (UPDATE payments AS p SET created_at = aged.created_at FROM aged"
        " WHERE p.operation_id = aged.id),"
        " keyed AS (UPDATE idempotency_keys AS k SET operation_created_at = aged.created_at"
        " FROM aged WHERE k.operation_id = aged.id)"
        " UPDATE operation_transitions AS t SET operation_created_at = aged.created_at"
        " FROM aged WHERE t.operation_id = aged.id",
        (operation_id,),
    )
    worker = start_worker(work_dir / "logs", {**base_env, **FAST_WORKER}, once=True)
    assert worker.wait_exit(timeout=120) == 0, worker.log()
    wait_for_state(db, operation_id, "COMPLETED")
    rows = _rows(db, operation_id)
    settled = [r for r in rows if r["what"] in ("COMPLETED", "payment.succeeded", "payment")]
    assert len(settled) == 4, rows
    layouts = {layout.table: layout for layout in PARTITIONED}
    for row in settled:
        layout = layouts[row["tbl"]]
        assert row["operation_created_at"] == row["created_at"]
        assert row["part"] == partition_of(db, layout, row["created_at"]), row
        assert row["part"] != layout.day_partition(datetime.now(UTC).date()), row
    # And the operation's history, read from its day's partition, is whole.
    history = client.get("/operations", params={"idempotency_key": key}).json()["history"]
    assert [h["to_state"] for h in history][-1] == "COMPLETED"
    assert len(history) == len([r for r in rows if r["tbl"] == "operation_transitions"])
