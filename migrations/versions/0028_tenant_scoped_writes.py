"""Every write scoped by tenant: operation_transitions.tenant_id; the worker's scans by tenant

The audit trail gains the tenant of the operation each row audits, so that every statement
of a verb (the operation's change, its audit row, its business object, its event) writes
one tenant's rows only: on Citus `operation_transitions` is then distributed by
`tenant_id` and co-located with `operations` (docs/scaling.md). The verbs fill the column
from the operation row they update.

On a large table, without holding up the service:
1. the column is added without a default (the catalogue alone changes), with a trigger
   that fills it from the operation for a row written without it: a process of the
   previous release, still running during the upgrade, writes such rows;
2. the rows written before are filled in batches of `BATCH` ids, each its own transaction
   (row locks held for one batch, WAL and replicas kept up with), in autocommit;
3. NOT NULL is proven by a CHECK constraint added NOT VALID and then validated: the scan
   takes a lock that lets reads and writes go on (SHARE UPDATE EXCLUSIVE), after which
   `SET NOT NULL` uses the constraint instead of scanning again, and the CHECK is dropped.
The trigger stays while a process of an earlier release may still write: the service's own
statements always name the column (tests/db/test_tenant_writes.py), so it never fires for
them. On Citus it is dropped before the table is distributed.

The worker's two scan indexes lead with tenant_id (same names, same partial predicates): its
claim runs per tenant (`app/operations/leases.py`), each tenant's due operations a range of
the index, and which tenants have work due is a loose scan of the same indexes, one probe
per tenant. An in-flight operation whose owner gave its lease back (`lease_expires_at` NULL)
sorts first: it is free. A plain CREATE INDEX blocks writes to `operations` while it scans
the table: on a large table build each by hand first, under another name, and swap it in:

    CREATE INDEX CONCURRENTLY ix_operations_recovery_due_new ON operations
        (tenant_id, next_check_at) WHERE state = 'UNKNOWN_REQUIRES_RECOVERY';
    DROP INDEX CONCURRENTLY ix_operations_recovery_due;
    ALTER INDEX ix_operations_recovery_due_new RENAME TO ix_operations_recovery_due;

(and `ix_operations_in_flight_lease` on `(tenant_id, lease_expires_at NULLS FIRST) WHERE
state IN ('RECEIVED', 'PROVIDER_REQUEST_SENT')`): the upgrade leaves an index that already
leads with tenant_id as it is.

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-27 16:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Audit rows filled per transaction: a few hundred milliseconds of work each.
BATCH = 20_000

FILL_FUNCTION = """
    CREATE OR REPLACE FUNCTION operation_transitions_tenant() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        NEW.tenant_id := (SELECT tenant_id FROM operations WHERE id = NEW.operation_id);
        RETURN NEW;
    END
    $$
"""
FILL_TRIGGER = """
    CREATE TRIGGER operation_transitions_tenant
    BEFORE INSERT ON operation_transitions
    FOR EACH ROW WHEN (NEW.tenant_id IS NULL)
    EXECUTE FUNCTION operation_transitions_tenant()
"""
BACKFILL = """
    UPDATE operation_transitions AS t SET tenant_id = o.tenant_id
    FROM operations AS o
    WHERE o.id = t.operation_id
      AND t.id > :after AND t.id <= :upto AND t.tenant_id IS NULL
"""
CHECK = "ck_operation_transitions_tenant_id_not_null"

# (name, columns by tenant, columns before), each partial on the same predicate.
SCAN_INDEXES = (
    (
        "ix_operations_in_flight_lease",
        "tenant_id, lease_expires_at NULLS FIRST",
        "lease_expires_at",
        "state IN ('RECEIVED', 'PROVIDER_REQUEST_SENT')",
    ),
    (
        "ix_operations_recovery_due",
        "tenant_id, next_check_at",
        "next_check_at",
        "state = 'UNKNOWN_REQUIRES_RECOVERY'",
    ),
)
LEADS_WITH_TENANT = """
    SELECT EXISTS (
        SELECT FROM pg_index x
        JOIN pg_class i ON i.oid = x.indexrelid
        JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = x.indkey[0]
        WHERE i.relname = :name AND a.attname = 'tenant_id')
"""


def upgrade() -> None:
    op.execute("ALTER TABLE operation_transitions ADD COLUMN IF NOT EXISTS tenant_id uuid")
    op.execute(FILL_FUNCTION)
    op.execute("DROP TRIGGER IF EXISTS operation_transitions_tenant ON operation_transitions")
    op.execute(FILL_TRIGGER)
    bind = op.get_bind()
    # Committed first: from here on every new row has its tenant (the trigger), so the rows
    # to fill are those up to the highest id now.
    with op.get_context().autocommit_block():
        last = bind.execute(sa.text("SELECT coalesce(max(id), 0) FROM operation_transitions"))
        upto = int(last.scalar_one())
        for after in range(0, upto, BATCH):
            bind.execute(sa.text(BACKFILL), {"after": after, "upto": after + BATCH})
        op.execute(f"ALTER TABLE operation_transitions DROP CONSTRAINT IF EXISTS {CHECK}")
        op.execute(
            f"ALTER TABLE operation_transitions ADD CONSTRAINT {CHECK}"
            " CHECK (tenant_id IS NOT NULL) NOT VALID"
        )
        op.execute(f"ALTER TABLE operation_transitions VALIDATE CONSTRAINT {CHECK}")
    op.execute("ALTER TABLE operation_transitions ALTER COLUMN tenant_id SET NOT NULL")
    op.execute(f"ALTER TABLE operation_transitions DROP CONSTRAINT {CHECK}")
    for name, by_tenant, _before, where in SCAN_INDEXES:
        if bind.execute(sa.text(LEADS_WITH_TENANT), {"name": name}).scalar_one():
            continue
        op.execute(f"DROP INDEX IF EXISTS {name}")
        op.execute(f"CREATE INDEX {name} ON operations ({by_tenant}) WHERE {where}")


def downgrade() -> None:
    for name, _by_tenant, before, where in SCAN_INDEXES:
        op.execute(f"DROP INDEX IF EXISTS {name}")
        op.execute(f"CREATE INDEX {name} ON operations ({before}) WHERE {where}")
    op.execute("DROP TRIGGER IF EXISTS operation_transitions_tenant ON operation_transitions")
    op.execute("DROP FUNCTION IF EXISTS operation_transitions_tenant()")
    op.execute("ALTER TABLE operation_transitions DROP COLUMN IF EXISTS tenant_id")
