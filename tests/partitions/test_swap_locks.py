"""The swap never holds the service up for longer than its lock timeout.

The swap's ALTER TABLE needs ACCESS EXCLUSIVE, and while it waits for it (behind a long
read, say) every statement on the table queues behind the ALTER. So it waits at most
`LOCK_TIMEOUT_MS`, gives way, and tries again: here a transaction holds the audit trail
open while the swap starts, and an audit row written meanwhile is written within its own
5 s lock timeout; once the reader ends, the swap goes through.
"""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
from alembic import command

from app.db.migrate import alembic_config
from app.partitions import convert
from app.partitions.shapes import OPERATIONS_SHAPE, PAYMENT_SHAPE, TRANSITIONS_SHAPE
from app.partitions.swap_scope import swap_locks
from tests.support.control.waiting import wait_until


def _waiting_for_a_lock(url: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'swap'"
            " AND wait_event_type = 'Lock'"
        ).fetchone()
    return row is not None and row[0] > 0


def test_a_write_waits_for_the_swap_no_longer_than_its_lock_timeout(
    scratch_database: str,
) -> None:
    command.upgrade(alembic_config(scratch_database), "0030")
    tenant, operation = uuid.uuid4(), uuid.uuid4()
    cutover = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    cutover += timedelta(days=2)
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 't')", (tenant,))
        conn.execute(
            "INSERT INTO operations (id, tenant_id, operation_name, idempotency_key,"
            " fingerprint, state) VALUES (%s, %s, 'create_payment', 'k', 'f', 'RECEIVED')",
            (operation, tenant),
        )
        convert.build_indexes(conn, TRANSITIONS_SHAPE, concurrently=True)
        convert.add_check(conn, TRANSITIONS_SHAPE, cutover)
        convert.validate_check(conn, TRANSITIONS_SHAPE)

    failed: list[BaseException] = []
    with psycopg.connect(scratch_database) as reader:
        reader.execute("SELECT count(*) FROM operation_transitions")  # holds ACCESS SHARE

        def swap() -> None:
            try:
                with psycopg.connect(
                    scratch_database, autocommit=True, application_name="swap"
                ) as conn:
                    convert.swap_retried(
                        conn, TRANSITIONS_SHAPE, cutover, now=lambda: datetime.now(UTC)
                    )
            except BaseException as error:  # reported by the test below
                failed.append(error)

        swapping = threading.Thread(target=swap)
        swapping.start()
        wait_until(lambda: _waiting_for_a_lock(scratch_database), timeout=10, message="swap")
        with psycopg.connect(
            scratch_database, autocommit=True, options="-c lock_timeout=5s"
        ) as writer:
            writer.execute(
                "INSERT INTO operation_transitions (operation_id, tenant_id, to_state, trigger,"
                " actor, fence, operation_created_at) SELECT id, tenant_id, 'RECEIVED',"
                " 'claim', 'api:test', 1, created_at FROM operations WHERE id = %s",
                (operation,),
            )
        reader.rollback()
        swapping.join(timeout=120)
    assert failed == []
    with psycopg.connect(scratch_database) as conn:
        kind = conn.execute(
            "SELECT relkind::text FROM pg_class WHERE oid = 'operation_transitions'::regclass"
        ).fetchone()
        rows = conn.execute("SELECT count(*) FROM operation_transitions").fetchone()
    assert kind == ("p",)
    assert rows == (1,)


def test_the_swap_locks_in_the_services_order() -> None:
    # An operation's row, then its payment, then what is written beside them: a payment's
    # statements take their locks in that order, so the swap never waits on one in a circle.
    assert swap_locks(OPERATIONS_SHAPE) == [
        ("operations", "ACCESS EXCLUSIVE"),
        ("payments", "ACCESS EXCLUSIVE"),
        ("operation_transitions", "ACCESS EXCLUSIVE"),
        ("events", "ACCESS EXCLUSIVE"),
        ("refunds", "ACCESS EXCLUSIVE"),
        ("payment_modifications", "ACCESS EXCLUSIVE"),
    ]
    assert swap_locks(PAYMENT_SHAPE) == [
        ("operations", "SHARE ROW EXCLUSIVE"),
        ("payments", "ACCESS EXCLUSIVE"),
        ("refunds", "ACCESS EXCLUSIVE"),
        ("payment_modifications", "ACCESS EXCLUSIVE"),
        ("settlement_lines", "ACCESS EXCLUSIVE"),
        ("payment_failovers", "ACCESS EXCLUSIVE"),
    ]
    assert swap_locks(TRANSITIONS_SHAPE) == [
        ("operations", "SHARE ROW EXCLUSIVE"),
        ("operation_transitions", "ACCESS EXCLUSIVE"),
        ("payment_failovers", "ACCESS EXCLUSIVE"),
    ]
