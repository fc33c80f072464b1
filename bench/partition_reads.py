"""`python -m bench.partition_reads`: what a read costs when it names its days, and when not,
as the days kept grow.

For each number of days, a database seeded with `bench/history_seed.py` (every seeded day in
a partition of its own, as the worker's calendar makes them) and the statements below that the
service runs, each twice: as it runs now, naming the days it may read, and with the bound
opened to every day, as the same statement would run without it:

    payment by id      GET /payments/{id}'s read (`app/payments/repository.py`), the id's
                       window (a v7 id) against the unbounded one (a v4 id's)
    due tenants        the worker's read of which tenants have recovery due
                       (`app/operations/leases.py`), from the backlog's horizon (today)
                       against from the first day
    replay             a taken key's operation read in the statement that reads its
                       key's row (`app/operations/reads.py` keyed_snapshot_sql: the row's
                       id and day handed to `operation_on_day`, migration 0034, whose read
                       is planned with them as values), against the same read joined to
                       the key's row on the id alone; "replay, day joined": the statement
                       the claim ran first, the day taken from the joined key's row, which
                       prunes only when it runs; and "replay, second statement": the read
                       on the day the key's row names (snapshot_on_day, the day a
                       parameter), the second round trip a replay made before 0034
    history by id      GET /operations/{id}'s read with its history and links
                       (`app/operations/reads.py` history_by_id_sql), the newest
                       operation's: the audit trail bounded by the id's window as well as
                       by the operation's row, against the statement before that bound
                       (the history by its row alone: every day planned); the links'
                       payments are read on every day in both (the view gives no day)
    operation's payment
                       `payments.get_for_operation` (an owner's load): on the operation's
                       day, a parameter, against the same read by the operation's id alone
    operation's events the operators' read of an operation's events
                       (`app/webhooks/operator_reads.py`), the id's window against every day

Each is run `--runs` times through EXPLAIN (ANALYZE, SUMMARY): the server's own planning and
execution times, whose medians it prints, with how many partitions of `operations`,
`payments`, the audit trail or `events` it read (those in its plan and not shown as never
executed; for a read inside a function, those of the function's plans, logged by
auto_explain in a run of their own). A function plans its statement when it runs, so its
planning is in the execution time: compare the sums. Nothing here is a request over HTTP:
the figures are the database's share.

    .venv/bin/python -m bench.partition_reads postgresql://postgres@127.0.0.1:5432/postgres \\
        --days 30 365
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from app.db.migrate import upgrade_head
from app.ids import created_window, within
from app.operations import leases, reads
from app.payments import repository as payments
from app.webhooks import operator_reads
from bench.history_seed import seed
from bench.machine import load_average
from bench.system import with_database

PER_DAY = 200
RUNS = 30
_EVERY_DAY = {
    "id_from": datetime(1, 1, 2, tzinfo=UTC),
    "id_until": datetime(9999, 1, 1, tzinfo=UTC),
}
# A taken key's read through a join with its row: by the id alone, and (the statement the
# claim ran before) with the day from the row, pruned only when it runs.
_KEY_JOIN = """
    (SELECT operation_id, operation_created_at FROM idempotency_keys
     WHERE tenant_id = %(tenant_id)s AND operation_name = %(operation_name)s
       AND idempotency_key = %(idempotency_key)s) AS k
    JOIN operations ON operations.id = k.operation_id AND operations.tenant_id = %(tenant_id)s
