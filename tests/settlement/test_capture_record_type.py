"""Migration 0023: `capture` is a record type of the settled lines and of the discrepancy
queue, and a downgrade never drops a settled capture."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from alembic import command

from app.db.migrate import alembic_config

LINE = (
    "INSERT INTO settlement_lines (provider, provider_id, record_type, provider_key,"
    " gross_minor, fee_minor, net_minor, currency, payout_id, settled_on)"
    " VALUES ('primary', %s, 'capture', %s, 400, 42, 358, 'EUR', 'po_1', '2026-11-28')"
)
ITEM = (
    "INSERT INTO reconciliation_items (id, day, record_type, provider, provider_key, kind,"
    " state, detail) VALUES (%s, '2026-11-28', 'capture', 'primary', %s, 'orphan', 'open', 'x')"
)


def _stored(url: str, statement: str, *params: object) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement, params)


def test_captures_are_settled_from_0023_and_a_downgrade_keeps_them(scratch_database: str) -> None:
    config = alembic_config(scratch_database)
    command.upgrade(config, "0022")
    key = f"capture-{uuid.uuid4()}"
    for statement, params in ((LINE, ("cp_0", key)), (ITEM, (uuid.uuid4(), key))):
        with pytest.raises(psycopg.errors.CheckViolation):
            _stored(scratch_database, statement, *params)

    command.upgrade(config, "0023")
    _stored(scratch_database, LINE, "cp_1", key)
    _stored(scratch_database, ITEM, uuid.uuid4(), key)

    with pytest.raises(RuntimeError, match=r"1 in settlement_lines, 1 in reconciliation_items"):
        command.downgrade(config, "0022")
    with psycopg.connect(scratch_database) as conn:
        kept = conn.execute(
            "SELECT (SELECT count(*) FROM settlement_lines), (SELECT count(*) FROM"
            " reconciliation_items), (SELECT version_num FROM alembic_version)"
        ).fetchone()
    assert kept == (1, 1, "0023")

    _stored(scratch_database, "DELETE FROM settlement_lines")
    _stored(scratch_database, "DELETE FROM reconciliation_items")
    command.downgrade(config, "0022")
    with pytest.raises(psycopg.errors.CheckViolation):
        _stored(scratch_database, LINE, "cp_2", key)
