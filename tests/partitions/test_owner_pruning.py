"""An owner's statements read one partition: its operation's day's.

Checked with EXPLAIN ANALYZE on the statements the service runs, on the plan tests' seeded
database (`plan_db`, tests/support/fixtures/plans.py: a month of operations and payments
migrated from empty, so the older days are in the legacy partition and today's in today's;
"today" is the seeding's day, read from the seeded rows, not the clock's).
The owner's reference names the operation's `created_at` as a parameter (`OwnedRef`), so
the other days' partitions are pruned when the statement is planned: they are not in the
plan at all. Each is checked against the same statement without the day, which reaches
every partition. The writes run in a transaction rolled back: the seeded database stays as
it is for the next test.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from dataclasses import fields
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow, class_row

from app.operations import leases, operator_reads, reads, retention, statements
from app.operations.states import State, Trigger
from app.payments import repository as payments
from app.payments.attempts import DECLINED
from app.payments.rows import PaymentRow
from app.payments.status import PaymentStatus
from tests.partitions.test_pruning import scanned
from tests.support.fixtures.plans import seeded_day

Db = psycopg.Connection[DictRow]

# In flight today (today's partition) and unknown days ago (the legacy partition): the
# seed's fates of operations 8997 and 8301, payments routed to two providers
# (tests/support/fixtures/plans.py).
TODAY, DAYS_AGO = 8997, 8301
OWNED_DAY = "AND created_at = %(created_at)s"


def _md5(text: str) -> uuid.UUID:
    return uuid.UUID(hashlib.md5(text.encode()).hexdigest())


def _owner(plan_db: Db, g: int) -> dict[str, Any]:
    """What an owner of operation g knows of it: the parameters of its statements."""
    row = plan_db.execute(
        "SELECT id, tenant_id, created_at, fence, state FROM operations WHERE id = %s",
        (_md5(f"op{g}"),),
    ).fetchone()
    assert row is not None
    return dict(row)


@pytest.fixture
def writing(plan_db: Db) -> Iterator[Db]:
    """The seeded database, writable for one transaction that is rolled back."""
    with plan_db.transaction(force_rollback=True):
        plan_db.execute("SET TRANSACTION READ WRITE")
        yield plan_db


def _run(conn: Db, sql: str, params: dict[str, Any], table: str) -> dict[str, bool]:
    """`scanned`, its writes undone at once (a savepoint rolled back): the next statement
    of the test finds the rows as seeded."""
    with conn.transaction(force_rollback=True):
        return scanned(conn, sql, params, table)


def _read(found: dict[str, bool]) -> list[str]:
    return [name for name, ran in found.items() if ran]


def _one_partition(found: dict[str, bool], created_at: datetime, today: date) -> None:
    """Exactly one partition in the plan, read: `created_at`'s day's, or the legacy one for
    a day before the cutover (the seed's days before `today`, the seeding's day)."""
    assert len(found) == 1, found
    (name,) = _read(found)
    day = created_at.astimezone(UTC)
    if day.date() == today:
        assert name.endswith(f"_p{day:%Y%m%d}"), (name, day)
    else:
        assert name.endswith("_legacy"), (name, day)


def _without_the_day(sql: str) -> str:
    assert OWNED_DAY in sql
    return sql.replace(OWNED_DAY, "")


def _payment(conn: Db, g: int) -> PaymentRow:
    """Operation g's payment, at its first attempt of two (the failover's write needs a
    next one)."""
    columns = ", ".join(f.name for f in fields(PaymentRow))
    cur = conn.cursor(row_factory=class_row(PaymentRow))
    payment = cur.execute(
        f"SELECT {columns} FROM payments WHERE id = %s", (_md5(f"pay{g}"),)
    ).fetchone()
    assert payment is not None
    assert (payment.route, payment.attempt) == (["primary", "secondary"], 0), payment
    return payment


def _transition(conn: Db, owner: dict[str, Any], g: int, verb: str) -> tuple[str, dict[str, Any]]:
    """`record_final` (with the payment's outcome) or `fail_over` (with the payment's next
    attempt and its record) of operation g: `repository._transition`'s statement and
    parameters."""
    payment = _payment(conn, g)
    if verb == "record_final":
        subject = payments.result_with_outcome(
            payment.id,
            status=PaymentStatus.SUCCEEDED,
            provider_charge_id="ch_plan",
            decline_code=None,
            attempt=0,
            at=owner["created_at"] + timedelta(seconds=1),
        )
        trigger, to_state = Trigger.COMPLETE, State.COMPLETED
    else:
        subject = payments.next_attempt(payment, DECLINED, "processor_declined")
        trigger, to_state = Trigger.FAILOVER, State.PROVIDER_REQUEST_SENT
    sql = statements.transition_sql(verb, statements.subject_sql(subject))
    params = {
        "id": owner["id"],
        "tenant_id": owner["tenant_id"],
        "created_at": owner["created_at"],
        "fence": owner["fence"],
        "from_state": owner["state"],
        "to_state": to_state.value,
        "trigger": trigger.value,
        "actor": "worker:plan",
        "reason": verb,
        "response_status": 201,
        "response_headers": None,
        "response_body": "{}",
        "lease_s": 30,
        **subject.params,
    }
    return sql, params


@pytest.mark.parametrize("verb", ["record_final", "fail_over"])
@pytest.mark.parametrize("g", [TODAY, DAYS_AGO], ids=["today", "days ago"])
def test_a_fenced_transition_and_its_payments_write_read_their_days_partitions(
    writing: Db, g: int, verb: str
) -> None:
    owner = _owner(writing, g)
    sql, params = _transition(writing, owner, g, verb)
    operations = _run(writing, sql, params, "operations")
    paid = _run(writing, sql, params, "payments")

    today = seeded_day(writing)
    _one_partition(operations, owner["created_at"], today)
    _one_partition(paid, owner["created_at"], today)
    # The control: without the day, the same write reaches every partition of both.
    unbounded = _without_the_day(sql)
    assert len(_run(writing, unbounded, params, "operations")) > 1
    assert len(_run(writing, unbounded, params, "payments")) > 1


@pytest.mark.parametrize("g", [TODAY, DAYS_AGO], ids=["today", "days ago"])
def test_a_takeover_and_a_release_read_the_operations_days_partition(writing: Db, g: int) -> None:
    owner = _owner(writing, g)
    params = owner | {"owner": "worker:plan", "lease_s": 30}
    today = seeded_day(writing)
    taken = _run(writing, leases._TAKE_OVER, params, "operations")
    _one_partition(taken, owner["created_at"], today)
    assert len(_run(writing, _without_the_day(leases._TAKE_OVER), params, "operations")) > 1
    release = leases._RELEASE
    _one_partition(_run(writing, release, params, "operations"), owner["created_at"], today)
    assert len(_run(writing, _without_the_day(release), params, "operations")) > 1


@pytest.mark.parametrize("g", [TODAY, DAYS_AGO], ids=["today", "days ago"])
def test_an_owners_reads_read_the_operations_days_partition(plan_db: Db, g: int) -> None:
    owner = _owner(plan_db, g)
    params = owner | {"key_ttl_s": 86400}
    today = seeded_day(plan_db)
    for sql in (reads._OWNED, reads._TRACEPARENT, reads.owned_snapshot_sql()):
        _one_partition(scanned(plan_db, sql, params, "operations"), owner["created_at"], today)
        assert len(scanned(plan_db, _without_the_day(sql), params, "operations")) > 1


@pytest.mark.parametrize("g", [TODAY, DAYS_AGO], ids=["today", "days ago"])
def test_an_operators_wait_for_the_last_send_reads_the_trails_days_partition(
    plan_db: Db, g: int
) -> None:
    owner = _owner(plan_db, g)
    sql = operator_reads.LAST_SEND_SQL
    found = scanned(plan_db, sql, owner, "operation_transitions")
    _one_partition(found, owner["created_at"], seeded_day(plan_db))
    day = "AND operation_created_at = %(created_at)s"
    assert len(scanned(plan_db, sql.replace(day, ""), owner, "operation_transitions")) > 1


def test_the_expire_jobs_statement_reads_the_partitions_of_its_rows_days(writing: Db) -> None:
    # Two completed operations of one tenant: the newest (seeded at the seeding's start,
    # today), and one of days ago (legacy).
    owners = [_owner(writing, g) for g in (9000, 8010)]
    assert {o["state"] for o in owners} == {State.COMPLETED.value}, owners
    assert len({o["tenant_id"] for o in owners}) == 1, owners
    params = {
        "tenant_id": owners[0]["tenant_id"],
        "ids": [o["id"] for o in owners],
        "days": [o["created_at"] for o in owners],
        "ttl_s": 0,
    }
    batch = retention._DROP_RESPONSES.batch
    found = _run(writing, batch, params, "operations")
    assert len(found) == 2, found
    assert len(_read(found)) == 2, found
    unbounded = batch.replace("AND created_at = ANY(%(days)s)", "")
    assert len(_run(writing, unbounded, params, "operations")) > 2
