"""The calendar, retention, archive and restore on the catalogue's tables as the migrations
make them (`operations`, `payments`, `operation_transitions` and `events`, converted): on a
database of the test's own, at a day of its own, since a pass detaches whole days of every
tenant."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta
from datetime import time as clock
from pathlib import Path
from typing import Any

import psycopg
from psycopg.errors import LockNotAvailable
from psycopg.rows import dict_row

from app.db.migrate import upgrade_head
from app.partitions.calendar import Made, create_ahead
from app.partitions.layout import EVENTS, OPERATION_TRANSITIONS, OPERATIONS, PARTITIONED, PAYMENTS
from app.partitions.retention import Retired, retire_all
from tests.support.control.waiting import wait_until

DAY = date(2101, 5, 6)
ROOT = Path(__file__).resolve().parents[2]


def _pass(url: str, today: date, archive: Path) -> list[Retired]:
    async def go() -> list[Retired]:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        async with conn:
            for table in PARTITIONED:
                await create_ahead(conn, table, premake_days=3, today=DAY)
            retention = {table.table: 1 for table in PARTITIONED}
            done = await retire_all(conn, PARTITIONED, retention, today=today, archive_dir=archive)
            assert done is not None
            return done

    return asyncio.run(go())


def _rows(url: str, query: str, *params: Any) -> list[dict[str, Any]]:
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(query, params).fetchall()


def test_a_day_of_the_real_tables_retired_archived_and_restored(
    scratch_database: str, tmp_path: Path
) -> None:
    upgrade_head(scratch_database)
    tenant, operation, event = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    payment = uuid.uuid4()
    created = datetime.combine(DAY, clock(9), tzinfo=UTC)
    _pass(scratch_database, DAY, tmp_path)
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'real')", (tenant,))
        conn.execute(
            "INSERT INTO operations (id, tenant_id, operation_name, idempotency_key,"
            " fingerprint, state, created_at, completed_at)"
            " VALUES (%s, %s, 'create_payment', NULL, %s, 'COMPLETED', %s, %s)",
            (operation, tenant, "0" * 64, created, created),
        )
        conn.execute(
            "INSERT INTO payments (id, tenant_id, operation_id, provider_key, route, status,"
            " amount_minor, currency, account_id, created_at)"
            " VALUES (%s, %s, %s, %s, '{primary}', 'SUCCEEDED', 100, 'EUR', 'acc', %s)",
            (payment, tenant, operation, f"payment-{payment}", created),
        )
        conn.execute(
            "INSERT INTO operation_transitions (operation_id, tenant_id, from_state, to_state,"
            " trigger, actor, fence, created_at, operation_created_at)"
            " VALUES (%s, %s, 'RECEIVED', 'COMPLETED', 'complete', 'test', 1, %s, %s)",
            (operation, tenant, created, created),
        )
        conn.execute(
            "INSERT INTO events (id, tenant_id, type, operation_id, operation_created_at, data)"
            " VALUES (%s, %s, 'payment.succeeded', %s, %s, '{\"amount\": 1}')",
            (event, tenant, operation, created),
        )
        conn.execute(
            "INSERT INTO settlement_days (day, last_finished_at) VALUES (%s, now())", (DAY,)
        )
    before = _rows(scratch_database, "SELECT * FROM events WHERE id = %s", event)
    assert len(before) == 1
    family = {
        "operations": _rows(scratch_database, "SELECT * FROM operations WHERE id = %s", operation),
        "payments": _rows(scratch_database, "SELECT * FROM payments WHERE id = %s", payment),
    }
    assert [len(rows) for rows in family.values()] == [1, 1]

    # Two days on, one day kept: the day's partitions of the whole family go, archived.
    done = _pass(scratch_database, DAY + timedelta(days=2), tmp_path)
    assert [d.dropped for d in done] == [
        [OPERATIONS.day_partition(DAY)],
        [PAYMENTS.day_partition(DAY)],
        [OPERATION_TRANSITIONS.day_partition(DAY)],
        [EVENTS.day_partition(DAY)],
    ]
    assert _rows(scratch_database, "SELECT id FROM events WHERE id = %s", event) == []
    assert _rows(scratch_database, "SELECT id FROM operations WHERE id = %s", operation) == []
    assert _rows(scratch_database, "SELECT id FROM payments WHERE id = %s", payment) == []

    env = {k: v for k, v in os.environ.items() if not k.startswith("PAYMENTS_")}
    env["DATABASE_URL"] = scratch_database
    for table in PARTITIONED:
        restored = subprocess.run(
            [
                sys.executable,
                "-m",
                "app.cli",
                "partitions",
                "restore",
                str(tmp_path / f"{table.day_partition(DAY)}.csv.gz"),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert restored.returncode == 0, restored.stderr
    assert _rows(scratch_database, "SELECT * FROM events WHERE id = %s", event) == before
    assert family == {
        "operations": _rows(scratch_database, "SELECT * FROM operations WHERE id = %s", operation),
        "payments": _rows(scratch_database, "SELECT * FROM payments WHERE id = %s", payment),
    }
    trail = _rows(
        scratch_database,
        "SELECT to_state FROM operation_transitions WHERE operation_id = %s",
        operation,
    )
    assert trail == [{"to_state": "COMPLETED"}]
    # A new event still takes the next seq: the restored rows did not disturb the identity.
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO events (id, tenant_id, type, operation_id, operation_created_at, data)"
            " VALUES (%s, %s, 'payment.refunded', %s, %s, '{}') RETURNING seq",
            (uuid.uuid4(), tenant, operation, created),
        ).fetchone()
    assert row is not None
    assert row[0] > before[0]["seq"]


def test_a_day_whose_operation_holds_its_key_keeps_its_payment_and_trail(
    scratch_database: str, tmp_path: Path
) -> None:
    # The operations' own rule keeps their day; the payments and the audit trail, retired
    # after them, are kept with it (an operation outlives neither).
    upgrade_head(scratch_database)
    tenant, operation = uuid.uuid4(), uuid.uuid4()
    created = datetime.combine(DAY, clock(9), tzinfo=UTC)
    _pass(scratch_database, DAY, tmp_path)
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'kept')", (tenant,))
        conn.execute(
            "INSERT INTO operations (id, tenant_id, operation_name, idempotency_key,"
            " fingerprint, state, created_at, completed_at)"
            " VALUES (%s, %s, 'create_payment', 'still-held', %s, 'COMPLETED', %s, %s)",
            (operation, tenant, "0" * 64, created, created),
        )
        conn.execute(
            "INSERT INTO payments (id, tenant_id, operation_id, provider_key, route, status,"
            " amount_minor, currency, account_id, created_at)"
            " VALUES (%s, %s, %s, 'payment-kept', '{primary}', 'SUCCEEDED', 100, 'EUR',"
            " 'acc', %s)",
            (uuid.uuid4(), tenant, operation, created),
        )
        conn.execute(
            "INSERT INTO operation_transitions (operation_id, tenant_id, from_state, to_state,"
            " trigger, actor, fence, created_at, operation_created_at)"
            " VALUES (%s, %s, 'RECEIVED', 'COMPLETED', 'complete', 'test', 1, %s, %s)",
            (operation, tenant, created, created),
        )
        conn.execute(
            "INSERT INTO settlement_days (day, last_finished_at) VALUES (%s, now())", (DAY,)
        )
    done = {d.table: d for d in _pass(scratch_database, DAY + timedelta(days=2), tmp_path)}
    assert done["operations"].held == {OPERATIONS.day_partition(DAY): "key_held"}
    assert done["payments"].held == {PAYMENTS.day_partition(DAY): "operation_kept"}
    assert done["operation_transitions"].held == {
        OPERATION_TRANSITIONS.day_partition(DAY): "operation_kept"
    }
    assert [d.dropped for d in done.values() if d.table != "events"] == [[], [], []]


def test_making_a_day_holds_the_tenants_writers_back_a_second_at_most(
    scratch_database: str,
) -> None:
    # Attaching a day of events clones its foreign key to tenants: a SHARE ROW EXCLUSIVE
    # lock there, which waits for the writes under way and queues the next ones behind it.
    upgrade_head(scratch_database)

    def make() -> Made:
        async def go() -> Made:
            conn = await psycopg.AsyncConnection.connect(
                scratch_database, autocommit=True, application_name="calendar"
            )
            async with conn:
                return await create_ahead(conn, EVENTS, premake_days=2, today=DAY)

        return asyncio.run(go())

    def calendar_waiting() -> bool:
        return bool(
            _rows(
                scratch_database,
                "SELECT 1 FROM pg_stat_activity WHERE application_name = 'calendar'"
                " AND wait_event_type = 'Lock'",
            )
        )

    with psycopg.connect(scratch_database) as under_way, ThreadPoolExecutor(1) as pool:
        # A write under way on tenants (its transaction open).
        under_way.execute("UPDATE tenants SET name = name WHERE false")
        making = pool.submit(make)
        wait_until(calendar_waiting, message="the calendar waiting for tenants")
        # The next write queues behind the calendar's lock until it gives up.
        with psycopg.connect(
            scratch_database, autocommit=True, options="-c lock_timeout=10s"
        ) as next_write:
            started = time.monotonic()
            next_write.execute("UPDATE tenants SET name = name WHERE false")
            waited = time.monotonic() - started
        under_way.rollback()
        # Every attempt may have come while the write was under way: then the next pass's.
        with contextlib.suppress(LockNotAvailable):
            making.result(timeout=60)
    assert waited < 5, f"a write waited {waited:.1f} s behind the calendar"
    # Once nothing holds tenants, the days are made.
    make()
    assert EVENTS.day_partition(DAY) in [
        row["relname"]
        for row in _rows(
            scratch_database,
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'events'::regclass",
        )
    ]
