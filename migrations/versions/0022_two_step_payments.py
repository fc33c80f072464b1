"""Two-step payments: manual capture on payments, and their captures and voids

Payments gain `capture_mode` (`automatic`, every payment so far, or `manual`),
`capture_before` (when a manual payment's hold lapses) and `amount_captured_minor` (the sum
of a manual payment's captures; a one-step payment's status says what it took, so no row is
rewritten), `modifying_operation_id` (the capture or void in flight, if one is), five
statuses, and the checks that keep captures within the authorized amount
and a manual payment's refunds within what was captured. `payment_modifications` holds each
capture and void, at most one in flight per payment (a partial unique index); its operations'
links join the `operation_links` view.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-27 12:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ONE_STEP = "'PENDING', 'SUCCEEDED', 'DECLINED', 'FAILED', 'PARTIALLY_REFUNDED', 'REFUNDED'"
_OLD_PAYMENT_STATUSES = f"status IN ({_ONE_STEP})"
_NEW_PAYMENT_STATUSES = (
    f"status IN ({_ONE_STEP}, 'AUTHORIZED', 'PARTIALLY_CAPTURED', 'CAPTURED', 'VOIDED', 'EXPIRED')"
)

_LINKS = """
    CREATE OR REPLACE VIEW operation_links AS
        SELECT operation_id, tenant_id, jsonb_build_object('payment_id', id) AS links
        FROM payments
        UNION ALL
        SELECT operation_id, tenant_id,
               jsonb_build_object('payment_id', payment_id, 'refund_id', id) AS links
        FROM refunds
"""
_MODIFICATION_LINKS = """
        UNION ALL
        SELECT operation_id, tenant_id,
               jsonb_build_object('payment_id', payment_id, type || '_id', id) AS links
        FROM payment_modifications
"""


def upgrade() -> None:
    op.add_column(
        "payments",
        sa.Column(
            "capture_mode",
            sa.String(length=16),
            server_default=sa.text("'automatic'"),
            nullable=False,
        ),
    )
    op.add_column("payments", sa.Column("capture_before", sa.DateTime(timezone=True)))
    op.add_column("payments", sa.Column("modifying_operation_id", sa.UUID(), nullable=True))
    op.add_column(
        "payments",
        sa.Column(
            "amount_captured_minor", sa.BigInteger(), server_default=sa.text("0"), nullable=False
        ),
    )
    op.drop_constraint(op.f("ck_payments_status_valid"), "payments", type_="check")
    op.create_check_constraint(op.f("ck_payments_status_valid"), "payments", _NEW_PAYMENT_STATUSES)
    op.create_check_constraint(
        op.f("ck_payments_capture_mode_valid"),
        "payments",
        "capture_mode IN ('automatic', 'manual')",
    )
    op.create_check_constraint(
        op.f("ck_payments_captured_within_amount"),
        "payments",
        "amount_captured_minor >= 0 AND amount_captured_minor <= amount_minor",
    )
    op.create_check_constraint(
        op.f("ck_payments_refunded_within_captured"),
        "payments",
        "capture_mode = 'automatic' OR amount_refunded_minor <= amount_captured_minor",
    )
    op.create_check_constraint(
        op.f("ck_payments_capture_before_iff_manual"),
        "payments",
        "(capture_mode = 'manual') = (capture_before IS NOT NULL)",
    )
    op.create_index(
        "ix_payments_open_holds",
        "payments",
        ["capture_before"],
        postgresql_where=sa.text("status IN ('AUTHORIZED', 'PARTIALLY_CAPTURED')"),
    )
    op.create_table(
        "payment_modifications",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("payment_id", sa.UUID(), nullable=False),
        sa.Column("operation_id", sa.UUID(), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("provider_key", sa.String(length=128), nullable=False),
        sa.Column("charge_id", sa.String(length=128), nullable=False),
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("amount_minor", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("provider_reference", sa.String(length=128), nullable=True),
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
            "type IN ('capture', 'void')", name=op.f("ck_payment_modifications_type_valid")
        ),
        sa.CheckConstraint(
            "status IN ('PENDING', 'SUCCEEDED', 'FAILED')",
            name=op.f("ck_payment_modifications_status_valid"),
        ),
        sa.CheckConstraint(
            "amount_minor >= 0", name=op.f("ck_payment_modifications_amount_not_negative")
        ),
        sa.CheckConstraint(
            "type <> 'capture' OR amount_minor > 0",
            name=op.f("ck_payment_modifications_capture_positive"),
        ),
        sa.ForeignKeyConstraint(
            ["operation_id"],
            ["operations.id"],
            name=op.f("fk_payment_modifications_operation_id_operations"),
        ),
        sa.ForeignKeyConstraint(
            ["payment_id"],
            ["payments.id"],
            name=op.f("fk_payment_modifications_payment_id_payments"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_payment_modifications_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_payment_modifications")),
        sa.UniqueConstraint("operation_id", name=op.f("uq_payment_modifications_operation_id")),
        sa.UniqueConstraint("provider_key", name=op.f("uq_payment_modifications_provider_key")),
    )
    op.create_index(
        "uq_payment_modifications_in_flight",
        "payment_modifications",
        ["tenant_id", "payment_id"],
        unique=True,
        postgresql_where=sa.text("status = 'PENDING'"),
    )
    op.create_index(
        "ix_payment_modifications_tenant_payment_created",
        "payment_modifications",
        ["tenant_id", "payment_id", "created_at"],
    )
    op.create_index(
        "ix_payment_modifications_created_at_brin",
        "payment_modifications",
        ["created_at"],
        postgresql_using="brin",
    )
    op.create_index(
        "ix_payment_modifications_provider_reference",
        "payment_modifications",
        ["provider_reference"],
        postgresql_where=sa.text("provider_reference IS NOT NULL"),
    )
    op.create_index(
        "ix_payment_modifications_created", "payment_modifications", ["created_at", "id"]
    )
    op.create_index(
        "ix_payment_modifications_tenant_created",
        "payment_modifications",
        ["tenant_id", "created_at", "id"],
    )
    op.execute(_LINKS + _MODIFICATION_LINKS)


def downgrade() -> None:
    manual = (
        op.get_bind()
        .execute(sa.text("SELECT count(*) FROM payments WHERE capture_mode = 'manual'"))
        .scalar_one()
    )
    if manual:
        raise RuntimeError(
            f"{manual} payments were sent with manual capture; a schema without two-step"
            " payments cannot hold them, so nothing was changed"
        )
    op.execute(_LINKS)
    op.drop_table("payment_modifications")
    op.drop_index("ix_payments_open_holds", table_name="payments")
    for name in (
        "capture_before_iff_manual",
        "refunded_within_captured",
        "captured_within_amount",
        "capture_mode_valid",
        "status_valid",
    ):
        op.drop_constraint(op.f(f"ck_payments_{name}"), "payments", type_="check")
    op.create_check_constraint(op.f("ck_payments_status_valid"), "payments", _OLD_PAYMENT_STATUSES)
    op.drop_column("payments", "amount_captured_minor")
    op.drop_column("payments", "modifying_operation_id")
    op.drop_column("payments", "capture_before")
    op.drop_column("payments", "capture_mode")
