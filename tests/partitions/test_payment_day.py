"""The conversion of `payments` proves each payment is on its operation's day.

A database seeded at 0028 and migrated to 0032 (the history partitioned, the records not),
one payment's `created_at` moved a day off its operation's: the migration 0033 and the
online conversion both refuse, naming the payment and the repair, and change nothing (no
table partitioned, no key built, no CHECK added, the payment as it was). After the repair
statement both convert, and every payment is in its operation's day's partition.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from alembic import command
from psycopg.rows import dict_row

from app.db.migrate import alembic_config, current_revision, head_revision
from app.partitions import convert
from app.partitions.payment_day import REPAIR

ROWS = 30

_SEED = [
    "INSERT INTO tenants (id, name) VALUES (%(tenant)s, 'day check')",
    "INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint,"
    " state, created_at) SELECT md5('op' || g)::uuid, %(tenant)s, 'create_payment',"
    " 'k' || g, 'f', 'COMPLETED', now() - make_interval(days => g)"
    " FROM generate_series(1, %(n)s) AS g",
    "INSERT INTO payments (id, tenant_id, operation_id, provider_key, status, amount_minor,"
    " currency, account_id, route, created_at) SELECT md5('pay' || g)::uuid, %(tenant)s,"
    " md5('op' || g)::uuid, 'payment-' || g, 'SUCCEEDED', 100, 'EUR', 'acc', '{primary}',"
    " o.created_at FROM generate_series(1, %(n)s) AS g"
    " JOIN operations o ON o.id = md5('op' || g)::uuid",
]
# The payment moved to the day before its operation's.
MOVED = "md5('pay7')::uuid"

# What the conversion of the records would have changed: the tables' kinds, the keys it
# builds before the swap, the CHECKs it adds, and the moved payment's `created_at`.
_FOOTPRINT = f"""
    SELECT (SELECT array_agg(relname::text || ':' || relkind::text ORDER BY relname)
            FROM pg_class WHERE relname IN ('operations', 'payments')) AS kinds,
           (SELECT array_agg(relname::text ORDER BY relname) FROM pg_class
            WHERE relname LIKE 'operations\\_legacy%%' OR relname LIKE 'payments\\_legacy%%')
             AS built,
           (SELECT array_agg(conname::text ORDER BY conname) FROM pg_constraint
            WHERE conname LIKE 'ck\\_%%\\_before\\_cutover') AS checks,
           (SELECT p.created_at - o.created_at FROM payments p
            JOIN operations o ON o.id = p.operation_id WHERE p.id = {MOVED}) AS moved_by
"""


def _footprint(url: str) -> dict[str, object]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        found = conn.execute(_FOOTPRINT).fetchone()
    assert found is not None
    return dict(found)


def _off_day_at_0032(url: str) -> dict[str, object]:
    """The database at 0032, one payment a day off its operation's; what it looks like."""
    config = alembic_config(url)
    command.upgrade(config, "0028")
    params = {"tenant": uuid.uuid4(), "n": ROWS}
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in _SEED:
            conn.execute(statement, params)
    command.upgrade(config, "0032")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"UPDATE payments SET created_at = created_at - interval '1 day' WHERE id = {MOVED}"
        )
    before = _footprint(url)
    assert before["kinds"] == ["operations:r", "payments:r"]
    assert before["built"] is None
    assert before["checks"] is None
    assert str(before["moved_by"]) == "-1 day, 0:00:00"
    return before


def _moved_id(url: str) -> str:
    with psycopg.connect(url) as conn:
        found = conn.execute(f"SELECT {MOVED}::text").fetchone()
    assert found is not None
    return str(found[0])


def _repair(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(REPAIR).rowcount


def _all_on_their_day(url: str) -> dict[str, object]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        found = conn.execute(
            "SELECT count(*) AS n, count(*) FILTER (WHERE o.tableoid::regclass::text"
            " = 'operations_legacy' AND p.tableoid::regclass::text = 'payments_legacy')"
            " AS legacy FROM payments p"
            " JOIN operations o ON o.id = p.operation_id AND o.created_at = p.created_at"
        ).fetchone()
    assert found is not None
    return dict(found)


def test_the_migration_refuses_a_payment_off_its_operations_day_until_repaired(
    scratch_database: str,
) -> None:
    before = _off_day_at_0032(scratch_database)
    config = alembic_config(scratch_database)
    moved = _moved_id(scratch_database)
    with pytest.raises(SystemExit) as refused:
        command.upgrade(config, "head")
    message = str(refused.value)
    assert message.startswith("migration 0033: 1 payment(s) have"), message
    assert moved in message
    assert REPAIR in message
    assert current_revision(scratch_database) == "0032"
    assert _footprint(scratch_database) == before

    assert _repair(scratch_database) == 1
    command.upgrade(config, "head")
    assert current_revision(scratch_database) == head_revision()
    assert _footprint(scratch_database)["kinds"] == ["operations:p", "payments:p"]
    assert _all_on_their_day(scratch_database) == {"n": ROWS, "legacy": ROWS}


def test_the_online_conversion_refuses_a_payment_off_its_operations_day_until_repaired(
    scratch_database: str,
) -> None:
    before = _off_day_at_0032(scratch_database)
    moved = _moved_id(scratch_database)
    off_day = r"^1 payment\(s\) have"
    with (
        psycopg.connect(scratch_database, autocommit=True) as conn,
        pytest.raises(convert.ConversionError, match=off_day) as refused,
    ):
        convert.convert_online(conn)
    assert moved in str(refused.value)
    assert _footprint(scratch_database) == before

    assert _repair(scratch_database) == 1
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        assert convert.convert_online(conn) == ["operations", "payments"]
    assert _footprint(scratch_database)["kinds"] == ["operations:p", "payments:p"]
    assert _all_on_their_day(scratch_database) == {"n": ROWS, "legacy": ROWS}
    command.upgrade(alembic_config(scratch_database), "head")
    assert current_revision(scratch_database) == head_revision()
