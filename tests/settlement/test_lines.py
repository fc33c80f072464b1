"""Settled lines are the providers' own: one provider's record id is no promise against
another's (migration 0017)."""

from __future__ import annotations

import uuid
from datetime import date

import psycopg
from alembic import command
from psycopg.rows import DictRow, dict_row

from app.db.migrate import alembic_config
from app.settlement.books import Settled
from app.settlement.repository import record_lines
from app.settlement.rows import RecordType
from tests.support.fixtures.repository import AsyncDb


def settled(provider_id: str, gross: int) -> Settled:
    return Settled(
        provider_id=provider_id,
        record_type=RecordType.CHARGE,
        provider_key=f"payment-{uuid.uuid4()}",
        gross_minor=gross,
        fee_minor=gross // 50,
        net_minor=gross - gross // 50,
        currency="EUR",
        payout_id="po_1",
        settled_on=date(2026, 11, 20),
    )


def test_two_providers_lines_under_one_record_id_are_both_kept(
    async_db: AsyncDb, db: psycopg.Connection[DictRow]
) -> None:
    shared_id = f"ch_{uuid.uuid4().hex}"

    async def record() -> list[int]:
        async with async_db.db.transaction() as conn:
            return [
                await record_lines(conn, "primary", [(settled(shared_id, 1000), None)]),
                await record_lines(conn, "secondary", [(settled(shared_id, 2500), None)]),
                # A report read again changes nothing.
                await record_lines(conn, "secondary", [(settled(shared_id, 2500), None)]),
            ]

    assert async_db.run(record()) == [1, 1, 0]
    rows = db.execute(
        "SELECT provider, gross_minor FROM settlement_lines WHERE provider_id = %s"
        " ORDER BY provider",
        (shared_id,),
    ).fetchall()
    assert rows == [
        {"provider": "primary", "gross_minor": 1000},
        {"provider": "secondary", "gross_minor": 2500},
    ]


def test_the_migration_gives_each_stored_line_its_provider(scratch_database: str) -> None:
    config = alembic_config(scratch_database)
    command.upgrade(config, "0016")
    tenant = uuid.uuid4()
    # A payment that failed over to its second provider, a refund of it there, and a line
    # of ours nowhere (an orphan).
    payment, refund, operation, refund_op = (uuid.uuid4() for _ in range(4))
    key = f"payment-{payment}"
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'old')", (tenant,))
        # The shape of 0016: each operation names its payment, a refund's its refund too,
        # as the service wrote them (0021 checks that and drops the columns).
        for op_id, name, refund_id in (
            (operation, "create_payment", None),
            (refund_op, "create_refund", refund),
        ):
            conn.execute(
                "INSERT INTO operations (id, tenant_id, operation_name, fingerprint, state,"
                " payment_id, refund_id) VALUES (%s, %s, %s, 'f', 'COMPLETED', %s, %s)",
                (op_id, tenant, name, payment, refund_id),
            )
        conn.execute(
            # On its operation's day, as the claim's statement writes it.
            "INSERT INTO payments (id, tenant_id, operation_id, provider_key, status,"
            " amount_minor, currency, account_id, route, attempt, created_at)"
            " SELECT %s, %s, id, %s, 'SUCCEEDED', 1000, 'EUR', 'acc', '{primary,secondary}', 1,"
            " created_at FROM operations WHERE id = %s",
            (payment, tenant, key, operation),
        )
        conn.execute(
            "INSERT INTO refunds (id, tenant_id, payment_id, operation_id, provider_key,"
            " charge_id, status, amount_minor, currency, provider)"
            " VALUES (%s, %s, %s, %s, %s, 'ch_2', 'SUCCEEDED', 400, 'EUR', 'secondary')",
            (refund, tenant, payment, refund_op, f"refund-{refund}"),
        )
        lines = [
            ("ch_1", "charge", f"{key}:1", payment, None),
            ("re_1", "refund", f"refund-{refund}", payment, refund),
            ("ch_9", "charge", f"payment-{uuid.uuid4()}", None, None),
        ]
        for provider_id, record_type, provider_key, payment_id, refund_id in lines:
            conn.execute(
                "INSERT INTO settlement_lines (provider_id, record_type, provider_key,"
                " payment_id, refund_id, gross_minor, fee_minor, net_minor, currency,"
                " payout_id, settled_on) VALUES (%s, %s, %s, %s, %s, 1000, 20, 980, 'EUR',"
                " 'po_1', '2026-11-20')",
                (provider_id, record_type, provider_key, payment_id, refund_id),
            )

    command.upgrade(config, "head")

    with psycopg.connect(scratch_database, row_factory=dict_row) as conn:
        rows = conn.execute(
            "SELECT provider_id, provider FROM settlement_lines ORDER BY provider_id"
        ).fetchall()
    assert rows == [
        {"provider_id": "ch_1", "provider": "secondary"},  # attempt 1: route[2]
        {"provider_id": "ch_9", "provider": "primary"},  # nothing of ours: the one there was
        {"provider_id": "re_1", "provider": "secondary"},  # where its charge is
    ]
    command.downgrade(config, "0016")
