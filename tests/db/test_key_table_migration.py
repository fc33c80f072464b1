"""Migration 0029: every operation still holding its key gets its row in `idempotency_keys`.

A database at 0028 is seeded with operations of two tenants, more than two batches of the
backfill, some of whose keys are released, and migrated: each operation holding a key, and
no other, has the key's row naming it by id and `created_at`. A batch run again makes a row
for a key that names another operation (as an insert of the previous release leaves one,
losing the key to an operation the backfill had not reached) name the operation holding it.
The downgrade puts 0028 back.
"""

from __future__ import annotations

import importlib.util
import uuid
from types import ModuleType

import psycopg
import sqlalchemy as sa
from alembic import command
from psycopg.rows import DictRow, dict_row

from app.db.migrate import REPO_ROOT, alembic_config, sync_engine

Db = psycopg.Connection[DictRow]
# More than two batches of the backfill (20,000), fewer than three.
OPERATIONS = 45_000

_SEED = """
    INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint,
                            state, created_at, key_released_at)
    SELECT gen_random_uuid(), %(tenant)s, 'create_payment',
           CASE WHEN g %% 10 = 0 THEN NULL ELSE 'key-' || g END, 'f', 'COMPLETED',
           now() - make_interval(secs => g),
           CASE WHEN g %% 10 = 0 THEN now() END
    FROM generate_series(1, %(n)s) AS g
"""
_HELD = """
    SELECT tenant_id, operation_name, idempotency_key, id, created_at FROM operations
    WHERE idempotency_key IS NOT NULL
"""
_ROWS = """
    SELECT tenant_id, operation_name, idempotency_key, operation_id, operation_created_at
    FROM idempotency_keys
"""


def _migration() -> ModuleType:
    path = REPO_ROOT / "migrations" / "versions" / "0029_idempotency_keys.py"
    spec = importlib.util.spec_from_file_location("migration_0029", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_key_held_gets_its_row_and_a_row_naming_another_operation_is_mended(
    scratch_database: str,
) -> None:
    config = alembic_config(scratch_database)
    command.upgrade(config, "0028")
    with psycopg.connect(scratch_database, autocommit=True, row_factory=dict_row) as db:
        for name, n in (("a", OPERATIONS // 2), ("b", OPERATIONS - OPERATIONS // 2)):
            tenant = uuid.uuid4()
            db.execute("INSERT INTO tenants (id, name) VALUES (%s, %s)", (tenant, name))
            db.execute(_SEED, {"tenant": tenant, "n": n})
        held = {tuple(r.values()) for r in db.execute(_HELD).fetchall()}
        assert len(held) == OPERATIONS - OPERATIONS // 10

        command.upgrade(config, "0029")
        assert {tuple(r.values()) for r in db.execute(_ROWS).fetchall()} == held

        # A key's row naming an operation that does not hold the key: a batch over the
        # operation holding it makes the row name it.
        tenant, name, key, operation_id, created_at = min(held)
        db.execute(
            "UPDATE idempotency_keys SET operation_id = %s, operation_created_at = now()"
            " WHERE tenant_id = %s AND operation_name = %s AND idempotency_key = %s",
            (uuid.uuid4(), tenant, name, key),
        )
        migration = _migration()
        engine = sync_engine(scratch_database)
        with engine.begin() as conn:
            conn.execute(
                sa.text(migration.BACKFILL), {"after": migration.FIRST, "batch": OPERATIONS}
            )
        engine.dispose()
        mended = db.execute(
            "SELECT operation_id, operation_created_at FROM idempotency_keys"
            " WHERE tenant_id = %s AND operation_name = %s AND idempotency_key = %s",
            (tenant, name, key),
        ).fetchone()
        assert mended == {"operation_id": operation_id, "operation_created_at": created_at}

        command.downgrade(config, "0028")
        left = db.execute(
            "SELECT (SELECT count(*) FROM pg_class WHERE relname = 'idempotency_keys') AS tables,"
            " (SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'idempotency_keys%%') AS triggers"
        ).fetchone()
        assert left == {"tables": 0, "triggers": 0}
