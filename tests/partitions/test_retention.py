"""Retention (`app/partitions/retention.py`, `holds.py`): partitions entirely past their
table's retention are detached and dropped; a day with an operation not final, or whose
settlement is not closed, is kept; a detach cut between its two transactions is finished
by the next pass."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from app.operations.states import TERMINAL, State
from app.partitions.calendar import create_ahead
from app.partitions.holds import FINAL, NOT_FINAL, hold
from app.partitions.layout import day_bounds
from app.partitions.retention import Retired, retire, retire_all
from tests.partitions.conftest import TABLE, Scratch
from tests.support.control.waiting import wait_until
from tests.support.factories.tenants import TenantHandle


def _days(scratch: Scratch, first: int, last: int) -> None:
    """Partitions for the days `first` to `last` (offsets from the test's first day)."""
    day = scratch.day(first)
    made = scratch.run(lambda conn: create_ahead(conn, TABLE, premake_days=last - first, today=day))
    assert len(made.created) == last - first + 1


def _retire(scratch: Scratch, today: int, retention_days: int | None) -> Retired:
    day = scratch.day(today)
    return scratch.run(lambda conn: retire(conn, TABLE, retention_days=retention_days, today=day))


def _names(scratch: Scratch, *offsets: int) -> list[str]:
    return [TABLE.day_partition(scratch.day(offset)) for offset in offsets]


def test_only_partitions_entirely_past_retention_are_dropped(
    scratch: Scratch, tenant: TenantHandle
) -> None:
    _days(scratch, 0, 10)
    old = scratch.operation(scratch.day(6), "COMPLETED", tenant_id=tenant.id)
    scratch.settled(scratch.day(6))
    scratch.transition(old, scratch.day(6), tenant.id)
    kept = scratch.operation(scratch.day(7), "COMPLETED", tenant_id=tenant.id)
    scratch.transition(kept, scratch.day(7), tenant.id)

    # Today is day 10, three days kept: day 6 ends at day 7's midnight, three days before
    # today's: every row in it is three days old. Day 7's latest rows are not.
    done = _retire(scratch, 10, 3)
    assert done.dropped == _names(scratch, 0, 1, 2, 3, 4, 5, 6)
    assert done.detached == done.dropped
    assert done.held == {}
    assert scratch.partitions() == _names(scratch, 7, 8, 9, 10)
    assert not scratch.table_exists(TABLE.day_partition(scratch.day(6)))
    with scratch.sync() as conn:
        rows = conn.execute("SELECT operation_id FROM operation_transitions").fetchall()
    assert [row["operation_id"] for row in rows] == [kept]

    # Again: nothing more is past retention.
    again = _retire(scratch, 10, 3)
    assert again.dropped == []
    assert again.held == {}


def test_a_table_kept_forever_loses_nothing(scratch: Scratch) -> None:
    _days(scratch, 0, 3)
    done = _retire(scratch, 400, None)
    assert done.dropped == []
    assert scratch.partitions() == _names(scratch, 0, 1, 2, 3)


def test_a_day_with_an_operation_not_final_is_kept(scratch: Scratch, tenant: TenantHandle) -> None:
    _days(scratch, 0, 6)
    waiting = scratch.operation(scratch.day(1), "FAILED_RETRYABLE", tenant_id=tenant.id)

    done = _retire(scratch, 6, 2)
    assert done.held == {TABLE.day_partition(scratch.day(1)): "operation_not_final"}
    assert done.dropped == _names(scratch, 0, 2, 3)
    assert scratch.partitions() == _names(scratch, 1, 4, 5, 6)

    # Its outcome known and its day settled, the day goes at the next pass.
    with scratch.sync() as conn:
        conn.execute(
            "UPDATE operations SET state = 'COMPLETED', completed_at = now() WHERE id = %s",
            (waiting,),
        )
    scratch.settled(scratch.day(1))
    assert _retire(scratch, 6, 2).dropped == _names(scratch, 1)


def test_a_day_whose_settlement_is_not_closed_is_kept(
    scratch: Scratch, tenant: TenantHandle
) -> None:
    _days(scratch, 0, 4)
    operation = scratch.operation(scratch.day(0), "COMPLETED", tenant_id=tenant.id)
    held = {TABLE.day_partition(scratch.day(0)): "settlement_open"}

    # Never settled: kept (the days without operations have nothing to settle).
    first = _retire(scratch, 4, 1)
    assert first.held == held
    assert first.dropped == _names(scratch, 1, 2)

    # Settled, but a discrepancy of the day is open: kept.
    scratch.settled(scratch.day(0))
    item = uuid.uuid4()
    with scratch.sync() as conn:
        conn.execute(
            "INSERT INTO reconciliation_items (id, day, record_type, provider, provider_key,"
            " kind, state, tenant_id, operation_id, detail)"
            " VALUES (%s, %s, 'charge', 'primary', %s, 'missing', 'open', %s, %s, 'test')",
            (item, scratch.day(0), f"key-{item}", tenant.id, operation),
        )
    scratch.items.append(item)
    assert _retire(scratch, 4, 1).held == held

    # A run of the day under way: kept.
    with scratch.sync() as conn:
        conn.execute(
            "UPDATE reconciliation_items SET state = 'auto_resolved' WHERE id = %s", (item,)
        )
        conn.execute(
            "UPDATE settlement_days SET lease_owner = 'a run',"
            " lease_expires_at = now() + interval '1 hour' WHERE day = %s",
            (scratch.day(0),),
        )
    assert _retire(scratch, 4, 1).held == held

    with scratch.sync() as conn:
        conn.execute(
            "UPDATE settlement_days SET lease_owner = NULL, lease_expires_at = NULL WHERE day = %s",
            (scratch.day(0),),
        )
    assert _retire(scratch, 4, 1).dropped == _names(scratch, 0)


def test_a_detach_cut_between_its_two_transactions_is_finished_by_the_next_pass(
    scratch: Scratch,
) -> None:
    _days(scratch, 0, 4)
    first = TABLE.day_partition(scratch.day(0))

    def the_detach() -> list[dict[str, object]]:
        with scratch.sync() as conn:
            return conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
                " AND query LIKE '%%DETACH PARTITION%%CONCURRENTLY%%'"
                " AND wait_event_type = 'Lock'",
                (scratch.schema,),
            ).fetchall()

    # A reader's transaction holds the table: the detach's second transaction waits for it,
    # and the pass is killed there, its first transaction committed.
    with scratch.sync() as reader, ThreadPoolExecutor(1) as pool:
        reader.autocommit = False
        reader.execute("SELECT count(*) FROM operation_transitions")
        cut = pool.submit(_retire, scratch, 4, 1)
        wait_until(lambda: bool(the_detach()), message="the detach waiting for the reader")
        with scratch.sync() as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (the_detach()[0]["pid"],))
        with pytest.raises(psycopg.OperationalError):
            cut.result(timeout=30)
        reader.rollback()

    with scratch.sync() as conn:
        row = conn.execute(
            "SELECT i.inhdetachpending FROM pg_inherits i WHERE i.inhrelid = to_regclass(%s)",
            (first,),
        ).fetchone()
    assert row is not None
    assert row["inhdetachpending"], "the detach was not left half done"

    done = _retire(scratch, 4, 1)
    assert done.finalized == [first]
    assert done.dropped == _names(scratch, 0, 1, 2)
    assert not scratch.table_exists(first)
    assert scratch.partitions() == _names(scratch, 3, 4)


