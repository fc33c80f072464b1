"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22 04:13:04.867247
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("api_key_hash", sa.String(length=64), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tenants")),
        sa.UniqueConstraint("api_key_hash", name=op.f("uq_tenants_api_key_hash")),
    )
    op.create_table(
        "operations",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("operation_name", sa.String(length=64), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("payment_id", sa.UUID(), nullable=False),
        sa.Column("lease_owner", sa.String(length=128), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("fence", sa.BigInteger(), server_default=sa.text("1"), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("next_check_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("needs_attention", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("response_status", sa.Integer(), nullable=True),
        sa.Column("response_headers", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("response_body", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("response_expired_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "state IN ('RECEIVED', 'PROVIDER_REQUEST_SENT', 'COMPLETED', 'FAILED', "
            "'FAILED_RETRYABLE', 'UNKNOWN_REQUIRES_RECOVERY')",
            name=op.f("ck_operations_state_valid"),
        ),
        sa.CheckConstraint("fence >= 1", name=op.f("ck_operations_fence_positive")),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_operations_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_operations")),
        sa.UniqueConstraint("payment_id", name=op.f("uq_operations_payment_id")),
        sa.UniqueConstraint(
            "tenant_id",
            "operation_name",
            "idempotency_key",
            name=op.f("uq_operations_tenant_id_operation_name_idempotency_key"),
        ),
    )
    op.create_index(
        "ix_operations_in_flight_lease",
        "operations",
        ["lease_expires_at"],
        unique=False,
        postgresql_where=sa.text("state IN ('RECEIVED', 'PROVIDER_REQUEST_SENT')"),
    )
    op.create_index(
        "ix_operations_recovery_due",
        "operations",
        ["next_check_at"],
        unique=False,
        postgresql_where=sa.text("state = 'UNKNOWN_REQUIRES_RECOVERY'"),
    )
    op.create_index(
        "ix_operations_terminal_created",
        "operations",
        ["created_at"],
        unique=False,
        postgresql_where=sa.text("state IN ('COMPLETED', 'FAILED')"),
    )
    op.create_table(
        "operation_transitions",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("operation_id", sa.UUID(), nullable=False),
        sa.Column("from_state", sa.String(length=32), nullable=True),
        sa.Column("to_state", sa.String(length=32), nullable=False),
        sa.Column("trigger", sa.String(length=32), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("clock_timestamp()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["operation_id"],
            ["operations.id"],
            name=op.f("fk_operation_transitions_operation_id_operations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_operation_transitions")),
    )
    op.create_index(
        op.f("ix_operation_transitions_operation_id"),
        "operation_transitions",
        ["operation_id"],
        unique=False,
    )
    op.create_table(
        "payments",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("operation_id", sa.UUID(), nullable=False),
        sa.Column("provider_key", sa.String(length=128), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("amount_minor", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("account_id", sa.String(length=64), nullable=False),
        sa.Column("merchant_reference", sa.String(length=128), nullable=True),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column(
            "metadata",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("provider_charge_id", sa.String(length=128), nullable=True),
        sa.Column("decline_code", sa.String(length=128), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "status IN ('PENDING', 'SUCCEEDED', 'DECLINED', 'FAILED')",
            name=op.f("ck_payments_status_valid"),
        ),
        sa.CheckConstraint("amount_minor > 0", name=op.f("ck_payments_amount_positive")),
        sa.ForeignKeyConstraint(
            ["operation_id"], ["operations.id"], name=op.f("fk_payments_operation_id_operations")
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_payments_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_payments")),
        sa.UniqueConstraint("operation_id", name=op.f("uq_payments_operation_id")),
        sa.UniqueConstraint("provider_key", name=op.f("uq_payments_provider_key")),
    )
    op.create_index(op.f("ix_payments_tenant_id"), "payments", ["tenant_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_payments_tenant_id"), table_name="payments")
    op.drop_table("payments")
    op.drop_index(op.f("ix_operation_transitions_operation_id"), table_name="operation_transitions")
    op.drop_table("operation_transitions")
    op.drop_index(
        "ix_operations_terminal_created",
        table_name="operations",
        postgresql_where=sa.text("state IN ('COMPLETED', 'FAILED')"),
    )
    op.drop_index(
        "ix_operations_recovery_due",
        table_name="operations",
        postgresql_where=sa.text("state = 'UNKNOWN_REQUIRES_RECOVERY'"),
    )
    op.drop_index(
        "ix_operations_in_flight_lease",
        table_name="operations",
        postgresql_where=sa.text("state IN ('RECEIVED', 'PROVIDER_REQUEST_SENT')"),
    )
    op.drop_table("operations")
    op.drop_table("tenants")
