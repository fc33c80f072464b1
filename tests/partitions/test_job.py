"""The worker's `partitions` job (`app/partitions/job.py`): its gauges and counters, and the
worker running it as it starts."""

from __future__ import annotations

import asyncio
from datetime import date, timedelta

import psycopg
from psycopg_pool import AsyncConnectionPool

from app.db.database import Connection, Database
from app.db.migrate import upgrade_head
from app.observability.metrics import Metrics
from app.partitions.job import PartitionJob, PartitionMetrics, Pass
from tests.partitions.conftest import TABLE, Scratch
from tests.support.control.spawner import Spawner
from tests.support.control.waiting import wait_until


def _run(scratch: Scratch, metrics: Metrics, today: date) -> Pass:
    async def go() -> Pass:
        pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
            scratch.database_url,
            min_size=1,
            max_size=1,
            open=False,
            # As the service's pool: autocommit, every statement prepared at its first use.
            kwargs={"autocommit": True, "options": scratch.options, "prepare_threshold": 0},
        )
        await pool.open()
        try:
            job = PartitionJob(
                Database(pool),
                premake_days=7,
                retention={TABLE.table: 2},
                archive_dir=None,
                metrics=PartitionMetrics(
                    days_ahead=metrics.partition_days_ahead,
                    dropped=metrics.partitions_dropped,
                    held=metrics.partitions_held,
                ),
                tables=(TABLE,),
            )
            return await job.run(today)
        finally:
            await pool.close()

    return asyncio.run(go())


def test_a_pass_sets_the_days_ahead_and_counts_what_it_dropped(scratch: Scratch) -> None:
    metrics = Metrics()
    sample = metrics.registry.get_sample_value
    labels = {"table": TABLE.table}

    first = _run(scratch, metrics, scratch.day(0))
    assert len(first.made[0].created) == 8
    assert sample("payments_partition_days_ahead", labels) == 8
    assert sample("payments_partitions_dropped_total", labels) == 0

    # Five days on: five more days made, and the three whole days past two days' retention
    # dropped.
    later = _run(scratch, metrics, scratch.day(5))
    assert later.retired is not None
    assert later.retired[0].dropped == [TABLE.day_partition(scratch.day(i)) for i in range(3)]
    assert sample("payments_partition_days_ahead", labels) == 8
    assert sample("payments_partitions_dropped_total", labels) == 3
    assert sample("payments_partitions_held", labels) == 0


def test_the_worker_makes_the_days_ahead_as_it_starts(
    spawn: Spawner, scratch_database: str
) -> None:
    # A database of its own whose search path finds a partitioned operation_transitions
    # first: the worker's own connections see it as they would a converted table.
    upgrade_head(scratch_database)
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA cal")
        conn.execute(
            f"CREATE TABLE cal.{TABLE.table} (id bigint, {TABLE.column} timestamptz NOT NULL)"
            f" PARTITION BY RANGE ({TABLE.column})"
        )
        name = conn.execute("SELECT current_database()").fetchone()
        assert name is not None
        conn.execute(f'ALTER DATABASE "{name[0]}" SET search_path = cal, public')
        today_row = conn.execute("SELECT (now() AT TIME ZONE 'UTC')::date").fetchone()
        assert today_row is not None
        today = today_row[0]

    worker = spawn.worker(once=True, DATABASE_URL=scratch_database)
    assert worker.popen.wait(timeout=120) == 0, worker.log()

    with psycopg.connect(scratch_database, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'cal.operation_transitions'::regclass ORDER BY 1"
        ).fetchall()
    made = {row[0] for row in rows}
    # Today by the database's clock and the seven days after it (a worker started across
    # midnight counts from the next day: the days from tomorrow on are made either way).
    assert {TABLE.day_partition(today + timedelta(days=i)) for i in range(1, 8)} <= made
    assert len(made) == 8
    assert "day partitions made ahead" in worker.log()


def test_a_worker_stopped_during_a_pass_stops_cleanly(spawn: Spawner) -> None:
    # The pass is held at its start (the failpoint) when the worker is told to stop: the
    # scheduler's shutdown cancels it, which is a stop, not a failed job with a traceback.
    worker = spawn.worker(once=False, PAYMENTS_FAILPOINTS="partitions_pass=120")
    wait_until(
        lambda: "partitions pass started" in worker.log(),
        timeout=60,
        message="the worker's first partitions pass to start",
    )
    assert worker.stop(timeout=30) == 0, worker.log()
    log = worker.log()
    assert "partitions pass interrupted by the stop" in log
    assert "Traceback" not in log, log
