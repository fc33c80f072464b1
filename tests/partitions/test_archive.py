"""Archives (`app/partitions/archive.py`): a partition past retention written to the archive
folder before it is dropped, and `payments partitions restore FILE` loading it back as that
day's partition, its rows as they were."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

from app.partitions.archive import write_archive
from app.partitions.calendar import create_ahead
from app.partitions.retention import retire
from tests.partitions.conftest import TABLE, Scratch
from tests.support.factories.tenants import TenantHandle

ROOT = Path(__file__).resolve().parents[2]


def _rows(scratch: Scratch, partition: str) -> list[dict[str, Any]]:
    with scratch.sync() as conn:
        return conn.execute(f"SELECT * FROM {partition} ORDER BY id").fetchall()


def _restore(scratch: Scratch, path: Path) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("PAYMENTS_")}
    env["DATABASE_URL"] = scratch.url
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "partitions", "restore", str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_partition_archived_dropped_and_restored_reads_back_the_same(
    scratch: Scratch, tenant: TenantHandle, tmp_path: Path
) -> None:
    first = scratch.day(0)
    scratch.run(lambda conn: create_ahead(conn, TABLE, premake_days=3, today=first))
    operation = scratch.operation(first, "COMPLETED", tenant_id=tenant.id)
    scratch.settled(first)
    for _ in range(3):
        scratch.transition(operation, first, tenant.id)
    partition = TABLE.day_partition(first)
    before = _rows(scratch, partition)
    with scratch.sync() as conn:
        row = conn.execute(
            "SELECT pg_get_expr(relpartbound, oid) AS bound FROM pg_class WHERE oid = %s::regclass",
            (partition,),
        ).fetchone()
    assert row is not None
    bound = row["bound"]

    today = scratch.day(3)
    done = scratch.run(
        lambda conn: retire(conn, TABLE, retention_days=1, today=today, archive_dir=tmp_path)
    )
    assert done.archived == [partition, TABLE.day_partition(scratch.day(1))]
    assert done.dropped == done.archived
    assert not scratch.table_exists(partition)

    data, description = tmp_path / f"{partition}.csv.gz", tmp_path / f"{partition}.json"
    meta = json.loads(description.read_text())
    assert meta["rows"] == 3
    assert meta["table"] == TABLE.table
    assert meta["bound"] == bound
    with gzip.open(data, "rt") as lines:
        assert lines.readline().rstrip("\n").split(",")[:2] == ["id", "operation_id"]
    assert not list(tmp_path.glob("*.tmp"))

    restored = _restore(scratch, data)
    assert restored.returncode == 0, restored.stderr
    assert f"{partition}: 3 rows restored" in restored.stdout
    assert partition in scratch.partitions()
    assert _rows(scratch, partition) == before
    # Reads through the partitioned table find them again.
    with scratch.sync() as conn:
        found = conn.execute(
            "SELECT count(*) AS n FROM operation_transitions WHERE operation_id = %s",
            (operation,),
        ).fetchone()
    assert found is not None
    assert found["n"] == 3

    # Restored: kept by the next pass, however old; a second restore is refused.
    again = scratch.run(
        lambda conn: retire(conn, TABLE, retention_days=1, today=today, archive_dir=tmp_path)
    )
    assert again.held == {partition: "restored"}
    twice = _restore(scratch, description)
    assert twice.returncode == 1
    assert "exists already" in twice.stderr


def test_an_archive_whose_data_changed_is_not_restored(scratch: Scratch, tmp_path: Path) -> None:
    first = scratch.day(0)
    scratch.run(lambda conn: create_ahead(conn, TABLE, premake_days=2, today=first))
    today = scratch.day(2)
    scratch.run(
        lambda conn: retire(conn, TABLE, retention_days=1, today=today, archive_dir=tmp_path)
    )
    data = tmp_path / f"{TABLE.day_partition(first)}.csv.gz"
    data.write_bytes(gzip.compress(b"id\n1\n"))
    refused = _restore(scratch, data)
    assert refused.returncode == 1
    assert "checksum" in refused.stderr
    assert TABLE.day_partition(first) not in scratch.partitions()


def test_a_restore_the_database_refuses_attaches_nothing(scratch: Scratch, tmp_path: Path) -> None:
    first = scratch.day(0)
    scratch.run(lambda conn: create_ahead(conn, TABLE, premake_days=2, today=first))
    today = scratch.day(2)
    scratch.run(
        lambda conn: retire(conn, TABLE, retention_days=1, today=today, archive_dir=tmp_path)
    )
    # A day already covered by another partition: the attach overlaps it.
    with scratch.sync() as conn:
        conn.execute(
            f"CREATE TABLE wide PARTITION OF {TABLE.table}"
            f" FOR VALUES FROM ('{scratch.day(-5)}') TO ('{scratch.day(1)}')"
        )
    refused = _restore(scratch, tmp_path / f"{TABLE.day_partition(first)}.json")
    assert refused.returncode == 1
    assert "nothing attached" in refused.stderr
    assert "would overlap" in refused.stderr
    assert not scratch.table_exists(TABLE.day_partition(first))


def test_a_large_day_is_archived_whatever_the_pools_statement_timeout(
    scratch: Scratch, tmp_path: Path
) -> None:
    # The worker's connections cancel any statement after PAYMENTS_DB_STATEMENT_TIMEOUT_MS;
    # reading a whole day out takes longer than a request's statement may.
    name = TABLE.day_partition(scratch.day(0))
    with scratch.sync() as conn:
        conn.execute(f"CREATE TABLE {name} (LIKE {TABLE.table} INCLUDING DEFAULTS)")
        conn.execute(
            f"INSERT INTO {name} (operation_id, tenant_id, to_state, trigger, actor, fence,"
            f" {TABLE.column}) SELECT gen_random_uuid(), gen_random_uuid(), 'COMPLETED',"
            " 'complete', repeat('a', 100), 1, %s FROM generate_series(1, 200000)",
            (scratch.day(0),),
        )

    async def archive() -> tuple[int, str]:
        conn = await psycopg.AsyncConnection.connect(
            scratch.database_url,
            autocommit=True,
            options=f"{scratch.options} -c statement_timeout=50",
        )
        async with conn:
            written = await write_archive(
                conn,
                TABLE,
                schema=scratch.schema,
                partition=name,
                bound="FOR VALUES FROM ('2101-01-01') TO ('2101-01-02')",
                folder=tmp_path,
            )
            row = await (await conn.execute("SHOW statement_timeout")).fetchone()
            assert row is not None
            return written.rows, str(row[0])

    rows, timeout = asyncio.run(archive())
    assert rows == 200_000
    # The connection's own timeout is back for whatever it runs next.
    assert timeout == "50ms"
