"""`payments migrate` partitions a small database itself and refuses a large one.

Migration 0031 runs the conversion in its own transaction, under its locks: fine for a few
rows, not for a billion. Past `SMALL_ROWS` rows it changes nothing and stops, naming the
online command; a downgrade from the partitioned shape gives back 0030's tables with every
row.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from alembic import command
from psycopg.rows import dict_row

from app.db.migrate import alembic_config, current_revision, head_revision
from app.partitions import convert

ROWS = 30

_SEED = [
    "INSERT INTO tenants (id, name) VALUES (%(tenant)s, 'small')",
    "INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint,"
    " state, created_at) SELECT md5('op' || g)::uuid, %(tenant)s, 'create_payment',"
    " 'k' || g, 'f', 'COMPLETED', now() - make_interval(days => g)"
    " FROM generate_series(1, %(n)s) AS g",
    "INSERT INTO operation_transitions (operation_id, tenant_id, to_state, trigger, actor,"
    " fence) SELECT md5('op' || g)::uuid, %(tenant)s, 'RECEIVED', 'claim', 'api:old', 1"
    " FROM generate_series(1, %(n)s) AS g",
    "INSERT INTO events (id, tenant_id, type, operation_id, data) SELECT gen_random_uuid(),"
    " %(tenant)s, 'payment.succeeded', md5('op' || g)::uuid, '{}'"
    " FROM generate_series(1, %(n)s) AS g",
]


def _seeded_at_0028(url: str) -> None:
    command.upgrade(alembic_config(url), "0028")
    params = {"tenant": uuid.uuid4(), "n": ROWS}
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in _SEED:
            conn.execute(statement, params)


def _kinds(url: str) -> dict[str, str]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        rows = conn.execute(
            "SELECT relname AS name, relkind::text AS kind FROM pg_class"
            " WHERE relname IN ('operation_transitions', 'events')"
        ).fetchall()
    return {row["name"]: row["kind"] for row in rows}


def test_a_large_database_is_left_for_the_online_command(
    scratch_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seeded_at_0028(scratch_database)
    monkeypatch.setattr(convert, "SMALL_ROWS", ROWS - 1)
    config = alembic_config(scratch_database)
    with pytest.raises(SystemExit, match="payments partitions convert"):
        command.upgrade(config, "head")
    assert current_revision(scratch_database) != head_revision()
    assert _kinds(scratch_database) == {"operation_transitions": "r", "events": "r"}
    # The documented way on: the online command, then `migrate` again.
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        assert convert.convert_online(conn) == ["operation_transitions", "events"]
    command.upgrade(config, "head")
    assert current_revision(scratch_database) == head_revision()
    assert _kinds(scratch_database) == {"operation_transitions": "p", "events": "p"}


def test_a_small_database_is_partitioned_and_given_back_by_the_downgrade(
    scratch_database: str,
) -> None:
    _seeded_at_0028(scratch_database)
    config = alembic_config(scratch_database)
    command.upgrade(config, "head")
    assert _kinds(scratch_database) == {"operation_transitions": "p", "events": "p"}
    with psycopg.connect(scratch_database, row_factory=dict_row) as conn:
        # Every old row has its operation's day, and sits in the legacy partition.
        found = conn.execute(
            "SELECT t.tableoid::regclass::text AS part, count(*) AS n FROM operation_transitions t"
            " JOIN operations o ON o.id = t.operation_id AND o.created_at = t.operation_created_at"
            " GROUP BY 1"
        ).fetchall()
    assert found == [{"part": "operation_transitions_legacy", "n": ROWS}]
    command.downgrade(config, "0028")
    assert _kinds(scratch_database) == {"operation_transitions": "r", "events": "r"}
    with psycopg.connect(scratch_database, row_factory=dict_row) as conn:
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM operation_transitions) AS trail,"
            " (SELECT count(*) FROM events) AS events"
        ).fetchone()
    assert counts == {"trail": ROWS, "events": ROWS}
    command.upgrade(config, "head")
    assert _kinds(scratch_database) == {"operation_transitions": "p", "events": "p"}
