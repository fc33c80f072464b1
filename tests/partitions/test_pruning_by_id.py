"""A read by id of an operation or a payment reads only the days its id tells.

Checked with EXPLAIN on the statements the service runs, on the plan tests' seeded database
(`plan_db`: migrated from empty, so the older days are in the legacy partition, today's and
the next week's in their own; "today" and "now" are the seeding's, read from the seeded rows,
not the clock's). An id is a UUIDv7 (`app/ids.py`): its read names
`created_at` within a day either side of the id's time, so the planner keeps only the
partitions that window meets (two or three days, and the legacy partition when the window
reaches back before it) and drops the rest from the plan. A v4 id, as every row before
this release has, tells no time: its read keeps every partition, as before.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow

from app.authorizations import repository as modifications
from app.authorizations.rows import ModificationRow, ModificationStatus, ModificationType
from app.ids import created_window, new_id
from app.operations import reads
from app.payments import repository as payments
from app.refunds import repository as refunds
from app.refunds.rows import RefundRow, RefundStatus
from tests.partitions.test_pruning import scanned
from tests.support.fixtures.plans import seeded_at

Db = psycopg.Connection[DictRow]
TENANT = uuid.uuid4()


def _partitions(conn: Db, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = %s::regclass ORDER BY c.relname",
        (table,),
    ).fetchall()
    return [str(row["relname"]) for row in rows]


def _days_of(conn: Db, table: str, start: datetime, end: datetime) -> set[str]:
    """The partitions of `table` that hold some of [start, end): each day's it meets, and
    the legacy partition (before the first day's) when the range starts before it."""
    names = _partitions(conn, table)
    days = sorted(n for n in names if n != f"{table}_legacy")
    first = datetime.strptime(days[0].removeprefix(f"{table}_p"), "%Y%m%d").replace(tzinfo=UTC)
    met = {f"{table}_legacy"} if start < first else set()
    day = start.date()
    while datetime.combine(day, time(), UTC) < end:
        met.add(f"{table}_p{day:%Y%m%d}")
        day += timedelta(days=1)
    return met & set(names)


def _planned(conn: Db, sql: str, params: dict[str, Any], table: str) -> set[str]:
    """The partitions of `table` the plan of `sql` keeps (EXPLAIN alone: a statement that
    locks or writes is only planned, the database is read-only)."""
    rows = conn.execute(f"EXPLAIN (COSTS OFF) {sql}", params).fetchall()
    pattern = re.compile(rf" on ({table}_(?:legacy|p\d{{8}}))\b")
    return {match.group(1) for row in rows for match in pattern.finditer(str(row["QUERY PLAN"]))}


def _noon(conn: Db, days_ahead: int) -> datetime:
    """Noon `days_ahead` days after the seeding's day (the plan database's today)."""
    today: date = seeded_at(conn).date()
    return datetime.combine(today + timedelta(days=days_ahead), time(12), UTC)


# Now (the seeding's moment: the legacy partition, today's and tomorrow's), and a day of
# next week (three of next week's days, nothing older).
MOMENTS = [pytest.param(None, id="now"), pytest.param(4, id="next-week")]


def _moment(conn: Db, days_ahead: int | None) -> datetime:
    return seeded_at(conn) if days_ahead is None else _noon(conn, days_ahead)


def _window_days(conn: Db, ident: uuid.UUID, table: str) -> set[str]:
    window = created_window(ident)
    return _days_of(conn, table, window.start, window.end)


@pytest.mark.parametrize("days_ahead", MOMENTS)
def test_get_payment_reads_the_days_its_id_tells(plan_db: Db, days_ahead: int | None) -> None:
    payment_id = new_id(_moment(plan_db, days_ahead))
    params = payments.by_id(payment_id) | {"tenant_id": TENANT}
    sql = payments.get_sql()

    found = scanned(plan_db, sql, params, "payments")

    assert set(found) == _window_days(plan_db, payment_id, "payments"), found
    assert 2 <= len(found) <= 3, found
    # Pruned, not absent: the statement can reach every day.
    assert len(_partitions(plan_db, "payments")) > len(found)


def test_get_payment_by_a_v4_id_reads_every_day(plan_db: Db) -> None:
    params = payments.by_id(uuid.uuid4()) | {"tenant_id": TENANT}
    found = scanned(plan_db, payments.get_sql(), params, "payments")
    assert set(found) == set(_partitions(plan_db, "payments")), found


@pytest.mark.parametrize("days_ahead", MOMENTS)
def test_get_operation_reads_the_days_its_id_tells(plan_db: Db, days_ahead: int | None) -> None:
    operation_id = new_id(_moment(plan_db, days_ahead))
    params: dict[str, Any] = {"id": operation_id, "tenant_id": TENANT, "key_ttl_s": 86400}
    params |= created_window(operation_id).params("id")

    found = scanned(plan_db, reads.history_by_id_sql(), params, "operations")

    assert set(found) == _window_days(plan_db, operation_id, "operations"), found
    assert len(_partitions(plan_db, "operations")) > len(found)


@pytest.mark.parametrize("days_ahead", MOMENTS)
def test_a_refunds_lock_reads_its_payments_days(plan_db: Db, days_ahead: int | None) -> None:
    payment_id = new_id(_moment(plan_db, days_ahead))
    params: dict[str, Any] = {"tenant_id": TENANT, "payment_id": payment_id}
    params |= created_window(payment_id).params("payment")

    kept = _planned(plan_db, refunds.lock_payment_sql(), params, "payments")

    assert kept == _window_days(plan_db, payment_id, "payments"), kept


@pytest.mark.parametrize("days_ahead", MOMENTS)
def test_a_captures_guard_reads_its_payments_days(plan_db: Db, days_ahead: int | None) -> None:
    payment_id = new_id(_moment(plan_db, days_ahead))
    guard = modifications.claim_guard(tenant_id=TENANT, payment_id=payment_id, capture=True)

    kept = _planned(plan_db, guard.sql, guard.params, "payments")

    assert kept == _window_days(plan_db, payment_id, "payments"), kept


def _refund(payment_id: uuid.UUID, at: datetime) -> RefundRow:
    return RefundRow(
        id=uuid.uuid4(),
        tenant_id=TENANT,
        payment_id=payment_id,
        operation_id=uuid.uuid4(),
        provider_key="refund-key",
        charge_id="ch_1",
        provider="primary",
        status="PENDING",
        amount_minor=100,
        currency="EUR",
        reason=None,
        metadata={},
        provider_refund_id=None,
        created_at=at,
        updated_at=at,
    )


def _capture(payment_id: uuid.UUID, at: datetime) -> ModificationRow:
    return ModificationRow(
        id=uuid.uuid4(),
        tenant_id=TENANT,
        payment_id=payment_id,
        operation_id=uuid.uuid4(),
        type="capture",
        provider_key="capture-key",
        charge_id="ch_1",
        provider="primary",
        status="PENDING",
        amount_minor=100,
        currency="EUR",
        provider_reference=None,
        created_at=at,
        updated_at=at,
    )


def test_a_refunds_write_to_its_payment_names_its_payments_days(plan_db: Db) -> None:
    payment_id = new_id(_noon(plan_db, -10))
    today = _noon(plan_db, 0)
    write = refunds.result_with_outcome(
        _refund(payment_id, today), status=RefundStatus.SUCCEEDED, provider_refund_id="re", at=today
    )
    [to_payment] = write.also
    params = write.params | {"tenant_id": TENANT}

    kept = _planned(plan_db, f"WITH changed AS (SELECT) {to_payment}", params, "payments")

    # Ten days ago: the legacy partition alone, not today's nor next week's.
    assert kept == {"payments_legacy"}, kept


def test_a_captures_write_to_its_payment_names_its_payments_day(plan_db: Db) -> None:
    day = _noon(plan_db, 3)
    write = modifications.result_with_outcome(
        _capture(new_id(day), day),
        payment_created_at=day,
        status=ModificationStatus.SUCCEEDED,
        provider_reference="cap_1",
        at=day,
    )
    [to_payment] = write.also
    params = write.params | {"tenant_id": TENANT}

    kept = _planned(plan_db, f"WITH changed AS (SELECT) {to_payment}", params, "payments")

    assert kept == {f"payments_p{day:%Y%m%d}"}, kept


@pytest.mark.parametrize("days_ahead", MOMENTS)
def test_a_captures_claim_marks_its_payment_on_its_payments_days(
    plan_db: Db, days_ahead: int | None
) -> None:
    payment_id = new_id(_moment(plan_db, days_ahead))
    guard = modifications.claim_guard(tenant_id=TENANT, payment_id=payment_id, capture=True)
    write = modifications.created_with_claim(
        id=new_id(_moment(plan_db, days_ahead)),
        type=ModificationType.CAPTURE,
        provider_key="capture-key",
        payment_id=payment_id,
    )
    [mark] = write.also
    sql = (
        f"WITH guard AS MATERIALIZED ({guard.sql}), changed AS (SELECT gen_random_uuid() AS id)"
        f" {mark}"
    )
    params = guard.params | write.params | {"tenant_id": TENANT}

    kept = _planned(plan_db, sql, params, "payments")

    assert kept == _window_days(plan_db, payment_id, "payments"), kept
