"""`payments migrate` partitions a small database itself and refuses a large one.

Migrations 0031 (the history) and 0033 (the operations and payments) run the conversion in
their own transaction, under their locks: fine for a few rows, not for a billion. Past
`SMALL_ROWS` rows each changes nothing and stops, naming the online command; a downgrade
from the partitioned shape gives back 0028's tables with every row, their keys, foreign
keys and the key table's triggers.
"""

from __future__ import annotations

import os
import subprocess
import uuid

import psycopg
import pytest
from alembic import command
from psycopg.rows import dict_row

from app.db.migrate import alembic_config, current_revision, head_revision
from app.partitions import convert
from tests.support.control.processes import PAYMENTS, REPO_ROOT

ROWS = 30
TABLES = ("operation_transitions", "events", "operations", "payments")
UNPARTITIONED = dict.fromkeys(TABLES, "r")
PARTITIONED = dict.fromkeys(TABLES, "p")

_SEED = [
    "INSERT INTO tenants (id, name) VALUES (%(tenant)s, 'small')",
    "INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint,"
    " state, created_at) SELECT md5('op' || g)::uuid, %(tenant)s, 'create_payment',"
    " 'k' || g, 'f', 'COMPLETED', now() - make_interval(days => g)"
    " FROM generate_series(1, %(n)s) AS g",
    "INSERT INTO payments (id, tenant_id, operation_id, provider_key, status, amount_minor,"
    " currency, account_id, route, created_at) SELECT md5('pay' || g)::uuid, %(tenant)s,"
    " md5('op' || g)::uuid, 'payment-' || g, 'SUCCEEDED', 100, 'EUR', 'acc', '{primary}',"
    " o.created_at FROM generate_series(1, %(n)s) AS g"
    " JOIN operations o ON o.id = md5('op' || g)::uuid",
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
            " WHERE relname IN ('operation_transitions', 'events', 'operations', 'payments')"
        ).fetchall()
    return {row["name"]: row["kind"] for row in rows}


# What 0033 takes away and its downgrade gives back: the claim's unique key on
# `operations`, the key table's triggers, and the foreign keys into operations and payments.
_RECORD_SCHEMA = """
    SELECT (SELECT count(*) FROM pg_constraint
            WHERE conname = 'uq_operations_tenant_id_operation_name_idempotency_key')
             AS claim_unique,
           (SELECT array_agg(tgname::text ORDER BY tgname) FROM pg_trigger
            WHERE tgrelid = 'operations'::regclass AND NOT tgisinternal) AS triggers,
           (SELECT count(*) FROM pg_proc WHERE proname LIKE 'idempotency_keys_%%') AS functions,
           (SELECT array_agg(DISTINCT conrelid::regclass::text ORDER BY conrelid::regclass::text)
            FROM pg_constraint WHERE contype = 'f' AND conparentid = 0
              AND confrelid IN ('operations'::regclass, 'payments'::regclass)) AS referencing
"""
_REFERENCING = [
    "events",
    "operation_transitions",
    "payment_failovers",
    "payment_modifications",
    "payments",
    "refunds",
    "settlement_lines",
]


def _record_schema(url: str) -> dict[str, object]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        found = conn.execute(_RECORD_SCHEMA).fetchone()
    assert found is not None
    return dict(found)


