"""`bench/partition_reads.py` measures what it says: each statement named with its days
reads fewer partitions than the same statement with its bound opened to every day."""

from __future__ import annotations

import psycopg

from app.db.migrate import upgrade_head
from bench.history_seed import seed
from bench.partition_reads import measure, table


def test_each_statement_reads_fewer_days_when_it_names_them(scratch_database: str) -> None:
    upgrade_head(scratch_database)
    seed(scratch_database, payments=200, days=10, tenants=2)
    with psycopg.connect(scratch_database) as conn:
        timings = measure(conn, runs=1)
    by = {(t.statement, t.bounded): t for t in timings}
    assert {statement for statement, _ in by} == {
        "payment by id",
        "due tenants",
        "replay",
        "replay, day joined",
        "history by id",
        "operation's payment",
        "operation's events",
        "replay, second statement",
    }
    single = {"replay, day joined", "replay, second statement"}
    # The history by id reads its operation's day of the audit trail with its bound or
    # without (pruned when it runs), and every day of `payments` through its links either
    # way: its bound shows in what is planned (tests/partitions/test_pruning_by_operation.py).
    planned_only = {"history by id"}
    for statement in sorted({statement for statement, _ in by} - single - planned_only):
        named, every = by[statement, True], by[statement, False]
        assert 0 < named.partitions < every.partitions, timings
        assert named.planning_ms > 0
        assert named.execution_ms > 0
    history, history_before = by["history by id", True], by["history by id", False]
    assert 0 < history.partitions == history_before.partitions, timings
    # A payment read by its id's window reads its day's neighbours, not the ten days.
    assert by["payment by id", True].partitions <= 3, timings
    # The key's row and its operation in one statement: the function's read, one day.
    assert by["replay", True].partitions == 1, timings
    # An operation's payment by its id's window, likewise.
    assert by["operation's payment", True].partitions <= 3, timings
    assert by["replay, second statement", True].partitions == 1, timings
    # The day taken from the joined row: one day read, every day planned.
    assert by["replay, day joined", True].partitions == 1, timings
    assert "| replay | yes | 1 |" in table(10, timings)