"""
_REPLAY_BY_ID_ALONE = f"SELECT {reads.SNAPSHOT_COLUMNS} FROM {_KEY_JOIN}"
_REPLAY_DAY_JOINED = _REPLAY_BY_ID_ALONE + " AND operations.created_at = k.operation_created_at"
_PAYMENT_ON_DAY = payments.for_operation_sql()
_PAYMENT_ANY_DAY = _PAYMENT_ON_DAY.replace(" AND created_at = %(created_at)s", "")
assert _PAYMENT_ANY_DAY != _PAYMENT_ON_DAY
_OPERATIONS_EVERY_DAY = {
    f"op_{end}": value
    for end, value in (("from", _EVERY_DAY["id_from"]), ("until", _EVERY_DAY["id_until"]))
}
_HISTORY_BY_ID = reads.history_by_id_sql()
# The read by id before its history was bounded by the id's window: the history by the
# operation's row alone. (Its links read every day of `payments` either way: the view
# gives no day.)
_HISTORY_BOUND = f" AND {within('t.operation_created_at', 'id')}"
assert _HISTORY_BOUND in _HISTORY_BY_ID
_HISTORY_BY_ID_BEFORE = _HISTORY_BY_ID.replace(_HISTORY_BOUND, "")


# A partition of a partitioned table in a plan's line.
_PARTITION = re.compile(
    r" on ((?:operations|payments|operation_transitions|events)_(?:legacy|p\d{8}))\b"
)


@dataclass(frozen=True)
class Timing:
    """One statement's medians over its runs, in milliseconds, and the partitions of
    `operations`, `payments`, the audit trail or `events` its run read (the plan's, less
    those never executed)."""

    statement: str
    bounded: bool
    planning_ms: float
    execution_ms: float
    partitions: int


@contextmanager
def seeded(server_url: str, days: int) -> Iterator[str]:
    name = f"payments_partition_reads_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = with_database(server_url, name)
    try:
        upgrade_head(url)
        seed(url, payments=days * PER_DAY, days=days, tenants=4)
        yield url
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _read(text: str) -> set[str]:
    """The partitions of `operations`, `payments`, the audit trail or `events` a plan names
    and ran."""
    return {
        match.group(1)
        for line in text.splitlines()
        if "(never executed)" not in line and (match := _PARTITION.search(line))
    }


def _explain(
    conn: psycopg.Connection[Any], sql: str, params: dict[str, Any]
) -> tuple[float, float, int]:
    rows = conn.execute(f"EXPLAIN (ANALYZE, SUMMARY, COSTS OFF) {sql}", params).fetchall()
    text = "\n".join(str(row[0]) for row in rows)
    planning = float(re.search(r"Planning Time: ([\d.]+) ms", text).group(1))  # type: ignore[union-attr]
    execution = float(re.search(r"Execution Time: ([\d.]+) ms", text).group(1))  # type: ignore[union-attr]
    return planning, execution, len(_read(text) | _nested(conn, sql, params))


def _nested(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any]) -> set[str]:
    """The partitions the statements `sql` runs inside functions read, in a run of its own
    with auto_explain logging their plans to the client."""
    if "_on_day(" not in sql:
        return set()
    plans: list[str] = []

    def handler(diagnostic: psycopg.errors.Diagnostic) -> None:
        plans.append(diagnostic.message_primary or "")

    conn.add_notice_handler(handler)
    conn.execute("LOAD 'auto_explain'")
    settings = {"log_nested_statements": "on", "log_level": "notice", "log_analyze": "on"}
    for name, value in (*settings.items(), ("log_min_duration", "0")):
        conn.execute("SELECT set_config(%s, %s, false)", (f"auto_explain.{name}", value))
    try:
        conn.execute(sql, params).fetchall()
    finally:
        conn.execute("SET auto_explain.log_min_duration = -1")
        conn.remove_notice_handler(handler)
    outer = sql.strip()[:40]
    return set().union(*(_read(plan) for plan in plans if outer not in plan))


def measure(conn: psycopg.Connection[Any], runs: int) -> list[Timing]:
    row = conn.execute(
        "SELECT p.id, p.tenant_id, o.operation_name, o.idempotency_key FROM payments p"
        " JOIN operations o ON o.id = p.operation_id AND o.created_at = p.created_at"
        " WHERE o.idempotency_key IS NOT NULL ORDER BY p.created_at DESC LIMIT 1"
    ).fetchone()
    assert row is not None, "the seed made payments whose keys are held"
    payment_id, tenant_id, name, key = row
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    first = conn.execute("SELECT min(created_at) FROM operations").fetchone()
    assert first is not None
    keyed = {"tenant_id": tenant_id, "operation_name": name, "idempotency_key": key}
    keyed["key_ttl_s"] = 86400
    key_row = conn.execute(reads.KEY_ROW, keyed).fetchone()
    assert key_row is not None
    on_day = {"id": key_row[0], "tenant_id": tenant_id, "created_at": key_row[1]}
    on_day["key_ttl_s"] = 86400
    by_id = {"id": payment_id, "tenant_id": tenant_id}
    sql = "SELECT operation_id, created_at FROM payments WHERE id = %s"
    operation = conn.execute(sql, (payment_id,)).fetchone()
    assert operation is not None
    operation_id = operation[0]
    on_its_day = {"operation_id": operation_id, "created_at": operation[1]}
    history = {"id": operation_id, "tenant_id": tenant_id, "key_ttl_s": 86400}
    history |= created_window(operation_id).params("id")
    of_operation = {"operation_id": operation_id, "tenant_id": tenant_id}
    every_day = of_operation | _OPERATIONS_EVERY_DAY
    of_operation |= created_window(operation_id).params("op")
    cases = [
        (
            "payment by id",
            True,
            payments.get_sql(),
            by_id | created_window(payment_id).params("id"),
        ),
        ("payment by id", False, payments.get_sql(), by_id | _EVERY_DAY),
        ("due tenants", True, leases._DUE_TENANTS, {"since": today}),
        ("due tenants", False, leases._DUE_TENANTS, {"since": first[0] - timedelta(days=1)}),
        ("replay", True, reads.keyed_snapshot_sql(), keyed),
        ("replay", False, _REPLAY_BY_ID_ALONE, keyed),
        ("history by id", True, _HISTORY_BY_ID, history),
        ("history by id", False, _HISTORY_BY_ID_BEFORE, history),
        ("operation's payment", True, _PAYMENT_ON_DAY, on_its_day),
        ("operation's payment", False, _PAYMENT_ANY_DAY, on_its_day),
        ("operation's events", True, operator_reads.EVENTS_SQL, of_operation),
        ("operation's events", False, operator_reads.EVENTS_SQL, every_day),
        ("replay, day joined", True, _REPLAY_DAY_JOINED, keyed),
        ("replay, second statement", True, reads.snapshot_on_day_sql(), on_day),
    ]
    timings = []
    for statement, bounded, sql, params in cases:
        _explain(conn, sql, params)  # warm the caches
        samples = [_explain(conn, sql, params) for _ in range(runs)]
        timings.append(
            Timing(
                statement,
                bounded,
                round(statistics.median(s[0] for s in samples), 3),
                round(statistics.median(s[1] for s in samples), 3),
                samples[0][2],
            )
        )
    return timings


def table(days: int, timings: list[Timing]) -> str:
    lines = [
        f"{days} days kept ({days * PER_DAY:,} payments)",
        "| statement | days named | partitions read | planning ms | execution ms | sum ms |",
        "|---|---|---|---|---|---|",
    ]
    for t in timings:
        named = "yes" if t.bounded else "no (every day)"
        lines.append(
            f"| {t.statement} | {named} | {t.partitions} | {t.planning_ms} | {t.execution_ms} "
            f"| {t.planning_ms + t.execution_ms:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.partition_reads",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("server_url", help="a PostgreSQL server (a database on it is made)")
    parser.add_argument("--days", type=int, nargs="+", default=[30, 365])
    parser.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"load_average_before": [round(v, 2) for v in load_average()]}
    for days in args.days:
        with seeded(args.server_url, days) as url, psycopg.connect(url) as conn:
            timings = measure(conn, args.runs)
        print(table(days, timings), flush=True)
        results[str(days)] = [asdict(t) for t in timings]
    results["load_average_after"] = [round(v, 2) for v in load_average()]
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
