"""The operations record loses its kind columns (migration 0021) with nothing lost.

A database of the old shape (0020: `operations.payment_id`, `operations.refund_id`) is seeded
with payments, refunds and their operations, migrated, and read back: every operation is
still there, and the ids it named are what its kind's table gives through
`operation_links`. An operation whose ids its kind's table does not hold stops the upgrade
with nothing changed; the downgrade puts the columns back as they were.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from alembic import command
from psycopg.rows import dict_row

from app.db.migrate import alembic_config

PAYMENTS = 5
REFUNDS_PER_PAYMENT = 2


def _seed_old_shape(url: str) -> dict[uuid.UUID, dict[str, Any]]:
    """Payments, each with refunds, and their operations as 0020 stored them; what each
    operation named, by operation id."""
    tenant = uuid.uuid4()
    named: dict[uuid.UUID, dict[str, Any]] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'old')", (tenant,))
        for n in range(PAYMENTS):
            payment, operation = uuid.uuid4(), uuid.uuid4()
            conn.execute(
                "INSERT INTO operations (id, tenant_id, operation_name, idempotency_key,"
                " fingerprint, state, payment_id) VALUES"
                " (%s, %s, 'create_payment', %s, 'f', 'COMPLETED', %s)",
                (operation, tenant, f"pay-{n}", payment),
            )
            conn.execute(
                "INSERT INTO payments (id, tenant_id, operation_id, provider_key, status,"
                " amount_minor, currency, account_id, route, attempt) VALUES"
                " (%s, %s, %s, %s, 'SUCCEEDED', 1000, 'EUR', 'acc', '{primary}', 0)",
                (payment, tenant, operation, f"payment-{payment}"),
            )
            named[operation] = {"payment_id": str(payment)}
            for m in range(REFUNDS_PER_PAYMENT):
                refund, refund_op = uuid.uuid4(), uuid.uuid4()
                conn.execute(
                    "INSERT INTO operations (id, tenant_id, operation_name, idempotency_key,"
                    " fingerprint, state, payment_id, refund_id) VALUES"
                    " (%s, %s, 'create_refund', %s, 'f', 'COMPLETED', %s, %s)",
                    (refund_op, tenant, f"refund-{n}-{m}", payment, refund),
                )
                conn.execute(
                    "INSERT INTO refunds (id, tenant_id, payment_id, operation_id, provider_key,"
                    " charge_id, status, amount_minor, currency, provider) VALUES"
                    " (%s, %s, %s, %s, %s, 'ch_1', 'SUCCEEDED', 100, 'EUR', 'primary')",
                    (refund, tenant, payment, refund_op, f"refund-{refund}"),
                )
                named[refund_op] = {"payment_id": str(payment), "refund_id": str(refund)}
    return named


def _columns(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'operations'"
        ).fetchall()
    return {row[0] for row in rows}


def test_the_migration_moves_the_links_to_the_kinds_tables_and_loses_nothing(
    scratch_database: str,
) -> None:
    config = alembic_config(scratch_database)
    command.upgrade(config, "0020")
    named = _seed_old_shape(scratch_database)

    command.upgrade(config, "0021")

    assert not {"payment_id", "refund_id"} & _columns(scratch_database)
    with psycopg.connect(scratch_database, row_factory=dict_row) as conn:
        rows = conn.execute(
            "SELECT o.id, l.links FROM operations o"
            " LEFT JOIN operation_links l ON l.operation_id = o.id"
        ).fetchall()
    assert len(rows) == PAYMENTS * (1 + REFUNDS_PER_PAYMENT) == len(named)
    assert {row["id"]: row["links"] for row in rows} == named

    command.downgrade(config, "0020")

    with psycopg.connect(scratch_database, row_factory=dict_row) as conn:
        back = conn.execute("SELECT id, payment_id, refund_id FROM operations").fetchall()
        view = conn.execute("SELECT to_regclass('operation_links') AS v").fetchone()
    assert view == {"v": None}
    assert {
        row["id"]: {
            "payment_id": str(row["payment_id"]),
            **({} if row["refund_id"] is None else {"refund_id": str(row["refund_id"])}),
        }
        for row in back
    } == named


@pytest.mark.parametrize("broken", ["payment_row_missing", "refund_names_another_payment"])
def test_an_operation_its_kinds_table_does_not_hold_stops_the_upgrade_and_changes_nothing(
    scratch_database: str, broken: str
) -> None:
    config = alembic_config(scratch_database)
    command.upgrade(config, "0020")
    named = _seed_old_shape(scratch_database)
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        if broken == "payment_row_missing":
            conn.execute(
                "INSERT INTO operations (id, tenant_id, operation_name, fingerprint, state,"
                " payment_id) SELECT %s, t.id, 'create_payment', 'f', 'RECEIVED', %s"
                " FROM tenants t LIMIT 1",
                (uuid.uuid4(), uuid.uuid4()),
            )
        else:
            conn.execute(
                "UPDATE operations SET payment_id = %s WHERE id = ("
                " SELECT id FROM operations WHERE operation_name = 'create_refund' LIMIT 1)",
                (uuid.uuid4(),),
            )

    with pytest.raises(RuntimeError, match="1 operations name a payment or refund"):
        command.upgrade(config, "0021")

    assert {"payment_id", "refund_id"} <= _columns(scratch_database)
    with psycopg.connect(scratch_database) as conn:
        count = conn.execute("SELECT count(*) FROM operations").fetchone()
        view = conn.execute("SELECT to_regclass('operation_links')").fetchone()
    assert count == (len(named) + (broken == "payment_row_missing"),)
    assert view == (None,)
