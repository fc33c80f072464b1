"""Migration 0028: the audit trail gains its tenant, the worker's scan indexes lead with it.

A database at 0027 is seeded with operations of two tenants and more audit rows than one
batch of the backfill fills, migrated, and read back: every row has its operation's tenant,
the column is NOT NULL with no CHECK left behind, a row written without the column (as a
process of the previous release writes it) gets its tenant from the trigger, and the two
scan indexes lead with tenant_id. An index an operator built by hand beforehand (the
migration's docstring says how) is kept as it is. The downgrade puts 0027 back.
"""

from __future__ import annotations

import uuid

import psycopg
from alembic import command
from psycopg.rows import DictRow, dict_row

from app.db.migrate import alembic_config

Db = psycopg.Connection[DictRow]
# More than one batch of the backfill (20,000), fewer than three.
AUDIT_ROWS = 45_000

_INDEXES = """
    SELECT i.relname AS name, i.oid, pg_get_indexdef(i.oid) AS definition
    FROM pg_class i WHERE i.relname IN
        ('ix_operations_in_flight_lease', 'ix_operations_recovery_due')
    ORDER BY 1
"""


def _seed(db: Db) -> dict[uuid.UUID, uuid.UUID]:
    """Two tenants, ten operations each, AUDIT_ROWS audit rows among them: by operation,
    its tenant."""
    tenants = {}
    for name in ("a", "b"):
        tenant = uuid.uuid4()
        db.execute("INSERT INTO tenants (id, name) VALUES (%s, %s)", (tenant, name))
        for n in range(10):
            operation = uuid.uuid4()
            db.execute(
                "INSERT INTO operations (id, tenant_id, operation_name, idempotency_key,"
                " fingerprint, state) VALUES (%s, %s, 'create_payment', %s, 'f', 'COMPLETED')",
                (operation, tenant, f"{name}-{n}"),
            )
            tenants[operation] = tenant
    db.execute(
        "INSERT INTO operation_transitions (operation_id, from_state, to_state, trigger,"
        " actor, fence)"
        " SELECT (%s::uuid[])[1 + g %% 20], 'RECEIVED', 'PROVIDER_REQUEST_SENT', 'send', 'old', 1"
        " FROM generate_series(1, %s) AS g",
        (list(tenants), AUDIT_ROWS),
    )
    return tenants


def test_every_audit_row_gets_its_operations_tenant_and_the_scans_lead_with_it(
    scratch_database: str,
) -> None:
    config = alembic_config(scratch_database)
    command.upgrade(config, "0027")
    with psycopg.connect(scratch_database, autocommit=True, row_factory=dict_row) as db:
        tenants = _seed(db)
        command.upgrade(config, "0028")
        rows = db.execute(
            "SELECT operation_id, tenant_id, count(*) AS n FROM operation_transitions GROUP BY 1, 2"
        ).fetchall()
        assert sum(r["n"] for r in rows) == AUDIT_ROWS
        assert {r["operation_id"]: r["tenant_id"] for r in rows} == tenants
        column = db.execute(
            "SELECT is_nullable FROM information_schema.columns"
            " WHERE table_name = 'operation_transitions' AND column_name = 'tenant_id'"
        ).fetchone()
        assert column == {"is_nullable": "NO"}
        checks = db.execute(
            "SELECT conname FROM pg_constraint"
            " WHERE conrelid = 'operation_transitions'::regclass AND contype = 'c'"
        ).fetchall()
        assert checks == []

        # A writer of the previous release leaves the column out: the trigger fills it.
        operation, tenant = next(iter(tenants.items()))
        written = db.execute(
            "INSERT INTO operation_transitions (operation_id, from_state, to_state, trigger,"
            " actor, fence) VALUES (%s, 'PROVIDER_REQUEST_SENT', 'COMPLETED', 'complete',"
            " 'old release', 1) RETURNING tenant_id",
            (operation,),
        ).fetchone()
        assert written == {"tenant_id": tenant}

        indexes = {r["name"]: r["definition"] for r in db.execute(_INDEXES).fetchall()}
        assert (
            "(tenant_id, lease_expires_at NULLS FIRST)" in indexes["ix_operations_in_flight_lease"]
        )
        assert "(tenant_id, next_check_at)" in indexes["ix_operations_recovery_due"]

        command.downgrade(config, "0027")
        gone = db.execute(
            "SELECT count(*) AS n FROM information_schema.columns"
            " WHERE table_name = 'operation_transitions' AND column_name = 'tenant_id'"
        ).fetchone()
        assert gone == {"n": 0}
        indexes = {r["name"]: r["definition"] for r in db.execute(_INDEXES).fetchall()}
        assert "(lease_expires_at)" in indexes["ix_operations_in_flight_lease"]
        assert "(next_check_at)" in indexes["ix_operations_recovery_due"]


def test_an_index_built_by_hand_beforehand_is_kept(scratch_database: str) -> None:
    config = alembic_config(scratch_database)
    command.upgrade(config, "0027")
    with psycopg.connect(scratch_database, autocommit=True, row_factory=dict_row) as db:
        # As the migration's docstring tells an operator of a large table to.
        db.execute(
            "CREATE INDEX CONCURRENTLY ix_operations_recovery_due_new ON operations"
            " (tenant_id, next_check_at) WHERE state = 'UNKNOWN_REQUIRES_RECOVERY'"
        )
        db.execute("DROP INDEX CONCURRENTLY ix_operations_recovery_due")
        db.execute(
            "ALTER INDEX ix_operations_recovery_due_new RENAME TO ix_operations_recovery_due"
        )
        before = {r["name"]: r["oid"] for r in db.execute(_INDEXES).fetchall()}
        command.upgrade(config, "0028")
        after = {r["name"]: r["oid"] for r in db.execute(_INDEXES).fetchall()}
    assert after["ix_operations_recovery_due"] == before["ix_operations_recovery_due"]
    assert after["ix_operations_in_flight_lease"] != before["ix_operations_in_flight_lease"]
