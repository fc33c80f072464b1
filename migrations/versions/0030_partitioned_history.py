"""The operation's day on its audit trail and its events: operation_created_at

`operation_transitions` and `events` are to be partitioned by day, by the day of the
operation each row belongs to (docs/scaling.md, "Time partitions"), so each gains the
operation's `created_at`. The service's statements fill it from the operation row they
already touch (`changed ... RETURNING created_at`); for a row written without it, by a
process of the previous release still running during the upgrade, a trigger fills it from
the operation. The column is nullable here: adding it changes the catalogue only.

The events' key gains the day too: a unique key of a partitioned table must hold its
partition column, and the outbox's `ON CONFLICT` names the four columns from this release
on, so the unique index on (tenant_id, operation_id, type, operation_created_at) is built
here, CONCURRENTLY (outside the migration's transaction: reads and writes go on), under the
name the legacy partition will give it (`events_legacy_key`). The old key stays until the
conversion: the previous release's `ON CONFLICT` names it.

What is left is the conversion itself (app/partitions/convert.py): filling the rows written
before, in batches; proving NOT NULL and the cutover by a CHECK added NOT VALID and then
validated; the swap to a partitioned table. Migration 0031 runs it on a small database;
on a large one the operator runs `payments partitions convert` (docs/operations.md). The
triggers stay on the legacy partition, where they never fire again (every row routed to a
partition has its day), and go with it when retention drops it.

Revision ID: 0030
Revises: 0028
Create Date: 2026-11-27 17:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("operation_transitions", "events")

FILL_FUNCTION = """
    CREATE OR REPLACE FUNCTION operation_created_at_fill() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        NEW.operation_created_at :=
            (SELECT created_at FROM operations WHERE id = NEW.operation_id);
        RETURN NEW;
    END
    $$
"""
FILL_TRIGGER = """
    CREATE TRIGGER {table}_operation_created_at
    BEFORE INSERT ON {table}
    FOR EACH ROW WHEN (NEW.operation_created_at IS NULL)
    EXECUTE FUNCTION operation_created_at_fill()
"""
EVENTS_KEY = "events_legacy_key"
PARTITIONED = "SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass(:name)"
VALID_INDEX = """
    SELECT x.indisvalid FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
    WHERE i.relname = :name AND i.relnamespace = 'public'::regnamespace
"""


def upgrade() -> None:
    op.execute(FILL_FUNCTION)
    bind = op.get_bind()
    for table in TABLES:
        # Run again after `payments partitions convert` (0031 stopped, see above): the
        # table is partitioned already and its legacy partition has the trigger.
        if bind.execute(sa.text(PARTITIONED), {"name": table}).scalar():
            continue
        op.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS operation_created_at timestamptz")
        op.execute(f"DROP TRIGGER IF EXISTS {table}_operation_created_at ON {table}")
        op.execute(FILL_TRIGGER.format(table=table))
    # Committed first: the column and the trigger must be there before the index is built.
    # Alembic runs the migrations to the head in one transaction, so when 0031 stops this
    # one runs again with the next `migrate`: a valid index is kept, an invalid one (a build
    # that failed half-way) built again.
    valid = bind.execute(sa.text(VALID_INDEX), {"name": EVENTS_KEY}).scalar()
    if valid:
        return
    with op.get_context().autocommit_block():
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {EVENTS_KEY}")
        op.execute(
            f"CREATE UNIQUE INDEX CONCURRENTLY {EVENTS_KEY} ON events"
            " (tenant_id, operation_id, type, operation_created_at)"
        )


def downgrade() -> None:
    op.execute(f"DROP INDEX IF EXISTS {EVENTS_KEY}")
    for table in TABLES:
        op.execute(f"DROP TRIGGER IF EXISTS {table}_operation_created_at ON {table}")
        op.execute(f"ALTER TABLE {table} DROP COLUMN IF EXISTS operation_created_at")
    op.execute("DROP FUNCTION IF EXISTS operation_created_at_fill()")
