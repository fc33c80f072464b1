"""The reads by an operation's id plan only the days that id tells: its history, its
events; those that know the operation's day (its payment's load, a lapsed hold's event)
plan that day alone.

Checked with EXPLAIN on the statements the service runs, on the plan tests' seeded database
(`plan_db`: migrated from empty, so the seeded month is in the legacy partition, the
seeding's day and the days after it in their own). The moments are taken from the seeded
rows (the newest operation is made at the seeding's start), not from the clock. An id is a
UUIDv7 (`app/ids.py`): each read names `created_at` within a day either side of the id's
time, so the planner keeps the partitions that window meets and drops the others from the
plan. A v4 id tells no time: its read keeps every partition.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, time, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow

from app.authorizations import expiry
from app.events.outbox import outcome_event
from app.events.rows import EventType
from app.ids import created_window, new_id
from app.operations import reads
from app.payments import repository as payments
from app.webhooks import operator_reads

Db = psycopg.Connection[DictRow]
TENANT = uuid.uuid4()


def _partitions(conn: Db, table: str) -> set[str]:
    rows = conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = %s::regclass",
        (table,),
    ).fetchall()
    return {str(row["relname"]) for row in rows}


def _days_of(conn: Db, table: str, start: datetime, end: datetime) -> set[str]:
    """The partitions of `table` that hold some of [start, end): each day's it meets, and
    the legacy partition when the range starts before the first day's."""
    names = _partitions(conn, table)
    days = sorted(n for n in names if n != f"{table}_legacy")
    first = datetime.strptime(days[0].removeprefix(f"{table}_p"), "%Y%m%d").replace(tzinfo=UTC)
    met = {f"{table}_legacy"} if start < first else set()
    day = start.date()
    while datetime.combine(day, time(), UTC) < end:
        met.add(f"{table}_p{day:%Y%m%d}")
        day += timedelta(days=1)
    return met & names


def _planned(conn: Db, sql: str, params: dict[str, Any], table: str) -> set[str]:
    """The partitions of `table` the plan of `sql` keeps (EXPLAIN alone: a statement that
    writes is only planned, the database is read-only)."""
    rows = conn.execute(f"EXPLAIN (COSTS OFF) {sql}", params).fetchall()
    pattern = re.compile(rf" on ({table}_(?:legacy|p\d{{8}}))\b")
    return {match.group(1) for row in rows for match in pattern.finditer(str(row["QUERY PLAN"]))}


def _seeded_at(conn: Db) -> datetime:
    """When the newest seeded operation was made: the seeding's start, on its own day's
    partition (the older days are in the legacy partition)."""
    row = conn.execute("SELECT max(created_at) AS at FROM operations").fetchone()
    assert row is not None
    at = row["at"]
    assert isinstance(at, datetime)
    return at


def _moment(conn: Db, days_ahead: int | None) -> datetime:
    """The seeding's moment, or noon of a day `days_ahead` of its day."""
    at = _seeded_at(conn)
    if days_ahead is None:
        return at
    return datetime.combine(at.astimezone(UTC).date() + timedelta(days=days_ahead), time(12), UTC)


# The seeding's moment (the legacy partition, the seeding's day and the next: the window
# reaches back before the first day's partition), and a day of the days made ahead (three
# of those days, nothing older).
MOMENTS = [pytest.param(None, id="seeded"), pytest.param(4, id="days-ahead")]


def _window_days(conn: Db, ident: uuid.UUID, table: str) -> set[str]:
    window = created_window(ident)
    return _days_of(conn, table, window.start, window.end)


def _by_id(operation_id: uuid.UUID) -> dict[str, Any]:
    params: dict[str, Any] = {"id": operation_id, "tenant_id": TENANT, "key_ttl_s": 86400}
    return params | created_window(operation_id).params("id")


