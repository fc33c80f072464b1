"""`python -m bench.history`'s parts that need no system: which partitions `--drop-day-during`
drops (the oldest day of each partitioned history table, referencing tables first, never a
DEFAULT partition nor the legacy one; none where no history table is partitioned), how the
drop's window splits the requests, and which seeded keys the seeded replays send (none the
key TTL will refuse during the run)."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta

import psycopg
import pytest

from app.db.migrate import upgrade_head
from bench.history import DropWindow, drop_oldest_day, oldest_partitions, seeded_keys
from bench.history_seed import KEY_TTL_S, seed

_DAYS = ("2026-10-29", "2026-10-30", "2026-10-31")


def _partitioned(conn: psycopg.Connection[object], table: str) -> None:
    conn.execute(f"CREATE TABLE {table} (created_at timestamptz) PARTITION BY RANGE (created_at)")
    # Created newest first: the oldest is found by its bound, not by its creation order.
    for day, next_day in reversed(list(zip(_DAYS, (*_DAYS[1:], "2026-11-01"), strict=True))):
        conn.execute(
            f"CREATE TABLE {table}_{day.replace('-', '')} PARTITION OF {table}"
            f" FOR VALUES FROM ('{day}') TO ('{next_day}')"
        )
    conn.execute(f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT")


def test_the_oldest_day_of_each_partitioned_table_referencing_tables_first(
    scratch_database: str,
) -> None:
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        for table in ("operations", "events", "operation_transitions"):
            _partitioned(conn, table)
        conn.execute("CREATE TABLE payments (id int)")
        assert oldest_partitions(conn) == [
            ("operation_transitions", "operation_transitions_20261029"),
            ("events", "events_20261029"),
            ("operations", "operations_20261029"),
        ]


@pytest.mark.parametrize("detach", [False, True])
def test_the_oldest_day_is_dropped_or_why_not_is_said(scratch_database: str, detach: bool) -> None:
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        _partitioned(conn, "events")
    window = DropWindow()
    drop_oldest_day(scratch_database, window, 0.0, detach=detach)
    with psycopg.connect(scratch_database) as conn:
        left = {name for (_table, name) in oldest_partitions(conn)}
    if detach:
        # PostgreSQL detaches CONCURRENTLY only where no DEFAULT partition exists.
        assert window.dropped == []
        assert "default partition" in window.note
        assert left == {"events_20261029"}
    else:
        assert window.dropped == ["events_20261029"]
        assert window.ended >= window.started
        assert left == {"events_20261030"}


@pytest.mark.parametrize("detach", [False, True])
def test_the_seeded_layouts_oldest_day_is_found_and_dropped(
    scratch_database: str, detach: bool
) -> None:
    upgrade_head(scratch_database)
    figures = seed(scratch_database, payments=300, days=3, tenants=1)
    first = datetime.fromisoformat(figures["seeded_at"]).astimezone(UTC).date() - timedelta(days=3)
    with psycopg.connect(scratch_database) as conn:
        # The legacy partition (FROM MINVALUE) is no day: never the oldest.
        assert oldest_partitions(conn) == _day(first)
    window = DropWindow()
    drop_oldest_day(scratch_database, window, 0.0, detach=detach)
    assert window.dropped == [partition for _table, partition in _day(first)]
    with psycopg.connect(scratch_database) as conn:
        assert oldest_partitions(conn) == _day(first + timedelta(days=1))


def _day(day: date) -> list[tuple[str, str]]:
    """A day's partitions of the four partitioned tables, in the order they are dropped
    (what references first)."""
    tables = ("operation_transitions", "events", "payments", "operations")
    return [(table, f"{table}_p{day:%Y%m%d}") for table in tables]


def test_nothing_to_drop_where_no_history_table_is_partitioned(scratch_database: str) -> None:
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        for table in ("operation_transitions", "events", "operations"):
            conn.execute(f"CREATE TABLE {table} (created_at timestamptz)")
        assert oldest_partitions(conn) == []
    window = DropWindow()
    drop_oldest_day(scratch_database, window, 0.0, detach=False)
    assert window.dropped == []
    assert window.note == "no partitioned history table: nothing to drop"


def test_the_window_holds_the_requests_in_flight_during_the_drop() -> None:
    window = DropWindow(dropped=["events_20261029"], started=10.0, ended=10.5)
    # (completion, latency): before; overlapping the start; inside; overlapping the end;
    # after.
    window.answered = [(9.0, 0.1), (10.1, 0.2), (10.3, 0.1), (10.7, 0.4), (11.0, 0.1)]
    summary = window.summary()
    assert summary["drop_s"] == 0.5
    assert (summary["before"]["requests"], summary["during"]["requests"]) == (1, 3)
    assert summary["after"]["requests"] == 1
    assert summary["during"]["p99_ms"] == pytest.approx(400.0)
    assert summary["before"]["p50_ms"] == pytest.approx(100.0)
    assert math.isnan(DropWindow().started)


def test_seeded_replays_keep_to_keys_the_ttl_still_lets_replay(scratch_database: str) -> None:
    upgrade_head(scratch_database)
    seed(scratch_database, payments=400, days=2, tenants=1)
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        # A key 5 minutes short of its TTL: its answer is stored, but the API will answer
        # it 422 within the run.
        row = conn.execute(
            "UPDATE operations SET completed_at = now() - make_interval(secs => %s)"
            " WHERE id = (SELECT id FROM operations WHERE response_body IS NOT NULL"
            " ORDER BY created_at DESC LIMIT 1) RETURNING idempotency_key",
            (KEY_TTL_S - 300,),
        ).fetchone()
    assert row is not None
    _tenant, keys = seeded_keys(scratch_database, 1000)
    replayed = [key for key, _body, _answer in keys]
    assert row[0] not in replayed
    assert len(replayed) > 150
