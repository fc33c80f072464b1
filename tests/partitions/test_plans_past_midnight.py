"""The partition plan tests after midnight: their "today" is the seeding's, not the clock's.

The plan database (`plan_db`, tests/support/fixtures/plans.py) is seeded once per session: a
run crossing midnight UTC seeds it on one day and tests on the next, when the clock's today
has no seeded row and is not the migration's first day partition. Here a database of the
module's own is migrated and seeded as of ten minutes before today's midnight (its first
day partition yesterday's, its newest rows yesterday's last minutes) and some of the
partition tests run on it as they do on `plan_db`: each finds its day in the seeded rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import psycopg
import pytest
from psycopg.rows import DictRow

from app.partitions.layout import OPERATIONS
from tests.partitions import test_owner_pruning as owner_pruning
from tests.partitions import test_pruning as pruning
from tests.partitions import test_pruning_by_id as pruning_by_id
from tests.support.control.database import throwaway_database
from tests.support.fixtures.plans import before_midnight, connect, make, seeded_day

Db = psycopg.Connection[DictRow]


@pytest.fixture(scope="module")
def yesterdays(database_url: str) -> Iterator[str]:
    with throwaway_database(database_url, "payments_plans_yesterday") as url:
        make(url, before_midnight(10))
        yield url


@pytest.fixture
def db(yesterdays: str) -> Iterator[Db]:
    with connect(yesterdays) as conn:
        yield conn


def test_the_database_was_migrated_and_seeded_before_todays_midnight(db: Db) -> None:
    day = seeded_day(db)
    assert day < datetime.now(UTC).date()
    names = db.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = 'operations'::regclass"
    ).fetchall()
    days = [d for row in names if (d := OPERATIONS.day_of(row["relname"])) is not None]
    assert min(days) == day, sorted(days)


@pytest.mark.parametrize(("g", "where"), [(pruning.NEWEST, "today"), (pruning.OLDEST, "legacy")])
def test_a_taken_keys_operation_is_read_from_its_days_partition(db: Db, g: int, where: str) -> None:
    pruning.test_a_taken_keys_operation_is_read_from_its_days_partition(db, g, where)


def test_the_recovery_claim_and_the_payments_list_read_from_the_seedings_day(db: Db) -> None:
    for statement in ("_DUE_TENANTS", "_CLAIM_DUE"):
        pruning.test_the_recovery_claim_reads_the_days_from_the_horizon_on(db, statement)
    pruning.test_the_payments_list_reads_the_newest_day_first_and_stops_there(db)
    with db.transaction(force_rollback=True):
        db.execute("SET TRANSACTION READ WRITE")
        owner_pruning.test_the_expire_jobs_statement_reads_the_partitions_of_its_rows_days(db)


@pytest.mark.parametrize("g", [owner_pruning.TODAY, owner_pruning.DAYS_AGO])
def test_an_owners_reads_and_writes_read_the_operations_days_partition(db: Db, g: int) -> None:
    owner_pruning.test_an_owners_reads_read_the_operations_days_partition(db, g)
    owner_pruning.test_an_operators_wait_for_the_last_send_reads_the_trails_days_partition(db, g)
    with db.transaction(force_rollback=True):
        db.execute("SET TRANSACTION READ WRITE")
        owner_pruning.test_a_takeover_and_a_release_read_the_operations_days_partition(db, g)
        for verb in ("record_final", "fail_over"):
            owner_pruning.test_a_fenced_transition_and_its_payments_write_read_their_days_partitions(
                db, g, verb
            )


@pytest.mark.parametrize("days_ahead", [None, 4])
def test_a_read_by_id_reads_the_days_its_id_tells(db: Db, days_ahead: int | None) -> None:
    pruning_by_id.test_get_payment_reads_the_days_its_id_tells(db, days_ahead)
    pruning_by_id.test_get_operation_reads_the_days_its_id_tells(db, days_ahead)
    pruning_by_id.test_a_captures_claim_marks_its_payment_on_its_payments_days(db, days_ahead)
    pruning_by_id.test_a_captures_write_to_its_payment_names_its_payments_day(db)
    pruning_by_id.test_a_refunds_write_to_its_payment_names_its_payments_days(db)
