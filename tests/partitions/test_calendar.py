"""The calendar (`app/partitions/calendar.py`): today's and the next days' partitions made,
once, by two workers at once as well, and what `days_ahead` counts."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, time

import psycopg
import pytest
from psycopg import sql

from app.db.database import Connection
from app.partitions.calendar import Made, create_ahead
from app.partitions.layout import PartitionedTable
from app.partitions.present import shape_of
from tests.partitions.conftest import TABLE, Scratch
from tests.support.control.waiting import wait_until


def _make(scratch: Scratch, offset: int, premake_days: int = 7) -> Made:
    day = scratch.day(offset)
    return scratch.run(lambda conn: create_ahead(conn, TABLE, premake_days=premake_days, today=day))


def _insert_on(scratch: Scratch, offset: int) -> None:
    moment = datetime.combine(scratch.day(offset), time(23, 59), tzinfo=UTC)
    with scratch.sync() as conn:
        conn.execute(
            "INSERT INTO operation_transitions (operation_id, tenant_id, to_state, trigger,"
            " actor, fence, operation_created_at) VALUES (gen_random_uuid(), gen_random_uuid(),"
            " 'RECEIVED', 'send', 'test', 1, %s)",
            (moment,),
        )


def test_today_and_the_days_ahead_are_made_once(scratch: Scratch) -> None:
    first = _make(scratch, 0)
    assert first.partitioned
    assert first.created == tuple(TABLE.day_partition(scratch.day(i)) for i in range(8))
    assert first.days_ahead == 8
    assert scratch.partitions() == list(first.created)

    again = _make(scratch, 0)
    assert again.created == ()
    assert again.days_ahead == 8

    # Rows of the last day made land; a row of the day after has no partition.
    _insert_on(scratch, 7)
    with pytest.raises(psycopg.errors.CheckViolation, match="no partition"):
        _insert_on(scratch, 8)

    # Three days on, the three missing days are made.
    later = _make(scratch, 3)
    assert later.created == tuple(TABLE.day_partition(scratch.day(i)) for i in (8, 9, 10))
    assert later.days_ahead == 8


def test_days_ahead_counts_from_today_to_the_first_day_missing(scratch: Scratch) -> None:
    _make(scratch, 0, premake_days=2)
    with scratch.sync() as conn:
        conn.execute(f"DROP TABLE {TABLE.day_partition(scratch.day(1))}")
    # Made again: the gap is filled, the count goes past it.
    assert _make(scratch, 0, premake_days=2).days_ahead == 3
    with scratch.sync() as conn:
        conn.execute(f"DROP TABLE {TABLE.day_partition(scratch.day(0))}")
    # Read without making anything: today is missing, so nothing is covered.
    shape_today = scratch.run(lambda conn: _shape_days_ahead(conn, scratch))
    assert shape_today == 0


async def _shape_days_ahead(conn: Connection, scratch: Scratch) -> int:
    shape = await shape_of(conn, TABLE)
    assert shape is not None
    return shape.days_ahead(scratch.day(0))


def test_a_legacy_partition_covers_the_days_before_its_cutover(scratch: Scratch) -> None:
    cutover = datetime.combine(scratch.day(2), time(0), tzinfo=UTC)
    with scratch.sync() as conn:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {legacy} PARTITION OF {table} FOR VALUES FROM (MINVALUE) TO ({to})"
            ).format(
                legacy=sql.Identifier(TABLE.legacy),
                table=sql.Identifier(TABLE.table),
                to=sql.Literal(cutover),
            )
        )
    made = _make(scratch, 0, premake_days=3)
    # Today and tomorrow are the legacy partition's: only the days from the cutover are made.
    assert made.created == tuple(TABLE.day_partition(scratch.day(i)) for i in (2, 3))
    assert made.days_ahead == 4


def test_a_table_not_partitioned_is_left_alone(scratch: Scratch) -> None:
    with scratch.sync() as conn:
        conn.execute("CREATE TABLE plain_rows (created_at timestamptz)")
    made = scratch.run(
        lambda conn: create_ahead(
            conn, PartitionedTable("plain_rows", "created_at"), premake_days=2, today=scratch.base
        )
    )
    assert made == Made("plain_rows", partitioned=False, created=(), days_ahead=0)


def test_two_workers_making_the_same_days_at_once_both_succeed(scratch: Scratch) -> None:
    # The test holds the lock an ATTACH needs on the table, so both passes start together
    # and stop at their first partition: without the calendar's advisory lock the second
    # would then make the same table as the first and fail when the first commits.
    started = threading.Barrier(3)

    def one_pass() -> Made:
        started.wait()
        return _make(scratch, 0)

    with scratch.sync() as blocker, ThreadPoolExecutor(2) as pool:
        blocker.autocommit = False
        blocker.execute(f"LOCK TABLE {TABLE.table} IN SHARE UPDATE EXCLUSIVE MODE")
        passes = [pool.submit(one_pass) for _ in range(2)]
        started.wait()

        def both_waiting() -> bool:
            with scratch.sync() as conn:
                row = conn.execute(
                    "SELECT count(*) AS n FROM pg_stat_activity"
                    " WHERE application_name = %s AND wait_event_type = 'Lock'",
                    (scratch.schema,),
                ).fetchone()
                assert row is not None
                return int(row["n"]) == 2 or any(future.done() for future in passes)

        wait_until(both_waiting, message="both passes waiting")
        blocker.commit()
        results = [future.result(timeout=30) for future in passes]

    made = sorted((result.created for result in results), key=len)
    assert made[0] == ()
    assert made[1] == tuple(TABLE.day_partition(scratch.day(i)) for i in range(8))
    assert all(result.days_ahead == 8 for result in results)
