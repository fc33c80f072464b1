"""The legacy partition of a converted table (every row from before the cutover, `FROM
(MINVALUE)`): past retention as a whole, and kept while any operation before the cutover is
not final or its day not settled. On a database of the test's own, where the operations
before the cutover are the test's alone (in a plain table of its schema, which the rules
read first: the database's own is partitioned, with no partition for the far-off days)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, date, datetime, time

import psycopg

from app.db.migrate import upgrade_head
from app.partitions.calendar import create_ahead
from app.partitions.retention import Retired, retire
from tests.partitions.conftest import TABLE

CUTOVER = date(2101, 3, 10)
OPTIONS = "-c search_path=cal,public -c timezone=UTC"


def _retire(url: str, today: date) -> Retired:
    async def go() -> Retired:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True, options=OPTIONS)
        async with conn:
            await create_ahead(conn, TABLE, premake_days=2, today=CUTOVER)
            return await retire(conn, TABLE, retention_days=5, today=today)

    return asyncio.run(go())


def test_the_legacy_partition_goes_once_every_operation_before_the_cutover_is_done(
    scratch_database: str,
) -> None:
    upgrade_head(scratch_database)
    tenant = uuid.uuid4()
    operations: dict[int, uuid.UUID] = {}
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA cal")
        conn.execute(
            f"CREATE TABLE cal.{TABLE.table} (id bigint, {TABLE.column} timestamptz NOT NULL)"
            f" PARTITION BY RANGE ({TABLE.column})"
        )
        conn.execute(
            f"CREATE TABLE cal.{TABLE.legacy} PARTITION OF cal.{TABLE.table}"
            f" FOR VALUES FROM (MINVALUE) TO ('{CUTOVER}')"
        )
        conn.execute(
            "CREATE TABLE cal.operations (LIKE public.operations INCLUDING DEFAULTS"
            " INCLUDING CONSTRAINTS)"
        )
        conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'legacy')", (tenant,))
        for day, state in ((1, "COMPLETED"), (5, "FAILED"), (7, "FAILED_RETRYABLE")):
            operations[day] = uuid.uuid4()
            created = datetime.combine(date(2101, 3, day), time(12), tzinfo=UTC)
            conn.execute(
                "INSERT INTO cal.operations (id, tenant_id, operation_name, idempotency_key,"
                " fingerprint, state, created_at, completed_at)"
                " VALUES (%s, %s, 'create_payment', NULL, %s, %s, %s, %s)",
                (operations[day], tenant, "0" * 64, state, created, created),
            )
        conn.execute(
            "INSERT INTO settlement_days (day, last_finished_at) VALUES (%s, now())",
            (date(2101, 3, 1),),
        )

    # Ten days after the cutover, five days kept: the legacy partition is past retention.
    today = date(2101, 3, 20)
    assert _retire(scratch_database, today).held == {TABLE.legacy: "operation_not_final"}

    with psycopg.connect(scratch_database, autocommit=True) as conn:
        conn.execute(
            "UPDATE cal.operations SET state = 'COMPLETED' WHERE id = %s", (operations[7],)
        )
    # Days 5 and 7 are not settled.
    assert _retire(scratch_database, today).held == {TABLE.legacy: "settlement_open"}

    with psycopg.connect(scratch_database, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO settlement_days (day, last_finished_at) VALUES (%s, now()), (%s, now())",
            (date(2101, 3, 5), date(2101, 3, 7)),
        )
    done = _retire(scratch_database, today)
    assert done.held == {}
    assert done.dropped[0] == TABLE.legacy
