"""Migration 0035: `operation_links` gives each row's partition day, and the links as before.

A database at 0033 (the payments partitioned) is seeded with a payment, a refund and a
capture of it, and their operations on a day past: after the upgrade the view gives the
payment's branch its `created_at` (its operation's) as `operation_created_at`, the refund's
and the capture's NULL, and each operation's links as it gave them before. The downgrade
puts the view of 0022 back: the same links, no day.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from alembic import command
from psycopg.rows import dict_row

from app.db.migrate import alembic_config

_LINKS = "SELECT * FROM operation_links ORDER BY operation_id"


def _seed(url: str, day: datetime) -> dict[str, uuid.UUID]:
    ids = {name: uuid.uuid4() for name in ("tenant", "payment", "refund", "capture")}
    ops = {name: uuid.uuid4() for name in ("payment", "refund", "capture")}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'links')", (ids["tenant"],))
        for name, op in ops.items():
            conn.execute(
                "INSERT INTO operations (id, tenant_id, operation_name, idempotency_key,"
                " fingerprint, state, created_at) VALUES (%s, %s, %s, %s, 'f', 'COMPLETED', %s)",
                (op, ids["tenant"], f"create_{name}", f"key-{name}", day),
            )
        conn.execute(
            "INSERT INTO payments (id, tenant_id, operation_id, provider_key, status,"
            " amount_minor, currency, account_id, route, attempt, created_at) VALUES"
            " (%s, %s, %s, 'payment-1', 'SUCCEEDED', 1000, 'EUR', 'acc', '{primary}', 0, %s)",
            (ids["payment"], ids["tenant"], ops["payment"], day),
        )
        conn.execute(
            "INSERT INTO refunds (id, tenant_id, payment_id, operation_id, provider_key,"
            " charge_id, status, amount_minor, currency, provider) VALUES"
            " (%s, %s, %s, %s, 'refund-1', 'ch_1', 'SUCCEEDED', 100, 'EUR', 'primary')",
            (ids["refund"], ids["tenant"], ids["payment"], ops["refund"]),
        )
        conn.execute(
            "INSERT INTO payment_modifications (id, tenant_id, payment_id, operation_id, type,"
            " provider_key, charge_id, provider, status, amount_minor, currency) VALUES"
            " (%s, %s, %s, %s, 'capture', 'capture-1', 'ch_1', 'primary', 'SUCCEEDED', 100,"
            " 'EUR')",
            (ids["capture"], ids["tenant"], ids["payment"], ops["capture"]),
        )
    return {f"{name}_operation": op for name, op in ops.items()} | ids


def _links(url: str) -> list[dict[str, Any]]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        return [dict(row) for row in conn.execute(_LINKS).fetchall()]


def test_the_view_gives_the_payments_day_and_the_same_links(scratch_database: str) -> None:
    config = alembic_config(scratch_database)
    command.upgrade(config, "0033")
    day = datetime.now(UTC).replace(microsecond=0) - timedelta(days=3)
    ids = _seed(scratch_database, day)
    before = _links(scratch_database)

    command.upgrade(config, "0035")
    after = _links(scratch_database)

    days = {row["operation_id"]: row.pop("operation_created_at") for row in after}
    assert after == before
    assert days == {
        ids["payment_operation"]: day,
        ids["refund_operation"]: None,
        ids["capture_operation"]: None,
    }
    links = {row["operation_id"]: row["links"] for row in after}
    assert links[ids["capture_operation"]] == {
        "payment_id": str(ids["payment"]),
        "capture_id": str(ids["capture"]),
    }

    command.downgrade(config, "0033")
    assert _links(scratch_database) == before