@pytest.mark.parametrize("days_ahead", MOMENTS)
@pytest.mark.parametrize("table", ["operation_transitions"])
def test_an_operations_history_by_id_plans_the_days_its_id_tells(
    plan_db: Db, days_ahead: int | None, table: str
) -> None:
    # GET /operations/{id}: its history (`operation_transitions`).
    operation_id = new_id(_moment(plan_db, days_ahead))

    kept = _planned(plan_db, reads.history_by_id_sql(), _by_id(operation_id), table)

    assert kept == _window_days(plan_db, operation_id, table), kept
    assert 2 <= len(kept) <= 3, kept
    # Pruned, not absent: the statement can reach every day.
    assert _partitions(plan_db, table) > kept


@pytest.mark.parametrize("table", ["operation_transitions"])
def test_an_operations_history_by_a_v4_id_plans_every_day(plan_db: Db, table: str) -> None:
    kept = _planned(plan_db, reads.history_by_id_sql(), _by_id(uuid.uuid4()), table)
    assert kept == _partitions(plan_db, table), kept


@pytest.mark.parametrize("days_ahead", [None, 3])
def test_an_operations_payment_plans_its_operations_day(
    plan_db: Db, days_ahead: int | None
) -> None:
    # An owner's load of its payment (`PaymentKind.load`): by the operation's id and its
    # `created_at`, which the payment shares.
    at = _moment(plan_db, days_ahead)
    params = {"operation_id": new_id(at), "created_at": at}

    kept = _planned(plan_db, payments.for_operation_sql(), params, "payments")

    assert kept == {f"payments_p{at.astimezone(UTC):%Y%m%d}"}, kept


def test_several_operations_payments_plan_their_days(plan_db: Db) -> None:
    # The worker's batch (`load_many`): the days of the operations it claimed.
    days = [_moment(plan_db, 1), _moment(plan_db, 3), _moment(plan_db, 3)]
    params = {"operation_ids": [new_id(at) for at in days], "days": days}

    kept = _planned(plan_db, payments.for_operation_sql(many=True), params, "payments")

    assert kept == {f"payments_p{at:%Y%m%d}" for at in days}, kept
    assert len(kept) == 2, kept


def _events_params(operation_id: uuid.UUID) -> dict[str, Any]:
    params: dict[str, Any] = {"operation_id": operation_id, "tenant_id": TENANT}
    return params | created_window(operation_id).params("op")


@pytest.mark.parametrize("days_ahead", MOMENTS)
@pytest.mark.parametrize("table", ["operations", "events"])
def test_an_operations_events_plan_the_days_its_id_tells(
    plan_db: Db, days_ahead: int | None, table: str
) -> None:
    # The operators' detail of an operation: its row's day, then its events on that day.
    operation_id = new_id(_moment(plan_db, days_ahead))

    kept = _planned(plan_db, operator_reads.EVENTS_SQL, _events_params(operation_id), table)

    assert kept == _window_days(plan_db, operation_id, table), kept
    assert _partitions(plan_db, table) > kept


@pytest.mark.parametrize("table", ["operations", "events"])
def test_an_operations_events_by_a_v4_id_plan_every_day(plan_db: Db, table: str) -> None:
    params = _events_params(uuid.uuid4())
    kept = _planned(plan_db, operator_reads.EVENTS_SQL, params, table)
    assert kept == _partitions(plan_db, table), kept


@pytest.mark.parametrize("days_ahead", [None, 3])
def test_a_lapsed_holds_event_plans_its_operations_day(plan_db: Db, days_ahead: int | None) -> None:
    # The payment's `created_at` is its operation's: the event's statement reads the
    # operation on that day, and writes the event to that day's partition.
    at = _moment(plan_db, days_ahead)
    event = outcome_event(tenant_id=TENANT, type=EventType.PAYMENT_EXPIRED, data={})
    params = event.params | {"operation_id": new_id(at), "operation_created_at": at}

    kept = _planned(plan_db, expiry.event_sql(event), params, "operations")

    assert kept == {f"operations_p{at.astimezone(UTC):%Y%m%d}"}, kept