# The pass's lock, as another worker's pass on the same schema takes it.
KEY = "hashtext('payments.partitions.retention:' || current_schema())"


def test_one_worker_at_a_time_runs_retention(scratch: Scratch) -> None:
    _days(scratch, 0, 3)

    async def both() -> list[list[Retired] | None]:
        from psycopg import AsyncConnection

        held = await AsyncConnection.connect(
            scratch.database_url, autocommit=True, options=scratch.options
        )
        async with held:
            await held.execute(f"SELECT pg_advisory_lock({KEY})")
            conn = await AsyncConnection.connect(
                scratch.database_url, autocommit=True, options=scratch.options
            )
            async with conn:
                skipped = await retire_all(conn, (TABLE,), {TABLE.table: 1}, today=scratch.day(3))
                await held.execute(f"SELECT pg_advisory_unlock({KEY})")
                ran = await retire_all(conn, (TABLE,), {TABLE.table: 1}, today=scratch.day(3))
        return [skipped, ran]

    skipped, ran = asyncio.run(both())
    assert skipped is None
    assert ran is not None
    assert ran[0].dropped == _names(scratch, 0, 1)


def test_the_rules_name_every_state_once() -> None:
    # A state added to the machine must be sorted into final or not: a state the rule does
    # not list would let a day with such an operation be dropped.
    assert set(FINAL) == {state.value for state in TERMINAL}
    assert set(NOT_FINAL) == {state.value for state in State} - set(FINAL)


def test_an_operations_day_is_kept_while_an_operation_of_it_holds_its_key(
    scratch: Scratch, tenant: TenantHandle
) -> None:
    # The operations table's own rule: its row is what refuses a second operation with the
    # key. The rule is read directly, on the test's own operations (conftest.py).
    day = scratch.day(0)
    operation = scratch.operation(day, "COMPLETED", tenant_id=tenant.id)
    scratch.settled(day)
    lower, upper = day_bounds(day)

    def held(table: str) -> str | None:
        return scratch.run(lambda conn: hold(conn, table, lower=lower, upper=upper))

    assert held("operations") == "key_held"
    assert held(TABLE.table) is None
    with scratch.sync() as conn:
        conn.execute(
            "UPDATE operations SET idempotency_key = NULL, key_released_at = now() WHERE id = %s",
            (operation,),
        )
    assert held("operations") is None
