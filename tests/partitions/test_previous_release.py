"""Between migration 0030 and the conversion, a process of the previous release writes audit
rows and events without `operation_created_at`: the trigger gives them their operation's."""

from __future__ import annotations

import uuid

import psycopg
from alembic import command
from psycopg.rows import dict_row

from app.db.migrate import alembic_config


def test_rows_written_without_the_day_get_their_operations(scratch_database: str) -> None:
    command.upgrade(alembic_config(scratch_database), "0030")
    tenant, operation = uuid.uuid4(), uuid.uuid4()
    with psycopg.connect(scratch_database, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'old')", (tenant,))
        conn.execute(
            "INSERT INTO operations (id, tenant_id, operation_name, idempotency_key,"
            " fingerprint, state, created_at) VALUES (%s, %s, 'create_payment', 'k', 'f',"
            " 'COMPLETED', now() - interval '2 days')",
            (operation, tenant),
        )
        # As the previous release writes them: no operation_created_at.
        conn.execute(
            "INSERT INTO operation_transitions (operation_id, tenant_id, from_state, to_state,"
            " trigger, actor, fence) VALUES (%s, %s, NULL, 'RECEIVED', 'claim', 'api:old', 1)",
            (operation, tenant),
        )
        conn.execute(
            "INSERT INTO events (id, tenant_id, type, operation_id, data) VALUES"
            " (%s, %s, 'payment.succeeded', %s, '{}')"
            " ON CONFLICT (tenant_id, operation_id, type) DO NOTHING",
            (uuid.uuid4(), tenant, operation),
        )
        found = conn.execute(
            "SELECT o.created_at, t.operation_created_at AS trail, e.operation_created_at AS event"
            " FROM operations o JOIN operation_transitions t ON t.operation_id = o.id"
            " JOIN events e ON e.operation_id = o.id WHERE o.id = %s",
            (operation,),
        ).fetchone()
    assert found is not None
    assert found["trail"] == found["created_at"]
    assert found["event"] == found["created_at"]
