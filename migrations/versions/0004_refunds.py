"""Refunds: the refunds table, the refund link on operations, refunded amounts on payments

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 17:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD_PAYMENT_STATUSES = "status IN ('PENDING', 'SUCCEEDED', 'DECLINED', 'FAILED')"
_NEW_PAYMENT_STATUSES = (
    "status IN ('PENDING', 'SUCCEEDED', 'DECLINED', 'FAILED', 'PARTIALLY_REFUNDED', 'REFUNDED')"
)


def upgrade() -> None:
    # payments: what succeeded refunds gave back, and the two statuses refunds lead to.
    op.add_column(
        "payments",
        sa.Column(
            "amount_refunded_minor", sa.BigInteger(), server_default=sa.text("0"), nullable=False
        ),
    )
    op.alter_column(
        "payments",
        "status",
        existing_type=sa.String(length=16),
        type_=sa.String(length=32),
        existing_nullable=False,
    )
    op.drop_constraint(op.f("ck_payments_status_valid"), "payments", type_="check")
    op.create_check_constraint(op.f("ck_payments_status_valid"), "payments", _NEW_PAYMENT_STATUSES)
    op.create_check_constraint(
        op.f("ck_payments_refunded_within_amount"),
        "payments",
        "amount_refunded_minor >= 0 AND amount_refunded_minor <= amount_minor",
    )
    # operations: `payment_id` is the payment an operation acts on; several refunds act on
    # one payment, so it is no longer unique. A refund operation also links its refund.
    op.drop_constraint(op.f("uq_operations_payment_id"), "operations", type_="unique")
    op.add_column("operations", sa.Column("refund_id", sa.UUID(), nullable=True))
    op.create_unique_constraint(op.f("uq_operations_refund_id"), "operations", ["refund_id"])
    op.create_table(
        "refunds",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("payment_id", sa.UUID(), nullable=False),
        sa.Column("operation_id", sa.UUID(), nullable=False),
        sa.Column("provider_key", sa.String(length=128), nullable=False),
        sa.Column("charge_id", sa.String(length=128), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("amount_minor", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=True),
        sa.Column(
            "metadata",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("provider_refund_id", sa.String(length=128), nullable=True),
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
            "status IN ('PENDING', 'SUCCEEDED', 'FAILED')", name=op.f("ck_refunds_status_valid")
        ),
        sa.CheckConstraint("amount_minor > 0", name=op.f("ck_refunds_amount_positive")),
        sa.ForeignKeyConstraint(
            ["operation_id"], ["operations.id"], name=op.f("fk_refunds_operation_id_operations")
        ),
        sa.ForeignKeyConstraint(
            ["payment_id"], ["payments.id"], name=op.f("fk_refunds_payment_id_payments")
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_refunds_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_refunds")),
        sa.UniqueConstraint("operation_id", name=op.f("uq_refunds_operation_id")),
        sa.UniqueConstraint("provider_key", name=op.f("uq_refunds_provider_key")),
    )
    op.create_index(
        op.f("ix_refunds_tenant_id_payment_id_created_at"),
        "refunds",
        ["tenant_id", "payment_id", "created_at"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_refunds_tenant_id_payment_id_created_at"), table_name="refunds")
    op.drop_table("refunds")
    op.drop_constraint(op.f("uq_operations_refund_id"), "operations", type_="unique")
    op.execute(
        "DELETE FROM operation_transitions WHERE operation_id IN "
        "(SELECT id FROM operations WHERE operation_name = 'create_refund')"
    )
    op.execute("DELETE FROM operations WHERE operation_name = 'create_refund'")
    op.drop_column("operations", "refund_id")
    op.create_unique_constraint(op.f("uq_operations_payment_id"), "operations", ["payment_id"])
    op.drop_constraint(op.f("ck_payments_refunded_within_amount"), "payments", type_="check")
    op.drop_constraint(op.f("ck_payments_status_valid"), "payments", type_="check")
    op.execute(
        "UPDATE payments SET status = 'SUCCEEDED' "
        "WHERE status IN ('PARTIALLY_REFUNDED', 'REFUNDED')"
    )
    op.create_check_constraint(op.f("ck_payments_status_valid"), "payments", _OLD_PAYMENT_STATUSES)
    op.alter_column(
        "payments",
        "status",
        existing_type=sa.String(length=32),
        type_=sa.String(length=16),
        existing_nullable=False,
    )
    op.drop_column("payments", "amount_refunded_minor")