def test_a_large_database_is_left_for_the_online_command(
    scratch_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seeded_at_0028(scratch_database)
    monkeypatch.setattr(convert, "SMALL_ROWS", ROWS - 1)
    config = alembic_config(scratch_database)
    with pytest.raises(SystemExit, match="payments partitions convert"):
        command.upgrade(config, "head")
    assert current_revision(scratch_database) != head_revision()
    assert _kinds(scratch_database) == UNPARTITIONED
    # The documented way on: the online command, then `migrate` again.
    converted = subprocess.run(
        [*PAYMENTS, "partitions", "convert"],
        env={**os.environ, "DATABASE_URL": scratch_database},
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
    )
    assert converted.returncode == 0, converted.stderr
    assert "partitioned: operation_transitions, events, operations, payments" in converted.stderr
    command.upgrade(config, "head")
    assert current_revision(scratch_database) == head_revision()
    assert _kinds(scratch_database) == PARTITIONED


def test_a_small_database_is_partitioned_and_given_back_by_the_downgrade(
    scratch_database: str,
) -> None:
    _seeded_at_0028(scratch_database)
    config = alembic_config(scratch_database)
    command.upgrade(config, "head")
    assert _kinds(scratch_database) == PARTITIONED
    with psycopg.connect(scratch_database, row_factory=dict_row) as conn:
        # Every old row has its operation's day, and sits in the legacy partition.
        found = conn.execute(
            "SELECT t.tableoid::regclass::text AS part, count(*) AS n FROM operation_transitions t"
            " JOIN operations o ON o.id = t.operation_id AND o.created_at = t.operation_created_at"
            " GROUP BY 1"
        ).fetchall()
    assert found == [{"part": "operation_transitions_legacy", "n": ROWS}]
    with psycopg.connect(scratch_database, row_factory=dict_row) as conn:
        records = conn.execute(
            "SELECT o.tableoid::regclass::text AS operation, p.tableoid::regclass::text AS payment,"
            " count(*) AS n FROM operations o"
            " JOIN payments p ON p.operation_id = o.id AND p.created_at = o.created_at"
            " GROUP BY 1, 2"
        ).fetchall()
        # The views read the parents, not the legacy partitions alone: a payment's link is
        # still found, and a new day's too.
        links = conn.execute("SELECT count(*) AS n FROM operation_links").fetchone()
        reads = conn.execute(
            "SELECT DISTINCT d.refobjid::regclass::text AS tbl FROM pg_depend d"
            " JOIN pg_rewrite r ON r.oid = d.objid"
            " WHERE r.ev_class = 'operation_links'::regclass"
            " AND d.refobjid IN ('payments'::regclass, 'payments_legacy'::regclass)"
        ).fetchall()
    assert records == [{"operation": "operations_legacy", "payment": "payments_legacy", "n": ROWS}]
    assert links == {"n": ROWS}
    assert reads == [{"tbl": "payments"}]
    assert _record_schema(scratch_database) == {
        "claim_unique": 0,
        "triggers": None,
        "functions": 0,
        "referencing": None,
    }
    command.downgrade(config, "0028")
    assert _kinds(scratch_database) == UNPARTITIONED
    with psycopg.connect(scratch_database, row_factory=dict_row) as conn:
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM operation_transitions) AS trail,"
            " (SELECT count(*) FROM events) AS events,"
            " (SELECT count(*) FROM operations) AS operations,"
            " (SELECT count(*) FROM payments) AS payments,"
            " (SELECT count(*) FROM operation_links) AS links"
        ).fetchone()
    assert counts == {
        "trail": ROWS,
        "events": ROWS,
        "operations": ROWS,
        "payments": ROWS,
        "links": ROWS,
    }
    command.upgrade(config, "0032")
    assert _record_schema(scratch_database) == {
        "claim_unique": 1,
        "triggers": ["idempotency_keys_claim", "idempotency_keys_release"],
        "functions": 2,
        "referencing": _REFERENCING,
    }
    command.upgrade(config, "head")
    assert _kinds(scratch_database) == PARTITIONED


def test_large_operations_are_left_for_the_online_command_after_the_history(
    scratch_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The history converted by 0031 while small; by 0033 the operations have grown.
    _seeded_at_0028(scratch_database)
    config = alembic_config(scratch_database)
    command.upgrade(config, "0032")
    monkeypatch.setattr(convert, "SMALL_ROWS", ROWS - 1)
    with pytest.raises(SystemExit, match="migration 0033: operations, payments hold more"):
        command.upgrade(config, "head")
    assert current_revision(scratch_database) == "0032"
    assert _kinds(scratch_database) == {
        "operation_transitions": "p",
        "events": "p",
        "operations": "r",
        "payments": "r",
    }
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        assert convert.convert_online(conn) == ["operations", "payments"]
    command.upgrade(config, "head")
    assert current_revision(scratch_database) == head_revision()
    assert _kinds(scratch_database) == PARTITIONED
