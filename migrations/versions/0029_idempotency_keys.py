"""Idempotency keys in a table of their own, the claim's decider, beside the history

The claim's race is decided by the primary key of a narrow table that is never partitioned,
`idempotency_keys (tenant_id, operation_name, idempotency_key)`, one row from the claim
until the key is released, naming its operation by id and `created_at`. `operations` can
then be partitioned by day of `created_at` (a unique key on a partitioned table must hold
the partition column, so one on the key alone could not stay): a key claimed just before
midnight and retried just after still finds its row here, and its operation through it in
one partition (docs/scaling.md).

On a large table, without holding up the service:
1. the table is created empty, with two triggers on `operations` for a process of the
   previous release, which claims by inserting into `operations` alone and releases a key
   by its UPDATE: before such an insert, the key's row is inserted (taken first, as the
   claim takes it, so a claim of either release waits on the other's key row and never the
   other way round); after an UPDATE that clears a key, the key's row is deleted in the
   same transaction. The service's claim has inserted the key's row already (the trigger's
   insert does nothing) and its release has deleted it (the trigger's delete finds none);
2. every operation still holding its key gets its row, in batches of `BATCH` operations in
   id order, each its own transaction (in autocommit). Each batch locks its operations FOR
   KEY SHARE, which only a key's release conflicts with, so the key an operation holds
   while its batch writes is its key, and a row for the key naming another operation (an
   insert of the previous release that lost the key to an operation the batch had not
   reached yet) is made to name it.
The unique constraint on `operations (tenant_id, operation_name, idempotency_key)` stays:
it still decides between a claim of the previous release and one of this, and goes when
`operations` is partitioned. The triggers stay while a process of the previous release may
run, and are dropped by a later migration once none does (their cost meanwhile: one probe
of the key table per claim, measured in the claim's commit).

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-27 18:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Operations per transaction: a few hundred milliseconds of work each.
BATCH = 20_000

TABLE = """
    CREATE TABLE idempotency_keys (
        tenant_id uuid NOT NULL,
        operation_name varchar(64) NOT NULL,
        idempotency_key varchar(255) NOT NULL,
        operation_id uuid NOT NULL,
        operation_created_at timestamptz NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT pk_idempotency_keys
            PRIMARY KEY (tenant_id, operation_name, idempotency_key),
        CONSTRAINT fk_idempotency_keys_tenant_id_tenants
            FOREIGN KEY (tenant_id) REFERENCES tenants (id)
    )
"""

# A claim of the previous release: the key's row first, as the service's claim takes it.
CLAIM_FUNCTION = """
    CREATE OR REPLACE FUNCTION idempotency_keys_claim() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO idempotency_keys (tenant_id, operation_name, idempotency_key,
                                      operation_id, operation_created_at)
        VALUES (NEW.tenant_id, NEW.operation_name, NEW.idempotency_key, NEW.id,
                NEW.created_at)
        ON CONFLICT (tenant_id, operation_name, idempotency_key) DO NOTHING;
        RETURN NEW;
    END
    $$
"""
CLAIM_TRIGGER = """
    CREATE TRIGGER idempotency_keys_claim
    BEFORE INSERT ON operations
    FOR EACH ROW WHEN (NEW.idempotency_key IS NOT NULL)
    EXECUTE FUNCTION idempotency_keys_claim()
"""
# A release of the previous release: the key's row goes with the operation's key. After the
# statement, so that the service's own release (which deletes the row in the same
# statement) has deleted it already.
RELEASE_FUNCTION = """
    CREATE OR REPLACE FUNCTION idempotency_keys_release() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM idempotency_keys
        WHERE tenant_id = OLD.tenant_id AND operation_name = OLD.operation_name
          AND idempotency_key = OLD.idempotency_key AND operation_id = OLD.id;
        RETURN NULL;
    END
    $$
"""
RELEASE_TRIGGER = """
    CREATE TRIGGER idempotency_keys_release
    AFTER UPDATE OF idempotency_key ON operations
    FOR EACH ROW WHEN (OLD.idempotency_key IS NOT NULL
                       AND NEW.idempotency_key IS DISTINCT FROM OLD.idempotency_key)
    EXECUTE FUNCTION idempotency_keys_release()
"""
TRIGGERS = (
    ("idempotency_keys_claim", CLAIM_FUNCTION, CLAIM_TRIGGER),
    ("idempotency_keys_release", RELEASE_FUNCTION, RELEASE_TRIGGER),
)

# One batch: the next `batch` operations by id after `after`; the last id of the batch.
BACKFILL = """
    WITH batch AS (
        SELECT id FROM operations WHERE id > CAST(:after AS uuid) ORDER BY id LIMIT :batch
    ), held AS (
        SELECT o.tenant_id, o.operation_name, o.idempotency_key, o.id, o.created_at
        FROM operations AS o
        WHERE o.id IN (SELECT id FROM batch) AND o.idempotency_key IS NOT NULL
        FOR KEY SHARE
    ), filled AS (
        INSERT INTO idempotency_keys AS k (tenant_id, operation_name, idempotency_key,
                                           operation_id, operation_created_at)
        SELECT * FROM held
        ON CONFLICT (tenant_id, operation_name, idempotency_key) DO UPDATE
        SET operation_id = excluded.operation_id,
            operation_created_at = excluded.operation_created_at
        WHERE (k.operation_id, k.operation_created_at)
              IS DISTINCT FROM (excluded.operation_id, excluded.operation_created_at)
    )
    SELECT id FROM batch ORDER BY id DESC LIMIT 1
"""
# Below every uuid: where the first batch starts.
FIRST = "00000000-0000-0000-0000-000000000000"


def upgrade() -> None:
    op.execute(TABLE)
    for name, function, trigger in TRIGGERS:
        op.execute(function)
        op.execute(f"DROP TRIGGER IF EXISTS {name} ON operations")
        op.execute(trigger)
    bind = op.get_bind()
    # Committed first: from here on every claim or release of either release keeps its
    # key's row, so the batches need only reach the operations written before.
    with op.get_context().autocommit_block():
        after: object = FIRST
        while after is not None:
            last = bind.execute(sa.text(BACKFILL), {"after": after, "batch": BATCH})
            after = last.scalar_one_or_none()


def downgrade() -> None:
    for name, _function, _trigger in TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name} ON operations")
        op.execute(f"DROP FUNCTION IF EXISTS {name}()")
    op.execute("DROP TABLE IF EXISTS idempotency_keys")
